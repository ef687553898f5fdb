"""Collective ops (TensorFlow's ``collective_ops``): all-reduce, all-gather and broadcast
among a group of devices, in one process or across the tasks of a cluster.

    tw.collective_ops.all_reduce(t, group_size, group_key, instance_key, merge_op="Add", final_op="Id")
    tw.collective_ops.all_gather(t, group_size, group_key, instance_key)
    tw.collective_ops.broadcast_send(t, shape, dtype, group_size, group_key, instance_key)
    tw.collective_ops.broadcast_recv(shape, dtype, group_size, group_key, instance_key)

Every member of a group (``group_key``, ``group_size`` devices) runs the same op with the
same ``instance_key``, each on its own device: in one graph on several devices, or — the
usual way — one op in each worker's own graph (between-graph replication; each worker task
is one member). The op of each member produces the result of all of them: for
``all_reduce`` the element-wise ``merge_op`` (``Add``, ``Mul``, ``Min``, ``Max``) of the
members' tensors, divided by ``group_size`` with ``final_op="Div"`` (the mean). Tensors
must agree in dtype and shape across members; a member that never comes fails the others
after ``timeout`` seconds (0: ``runtime.collectives.DEFAULT_TIMEOUT``), or when their step
times out (``RunOptions.timeout_in_ms``). How it works: ``runtime/collectives.py``.

Attr names and order follow TensorFlow's ``tf.raw_ops.CollectiveReduce`` and friends
(``subdiv_offsets``, ``wait_for`` and ``communication_hint`` are accepted and not used: the
algorithm is always a ring). The ops are stateful (never merged by CSE, run once per step)
and have no gradient.
"""

from __future__ import annotations

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op, convert_to_tensor
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import shape_fns

__all__ = ["all_reduce", "all_gather", "broadcast_send", "broadcast_recv"]

_T = "T: {float16, float32, float64, int32, int64}"
_KEYS = ["group_size: int", "group_key: int", "instance_key: int"]
_TAIL = ["communication_hint: string = 'auto'", "timeout_seconds: float = 0"]


def _gather_shape(op):
    s = op.inputs[0].shape
    if s.ndims is None:
        return [TensorShape(None)]
    if s.ndims == 0:
        raise errors.InvalidArgumentError("all_gather needs a tensor of rank >= 1, got a scalar")
    first = s.dims[0]
    n = op.get_attr("group_size")
    return [TensorShape([None if first is None else first * n, *s.dims[1:]])]


def _recv_shape(op):
    return [as_shape(op.get_attr("shape"))]


def register_ops(reg):
    reg.op("CollectiveReduce", inputs=["input: T"], outputs=["data: T"],
           attrs=[_T, *_KEYS, "merge_op: {'Min', 'Max', 'Mul', 'Add'}", "final_op: {'Id', 'Div'}",
                  "subdiv_offsets: list(int) = []", "wait_for: list(int) = []", *_TAIL],
           shape_fn=shape_fns.unchanged, stateful=True,
           doc="Mutually reduces the tensors of the group's members (identical dtype and shape).")
    reg.op("CollectiveGather", inputs=["input: T"], outputs=["data: T"],
           attrs=[_T, *_KEYS, "shape: shape = unknown", *_TAIL], shape_fn=_gather_shape, stateful=True,
           doc="The members' tensors concatenated along axis 0 in rank order (identical dtype and shape).")
    reg.op("CollectiveBcastSend", inputs=["input: T"], outputs=["data: T"],
           attrs=[_T, *_KEYS, "shape: shape = unknown", *_TAIL], shape_fn=shape_fns.unchanged, stateful=True,
           doc="Sends its input to every other member of the group (which run CollectiveBcastRecv).")
    reg.op("CollectiveBcastRecv", outputs=["data: T"], attrs=[_T, *_KEYS, "shape: shape", *_TAIL],
           shape_fn=_recv_shape, stateful=True,
           doc="Receives the tensor one member of the group sends with CollectiveBcastSend.")


def _check_keys(where: str, group_size, group_key, instance_key):
    for name, v in (("group_size", group_size), ("group_key", group_key), ("instance_key", instance_key)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise errors.InvalidArgumentError(f"{where}: {name} must be a Python int, got {v!r}")
    if group_size < 1:
        raise errors.InvalidArgumentError(f"{where}: group_size must be at least 1, got {group_size}")


def _timeout(where: str, timeout) -> float:
    t = float(timeout)
    if not t >= 0:
        raise errors.InvalidArgumentError(f"{where}: timeout must be >= 0 seconds, got {timeout!r}")
    return t


def all_reduce(t, group_size, group_key, instance_key, merge_op="Add", final_op="Id", subdiv_offsets=(0,),
               communication_hint="auto", timeout=0, name=None):
    """The element-wise ``merge_op`` of ``t`` over the ``group_size`` members of group
    ``group_key`` (``final_op="Div"``: divided by ``group_size``, the mean), on every member.
    Every member runs this op with the same ``instance_key``, on its own device."""
    _check_keys("all_reduce", group_size, group_key, instance_key)
    t = convert_to_tensor(t)
    return apply_op("CollectiveReduce", [t], {
        "group_size": group_size, "group_key": group_key, "instance_key": instance_key, "merge_op": merge_op,
        "final_op": final_op, "subdiv_offsets": [int(x) for x in subdiv_offsets],
        "communication_hint": communication_hint, "timeout_seconds": _timeout("all_reduce", timeout)},
        name=name or "CollectiveReduce")


def all_gather(t, group_size, group_key, instance_key, communication_hint="auto", timeout=0, name=None):
    """The members' ``t`` (identical shapes, rank >= 1) concatenated along axis 0 in rank
    order (members sorted by job, task and device), on every member."""
    _check_keys("all_gather", group_size, group_key, instance_key)
    t = convert_to_tensor(t)
    return apply_op("CollectiveGather", [t], {
        "group_size": group_size, "group_key": group_key, "instance_key": instance_key, "shape": t.shape,
        "communication_hint": communication_hint, "timeout_seconds": _timeout("all_gather", timeout)},
        name=name or "CollectiveGather")


def broadcast_send(t, shape, dtype, group_size, group_key, instance_key, communication_hint="auto", timeout=0,
                   name=None):
    """Send ``t`` (of ``shape`` and ``dtype``) to the other members of the group, which run
    ``broadcast_recv`` with the same keys; returns ``t``."""
    _check_keys("broadcast_send", group_size, group_key, instance_key)
    t = convert_to_tensor(t)
    shape, dtype = as_shape(shape), dtypes_mod.as_dtype(dtype)
    if t.dtype is not dtype:
        raise errors.InvalidArgumentError(f"broadcast_send: t has dtype {t.dtype.name}, dtype says {dtype.name}")
    if not shape.is_compatible_with(t.shape):
        raise errors.InvalidArgumentError(f"broadcast_send: t has shape {t.shape}, shape says {shape}")
    return apply_op("CollectiveBcastSend", [t], {
        "group_size": group_size, "group_key": group_key, "instance_key": instance_key, "shape": shape,
        "communication_hint": communication_hint, "timeout_seconds": _timeout("broadcast_send", timeout)},
        name=name or "CollectiveBcastSend")


def broadcast_recv(shape, dtype, group_size, group_key, instance_key, communication_hint="auto", timeout=0,
                   name=None):
    """The tensor (of ``shape`` and ``dtype``) that one member of the group sends with
    ``broadcast_send``."""
    _check_keys("broadcast_recv", group_size, group_key, instance_key)
    shape = as_shape(shape)
    if not shape.is_fully_defined():
        raise errors.InvalidArgumentError(f"broadcast_recv: shape must be fully defined, got {shape}")
    return apply_op("CollectiveBcastRecv", [], {
        "T": dtypes_mod.as_dtype(dtype), "group_size": group_size, "group_key": group_key,
        "instance_key": instance_key, "shape": shape, "communication_hint": communication_hint,
        "timeout_seconds": _timeout("broadcast_recv", timeout)}, name=name or "CollectiveBcastRecv")
