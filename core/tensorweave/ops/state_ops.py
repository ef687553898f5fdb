"""Stateful ops: Variable and the ops that update it (Assign, AssignAdd, AssignSub).

A Variable node's output refers to persistent state that lives in a container (4.7). Ops
that take it as a ``Ref`` input update that state; other consumers read its value.
"""

from __future__ import annotations

from tensorweave.framework import dtypes
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


def register_ops(reg):
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
