"""Stateful ops: Variable and the ops that update it (Assign, AssignAdd, AssignSub), and the
sparse updates of TF1's ref variables (ScatterUpdate, ScatterAdd, ScatterSub, ScatterMul,
ScatterDiv, ScatterMin, ScatterMax, ScatterNdUpdate, ScatterNdAdd).

A Variable node's output refers to persistent state that lives in a container (4.7). Ops
that take it as a ``Ref`` input update that state; other consumers read its value.

A Scatter op updates the rows ``ref[indices[i], ...]`` with ``updates[i, ...]`` and only those
(``kernels/state.py`` writes them in place when nothing else can see the variable's tensor):
``updates`` has the shape ``indices.shape + ref.shape[1:]``, or is a scalar applied to every
selected row. Repeated indices all apply: their updates add up for ScatterAdd/ScatterSub
(multiply up for ScatterMul/ScatterDiv); for ScatterUpdate one of them wins, which one is
unspecified, as in TensorFlow. The ScatterNd forms index with the last dimension of
``indices`` (``K`` leading coordinates of ``ref``): ``updates`` has the shape
``indices.shape[:-1] + ref.shape[K:]``. Every one outputs the variable's new value. An index
out of range is an InvalidArgumentError naming the op, the index and the valid range, and
leaves the variable unchanged.
"""

from __future__ import annotations

import re

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import apply_op, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import shape_fns


def _variable_shape(op):
    return [op.get_attr("shape")]


def _assign_shape(op):
    ref, value = op.inputs[0].shape, op.inputs[1].shape
    if op.get_attr("validate_shape"):
        return [ref.merge_with(value)]
    return [value]


def _update_shape(op):
    ref, value = op.inputs[0].shape, op.inputs[1].shape
    return [ref.merge_with(value)]


def _scatter_shape(op):
    ref, indices, updates = (t.shape for t in op.inputs)
    where = f"{op.type} node '{op.name}'"
    if ref.ndims == 0:
        raise errors.InvalidArgumentError(f"{where}: cannot scatter into a scalar variable '{op.inputs[0].name}'")
    if updates.ndims != 0 and indices.ndims is not None and ref.ndims is not None:
        want = indices.concatenate(ref[1:])
        if not updates.is_compatible_with(want):
            raise errors.InvalidArgumentError(
                f"{where}: updates '{op.inputs[2].name}' have shape {updates}, but indices of shape {indices} and "
                f"a variable of shape {ref} need updates of shape {want} (indices.shape + ref.shape[1:]) or a scalar")
    return [ref]


def _scatter_nd_shape(op):
    ref, indices, updates = (t.shape for t in op.inputs)
    where = f"{op.type} node '{op.name}'"
    if indices.ndims == 0:
        raise errors.InvalidArgumentError(f"{where}: indices must have rank >= 1 (the last dimension indexes ref)")
    if indices.ndims is not None and ref.ndims is not None and indices[-1] is not None:
        k = indices[-1]
        if k > ref.ndims:
            raise errors.InvalidArgumentError(
                f"{where}: indices '{op.inputs[1].name}' of shape {indices} index {k} dimensions, but the variable "
                f"has shape {ref}")
        want = indices[:-1].concatenate(ref[k:])
        if updates.ndims is not None and not updates.is_compatible_with(want):
            raise errors.InvalidArgumentError(
                f"{where}: updates '{op.inputs[2].name}' have shape {updates}, but indices of shape {indices} and a "
                f"variable of shape {ref} need updates of shape {want} (indices.shape[:-1] + ref.shape[K:])")
    return [ref]


# op -> (the default of use_locking (TF's), the dtypes it takes, what it does)
_NUMBERS = "{float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, complex64, complex128}"
_REAL = "{float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64}"
SCATTER_OPS = {
    "ScatterUpdate": ("true", "type", "ref[indices] = updates"),
    "ScatterAdd": ("false", _NUMBERS, "ref[indices] += updates"),
    "ScatterSub": ("false", _NUMBERS, "ref[indices] -= updates"),
    "ScatterMul": ("false", _NUMBERS, "ref[indices] *= updates"),
    "ScatterDiv": ("false", _NUMBERS, "ref[indices] /= updates"),
    "ScatterMin": ("false", _REAL, "ref[indices] = min(ref[indices], updates)"),
    "ScatterMax": ("false", _REAL, "ref[indices] = max(ref[indices], updates)"),
    "ScatterNdUpdate": ("true", "type", "ref[indices[..., :K]] = updates"),
    "ScatterNdAdd": ("false", _NUMBERS, "ref[indices[..., :K]] += updates"),
}


def register_ops(reg):
    for name, (locking, types, doc) in SCATTER_OPS.items():
        reg.op(name, inputs=["ref: Ref(T)", "indices: Tindices", "updates: T"], outputs=["output_ref: T"],
               attrs=[f"T: {types}", "Tindices: {int32, int64}", f"use_locking: bool = {locking}"],
               shape_fn=_scatter_nd_shape if "Nd" in name else _scatter_shape, stateful=True,
               doc=doc + " (only the rows indexed; repeated indices all apply); outputs the new value of ref.")
    reg.op("Variable", outputs=["ref: dtype"],
           attrs=["shape: shape = unknown", "dtype: type", "container: string = ''", "shared_name: string = ''"],
           shape_fn=_variable_shape, stateful=True, outputs_ref=True,
           doc="Holds a persistent tensor in a container; read by consumers, updated by Assign*.")
    reg.op("Assign", inputs=["ref: Ref(T)", "value: T"], outputs=["output_ref: T"],
           attrs=["T: type", "validate_shape: bool = true", "use_locking: bool = true"],
           shape_fn=_assign_shape, stateful=True)
    for name in ("AssignAdd", "AssignSub"):
        reg.op(name, inputs=["ref: Ref(T)", "value: T"], outputs=["output_ref: T"],
               attrs=["T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, complex64, complex128}",
                      "use_locking: bool = false"],
               shape_fn=_update_shape, stateful=True)
    reg.op("IsVariableInitialized", inputs=["ref: Ref(dtype)"], outputs=["is_initialized: bool"],
           attrs=["dtype: type"], shape_fn=shape_fns.scalar, stateful=True)


def variable_op(shape, dtype, name="Variable", container=None, shared_name="", exact_name=None):
    """A raw Variable node. ``exact_name`` names it exactly (tw.Variable uses its scope name)."""
    g = get_default_graph()
    return apply_op("Variable", [], {
        "shape": as_shape(shape) if shape is not None else TensorShape(None),
        "dtype": dtypes.as_dtype(dtype),
        "container": g._current_container() if container is None else container,
        "shared_name": shared_name or "",
    }, name=name, _exact_name=exact_name)


def assign(ref, value, validate_shape=None, use_locking=None, name=None):
    """``ref = value``; returns the new value (``tf.assign``)."""
    attrs = {}
    if validate_shape is not None:
        attrs["validate_shape"] = validate_shape
    if use_locking is not None:
        attrs["use_locking"] = use_locking
    return apply_op("Assign", [ref, value], attrs, name=name)


def assign_add(ref, value, use_locking=None, name=None):
    """``ref += value``; returns the new value."""
    return apply_op("AssignAdd", [ref, value], {} if use_locking is None else {"use_locking": use_locking}, name=name)


def assign_sub(ref, value, use_locking=None, name=None):
    """``ref -= value``; returns the new value."""
    return apply_op("AssignSub", [ref, value], {} if use_locking is None else {"use_locking": use_locking}, name=name)


def is_variable_initialized(ref, name=None):
    return apply_op("IsVariableInitialized", [ref], name=name)


def _scatter(op_type, locking, doc):
    """The TF1 wrapper of the Scatter op ``op_type`` (``ScatterNdAdd``: ``scatter_nd_add``),
    ``(ref, indices, updates, use_locking=locking, name=None)``, which returns the new value
    of ``ref``; ``locking`` is TensorFlow's default."""
    def wrapper(ref, indices, updates, use_locking=locking, name=None):
        return apply_op(op_type, [ref, indices, updates], {} if use_locking is None else {"use_locking": use_locking},
                        name=name)
    wrapper.__name__ = wrapper.__qualname__ = re.sub(r"(?<!^)(?=[A-Z])", "_", op_type).lower()
    wrapper.__doc__ = doc + "; returns the new value of ``ref``."
    return wrapper


scatter_update = _scatter("ScatterUpdate", True, "``ref[indices] = updates`` (TF1 ``tf.scatter_update``)")
scatter_add = _scatter("ScatterAdd", False, "``ref[indices] += updates``, repeated indices adding up")
scatter_sub = _scatter("ScatterSub", False, "``ref[indices] -= updates``, repeated indices adding up")
scatter_mul = _scatter("ScatterMul", False, "``ref[indices] *= updates``")
scatter_div = _scatter("ScatterDiv", False, "``ref[indices] /= updates``")
scatter_min = _scatter("ScatterMin", False, "``ref[indices] = min(ref[indices], updates)``")
scatter_max = _scatter("ScatterMax", False, "``ref[indices] = max(ref[indices], updates)``")
scatter_nd_update = _scatter("ScatterNdUpdate", True,
                             "``ref[indices[i, :K]] = updates[i]`` (TF1 ``tf.scatter_nd_update``)")
scatter_nd_add = _scatter("ScatterNdAdd", False, "``ref[indices[i, :K]] += updates[i]``, repeated indices adding up")
