"""Array ops: constants, placeholders, identity, shapes, reshaping, slicing, joining,
gathering, and ``Tensor.__getitem__`` (NumPy-style indexing through StridedSlice).

Definitions are registered by ``register_ops`` (called from the built-in plugin); the Python
wrappers below are the public TF1-style API (``tw.constant``, ``tw.reshape``, ...).
"""

from __future__ import annotations

import builtins

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    Tensor,
    apply_op,
    constant_value,
    constant_value_as_shape,
    convert_to_tensor,
    register_tensor_conversion_function,
)
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import math_ops, shape_fns
from tensorweave.ops.constant_op import constant

# This module defines ops named ``range`` and ``slice`` (TF1 names), so it keeps the builtins.
_pyrange = builtins.range
_pyslice = builtins.slice

__all__ = [
    "constant", "placeholder", "identity", "stack", "pack",
    "concat", "slice", "split", "reshape", "transpose", "rank", "shape", "size", "fill",
    "zeros", "ones", "zeros_like", "ones_like", "gather", "unstack", "unpack", "expand_dims",
    "squeeze", "tile", "range", "one_hot", "stop_gradient", "placeholder_with_default",
    "strided_slice", "broadcast_to", "invert_permutation", "setdiff1d", "where", "select",
]

_INDEX = "{int32, int64}"
_NOT_STRING = ("{float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, "
               "complex64, complex128, bool}")


# ---------------------------------------------------------------------------------------
# shape-function helpers
def _select_shape(op):
    c, t, e = (x.shape for x in op.inputs)
    try:
        out = t.merge_with(e)
    except errors.InvalidArgumentError:
        raise errors.InvalidArgumentError(f"Select: t and e must have the same shape, got {t} and {e}") from None
    if c.ndims in (None, 0) or out.ndims is None or c.is_compatible_with(out):
        return [out]
    if c.ndims == 1 and out.ndims >= 1 and (c[0] is None or out[0] is None or c[0] == out[0]):
        return [out]  # a vector condition picks whole rows
    raise errors.InvalidArgumentError(
        f"Select: condition must be a scalar, have the shape of t and e, or be a vector of their first "
        f"dimension; got condition {c} for t and e of shape {out}")


def _const_ints(t):
    """The construction-time value of an int tensor as a list of Python ints, else None."""
    v = constant_value(t)
    if v is None:
        return None
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _const_scalar(t, what):
    v = constant_value(t)
    if v is None:
        return None
    v = np.asarray(v)
    if v.size != 1:
        raise errors.InvalidArgumentError(f"{what} must be a scalar, got a value of shape {v.shape}")
    return v.reshape(-1)[0].item()


def _vector_length(t):
    """The static length of a 1-D tensor (None if unknown); errors if it is not a vector."""
    s = t.shape
    if s.ndims is not None and s.ndims != 1:
        raise errors.InvalidArgumentError(f"'{t.name}' must be a vector, got shape {s}")
    return None if s.ndims is None else s[0]


def _require_scalar(t, what):
    if t.shape.ndims is not None and t.shape.ndims != 0:
        raise errors.InvalidArgumentError(f"{what} must be a scalar, got shape {t.shape}")


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


# ---------------------------------------------------------------------------------------
# shape functions
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


def _concat_shape(op):
    values, axis_t = op.inputs[:-1], op.inputs[-1]
    _require_scalar(axis_t, "the concat axis")
    ranks = {t.shape.ndims for t in values if t.shape.ndims is not None}
    if len(ranks) > 1:
        raise errors.InvalidArgumentError(
            "all inputs must have the same rank; got shapes " + ", ".join(str(t.shape) for t in values))
    if not ranks:
        return [TensorShape(None)]
    rank = ranks.pop()
    if rank == 0:
        raise errors.InvalidArgumentError("cannot concatenate scalars; use tw.stack")
    axis = _const_scalar(axis_t, "the concat axis")
    if axis is None:
        return [TensorShape([None] * rank)]
    axis = shape_fns.normalize_axis(int(axis), rank, "concat axis")
    dims = [None] * rank
    total = 0
    for t in values:
        if t.shape.ndims is None:
            total = None
            continue
        for i, d in enumerate(t.shape.dims):
            if i == axis:
                total = None if total is None or d is None else total + d
            elif d is not None:
                if dims[i] is not None and dims[i] != d:
                    raise errors.InvalidArgumentError(
                        f"dimension {i} of the inputs must match (only the concat axis {axis} may differ); "
                        "got shapes " + ", ".join(str(v.shape) for v in values))
                dims[i] = d
    dims[axis] = total
    return [TensorShape(dims)]


def _slice_shape(op):
    x = op.inputs[0].shape
    nb, ns = _vector_length(op.inputs[1]), _vector_length(op.inputs[2])
    begin, size = _const_ints(op.inputs[1]), _const_ints(op.inputs[2])
    n = next((v for v in (x.ndims, nb, ns, None if begin is None else len(begin),
                          None if size is None else len(size)) if v is not None), None)
    for what, m in (("begin", nb), ("size", ns)):
        if m is not None and n is not None and m != n:
            raise errors.InvalidArgumentError(
                f"{what} has {m} elements but the input {x} has rank {n}; they must match")
    if n is None:
        return [TensorShape(None)]
    dims = x.dims if x.ndims is not None else [None] * n
    out = []
    for i in _pyrange(n):
        b = begin[i] if begin is not None else None
        s = size[i] if size is not None else None
        d = dims[i]
        if b is not None and b < 0:
            raise errors.InvalidArgumentError(f"begin[{i}] = {b} must be >= 0")
        if s is not None and s < -1:
            raise errors.InvalidArgumentError(f"size[{i}] = {s} must be >= -1 (-1 means: to the end)")
        if s == -1:
            s = None if b is None or d is None else d - b
        if d is not None and b is not None and s is not None and (b > d or b + s > d):
            raise errors.InvalidArgumentError(
                f"slice begin {begin} size {size} is out of bounds for dimension {i} of the input {x}")
        out.append(s)
    return [TensorShape(out)]


def _split_shape(op):
    axis_t, value = op.inputs
    num = op.get_attr("num_split")
    _require_scalar(axis_t, "the split axis")
    x = value.shape
    if x.ndims is None:
        return [TensorShape(None)] * num
    axis = _const_scalar(axis_t, "the split axis")
    if axis is None:
        return [TensorShape([None] * x.ndims)] * num
    axis = shape_fns.normalize_axis(int(axis), x.ndims, "split axis")
    dims = x.dims
    d = dims[axis]
    if d is not None:
        if d % num:
            raise errors.InvalidArgumentError(
                f"the number of splits {num} must evenly divide dimension {axis} of the input {x} (size {d})")
        dims[axis] = d // num
    return [TensorShape(dims)] * num


def _split_v_shape(op):
    value, sizes_t, axis_t = op.inputs
    num = op.get_attr("num_split")
    _require_scalar(axis_t, "the split axis")
    n = _vector_length(sizes_t)
    if n is not None and n != num:
        raise errors.InvalidArgumentError(f"size_splits has {n} elements but num_split is {num}")
    sizes = _const_ints(sizes_t)
    x = value.shape
    if sizes is not None:
        if len(sizes) != num:
            raise errors.InvalidArgumentError(f"size_splits has {len(sizes)} elements but num_split is {num}")
        if any(s < -1 for s in sizes) or sizes.count(-1) > 1:
            raise errors.InvalidArgumentError(
                f"size_splits {sizes} must be >= 0, with at most one -1 (inferred)")
    if x.ndims is None:
        return [TensorShape(None)] * num
    axis = _const_scalar(axis_t, "the split axis")
    if axis is None:
        return [TensorShape([None] * x.ndims)] * num
    axis = shape_fns.normalize_axis(int(axis), x.ndims, "split axis")
    if sizes is None:
        sizes = [None] * num
    d = x.dims[axis]
    if d is not None and sizes and None not in sizes:
        known = sum(s for s in sizes if s != -1)
        if -1 in sizes:
            if known > d:
                raise errors.InvalidArgumentError(
                    f"size_splits {sizes} add up to more than dimension {axis} of the input {x} (size {d})")
            sizes = [d - known if s == -1 else s for s in sizes]
        elif known != d:
            raise errors.InvalidArgumentError(
                f"size_splits {sizes} must add up to dimension {axis} of the input {x} (size {d})")
    out = []
    for s in sizes:
        dims = x.dims
        dims[axis] = None if s is None or s == -1 else s
        out.append(TensorShape(dims))
    return out


def _reshape_shape(op):
    x, shape_t = op.inputs
    _vector_length(shape_t)
    n = x.shape.num_elements()
    v = constant_value(shape_t)
    if v is None:
        s = constant_value_as_shape(shape_t)
        if s.ndims is not None and n is not None:
            unknown = [i for i, d in enumerate(s.dims) if d is None]
            known = _prod(d for d in s.dims if d is not None)
            if len(unknown) == 1 and known > 0 and n % known == 0:
                dims = s.dims
                dims[unknown[0]] = n // known
                return [TensorShape(dims)]
        return [s]
    dims = [int(d) for d in np.asarray(v).reshape(-1)]
    if any(d < -1 for d in dims) or dims.count(-1) > 1:
        raise errors.InvalidArgumentError(
            f"the requested shape {dims} may hold sizes >= 0 and at most one -1 (inferred)")
    if -1 not in dims:
        if n is not None and n != _prod(dims):
            raise errors.InvalidArgumentError(
                f"cannot reshape a tensor of shape {x.shape} ({n} elements) to shape {dims} "
                f"({_prod(dims)} elements)")
        return [TensorShape(dims)]
    known = _prod(d for d in dims if d != -1)
    i = dims.index(-1)
    if n is None:
        out = list(dims)
        out[i] = None
        return [TensorShape(out)]
    if known == 0:
        raise errors.InvalidArgumentError(
            f"cannot reshape a tensor of shape {x.shape} to shape {dims}: the -1 dimension cannot be "
            "inferred when the other dimensions multiply to 0")
    if n % known:
        raise errors.InvalidArgumentError(
            f"cannot reshape a tensor of shape {x.shape} ({n} elements) to shape {dims}: "
            f"{n} is not a multiple of {known}")
    dims[i] = n // known
    return [TensorShape(dims)]


def _check_perm(perm, rank):
    if rank is not None and len(perm) != rank:
        raise errors.InvalidArgumentError(
            f"transpose perm {perm} has {len(perm)} elements but the input has rank {rank}")
    if sorted(perm) != list(_pyrange(len(perm))):
        raise errors.InvalidArgumentError(f"transpose perm {perm} is not a permutation of 0..{len(perm) - 1}")


def _transpose_shape(op):
    x, perm_t = op.inputs
    n = _vector_length(perm_t)
    if n is not None and x.shape.ndims is not None and n != x.shape.ndims:
        raise errors.InvalidArgumentError(
            f"transpose perm has {n} elements but the input {x.shape} has rank {x.shape.ndims}")
    perm = _const_ints(perm_t)
    if perm is None:
        rank = x.shape.ndims if x.shape.ndims is not None else n
        return [TensorShape(None if rank is None else [None] * rank)]
    _check_perm(perm, x.shape.ndims)
    if x.shape.ndims is None:
        return [TensorShape([None] * len(perm))]
    dims = x.shape.dims
    return [TensorShape([dims[p] for p in perm])]


def _shape_shape(op):
    nd = op.inputs[0].shape.ndims
    return [TensorShape([nd])]


def _fill_shape(op):
    dims_t, value = op.inputs
    _vector_length(dims_t)
    _require_scalar(value, "the fill value")
    v = _const_ints(dims_t)
    if v is not None and any(d < 0 for d in v):
        raise errors.InvalidArgumentError(f"fill dims {v} must be >= 0")
    return [constant_value_as_shape(dims_t)]


def _placeholder_with_default_shape(op):
    s = op.get_attr("shape")
    if not s.is_compatible_with(op.inputs[0].shape):
        raise errors.InvalidArgumentError(
            f"the default value has shape {op.inputs[0].shape}, which is not compatible with shape {s}")
    return [s]


def _gather_dims(params, indices, axis):
    if params.ndims is None or indices.ndims is None or axis is None:
        return TensorShape(None)
    if params.ndims == 0:
        raise errors.InvalidArgumentError("cannot gather from a scalar")
    axis = shape_fns.normalize_axis(int(axis), params.ndims, "gather axis")
    p = params.dims
    return TensorShape(p[:axis] + indices.dims + p[axis + 1:])


def _gather_shape(op):
    return [_gather_dims(op.inputs[0].shape, op.inputs[1].shape, 0)]


def _gather_v2_shape(op):
    _require_scalar(op.inputs[2], "the gather axis")
    axis = _const_scalar(op.inputs[2], "the gather axis")
    return [_gather_dims(op.inputs[0].shape, op.inputs[1].shape, axis)]


def _unpack_shape(op):
    x = op.inputs[0].shape
    num = op.get_attr("num")
    if x.ndims is None:
        return [TensorShape(None)] * num
    if x.ndims == 0:
        raise errors.InvalidArgumentError("cannot unstack a scalar")
    axis = shape_fns.normalize_axis(op.get_attr("axis"), x.ndims, "unstack axis")
    dims = x.dims
    if dims[axis] is not None and dims[axis] != num:
        raise errors.InvalidArgumentError(
            f"num = {num} does not match dimension {axis} of the input {x} (size {dims[axis]})")
    del dims[axis]
    return [TensorShape(dims)] * num


def _expand_dims_shape(op):
    x, dim_t = op.inputs
    dim = _const_ints(dim_t)
    if dim is not None and len(dim) != 1:
        raise errors.InvalidArgumentError(f"the expand_dims axis must be a scalar, got {dim}")
    if x.shape.ndims is None:
        return [TensorShape(None)]
    if dim is None:
        return [TensorShape([None] * (x.shape.ndims + 1))]
    axis = shape_fns.normalize_axis(dim[0], x.shape.ndims + 1, "expand_dims axis")
    dims = x.shape.dims
    dims.insert(axis, 1)
    return [TensorShape(dims)]


def _squeeze_shape(op):
    x = op.inputs[0].shape
    axes = op.get_attr("squeeze_dims")
    if x.ndims is None:
        return [TensorShape(None)]
    dims = x.dims
    if not axes:
        if any(d is None for d in dims):
            return [TensorShape(None)]
        return [TensorShape([d for d in dims if d != 1])]
    norm = {shape_fns.normalize_axis(a, x.ndims, "squeeze axis") for a in axes}
    for a in sorted(norm):
        if dims[a] is not None and dims[a] != 1:
            raise errors.InvalidArgumentError(f"cannot squeeze dimension {a} of shape {x}: its size is not 1")
    return [TensorShape([d for i, d in enumerate(dims) if i not in norm])]


def _tile_shape(op):
    x, mult_t = op.inputs
    n = _vector_length(mult_t)
    rank = x.shape.ndims
    if n is not None and rank is not None and n != rank:
        raise errors.InvalidArgumentError(f"multiples has {n} elements but the input {x.shape} has rank {rank}")
    mult = _const_ints(mult_t)
    if mult is not None:
        if rank is not None and len(mult) != rank:
            raise errors.InvalidArgumentError(
                f"multiples {mult} has {len(mult)} elements but the input {x.shape} has rank {rank}")
        if any(m < 0 for m in mult):
            raise errors.InvalidArgumentError(f"multiples {mult} must be >= 0")
    if rank is None:
        rank = n if mult is None else len(mult)
        return [TensorShape(None if rank is None else [None] * rank)]
    dims = x.shape.dims
    if mult is None:
        return [TensorShape([0 if d == 0 else None for d in dims])]
    return [TensorShape([None if d is None and m != 0 else (d or 0) * m for d, m in zip(dims, mult, strict=False)])]


def range_length(start, limit, delta) -> int:
    """The length of ``tw.range(start, limit, delta)``; shared by the shape function and
    kernels so static and run-time shapes agree."""
    if delta == 0:
        raise errors.InvalidArgumentError("range: delta must not be 0")
    if delta > 0 and start > limit:
        raise errors.InvalidArgumentError(f"range: start {start} must be <= limit {limit} when delta {delta} > 0")
    if delta < 0 and start < limit:
        raise errors.InvalidArgumentError(f"range: start {start} must be >= limit {limit} when delta {delta} < 0")
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        return len(_pyrange(start, limit, delta))
    return int(np.ceil(abs((limit - start) / delta)))


def _range_shape(op):
    for t, what in zip(op.inputs, ("start", "limit", "delta"), strict=False):
        _require_scalar(t, f"range {what}")
    vals = [_const_scalar(t, "range argument") for t in op.inputs]
    if any(v is None for v in vals):
        return [TensorShape([None])]
    return [TensorShape([range_length(*vals)])]


def _one_hot_shape(op):
    indices, depth_t, on, off = op.inputs
    _require_scalar(depth_t, "depth")
    _require_scalar(on, "on_value")
    _require_scalar(off, "off_value")
    depth = _const_scalar(depth_t, "depth")
    if depth is not None and depth < 0:
        raise errors.InvalidArgumentError(f"depth must be >= 0, got {depth}")
    axis = op.get_attr("axis")
    x = indices.shape
    if x.ndims is None:
        return [TensorShape(None)]
    if not -1 <= axis <= x.ndims:
        raise errors.InvalidArgumentError(f"axis {axis} must be -1 or in [0, {x.ndims}]")
    dims = x.dims
    dims.insert(x.ndims if axis == -1 else axis, depth)
    return [TensorShape(dims)]


# ---------------------------------------------------------------------------------------
# StridedSlice: one helper turns (begin, end, strides, masks) into a NumPy index, so the
# shape function, the CPU kernel and other devices' kernels agree on the semantics.
_UNKNOWN = object()


def strided_slice_index(begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
                        new_axis_mask=0, shrink_axis_mask=0) -> tuple:
    """A NumPy index tuple equivalent to a StridedSlice spec (TF mask semantics).

    ``begin``/``end``/``strides`` are sequences of ints; an element may be ``_UNKNOWN``
    (shape inference with non-constant inputs). Shrunk dimensions become ints, new axes None.
    """
    n = len(strides)
    if len(begin) != n or len(end) != n:
        raise errors.InvalidArgumentError(
            f"begin, end and strides must have the same length, got {len(begin)}, {len(end)} and {n}")
    idx = []
    seen_ellipsis = False
    for i in _pyrange(n):
        bit = 1 << i
        if ellipsis_mask & bit:
            if seen_ellipsis:
                raise errors.InvalidArgumentError("a slice spec may contain only one ellipsis")
            seen_ellipsis = True
            idx.append(Ellipsis)
        elif new_axis_mask & bit:
            idx.append(None)
        elif shrink_axis_mask & bit:
            idx.append(0 if begin_mask & bit else begin[i])
        else:
            s = strides[i]
            if s == 0:
                raise errors.InvalidArgumentError(f"strides[{i}] must be non-zero")
            idx.append(_pyslice(None if begin_mask & bit else begin[i], None if end_mask & bit else end[i], s))
    return tuple(idx)


def _slice_len(d, sl):
    if d is None or _UNKNOWN in (sl.start, sl.stop, sl.step):
        return None
    return len(_pyrange(*sl.indices(d)))


def _strided_slice_dims(dims, idx):
    nd = len(dims)
    consumed = sum(1 for e in idx if e is not None and e is not Ellipsis)
    if consumed > nd:
        raise errors.InvalidArgumentError(f"the slice spec indexes {consumed} dimensions but the input has rank {nd}")
    out, i = [], 0
    for e in idx:
        if e is Ellipsis:
            k = nd - consumed
            out.extend(dims[i:i + k])
            i += k
        elif e is None:
            out.append(1)
        elif isinstance(e, _pyslice):
            out.append(_slice_len(dims[i], e))
            i += 1
        else:
            d = dims[i]
            if d is not None and e is not _UNKNOWN and not -d <= e < d:
                raise errors.InvalidArgumentError(f"index {e} is out of bounds for dimension {i} with size {d}")
            i += 1
    out.extend(dims[i:])
    return out


def _strided_slice_shape(op):
    x, b_t, e_t, s_t = op.inputs
    lens = {n for n in (_vector_length(b_t), _vector_length(e_t), _vector_length(s_t)) if n is not None}
    if len(lens) > 1:
        raise errors.InvalidArgumentError("begin, end and strides must have the same length")
    n = lens.pop() if lens else None
    vals = [_const_ints(t) for t in (b_t, e_t, s_t)]
    for v in vals:
        if v is not None:
            n = len(v)
    if n is None:
        return [TensorShape(None)]
    vals = [v if v is not None else [_UNKNOWN] * n for v in vals]
    masks = [op.get_attr(k) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")]
    idx = strided_slice_index(*vals, *masks)
    if x.shape.ndims is None:
        return [TensorShape(None)]
    return [TensorShape(_strided_slice_dims(x.shape.dims, idx))]


# ---------------------------------------------------------------------------------------
# BroadcastTo, InvertPermutation, ListDiff, StridedSliceGrad (also used by gradients)
def _broadcast_to_shape(op):
    x, shape_t = op.inputs
    _vector_length(shape_t)
    target = constant_value_as_shape(shape_t)
    v = _const_ints(shape_t)
    if v is not None and any(d < 0 for d in v):
        raise errors.InvalidArgumentError(f"broadcast_to: shape {v} must be >= 0")
    if target.ndims is None:
        return [TensorShape(None)]
    xs = x.shape
    if xs.ndims is None:
        return [target]
    if xs.ndims > target.ndims:
        raise errors.InvalidArgumentError(
            f"cannot broadcast a tensor of shape {xs} to the lower-rank shape {target}")
    dims = target.dims
    lead = target.ndims - xs.ndims
    for i, d in enumerate(xs.dims):
        t = dims[lead + i]
        if d is None or d == 1:
            continue
        if t is None:
            dims[lead + i] = d
        elif t != d:
            raise errors.InvalidArgumentError(f"cannot broadcast a tensor of shape {xs} to shape {target}")
    return [TensorShape(dims)]


def _invert_permutation_shape(op):
    _vector_length(op.inputs[0])
    p = _const_ints(op.inputs[0])
    if p is not None:
        _check_perm(p, None)
    return [op.inputs[0].shape]


def _list_diff_shape(op):
    _vector_length(op.inputs[0])
    _vector_length(op.inputs[1])
    return [TensorShape([None]), TensorShape([None])]


def _strided_slice_grad_shape(op):
    shape_t = op.inputs[0]
    _vector_length(shape_t)
    return [constant_value_as_shape(shape_t)]


# ---------------------------------------------------------------------------------------
def register_ops(reg):
    reg.op("Placeholder", outputs=["output: dtype"], attrs=["dtype: type", "shape: shape = unknown"],
           shape_fn=_placeholder_shape, doc="A value that must be fed at run time.")
    reg.op("PlaceholderWithDefault", inputs=["input: dtype"], outputs=["output: dtype"],
           attrs=["dtype: type", "shape: shape"], shape_fn=_placeholder_with_default_shape,
           doc="Its input, unless a value is fed.")
    reg.op("Identity", inputs=["input: T"], outputs=["output: T"], attrs=["T: type"], shape_fn=shape_fns.unchanged)
    reg.op("StopGradient", inputs=["input: T"], outputs=["output: T"], attrs=["T: type"],
           shape_fn=shape_fns.unchanged, doc="Identity that gradients do not flow through.")
    reg.op("Pack", inputs=["values: N * T"], outputs=["output: T"], attrs=["N: int >= 1", "T: type", "axis: int = 0"],
           shape_fn=_pack_shape)
    reg.op("Unpack", inputs=["value: T"], outputs=["output: num * T"],
           attrs=["num: int >= 0", "T: type", "axis: int = 0"], shape_fn=_unpack_shape)
    reg.op("ConcatV2", inputs=["values: N * T", "axis: Tidx"], outputs=["output: T"],
           attrs=["N: int >= 2", "T: type", f"Tidx: {_INDEX} = int32"], shape_fn=_concat_shape)
    reg.op("Slice", inputs=["input: T", "begin: Index", "size: Index"], outputs=["output: T"],
           attrs=["T: type", f"Index: {_INDEX}"], shape_fn=_slice_shape)
    reg.op("StridedSlice", inputs=["input: T", "begin: Index", "end: Index", "strides: Index"], outputs=["output: T"],
           attrs=["T: type", f"Index: {_INDEX}", "begin_mask: int = 0", "end_mask: int = 0",
                  "ellipsis_mask: int = 0", "new_axis_mask: int = 0", "shrink_axis_mask: int = 0"],
           shape_fn=_strided_slice_shape)
    reg.op("Split", inputs=["split_dim: int32", "value: T"], outputs=["output: num_split * T"],
           attrs=["num_split: int >= 1", "T: type"], shape_fn=_split_shape)
    reg.op("SplitV", inputs=["value: T", "size_splits: Tlen", "split_dim: int32"], outputs=["output: num_split * T"],
           attrs=["num_split: int >= 1", "T: type", f"Tlen: {_INDEX} = int64"], shape_fn=_split_v_shape)
    reg.op("Reshape", inputs=["tensor: T", "shape: Tshape"], outputs=["output: T"],
           attrs=["T: type", f"Tshape: {_INDEX} = int32"], shape_fn=_reshape_shape)
    reg.op("Transpose", inputs=["x: T", "perm: Tperm"], outputs=["y: T"],
           attrs=["T: type", f"Tperm: {_INDEX} = int32"], shape_fn=_transpose_shape)
    reg.op("Rank", inputs=["input: T"], outputs=["output: int32"], attrs=["T: type"], shape_fn=shape_fns.scalar)
    reg.op("Shape", inputs=["input: T"], outputs=["output: out_type"],
           attrs=["T: type", f"out_type: {_INDEX} = int32"], shape_fn=_shape_shape)
    reg.op("Size", inputs=["input: T"], outputs=["output: out_type"],
           attrs=["T: type", f"out_type: {_INDEX} = int32"], shape_fn=shape_fns.scalar)
    reg.op("Fill", inputs=["dims: index_type", "value: T"], outputs=["output: T"],
           attrs=["T: type", f"index_type: {_INDEX} = int32"], shape_fn=_fill_shape)
    reg.op("ZerosLike", inputs=["x: T"], outputs=["y: T"], attrs=["T: type"], shape_fn=shape_fns.unchanged)
    reg.op("Select", inputs=["condition: bool", "t: T", "e: T"], outputs=["output: T"], attrs=["T: type"],
           shape_fn=_select_shape,
           doc="Elements of t where condition is true, else of e; a vector condition picks rows (TF1's select).")
    reg.op("Where", inputs=["input: T"], outputs=["index: int64"], attrs=[f"T: {_NOT_STRING} = bool"],
           shape_fn=lambda op: [TensorShape([None, op.inputs[0].shape.ndims])],
           doc="The coordinates of the true (non-zero) elements, one row each, in row-major order.")
    reg.op("OnesLike", inputs=["x: T"], outputs=["y: T"], attrs=[f"T: {_NOT_STRING}"], shape_fn=shape_fns.unchanged)
    reg.op("Gather", inputs=["params: Tparams", "indices: Tindices"], outputs=["output: Tparams"],
           attrs=["validate_indices: bool = true", "Tparams: type", f"Tindices: {_INDEX}"], shape_fn=_gather_shape)
    reg.op("GatherV2", inputs=["params: Tparams", "indices: Tindices", "axis: Taxis"], outputs=["output: Tparams"],
           attrs=["Tparams: type", f"Tindices: {_INDEX}", f"Taxis: {_INDEX}"], shape_fn=_gather_v2_shape)
    reg.op("ExpandDims", inputs=["input: T", "dim: Tdim"], outputs=["output: T"],
           attrs=["T: type", f"Tdim: {_INDEX} = int32"], shape_fn=_expand_dims_shape)
    reg.op("Squeeze", inputs=["input: T"], outputs=["output: T"],
           attrs=["T: type", "squeeze_dims: list(int) = []"], shape_fn=_squeeze_shape)
    reg.op("Tile", inputs=["input: T", "multiples: Tmultiples"], outputs=["output: T"],
           attrs=["T: type", f"Tmultiples: {_INDEX} = int32"], shape_fn=_tile_shape)
    reg.op("Range", inputs=["start: Tidx", "limit: Tidx", "delta: Tidx"], outputs=["output: Tidx"],
           attrs=["Tidx: {float32, float64, int32, int64} = int32"], shape_fn=_range_shape)
    reg.op("OneHot", inputs=["indices: TI", "depth: int32", "on_value: T", "off_value: T"], outputs=["output: T"],
           attrs=["axis: int = -1", "T: type", "TI: {uint8, int32, int64} = int64"], shape_fn=_one_hot_shape)
    reg.op("BroadcastTo", inputs=["input: T", "shape: Tidx"], outputs=["output: T"],
           attrs=["T: type", f"Tidx: {_INDEX} = int32"], shape_fn=_broadcast_to_shape,
           doc="The input broadcast (NumPy rules) to the given shape.")
    reg.op("InvertPermutation", inputs=["x: T"], outputs=["y: T"], attrs=[f"T: {_INDEX} = int32"],
           shape_fn=_invert_permutation_shape, doc="y[x[i]] = i for a permutation x of 0..n-1.")
    reg.op("ListDiff", inputs=["x: T", "y: T"], outputs=["out: T", "idx: out_idx"],
           attrs=["T: type", f"out_idx: {_INDEX} = int32"], shape_fn=_list_diff_shape,
           doc="The elements of vector x not in y, in order, and their positions in x.")
    reg.op("StridedSliceGrad", inputs=["shape: Index", "begin: Index", "end: Index", "strides: Index", "dy: T"],
           outputs=["output: T"],
           attrs=["T: type", f"Index: {_INDEX}", "begin_mask: int = 0", "end_mask: int = 0",
                  "ellipsis_mask: int = 0", "new_axis_mask: int = 0", "shrink_axis_mask: int = 0"],
           shape_fn=_strided_slice_grad_shape,
           doc="Zeros of the given shape with dy written where StridedSlice with the same spec reads.")


# ---------------------------------------------------------------------------------------
# wrappers
def _is_graph_value(v):
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _index_tensor(value, what="shape", name=None, dtype=None):
    """Convert a shape, index list or int to an int32 tensor (int64 when values need it,
    or ``dtype`` when given).

    Handles what plain conversion gets wrong for shapes: ``[]`` (which NumPy calls float),
    TensorShapes, and lists mixing Python ints with scalar tensors.
    """
    if isinstance(value, Tensor):
        return value
    if _is_graph_value(value):
        return convert_to_tensor(value)
    if isinstance(value, TensorShape):
        if not value.is_fully_defined():
            raise errors.InvalidArgumentError(f"{what} {value} must be fully defined")
        value = value.as_list()
    if isinstance(value, list | tuple) and any(_is_graph_value(v) for v in value):
        if dtype is not None:
            value = [math_ops.cast(v, dtype) if _is_graph_value(v) else v for v in value]
        return stack(list(value), name=name or "stack")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = np.asarray(value, dtype=object)
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int32)
    if arr.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"{what} must be integers, got {value!r}")
    if dtype is not None:
        arr = arr.astype(dtype.np_dtype)
    elif arr.size == 0 or (arr.min() >= -(2**31) and arr.max() < 2**31):
        arr = arr.astype(np.int32)
    else:
        arr = arr.astype(np.int64)
    return constant(arr, name=name or "Const")


def placeholder(dtype=dtypes.float32, shape=None, name=None):
    """A tensor to be fed at run time. Unlike TF1, ``dtype`` defaults to float32 (so the
    whitepaper's ``tf.placeholder(name="x")`` runs as written)."""
    return apply_op("Placeholder", [], {"dtype": dtypes.as_dtype(dtype), "shape": as_shape(shape)}, name=name)


def placeholder_with_default(input, shape, name=None):  # noqa: A002 - TF1 argument name
    """``input`` unless a value is fed for the result; ``shape`` may be less specific than
    the default's (``[None, 3]``) so that other shapes can be fed."""
    return apply_op("PlaceholderWithDefault", [input], {"shape": as_shape(shape)}, name=name)


def identity(input, name=None):  # noqa: A002 - TF1 argument name
    return apply_op("Identity", [input], name=name)


def stop_gradient(input, name=None):  # noqa: A002 - TF1 argument name
    """The input, as a constant to gradient computation."""
    return apply_op("StopGradient", [input], name=name)


def stack(values, axis=0, name="stack"):
    """Pack a list of rank-R tensors into one rank-(R+1) tensor (``tf.stack``)."""
    if not isinstance(values, list | tuple) or not values:
        raise errors.InvalidArgumentError("stack expects a non-empty list of tensors")
    return apply_op("Pack", [list(values)], {"axis": axis}, name=name)


pack = stack


def unstack(value, num=None, axis=0, name="unstack"):
    """Split ``value`` along ``axis`` into a list of ``num`` tensors of rank R-1."""
    value = convert_to_tensor(value)
    if num is None:
        s = value.shape
        if s.ndims is None:
            raise errors.InvalidArgumentError(
                f"unstack: cannot infer num from '{value.name}', whose shape is unknown; pass num")
        if s.ndims == 0:
            raise errors.InvalidArgumentError(f"unstack: '{value.name}' is a scalar")
        num = s[shape_fns.normalize_axis(axis, s.ndims, "unstack axis")]
        if num is None:
            raise errors.InvalidArgumentError(
                f"unstack: cannot infer num from shape {s} of '{value.name}' (dimension {axis} is unknown); pass num")
    out = apply_op("Unpack", [value], {"num": num, "axis": axis}, name=name)
    return list(out) if isinstance(out, tuple) else []  # num=0: apply_op returns the Operation


unpack = unstack


def concat(values, axis, name="concat"):
    """Join tensors along ``axis`` (``tf.concat(values, axis)``)."""
    if not isinstance(values, list | tuple):
        values = [values]
    if not values:
        raise errors.InvalidArgumentError("concat expects a non-empty list of tensors")
    if len(values) == 1:
        t = convert_to_tensor(axis, dtype=dtypes.int32) if not isinstance(axis, Tensor) else axis
        _require_scalar(t, "the concat axis")
        return identity(values[0], name=name)
    return apply_op("ConcatV2", [list(values), axis], name=name)


def slice(input_, begin, size, name=None):  # noqa: A001 - TF1 name
    """The part of ``input_`` that starts at ``begin`` with ``size`` (-1: to the end)."""
    return apply_op("Slice", [input_, _index_tensor(begin, "begin"), _index_tensor(size, "size")], name=name)


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, var=None, name=None):
    """NumPy-style slicing with TF's mask encoding (``x[1:, ..., None, 2]`` builds one)."""
    begin = _index_tensor(begin, "begin")
    end = _index_tensor(end, "end")
    if strides is None:
        n = _vector_length(begin)
        if n is None:
            raise errors.InvalidArgumentError("strided_slice: pass strides when begin's length is unknown")
        strides = [1] * n
    strides = _index_tensor(strides, "strides")
    return apply_op("StridedSlice", [input_, begin, end, strides],
                    {"begin_mask": begin_mask, "end_mask": end_mask, "ellipsis_mask": ellipsis_mask,
                     "new_axis_mask": new_axis_mask, "shrink_axis_mask": shrink_axis_mask}, name=name)


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """Split into ``num_or_size_splits`` equal parts (an int) or parts of the given sizes
    (a list, one of which may be -1). Returns a list of tensors."""
    n = num_or_size_splits
    if isinstance(n, int | np.integer) and not isinstance(n, bool):
        return list(apply_op("Split", [axis, value], {"num_split": int(n)}, name=name))
    sizes = _index_tensor(n, "size_splits")
    if num is None:
        num = _vector_length(sizes)
        if num is None:
            raise errors.InvalidArgumentError("split: cannot infer the number of outputs from size_splits; pass num")
    return list(apply_op("SplitV", [value, sizes, axis], {"num_split": num}, name=name))


def reshape(tensor, shape, name=None):
    """``tensor`` with the same elements in a new ``shape`` (one dimension may be -1)."""
    return apply_op("Reshape", [tensor, _index_tensor(shape)], name=name)


def transpose(a, perm=None, name="transpose", conjugate=False):
    """Permute dimensions; ``perm`` None reverses them (a matrix transpose for rank 2)."""
    a = convert_to_tensor(a)
    if perm is None:
        nd = a.shape.ndims
        if nd is not None:
            perm = list(_pyrange(nd - 1, -1, -1))
        else:
            r = rank(a)
            perm = math_ops.subtract(math_ops.subtract(r, 1), range(0, r, 1))
    out = apply_op("Transpose", [a, _index_tensor(perm, "perm")], name=name)
    if conjugate and a.dtype.is_complex:
        out = math_ops.conj(out)
    return out


def rank(input, name=None):  # noqa: A002 - TF1 argument name
    """The number of dimensions of ``input`` (an int32 scalar)."""
    return apply_op("Rank", [input], name=name)


def shape(input, name=None, out_type=dtypes.int32):  # noqa: A002 - TF1 argument name
    """The run-time shape of ``input`` as a 1-D tensor."""
    return apply_op("Shape", [input], {"out_type": dtypes.as_dtype(out_type)}, name=name)


def size(input, name=None, out_type=dtypes.int32):  # noqa: A002 - TF1 argument name
    """The number of elements of ``input``."""
    return apply_op("Size", [input], {"out_type": dtypes.as_dtype(out_type)}, name=name)


def fill(dims, value, name=None):
    """A tensor of shape ``dims`` filled with the scalar ``value``."""
    return apply_op("Fill", [_index_tensor(dims, "dims"), value], name=name)


def _scalar_of(dtype, one):
    if dtype.is_string:
        if one:
            raise errors.InvalidArgumentError("ones: there is no 'one' of dtype string")
        return b""
    if dtype.is_bool:
        return one
    return 1 if one else 0


_SMALL_CONSTANT = 1000


def _filled(shape_, dtype, one, name):
    dtype = dtypes.as_dtype(dtype)
    value = _scalar_of(dtype, one)
    if not _is_graph_value(shape_) and not (
            isinstance(shape_, list | tuple) and any(_is_graph_value(v) for v in shape_)):
        shape_ = _index_tensor_value(shape_)
        if _prod(shape_) < _SMALL_CONSTANT:
            return constant(value, dtype=dtype, shape=shape_, name=name)
    return fill(shape_, constant(value, dtype=dtype), name=name)


def _index_tensor_value(shape_):
    if isinstance(shape_, TensorShape):
        if not shape_.is_fully_defined():
            raise errors.InvalidArgumentError(f"shape {shape_} must be fully defined")
        return shape_.as_list()
    arr = np.asarray(shape_)
    if arr.size == 0:
        return []
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise errors.InvalidArgumentError(f"shape must be a list of integers, got {shape_!r}")
    dims = [int(d) for d in arr.reshape(-1)]
    if any(d < 0 for d in dims):
        raise errors.InvalidArgumentError(f"shape {dims} must not have negative dimensions")
    return dims


def zeros(shape, dtype=dtypes.float32, name=None):
    """A tensor of ``shape`` with all elements zero (empty strings for string)."""
    return _filled(shape, dtype, False, name or "zeros")


def ones(shape, dtype=dtypes.float32, name=None):
    """A tensor of ``shape`` with all elements one (True for bool)."""
    return _filled(shape, dtype, True, name or "ones")


def zeros_like(tensor, dtype=None, name=None, optimize=True):
    """Zeros with the shape (and, unless ``dtype`` is given, the dtype) of ``tensor``."""
    tensor = convert_to_tensor(tensor)
    if dtype is not None and dtypes.as_dtype(dtype) is not tensor.dtype:
        return zeros(shape(tensor), dtype, name=name or "zeros_like")
    return apply_op("ZerosLike", [tensor], name=name or "zeros_like")


def ones_like(tensor, dtype=None, name=None, optimize=True):
    """Ones with the shape (and, unless ``dtype`` is given, the dtype) of ``tensor``."""
    tensor = convert_to_tensor(tensor)
    if dtype is not None and dtypes.as_dtype(dtype) is not tensor.dtype:
        return ones(shape(tensor), dtype, name=name or "ones_like")
    return apply_op("OnesLike", [tensor], name=name or "ones_like")


def gather(params, indices, validate_indices=None, name=None, axis=0):
    """Slices of ``params`` along ``axis`` at ``indices`` (an out-of-range index is an error)."""
    return apply_op("GatherV2", [params, indices, axis], name=name or "GatherV2")


def expand_dims(input, axis=None, name=None, dim=None):  # noqa: A002 - TF1 argument name
    """Insert a dimension of size 1 at ``axis``."""
    if dim is not None:
        if axis is not None:
            raise errors.InvalidArgumentError("expand_dims: pass axis or dim, not both")
        axis = dim
    if axis is None:
        raise errors.InvalidArgumentError("expand_dims: axis is required")
    return apply_op("ExpandDims", [input, axis], name=name)


def squeeze(input, axis=None, name=None, squeeze_dims=None):  # noqa: A002 - TF1 argument name
    """Remove dimensions of size 1 (all of them, or those in ``axis``)."""
    if squeeze_dims is not None:
        if axis is not None:
            raise errors.InvalidArgumentError("squeeze: pass axis or squeeze_dims, not both")
        axis = squeeze_dims
    if axis is None:
        axis = []
    elif isinstance(axis, int | np.integer):
        axis = [int(axis)]
    return apply_op("Squeeze", [input], {"squeeze_dims": list(axis)}, name=name)


def tile(input, multiples, name=None):  # noqa: A002 - TF1 argument name
    """Repeat ``input`` ``multiples[i]`` times along dimension i."""
    return apply_op("Tile", [input, _index_tensor(multiples, "multiples")], name=name)


_RANGE_TYPES = [dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64]


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001 - TF1 name
    """``[start, start + delta, ...)`` up to ``limit`` (``tw.range(5)`` is 0..4). Without
    ``dtype`` the widest of the arguments' types (int32 < int64 < float32 < float64)."""
    if limit is None:
        start, limit = 0, start
    args = [start, limit, delta]
    if dtype is None:
        dts = [a.dtype if isinstance(a, Tensor) else dtypes.dtype_of_value(a) for a in args]
        for d in dts:
            if d not in _RANGE_TYPES:
                raise errors.InvalidArgumentError(f"range: arguments of dtype {d.name} are not supported")
        dtype = max(dts, key=_RANGE_TYPES.index)
    dtype = dtypes.as_dtype(dtype)
    tensors = []
    for a in args:
        if isinstance(a, Tensor) and a.dtype is not dtype:
            a = math_ops.cast(a, dtype)
        tensors.append(a if isinstance(a, Tensor) else convert_to_tensor(a, dtype=dtype))
    return apply_op("Range", tensors, name=name)


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """One-hot vectors: ``on_value`` where the position equals the index, ``off_value``
    elsewhere (also for indices outside [0, depth)). The dtype defaults to that of
    ``on_value``/``off_value``, else float32."""
    if dtype is None:
        for v in (on_value, off_value):
            if v is not None:
                dtype = v.dtype if isinstance(v, Tensor) else dtypes.dtype_of_value(v)
                break
        else:
            dtype = dtypes.float32
    dtype = dtypes.as_dtype(dtype)
    on = convert_to_tensor(_scalar_of(dtype, True) if on_value is None else on_value, dtype=dtype)
    off = convert_to_tensor(_scalar_of(dtype, False) if off_value is None else off_value, dtype=dtype)
    return apply_op("OneHot", [indices, depth, on, off], {"axis": -1 if axis is None else axis}, name=name)


def broadcast_to(input, shape, name=None):  # noqa: A002 - TF1 argument name
    """``input`` broadcast to ``shape`` with NumPy rules (``tf.broadcast_to``)."""
    return apply_op("BroadcastTo", [input, _index_tensor(shape)], name=name)


def invert_permutation(x, name=None):
    """The inverse of the permutation ``x`` (``y[x[i]] = i``; ``tf.invert_permutation``)."""
    return apply_op("InvertPermutation", [_index_tensor(x, "permutation")], name=name)


def setdiff1d(x, y, index_dtype=dtypes.int32, name=None):
    """The elements of the vector ``x`` that are not in ``y`` (in their order in ``x``) and
    their indices in ``x``: ``(out, idx)`` (``tf.setdiff1d``)."""
    x = convert_to_tensor(x)
    y = convert_to_tensor(y, dtype=x.dtype) if not isinstance(y, Tensor) else y
    return apply_op("ListDiff", [x, y], {"out_idx": dtypes.as_dtype(index_dtype)}, name=name)


# ---------------------------------------------------------------------------------------
# Tensor.__getitem__
def _is_int_index(s):
    return isinstance(s, int | np.integer) and not isinstance(s, bool | np.bool_)


def _check_index_tensor(t):
    if t.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"tensor indices must be int32 or int64, got '{t.name}' of dtype {t.dtype.name}")
    if t.shape.ndims is not None and t.shape.ndims != 0:
        raise TypeError(f"tensor indices must be scalars, got '{t.name}' of shape {t.shape}; use tw.gather")


def _slice_helper(tensor, slice_spec):
    """``tensor[spec]``: ints, slices (with steps), ``...``, ``tw.newaxis`` and scalar int
    tensors, as in NumPy basic indexing."""
    if not isinstance(slice_spec, tuple):
        slice_spec = (slice_spec,)
    begin, end, strides = [], [], []
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}
    for i, s in enumerate(slice_spec):
        bit = 1 << i
        if isinstance(s, _pyslice):
            for part in (s.start, s.stop, s.step):
                if part is not None and not _is_int_index(part):
                    if isinstance(part, Tensor):
                        _check_index_tensor(part)
                    else:
                        raise TypeError(f"slice bounds must be integers or scalar int tensors, got {part!r}")
            if s.step is not None and _is_int_index(s.step) and s.step == 0:
                raise errors.InvalidArgumentError("slice step must not be 0")
            begin.append(0 if s.start is None else s.start)
            end.append(0 if s.stop is None else s.stop)
            strides.append(1 if s.step is None else s.step)
            if s.start is None:
                masks["begin_mask"] |= bit
            if s.stop is None:
                masks["end_mask"] |= bit
        elif s is Ellipsis:
            if masks["ellipsis_mask"]:
                raise errors.InvalidArgumentError("an index can only have a single ellipsis ('...')")
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["ellipsis_mask"] |= bit
        elif s is None:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["new_axis_mask"] |= bit
        elif _is_int_index(s) or isinstance(s, Tensor):
            if isinstance(s, Tensor):
                _check_index_tensor(s)
            begin.append(s)
            end.append(s + 1)
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
        else:
            raise TypeError(
                "only integers, slices (`:`), ellipsis (`...`), tw.newaxis (`None`) and scalar int32/int64 "
                f"tensors are valid indices, got {s!r}" + ("; use tw.gather" if isinstance(s, list | np.ndarray) else ""))
    # begin, end and strides share one dtype: int64 if any index tensor is int64.
    wide = any((v.dtype is dtypes.int64) if isinstance(v, Tensor) else not -(2**31) <= v < 2**31
               for v in begin + end + strides)
    dtype = dtypes.int64 if wide else dtypes.int32
    return strided_slice(tensor, _index_tensor(begin, "begin", "stack", dtype),
                         _index_tensor(end, "end", "stack_1", dtype),
                         _index_tensor(strides, "strides", "stack_2", dtype), name="strided_slice", **masks)


def _autopack(value, dtype, name):
    """A list or tuple holding tensors becomes one tensor: Pack of its elements (TF's
    autopacking); anything else is left to the next conversion."""
    if not any(isinstance(v, Tensor) or hasattr(v, "_as_graph_element") for v in _leaves(value)):
        return NotImplemented
    return stack(list(value), name=name or "packed")


def _leaves(value):
    for v in value:
        if isinstance(v, list | tuple):
            yield from _leaves(v)
        else:
            yield v


register_tensor_conversion_function((list, tuple), _autopack, priority=110)
Tensor.__getitem__ = _slice_helper  # NumPy-style indexing of tensors (tensor[1:, ::2])


def where(condition, x=None, y=None, name=None):
    """TF1's ``tf.where``: with ``x`` and ``y``, the elements of ``x`` where ``condition`` is
    true and of ``y`` elsewhere (``condition`` of their shape, or a vector picking rows);
    alone, the coordinates of the true (for numbers: non-zero) elements of ``condition``
    (int64, shape [N, rank], one row each in row-major order)."""
    if (x is None) != (y is None):
        raise errors.InvalidArgumentError("tw.where: give both x and y, or neither")
    if x is None:
        return apply_op("Where", [convert_to_tensor(condition)], name=name)  # numbers: non-zero is true
    return apply_op("Select", [condition, x, y], name=name)


def select(condition, t, e, name=None):
    """``tw.where(condition, t, e)`` under TF1's older name."""
    return apply_op("Select", [condition, t, e], name=name)
