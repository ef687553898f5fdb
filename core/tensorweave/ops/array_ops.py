"""Array ops: constants, placeholders, identity, shapes, reshaping, slicing, joining.

Definitions are registered by ``register_ops`` (called from the built-in plugin); the Python
wrappers below are the public TF1-style API (``tw.constant``, ``tw.reshape``, ...).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import _to_const_array, apply_op
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import shape_fns

__all__ = ["constant", "placeholder", "identity", "stack", "pack"]


def _const_shape(op):
    return [TensorShape(np.shape(op.get_attr("value")))]


def _placeholder_shape(op):
    return [op.get_attr("shape")]


def _pack_shape(op):
    shape = TensorShape(None)
    for t in op.inputs:
        try:
            shape = shape.merge_with(t.shape)
        except errors.InvalidArgumentError:
            raise errors.InvalidArgumentError(
                f"all packed tensors must have the same shape; got {op.inputs[0].shape} and {t.shape}") from None
    if shape.ndims is None:
        return [TensorShape(None)]
    axis = shape_fns.normalize_axis(op.get_attr("axis"), shape.ndims + 1)
    dims = shape.dims
    dims.insert(axis, len(op.inputs))
    return [TensorShape(dims)]


def register_ops(reg):
    reg.op("Const", outputs=["output: dtype"], attrs=["value: tensor", "dtype: type"], shape_fn=_const_shape,
           doc="A constant tensor; its value is an attr.")
    reg.op("Placeholder", outputs=["output: dtype"], attrs=["dtype: type", "shape: shape = unknown"],
           shape_fn=_placeholder_shape, doc="A value that must be fed at run time.")
    reg.op("Identity", inputs=["input: T"], outputs=["output: T"], attrs=["T: type"], shape_fn=shape_fns.unchanged)
    reg.op("Pack", inputs=["values: N * T"], outputs=["output: T"], attrs=["N: int >= 1", "T: type", "axis: int = 0"],
           shape_fn=_pack_shape)


# ---------------------------------------------------------------------------------------
def constant(value, dtype=None, shape=None, name="Const", verify_shape=False):
    """A constant tensor (``tw.constant([1., 2.])``). A scalar ``value`` with ``shape`` fills it."""
    dt = dtypes.as_dtype(dtype) if dtype is not None else None
    arr = _to_const_array(value, dt, name)
    if dt is None and arr.dtype == object:
        dt = dtypes.string
    dt = dt or dtypes.as_dtype(arr.dtype)
    if shape is not None:
        shape = as_shape(shape).as_list()
        if arr.shape != tuple(shape):
            if verify_shape or (arr.size not in (1, int(np.prod(shape, dtype=np.int64)))):
                raise errors.InvalidArgumentError(
                    f"constant '{name}': value of shape {arr.shape} does not fit shape {tuple(shape)}")
            arr = np.broadcast_to(arr.reshape(-1)[0] if arr.size == 1 else arr.reshape(shape), shape).copy()
    arr = np.array(arr)  # our own copy: the caller's array stays theirs and writable
    arr.flags.writeable = False  # a constant's value must never change under a kernel
    return apply_op("Const", [], {"value": arr, "dtype": dt}, name=name)


def placeholder(dtype=dtypes.float32, shape=None, name=None):
    """A tensor to be fed at run time. Unlike TF1, ``dtype`` defaults to float32 (so the
    whitepaper's ``tf.placeholder(name="x")`` runs as written)."""
    return apply_op("Placeholder", [], {"dtype": dtypes.as_dtype(dtype), "shape": as_shape(shape)}, name=name)


def identity(input, name=None):  # noqa: A002 - TF1 argument name
    return apply_op("Identity", [input], name=name)


def stack(values, axis=0, name="stack"):
    """Pack a list of rank-R tensors into one rank-(R+1) tensor (``tf.stack``)."""
    if not isinstance(values, list | tuple) or not values:
        raise errors.InvalidArgumentError("stack expects a non-empty list of tensors")
    return apply_op("Pack", [list(values)], {"axis": axis}, name=name)


pack = stack
