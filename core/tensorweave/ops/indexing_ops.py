"""Indexing ops around sparse models: N-d gathers and scatters, segment reductions,
DynamicPartition/DynamicStitch, Unique, SparseToDense, ReverseV2, Pad/PadV2/MirrorPad,
TopKV2 and ``tw.boolean_mask`` (a composition of Reshape, Where and Gather, as in TF).

Definitions are registered by ``register_ops`` (called from the built-in plugin); the Python
wrappers below are the public TF1 API (``tw.gather_nd``, ``tw.dynamic_partition``,
``tw.pad``, ``tw.nn.top_k``, ...). Gradients are in ``indexing_grad.py``.

Shape functions check what is known at construction (index depths against ranks, paddings
against dimensions, constant ``k`` against the last dimension) and raise
``InvalidArgumentError`` (also a ``ValueError``, as TF's shape errors are); the kernels check
the values (indices out of range, unsorted segment ids) at run time.
"""

from __future__ import annotations

import collections

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    Tensor,
    apply_op,
    constant_value,
    constant_value_as_shape,
    convert_to_tensor,
    get_default_graph,
)
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops, math_ops

__all__ = [
    "gather_nd", "scatter_nd", "unsorted_segment_max", "unsorted_segment_min", "segment_sum", "segment_mean",
    "segment_max", "segment_min", "dynamic_partition", "dynamic_stitch", "parallel_dynamic_stitch", "unique",
    "unique_with_counts", "sparse_to_dense", "reverse", "reverse_v2", "pad", "boolean_mask",
]

_INDEX = "{int32, int64}"
_REAL = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64}"
_NUM = ("T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, "
        "complex64, complex128}")
MIRROR_MODES = ("REFLECT", "SYMMETRIC")


# ---------------------------------------------------------------------------------------
# shape-function helpers
def _const_ints(t):
    """The construction-time value of an int tensor as a flat list of ints, else None."""
    v = constant_value(t)
    return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]


def _require_rank(t, ranks, what):
    nd = t.shape.ndims
    if nd is not None and nd not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise errors.InvalidArgumentError(f"{what} must have rank {want}, got shape {t.shape}")


def _prefix_rest(data: TensorShape, prefix: TensorShape, what: str, data_what: str = "data") -> TensorShape:
    """``data``'s dimensions after ``prefix``, which must be a prefix of ``data``'s shape."""
    if data.ndims is None or prefix.ndims is None:
        return TensorShape(None)
    if prefix.ndims > data.ndims or not data[:prefix.ndims].is_compatible_with(prefix):
        raise errors.InvalidArgumentError(f"{what} of shape {prefix} must be a prefix of the shape of {data_what} {data}")
    return data[prefix.ndims:]


# ---------------------------------------------------------------------------------------
# GatherNd / ScatterNd: an index vector of length K addresses the first K dimensions.
def _gather_nd_shape(op):
    params, indices = (t.shape for t in op.inputs)
    if indices.ndims == 0:
        raise errors.InvalidArgumentError("indices must be at least a vector, got a scalar")
    if indices.ndims is None or indices[-1] is None:
        return [TensorShape(None)]
    k = indices[-1]
    if params.ndims is not None and k > params.ndims:
        raise errors.InvalidArgumentError(
            f"indices.shape[-1] = {k} must be <= the rank of params {params} ({params.ndims})")
    return [indices[:-1].concatenate(params[k:])]


def scatter_nd_check(indices: TensorShape, updates: TensorShape, shape: TensorShape, what="shape"):
    """The one rule relating ScatterNd's (and ScatterNd*'s) shapes: ``updates.shape ==
    indices.shape[:-1] + shape[indices.shape[-1]:]``; raises InvalidArgumentError, for known
    shapes, with TF's wording."""
    if indices.ndims == 0:
        raise errors.InvalidArgumentError("indices must be at least a vector, got a scalar")
    if indices.ndims is None or indices[-1] is None:
        return
    k, outer = indices[-1], indices.ndims - 1
    if shape.ndims is not None and k > shape.ndims:
        raise errors.InvalidArgumentError(
            f"indices.shape[-1] = {k} must be <= the rank of the {what} {shape} ({shape.ndims})")
    if updates.ndims is None:
        return
    if updates.ndims < outer or not updates[:outer].is_compatible_with(indices[:-1]):
        raise errors.InvalidArgumentError(
            f"the outer {outer} dimensions of indices.shape={indices} must match the outer {outer} dimensions "
            f"of updates.shape={updates}")
    if shape.ndims is None:
        return
    inner = shape.ndims - k
    if updates.ndims - outer != inner or not updates[outer:].is_compatible_with(shape[k:]):
        raise errors.InvalidArgumentError(
            f"the inner {inner} dimensions of {what}.shape={shape} must match the inner {updates.ndims - outer} "
            f"dimensions of updates.shape={updates} (updates.shape must be indices.shape[:-1] + "
            f"{what}.shape[indices.shape[-1]:])")


def _scatter_nd_shape(op):
    indices, updates, shape_t = op.inputs
    _require_rank(shape_t, (1,), "shape")
    dims = _const_ints(shape_t)
    if dims is not None and any(d < 0 for d in dims):
        raise errors.InvalidArgumentError(f"shape {dims} must be >= 0")
    out = constant_value_as_shape(shape_t)
    scatter_nd_check(indices.shape, updates.shape, out)
    return [out]


# ---------------------------------------------------------------------------------------
# segment reductions
def _unsorted_segment_shape(op):
    return math_ops._unsorted_segment_sum_shape(op)  # one rule for Sum, Max and Min


def _segment_shape(op):
    data, ids = (t.shape for t in op.inputs)
    _require_rank(op.inputs[1], (1,), "segment_ids")
    if data.ndims == 0:
        raise errors.InvalidArgumentError("data must be at least a vector, got a scalar")
    if data.ndims is not None and ids.ndims is not None and not data[:1].is_compatible_with(ids):
        raise errors.InvalidArgumentError(
            f"segment_ids of shape {ids} must have one element per row of data {data}")
    if data.ndims is None:
        return [TensorShape(None)]
    rows = None
    v = _const_ints(op.inputs[1])
    if v is not None:
        if v and v[0] < 0:
            raise errors.InvalidArgumentError(f"segment_ids[0] = {v[0]} is not in [0, inf): segment ids must be >= 0")
        down = [i for i in range(1, len(v)) if v[i] < v[i - 1]]
        if down:
            i = down[0]
            raise errors.InvalidArgumentError(
                f"segment ids are not sorted: segment_ids[{i}] = {v[i]} follows segment_ids[{i - 1}] = {v[i - 1]}")
        rows = (v[-1] + 1) if v else 0
    return [TensorShape([rows]).concatenate(data[1:])]


# ---------------------------------------------------------------------------------------
# DynamicPartition / DynamicStitch
def _dynamic_partition_shape(op):
    data, parts = (t.shape for t in op.inputs)
    num = op.get_attr("num_partitions")
    rest = _prefix_rest(data, parts, "partitions")
    v = _const_ints(op.inputs[1])
    if v is None:
        return [TensorShape([None]).concatenate(rest)] * num
    bad = [p for p in v if not 0 <= p < num]
    if bad:
        raise errors.InvalidArgumentError(f"partitions hold {bad[0]}, which is not in [0, {num})")
    return [TensorShape([v.count(p)]).concatenate(rest) for p in range(num)]


def _dynamic_stitch_shape(op):
    n = op.get_attr("N")
    indices, data = op.inputs[:n], op.inputs[n:]
    rest = TensorShape(None)
    for i, (ix, d) in enumerate(zip(indices, data, strict=True)):
        r = _prefix_rest(d.shape, ix.shape, f"indices[{i}]", f"data[{i}]")
        try:
            rest = rest.merge_with(r)
        except errors.InvalidArgumentError:
            raise errors.InvalidArgumentError(
                f"data[{i}] of shape {d.shape} does not fit the others: every data[i].shape must be "
                f"indices[i].shape + one common shape, here {rest}") from None
    vals = [_const_ints(t) for t in indices]
    for i, v in enumerate(vals):
        if v is not None and v and min(v) < 0:
            raise errors.InvalidArgumentError(f"indices[{i}] holds {min(v)}: indices must be >= 0")
    rows = None
    if all(v is not None for v in vals):
        flat = [x for v in vals for x in v]
        rows = max(flat) + 1 if flat else 0
    return [TensorShape([rows]).concatenate(rest)]


# ---------------------------------------------------------------------------------------
# Unique, SparseToDense, ReverseV2
def _unique_shape(op):
    _require_rank(op.inputs[0], (1,), "x")
    x = op.inputs[0].shape
    n = len(op.outputs)
    return [TensorShape([None]), x.merge_with(TensorShape([None]))] + [TensorShape([None])] * (n - 2)


def _sparse_to_dense_shape(op):
    indices, shape_t, values, default = op.inputs
    _require_rank(indices, (0, 1, 2), "sparse_indices")
    _require_rank(shape_t, (1,), "output_shape")
    _require_rank(values, (0, 1), "sparse_values")
    _require_rank(default, (0,), "default_value")
    dims = _const_ints(shape_t)
    if dims is not None and any(d < 0 for d in dims):
        raise errors.InvalidArgumentError(f"output_shape {dims} must be >= 0")
    out = constant_value_as_shape(shape_t)
    i = indices.shape
    if i.ndims == 2 and i[1] is not None and out.ndims is not None and i[1] != out.ndims:
        raise errors.InvalidArgumentError(
            f"sparse_indices of shape {i} hold indices of rank {i[1]}, but output_shape has {out.ndims} elements")
    n = None if i.ndims is None else (1 if i.ndims == 0 else i[0])
    v = values.shape
    if v.ndims == 1 and v[0] is not None and n is not None and v[0] != n:
        raise errors.InvalidArgumentError(
            f"sparse_values has {v[0]} elements but sparse_indices {i} hold {n} indices")
    return [out]


def check_axes(axes, rank, what="axis"):
    """Normalised axes (ValueError-like InvalidArgumentError for out-of-range or repeated ones)."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise errors.InvalidArgumentError(f"{what} {a} is out of range for an input of rank {rank}")
        a %= rank
        if a in out:
            raise errors.InvalidArgumentError(f"{what} {a} is given more than once in {list(axes)}")
        out.append(a)
    return out


def _reverse_shape(op):
    x, axis_t = op.inputs
    _require_rank(axis_t, (1,), "axis")
    axes = _const_ints(axis_t)
    if axes is not None and x.shape.ndims is not None:
        check_axes(axes, x.shape.ndims)
    return [x.shape]


# ---------------------------------------------------------------------------------------
# Pad, PadV2, MirrorPad, MirrorPadGrad: paddings is a [rank, 2] matrix of (before, after).
def check_paddings(pads, shape, mode=None, grad=False):
    """Raise InvalidArgumentError for paddings that do not fit ``shape`` (a list of ints or
    Nones): negative paddings; for REFLECT a padding >= the dimension, for SYMMETRIC >;
    for MirrorPadGrad (``grad``) paddings larger than the padded input."""
    for d, (b, a) in enumerate(pads):
        if b < 0 or a < 0:
            raise errors.InvalidArgumentError(f"paddings must be non-negative, got {[b, a]} for dimension {d}")
        n = shape[d]
        if n is None or mode is None:
            continue
        if grad:
            if b + a > n:
                raise errors.InvalidArgumentError(
                    f"paddings {[b, a]} of dimension {d} add up to more than its size {n}")
            n -= b + a
        limit, cmp = (n - 1, "less than") if mode == "REFLECT" else (n, "no greater than")
        if b > limit or a > limit:
            raise errors.InvalidArgumentError(
                f"{mode} paddings must be {cmp} the dimension size: paddings {[b, a]} for dimension {d} of size {n}")


def _pad_shape(op):
    x, pads_t = op.inputs[:2]
    if len(op.inputs) == 3:
        _require_rank(op.inputs[2], (0,), "constant_values")
    p = pads_t.shape
    if p.ndims is not None and (p.ndims != 2 or (p[1] is not None and p[1] != 2)):
        raise errors.InvalidArgumentError(f"paddings must be a matrix with 2 columns, got shape {p}")
    rank = x.shape.ndims
    if rank is not None and p.ndims == 2 and p[0] is not None and p[0] != rank:
        raise errors.InvalidArgumentError(
            f"paddings of shape {p} must have one row per dimension of the input {x.shape} (rank {rank})")
    if rank is None:
        rank = p[0] if p.ndims == 2 else None
    if rank is None:
        return [TensorShape(None)]
    v = _const_ints(pads_t)
    dims = x.shape.dims if x.shape.ndims is not None else [None] * rank
    if v is None:
        return [TensorShape([None] * rank)]
    if len(v) != 2 * rank:
        raise errors.InvalidArgumentError(f"paddings has {len(v) // 2} rows but the input has rank {rank}")
    pads = [(v[2 * i], v[2 * i + 1]) for i in range(rank)]
    grad = op.type == "MirrorPadGrad"
    mode = op.get_attr("mode") if op.type in ("MirrorPad", "MirrorPadGrad") else None
    check_paddings(pads, dims, mode, grad)
    sign = -1 if grad else 1
    return [TensorShape([None if d is None else d + sign * (b + a) for d, (b, a) in zip(dims, pads, strict=True)])]


# ---------------------------------------------------------------------------------------
# TopKV2
def _top_k_shape(op):
    x, k_t = op.inputs
    _require_rank(k_t, (0,), "k")
    k = _const_ints(k_t)
    k = None if k is None else k[0]
    if k is not None and k < 0:
        raise errors.InvalidArgumentError(f"k must be non-negative, got {k}")
    s = x.shape
    if s.ndims == 0:
        raise errors.InvalidArgumentError("input must be at least a vector, got a scalar")
    if s.ndims is None:
        return [TensorShape(None)] * 2
    if k is not None and s[-1] is not None and s[-1] < k:
        raise errors.InvalidArgumentError(f"input must have at least k = {k} columns, its shape is {s}")
    out = s[:-1].concatenate([k])
    return [out, out]


# ---------------------------------------------------------------------------------------
def register_ops(reg):
    reg.op("GatherNd", inputs=["params: Tparams", "indices: Tindices"], outputs=["output: Tparams"],
           attrs=["Tparams: type", f"Tindices: {_INDEX}"], shape_fn=_gather_nd_shape,
           doc="Slices of params at N-d indices: indices[..., :K] addresses the first K dimensions of params.")
    reg.op("ScatterNd", inputs=["indices: Tindices", "updates: T", "shape: Tindices"], outputs=["output: T"],
           attrs=[_NUM, f"Tindices: {_INDEX}"], shape_fn=_scatter_nd_shape,
           doc="Zeros of the given shape with updates added at N-d indices (duplicates are summed).")
    for name, what in (("UnsortedSegmentMax", "maximum"), ("UnsortedSegmentMin", "minimum")):
        reg.op(name, inputs=["data: T", "segment_ids: Tindices", "num_segments: Tnumsegments"],
               outputs=["output: T"], attrs=[_REAL, f"Tindices: {_INDEX}", f"Tnumsegments: {_INDEX} = int32"],
               shape_fn=_unsorted_segment_shape,
               doc=f"output[j, ...] = {what} of data[i..., ...] over the i with segment_ids[i...] == j; empty "
                   "segments hold the dtype's lowest (max) or highest (min) value; negative ids are dropped.")
    for name, types in (("SegmentSum", _NUM), ("SegmentMean", _NUM), ("SegmentMax", _REAL), ("SegmentMin", _REAL)):
        reg.op(name, inputs=["data: T", "segment_ids: Tindices"], outputs=["output: T"],
               attrs=[types, f"Tindices: {_INDEX}"], shape_fn=_segment_shape,
               doc=f"{name[7:]} of the rows of data by sorted, non-negative segment ids (one per row); the result "
                   "has max(segment_ids) + 1 rows, zeros for empty segments.")
    reg.op("DynamicPartition", inputs=["data: T", "partitions: int32"], outputs=["outputs: num_partitions * T"],
           attrs=["num_partitions: int >= 1", "T: type"], shape_fn=_dynamic_partition_shape,
           doc="outputs[p] = the slices data[i...] with partitions[i...] == p, in order.")
    for name in ("DynamicStitch", "ParallelDynamicStitch"):
        reg.op(name, inputs=["indices: N * int32", "data: N * T"], outputs=["merged: T"],
               attrs=["N: int >= 1", "T: type"], shape_fn=_dynamic_stitch_shape,
               doc="merged[indices[m][i...], ...] = data[m][i..., ...]; of repeated indices the last one wins "
                   "(the ParallelDynamicStitch name is an alias: the same deterministic kernel).")
    reg.op("Unique", inputs=["x: T"], outputs=["y: T", "idx: out_idx"],
           attrs=["T: type", f"out_idx: {_INDEX} = int32"], shape_fn=_unique_shape,
           doc="The distinct elements of the vector x in order of first occurrence, and x's positions in them.")
    reg.op("UniqueWithCounts", inputs=["x: T"], outputs=["y: T", "idx: out_idx", "count: out_idx"],
           attrs=["T: type", f"out_idx: {_INDEX} = int32"], shape_fn=_unique_shape,
           doc="Unique, and how often each distinct element occurs.")
    reg.op("SparseToDense", inputs=["sparse_indices: Tindices", "output_shape: Tindices", "sparse_values: T",
                                    "default_value: T"], outputs=["dense: T"],
           attrs=["validate_indices: bool = true", "T: type", f"Tindices: {_INDEX}"], shape_fn=_sparse_to_dense_shape,
           doc="A dense tensor of output_shape holding sparse_values at sparse_indices and default_value elsewhere.")
    reg.op("ReverseV2", inputs=["tensor: T", "axis: Tidx"], outputs=["output: T"],
           attrs=["T: type", f"Tidx: {_INDEX} = int32"], shape_fn=_reverse_shape,
           doc="The tensor with the order of its elements reversed along the given axes.")
    reg.op("Pad", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
           attrs=["T: type", f"Tpaddings: {_INDEX} = int32"], shape_fn=_pad_shape,
           doc="The input with paddings[d] = [before, after] zeros around dimension d.")
    reg.op("PadV2", inputs=["input: T", "paddings: Tpaddings", "constant_values: T"], outputs=["output: T"],
           attrs=["T: type", f"Tpaddings: {_INDEX} = int32"], shape_fn=_pad_shape,
           doc="Pad with constant_values instead of zeros.")
    reg.op("MirrorPad", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
           attrs=["T: type", f"Tpaddings: {_INDEX} = int32", "mode: {'REFLECT', 'SYMMETRIC'}"], shape_fn=_pad_shape,
           doc="Pad with the input mirrored at its borders: REFLECT leaves the border out, SYMMETRIC repeats it.")
    reg.op("MirrorPadGrad", inputs=["input: T", "paddings: Tpaddings"], outputs=["output: T"],
           attrs=[_NUM, f"Tpaddings: {_INDEX} = int32", "mode: {'REFLECT', 'SYMMETRIC'}"], shape_fn=_pad_shape,
           doc="The gradient of MirrorPad: the padded regions folded back onto the input and summed.")
    reg.op("TopKV2", inputs=["input: T", "k: int32"], outputs=["values: T", "indices: int32"],
           attrs=["sorted: bool = true", _REAL], shape_fn=_top_k_shape,
           doc="The k largest entries of each last-dimension row and their indices; equal values in index order.")


# ---------------------------------------------------------------------------------------
# wrappers
def gather_nd(params, indices, name=None, batch_dims=0):
    """Slices of ``params`` at N-d ``indices`` (``tf.gather_nd``): ``indices[..., :K]`` holds
    an index into the first K dimensions; the result has shape
    ``indices.shape[:-1] + params.shape[K:]``. An out-of-range index is an error."""
    if batch_dims != 0:
        raise errors.UnimplementedError("gather_nd: only batch_dims=0 is implemented")
    return apply_op("GatherNd", [params, indices], name=name)


def scatter_nd(indices, updates, shape, name=None):
    """Zeros of ``shape`` with ``updates`` added at N-d ``indices`` (``tf.scatter_nd``;
    duplicate indices are summed). ``updates.shape`` must be
    ``indices.shape[:-1] + shape[indices.shape[-1]:]``."""
    indices = convert_to_tensor(indices)
    if indices.dtype not in (dtypes.int32, dtypes.int64):
        raise errors.InvalidArgumentError(f"scatter_nd: indices must be int32 or int64, got {indices.dtype.name}")
    shape = array_ops._index_tensor(shape, "shape", dtype=indices.dtype) if not isinstance(shape, Tensor) else shape
    if shape.dtype is not indices.dtype:
        shape = math_ops.cast(shape, indices.dtype)
    return apply_op("ScatterNd", [indices, updates, shape], name=name)


def unsorted_segment_max(data, segment_ids, num_segments, name=None):
    """Maxima of the slices of ``data`` by segment (``tf.unsorted_segment_max``); an empty
    segment holds the dtype's lowest value, negative ids are dropped."""
    return apply_op("UnsortedSegmentMax", [data, segment_ids, num_segments], name=name)


def unsorted_segment_min(data, segment_ids, num_segments, name=None):
    """Minima of the slices of ``data`` by segment (``tf.unsorted_segment_min``); an empty
    segment holds the dtype's highest value, negative ids are dropped."""
    return apply_op("UnsortedSegmentMin", [data, segment_ids, num_segments], name=name)


def _segment(op_type):
    def f(data, segment_ids, name=None):
        return apply_op(op_type, [data, segment_ids], name=name)
    f.__name__ = {"SegmentSum": "segment_sum", "SegmentMean": "segment_mean", "SegmentMax": "segment_max",
                  "SegmentMin": "segment_min"}[op_type]
    f.__doc__ = (f"``tf.{f.__name__}``: the {op_type[7:].lower()} of the rows of ``data`` by segment; "
                 "``segment_ids`` (one per row) must be sorted and non-negative. The result has "
                 "``max(segment_ids) + 1`` rows; empty segments are zeros.")
    return f


segment_sum = _segment("SegmentSum")
segment_mean = _segment("SegmentMean")
segment_max = _segment("SegmentMax")
segment_min = _segment("SegmentMin")


def dynamic_partition(data, partitions, num_partitions, name=None):
    """Split ``data`` into ``num_partitions`` tensors by ``partitions`` (int32, a prefix of
    ``data``'s shape, values in ``[0, num_partitions)``); returns a list."""
    return list(apply_op("DynamicPartition", [data, partitions], {"num_partitions": num_partitions}, name=name))


def _stitch(op_type, indices, data, name):
    if not isinstance(indices, list | tuple) or not isinstance(data, list | tuple):
        raise errors.InvalidArgumentError(f"{op_type}: indices and data must be lists of tensors")
    if len(indices) != len(data) or not indices:
        raise errors.InvalidArgumentError(
            f"{op_type}: indices and data must be non-empty lists of the same length, got {len(indices)} and "
            f"{len(data)}")
    return apply_op(op_type, [list(indices), list(data)], name=name)


def dynamic_stitch(indices, data, name=None):
    """Interleave the ``data`` tensors: ``merged[indices[m][i], ...] = data[m][i, ...]``
    (``tf.dynamic_stitch``); of repeated indices the last one (in list order) wins. Rows no
    index names are zeros."""
    return _stitch("DynamicStitch", indices, data, name)


def parallel_dynamic_stitch(indices, data, name=None):
    """``tf.parallel_dynamic_stitch``: here the same as ``dynamic_stitch``."""
    return _stitch("ParallelDynamicStitch", indices, data, name)


UniqueOutput = collections.namedtuple("Unique", ["y", "idx"])
UniqueWithCountsOutput = collections.namedtuple("UniqueWithCounts", ["y", "idx", "count"])


def unique(x, out_idx=dtypes.int32, name=None):
    """``(y, idx)``: the distinct elements of the vector ``x`` in order of first occurrence,
    and for each element of ``x`` its position in ``y`` (``x == gather(y, idx)``)."""
    y, idx = apply_op("Unique", [x], {"out_idx": dtypes.as_dtype(out_idx)}, name=name)
    return UniqueOutput(y, idx)


def unique_with_counts(x, out_idx=dtypes.int32, name=None):
    """``(y, idx, count)``: ``unique`` and how often each element of ``y`` occurs in ``x``."""
    y, idx, count = apply_op("UniqueWithCounts", [x], {"out_idx": dtypes.as_dtype(out_idx)}, name=name)
    return UniqueWithCountsOutput(y, idx, count)


def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0, validate_indices=True,
                    name=None):
    """A dense tensor of ``output_shape`` with ``sparse_values`` (a vector, or a scalar for
    every index) at ``sparse_indices`` ([N, rank], [N] for a vector result, or a scalar) and
    ``default_value`` elsewhere. With ``validate_indices`` the indices must be sorted in
    row-major order without repeats; indices out of bounds are always an error."""
    sparse_indices = convert_to_tensor(sparse_indices)
    if sparse_indices.dtype not in (dtypes.int32, dtypes.int64):
        raise errors.InvalidArgumentError(
            f"sparse_to_dense: sparse_indices must be int32 or int64, got {sparse_indices.dtype.name}")
    if not isinstance(output_shape, Tensor):
        output_shape = array_ops._index_tensor(output_shape, "output_shape", dtype=sparse_indices.dtype)
    elif output_shape.dtype is not sparse_indices.dtype:
        output_shape = math_ops.cast(output_shape, sparse_indices.dtype)
    sparse_values = convert_to_tensor(sparse_values)
    default_value = convert_to_tensor(default_value, dtype=sparse_values.dtype) if not isinstance(
        default_value, Tensor) else default_value
    return apply_op("SparseToDense", [sparse_indices, output_shape, sparse_values, default_value],
                    {"validate_indices": bool(validate_indices)}, name=name)


def reverse(tensor, axis, name=None):
    """``tensor`` with its elements reversed along each dimension in ``axis`` (a list;
    ``tf.reverse`` of TF >= 1.0, that is ``tf.reverse_v2``)."""
    if isinstance(axis, int | np.integer):
        axis = [int(axis)]
    return apply_op("ReverseV2", [tensor, array_ops._index_tensor(axis, "axis")], name=name)


reverse_v2 = reverse


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0):
    """``tf.pad``: ``paddings`` is a [rank, 2] integer matrix of (before, after) amounts per
    dimension; ``mode`` is "CONSTANT" (``constant_values``), "REFLECT" (mirrored without the
    border; paddings < the dimension) or "SYMMETRIC" (with it; paddings <= the dimension),
    in any case."""
    m = mode.upper() if isinstance(mode, str) else mode
    if m not in ("CONSTANT", *MIRROR_MODES):
        raise errors.InvalidArgumentError(f"pad: unknown padding mode {mode!r}; use CONSTANT, REFLECT or SYMMETRIC")
    tensor = convert_to_tensor(tensor)
    paddings = array_ops._index_tensor(paddings, "paddings") if not isinstance(paddings, Tensor) else paddings
    if m == "CONSTANT":
        cv = constant_values
        if not isinstance(cv, Tensor) and not isinstance(cv, str | bytes) and np.ndim(cv) == 0 and cv == 0:
            return apply_op("Pad", [tensor, paddings], name=name)
        cv = convert_to_tensor(cv, dtype=tensor.dtype) if not isinstance(cv, Tensor) else cv
        return apply_op("PadV2", [tensor, paddings, cv], name=name)
    return apply_op("MirrorPad", [tensor, paddings], {"mode": m}, name=name)


def boolean_mask(tensor, mask, name="boolean_mask", axis=None):
    """The slices of ``tensor`` where the boolean ``mask`` is true (``tf.boolean_mask``).

    ``mask``'s shape (rank K >= 1, known) must match ``tensor.shape[axis:axis + K]``; those K
    dimensions become one, of the number of true elements. Built as TF builds it: a Reshape,
    ``tw.where`` on the flattened mask and a Gather.
    """
    tensor = convert_to_tensor(tensor)
    mask = convert_to_tensor(mask)
    if mask.dtype is not dtypes.bool_:
        raise errors.InvalidArgumentError(f"boolean_mask: mask must be bool, got {mask.dtype.name}")
    ms, ts = mask.shape, tensor.shape
    k = ms.ndims
    if k == 0:
        raise errors.InvalidArgumentError("boolean_mask: mask cannot be a scalar")
    if k is None:
        raise errors.InvalidArgumentError("boolean_mask: the number of mask dimensions must be known")
    axis = 0 if axis is None else int(axis)
    if ts.ndims is not None:
        if axis < 0:
            axis += ts.ndims
        if not 0 <= axis <= ts.ndims - k:
            raise errors.InvalidArgumentError(
                f"boolean_mask: a mask of rank {k} at axis {axis} does not fit a tensor of shape {ts}")
        if not ts[axis:axis + k].is_compatible_with(ms):
            raise errors.InvalidArgumentError(
                f"boolean_mask: mask of shape {ms} does not match dimensions {axis}..{axis + k - 1} of the tensor {ts}")
    elif axis < 0:
        raise errors.InvalidArgumentError("boolean_mask: a negative axis needs a tensor of known rank")
    with get_default_graph().name_scope(name):
        shp = array_ops.shape(tensor)
        flat = math_ops.reduce_prod(shp[axis:axis + k], axis=[0], keepdims=True)
        new_shape = array_ops.concat([shp[:axis], flat, shp[axis + k:]], 0)
        flat_tensor = array_ops.reshape(tensor, new_shape)
        if ts.ndims is not None:
            flat_tensor.set_shape(ts[:axis].concatenate([ts[axis:axis + k].num_elements()]).concatenate(ts[axis + k:]))
        idx = array_ops.squeeze(array_ops.where(array_ops.reshape(mask, [-1])), axis=[1])
        return array_ops.gather(flat_tensor, idx, axis=axis)


TopKOutput = collections.namedtuple("TopKV2", ["values", "indices"])


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002 - TF1 argument names
    """The ``k`` largest entries of each row (along the last dimension) of ``input`` and
    their indices, largest first; equal values come in index order (``tf.nn.top_k``)."""
    if not isinstance(k, Tensor):
        k = convert_to_tensor(k, dtype=dtypes.int32)
    return TopKOutput(*apply_op("TopKV2", [input, k], {"sorted": bool(sorted)}, name=name))
