"""Gradient functions of the indexing ops (``indexing_ops.py``), after TensorFlow's
``array_grad.py``, ``math_grad.py``, ``data_flow_grad.py``, ``nn_grad.py`` and
``sparse_grad.py``.

The gradients are dense tensors, except GatherNd's for indices of shape [N, 1] (whole rows,
as a Gather reads them): an ``IndexedSlices``, as in TF. Two depart from TF1 on purpose: DynamicStitch sends the
gradient of a repeated index only to the value that won (the last one), as current TF does,
where TF1 sent it to every writer; PadV2 gives ``constant_values`` its gradient (the sum of
the gradient over the padding) where TF returns None.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes
from tensorweave.framework.graph import Tensor, apply_op
from tensorweave.framework.indexed_slices import IndexedSlices
from tensorweave.ops import array_ops, indexing_ops, math_ops


def register_ops(reg):
    pass


def _shape_of(t: Tensor, dtype=dtypes.int32):
    """``t``'s shape: a constant when fully known, else a ``Shape`` tensor (of ``dtype``)."""
    if t.shape.is_fully_defined():
        return array_ops.constant(np.array(t.shape.as_list(), dtype=dtype.np_dtype), dtype=dtype)
    return array_ops.shape(t, out_type=dtype)


def _trailing_ones(prefix: Tensor, full: Tensor) -> Tensor:
    """The shape of ``prefix`` followed by a 1 for each further dimension of ``full``: the
    shape that lets a tensor shaped like ``prefix`` broadcast against ``full``."""
    pr, fr = prefix.shape.ndims, full.shape.ndims
    if pr is not None and fr is not None:
        if prefix.shape.is_fully_defined():
            return array_ops.constant(np.array(prefix.shape.as_list() + [1] * (fr - pr), dtype=np.int32))
        return array_ops.concat([array_ops.shape(prefix), array_ops.constant([1] * (fr - pr), dtype=dtypes.int32)], 0)
    extra = array_ops.rank(full) - array_ops.rank(prefix)
    return array_ops.concat([array_ops.shape(prefix), array_ops.ones(array_ops.expand_dims(extra, 0), dtypes.int32)], 0)


def _broadcast_mask(mask: Tensor, like: Tensor) -> Tensor:
    """A bool ``mask`` shaped like a prefix of ``like``'s shape, repeated to ``like``'s shape
    (Select wants its condition in full)."""
    if mask.shape.ndims is not None and mask.shape == like.shape and mask.shape.is_fully_defined():
        return mask
    m = array_ops.reshape(mask, _trailing_ones(mask, like))
    return math_ops.logical_and(m, array_ops.ones_like(like, dtype=dtypes.bool_))


# ---------------------------------------------------------------------------------------
# GatherNd / ScatterNd: each other's gradient
def _gather_nd_grad(op, grad):
    params, indices = op.inputs
    shape = _shape_of(params, indices.dtype)
    if indices.shape.ndims == 2 and indices.shape[1] == 1:
        # [N, 1] indices read whole rows, as Gather does: the gradient stays sparse (TF's choice).
        return [IndexedSlices(grad, array_ops.reshape(indices, [-1]), shape), None]
    return [indexing_ops.scatter_nd(indices, grad, shape), None]


def _scatter_nd_grad(op, grad):
    return [None, indexing_ops.gather_nd(grad, op.inputs[0]), None]


# ---------------------------------------------------------------------------------------
# segment reductions
def _segment_sum_grad(op, grad):
    return [array_ops.gather(grad, op.inputs[1]), None]


def _segment_counts(data: Tensor, ids: Tensor, dtype) -> Tensor:
    """The number of rows in each segment, shaped to broadcast against the output rows, at
    least 1 (an empty segment has no rows to send a gradient to)."""
    counts = indexing_ops.segment_sum(array_ops.ones_like(ids, dtype=dtype), ids)
    r = data.shape.ndims
    shape = [-1] + [1] * (r - 1) if r is not None else array_ops.concat(
        [[-1], array_ops.ones(array_ops.expand_dims(array_ops.rank(data) - 1, 0), dtypes.int32)], 0)
    return math_ops.maximum(array_ops.reshape(counts, shape), array_ops.constant(1, dtype=dtype))


def _segment_mean_grad(op, grad):
    data, ids = op.inputs
    return [array_ops.gather(grad / _segment_counts(data, ids, grad.dtype), ids), None]


def _segment_min_or_max_grad(op, grad):
    # The gradient of a segment goes to the elements equal to its extremum, split evenly
    # between ties (TF's rule).
    data, ids = op.inputs
    selected = math_ops.equal(data, array_ops.gather(op.outputs[0], ids))
    num = indexing_ops.segment_sum(math_ops.cast(selected, grad.dtype), ids)
    share = array_ops.gather(grad / math_ops.maximum(num, array_ops.constant(1, dtype=grad.dtype)), ids)
    return [array_ops.select(selected, share, array_ops.zeros_like(share)), None]


def _gather_drop_negatives(params, ids, clipped=None, keep=None):
    """``gather(params, max(ids, 0))`` with zeros where an id is negative (a dropped row),
    and the clipped ids and full-shape mask, to be reused."""
    if clipped is None:
        clipped = math_ops.maximum(ids, array_ops.zeros_like(ids))
    gathered = array_ops.gather(params, clipped)
    if keep is None:
        keep = _broadcast_mask(math_ops.greater_equal(ids, array_ops.zeros_like(ids)), gathered)
    return array_ops.select(keep, gathered, array_ops.zeros_like(gathered)), clipped, keep


def _unsorted_segment_min_or_max_grad(op, grad):
    data, ids, num_segments = op.inputs
    extremum, clipped, keep = _gather_drop_negatives(op.outputs[0], ids)
    selected = math_ops.logical_and(math_ops.equal(data, extremum), keep)
    num = math_ops.unsorted_segment_sum(math_ops.cast(selected, grad.dtype), ids, num_segments)
    weighted = grad / math_ops.maximum(num, array_ops.constant(1, dtype=grad.dtype))
    share, _, _ = _gather_drop_negatives(weighted, None, clipped, keep)
    return [array_ops.select(selected, share, array_ops.zeros_like(share)), None, None]


# ---------------------------------------------------------------------------------------
# DynamicPartition / DynamicStitch
def _positions(like: Tensor, start=0) -> Tensor:
    """int32 ``start, start + 1, ...`` in the shape of ``like``."""
    if like.shape.is_fully_defined() and isinstance(start, int):
        n = like.shape.num_elements()
        return array_ops.constant(np.arange(start, start + n, dtype=np.int32).reshape(like.shape.as_list()))
    flat = array_ops.range(start, start + array_ops.size(like), 1, dtype=dtypes.int32)
    return array_ops.reshape(flat, array_ops.shape(like))


def _dynamic_partition_grad(op, *grads):
    # Partition the positions of the data rows the same way, then stitch the gradients back
    # to those positions.
    data, partitions = op.inputs
    positions = indexing_ops.dynamic_partition(_positions(partitions), partitions, op.get_attr("num_partitions"))
    merged = indexing_ops.parallel_dynamic_stitch(positions, list(grads))
    return [array_ops.reshape(merged, _shape_of(data)), None]


def _dynamic_stitch_grad(op, grad):
    # Of repeated indices only the last writer reaches the output, so only it gets the
    # gradient: stitch each element's unique position with the same indices to see which
    # position won each row, and mask the others.
    n = op.get_attr("N")
    indices = list(op.inputs[:n])
    ids, offset = [], 0
    for ix in indices:
        ids.append(_positions(ix, offset))
        size = ix.shape.num_elements()
        offset = offset + (size if isinstance(offset, int) and size is not None else array_ops.size(ix))
    winners = indexing_ops.dynamic_stitch(indices, ids)
    out = [None] * n
    for ix, mine in zip(indices, ids, strict=True):
        won = math_ops.cast(math_ops.equal(mine, array_ops.gather(winners, ix)), grad.dtype)
        g = array_ops.gather(grad, ix)
        out.append(g * array_ops.reshape(won, _trailing_ones(ix, g)))
    return out


# ---------------------------------------------------------------------------------------
# SparseToDense, ReverseV2, Pad, MirrorPad, TopKV2
def _sparse_to_dense_grad(op, grad):
    indices, output_shape, values, _ = op.inputs
    nd = indices.shape.ndims
    if nd == 2:
        rows = indices
    elif nd in (0, 1):
        rows = array_ops.reshape(indices, [-1, 1])
    else:
        rows = array_ops.reshape(indices, array_ops.stack([-1, array_ops.size(output_shape, out_type=indices.dtype)]))
    picked = indexing_ops.gather_nd(grad, rows)
    if values.shape.ndims == 1:
        values_grad = picked
    elif values.shape.ndims == 0:
        values_grad = math_ops.reduce_sum(picked)  # one value written at every index
    else:
        per_value = array_ops.reshape(picked, array_ops.stack([-1, array_ops.size(values)]))
        values_grad = array_ops.reshape(math_ops.reduce_sum(per_value, axis=[0]), array_ops.shape(values))
    return [None, None, values_grad, math_ops.reduce_sum(grad) - math_ops.reduce_sum(picked)]


def _reverse_v2_grad(op, grad):
    return [indexing_ops.reverse(grad, op.inputs[1]), None]


def _pad_grad(op, grad):
    # The input's part of the padded gradient: a Slice from the "before" paddings.
    x, paddings = op.inputs[:2]
    begin = paddings[:, 0]
    x_grad = array_ops.slice(grad, begin, _shape_of(x, paddings.dtype))
    if len(op.inputs) == 2:
        return [x_grad, None]
    return [x_grad, None, math_ops.reduce_sum(grad) - math_ops.reduce_sum(x_grad)]


def _mirror_pad_grad(op, grad):
    return [apply_op("MirrorPadGrad", [grad, op.inputs[1]], {"mode": op.get_attr("mode")}), None]


def _mirror_pad_grad_grad(op, grad):
    return [apply_op("MirrorPad", [grad, op.inputs[1]], {"mode": op.get_attr("mode")}), None]


def _top_k_grad(op, grad, _):
    # Scatter each row's value gradients to the positions the indices name, in the input
    # flattened to one row after another.
    x = op.inputs[0]
    idx = op.outputs[1]
    in_shape = _shape_of(x)
    k = array_ops.shape(idx)[-1]
    n = array_ops.shape(x)[-1]
    # the row count spelled out, not -1: with k = 0 there is nothing to infer it from
    rows = array_ops.reshape(idx, array_ops.stack([math_ops.reduce_prod(array_ops.shape(idx)[:-1]), k]))
    starts = array_ops.range(0, array_ops.shape(rows)[0] * n, n, dtype=dtypes.int32)
    flat = array_ops.reshape(rows + array_ops.expand_dims(starts, 1), [-1, 1])
    total = array_ops.reshape(math_ops.reduce_prod(in_shape), [1])
    g = indexing_ops.scatter_nd(flat, array_ops.reshape(grad, [-1]), total)
    return [array_ops.reshape(g, in_shape), None]


def register_gradients(reg):
    reg.gradient("GatherNd", _gather_nd_grad)
    reg.gradient("ScatterNd", _scatter_nd_grad)
    reg.gradient("SegmentSum", _segment_sum_grad)
    reg.gradient("SegmentMean", _segment_mean_grad)
    reg.gradient("SegmentMax", _segment_min_or_max_grad)
    reg.gradient("SegmentMin", _segment_min_or_max_grad)
    reg.gradient("UnsortedSegmentMax", _unsorted_segment_min_or_max_grad)
    reg.gradient("UnsortedSegmentMin", _unsorted_segment_min_or_max_grad)
    reg.gradient("DynamicPartition", _dynamic_partition_grad)
    reg.gradient("DynamicStitch", _dynamic_stitch_grad)
    reg.gradient("ParallelDynamicStitch", _dynamic_stitch_grad)
    reg.gradient("SparseToDense", _sparse_to_dense_grad)
    reg.gradient("ReverseV2", _reverse_v2_grad)
    reg.gradient("Pad", _pad_grad)
    reg.gradient("PadV2", _pad_grad)
    reg.gradient("MirrorPad", _mirror_pad_grad)
    reg.gradient("MirrorPadGrad", _mirror_pad_grad_grad)
    reg.gradient("TopKV2", _top_k_grad)
    reg.no_gradient("Unique", "UniqueWithCounts")
