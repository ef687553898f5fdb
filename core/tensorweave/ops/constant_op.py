"""Constants: the Const op, ``tw.constant``, and how Python values become tensors.

Both ``array_ops`` and ``math_ops`` build constants, so they live here, below both (as in
TensorFlow's ``constant_op.py``). Importing this module registers the conversion every
op wrapper relies on: any Python or NumPy value passed where a tensor is expected becomes a
``Const`` node (``framework.graph.convert_to_tensor``), refusing lossy conversions.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import apply_op, register_tensor_conversion_function
from tensorweave.framework.tensor_shape import TensorShape, as_shape


def _const_shape(op):
    return [TensorShape(np.shape(op.get_attr("value")))]


def register_ops(reg):
    reg.op("Const", outputs=["output: dtype"], attrs=["value: tensor", "dtype: type"], shape_fn=_const_shape,
           doc="A constant tensor; its value is an attr.")


def to_const_array(value, dtype, name=None) -> np.ndarray:
    """Convert a Python/NumPy value to a constant array of ``dtype`` (its own dtype when
    None), refusing lossy conversions."""
    what = f" for '{name}'" if name else ""
    if dtype is None:
        dtype = dtypes.dtype_of_value(value)
        return dtypes.to_numpy(value, dtype)
    try:
        raw = np.asarray(value) if not dtype.is_string else None
    except (ValueError, TypeError) as e:
        raise errors.InvalidArgumentError(f"cannot convert {value!r}{what} to a tensor: {e}") from None
    if dtype.is_string:
        return dtypes.to_numpy(value, dtype)
    if raw.dtype.kind in "OSU":
        raise errors.InvalidArgumentError(f"expected {dtype.name}{what}, got {value!r} of type {type(value).__name__}")
    ok = (
        raw.size == 0  # `[]` reads as float64 in NumPy but holds nothing to lose
        or (raw.dtype.kind == "b" and (dtype.is_bool or dtype.is_numeric))
        or (raw.dtype.kind in "iu" and (dtype.is_numeric or (dtype.is_bool and raw.size == 0)))
        or (raw.dtype.kind == "f" and (dtype.is_floating or dtype.is_complex))
        or (raw.dtype.kind == "c" and dtype.is_complex)
    )
    if raw.dtype.kind == "f" and dtype.is_integer and raw.size and np.all(np.isfinite(raw)) and np.all(raw == np.round(raw)) \
            and not isinstance(value, np.ndarray | np.generic):
        ok = True  # a Python 2.0 where an int is expected is fine, as in TF
    if not ok:
        raise errors.InvalidArgumentError(
            f"expected {dtype.name}{what}, got {value!r} of type {type(value).__name__} ({raw.dtype}); "
            "the conversion would lose information")
    if dtype.is_integer and raw.dtype.kind in "iu" and raw.size:
        info = np.iinfo(dtype.np_dtype)
        if raw.min() < info.min or raw.max() > info.max:
            raise errors.InvalidArgumentError(f"value {value!r}{what} is out of range for {dtype.name}")
    return raw.astype(dtype.np_dtype, copy=False)


def constant(value, dtype=None, shape=None, name="Const", verify_shape=False):
    """A constant tensor (``tw.constant([1., 2.])``). A scalar ``value`` with ``shape`` fills it."""
    dt = dtypes.as_dtype(dtype) if dtype is not None else None
    arr = to_const_array(value, dt, name)
    if dt is None and arr.dtype == object:
        dt = dtypes.string
    dt = dt or dtypes.as_dtype(arr.dtype)
    if shape is not None:
        shape = as_shape(shape).as_list()
        if arr.shape != tuple(shape):
            if verify_shape or (arr.size not in (1, int(np.prod(shape, dtype=np.int64)))):
                raise errors.InvalidArgumentError(
                    f"constant '{name}': value of shape {arr.shape} does not fit shape {tuple(shape)}")
            arr = np.broadcast_to(arr.reshape(()) if arr.size == 1 else arr.reshape(shape), shape).copy()
    arr = np.array(arr)  # our own copy: the caller's array stays theirs and writable
    arr.flags.writeable = False  # a constant's value must never change under a kernel
    return apply_op("Const", [], {"value": arr, "dtype": dt}, name=name)


def _constant_conversion(value, dtype, name):
    arr = to_const_array(value, dtype, name)
    return constant(arr, dtype=dtypes.as_dtype(arr.dtype) if arr.dtype != object else dtypes.string,
                    name=name or "Const")


# The last resort of convert_to_tensor: whatever no other conversion claimed.
register_tensor_conversion_function(object, _constant_conversion, priority=200)
