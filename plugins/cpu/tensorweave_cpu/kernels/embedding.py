"""Embedding kernels: SparseSegmentSum/Mean/SqrtN, their Mean/SqrtN gradients, and
EmbeddingIdsCheck (``tensorweave.ops.embedding_ops``).

Indices and segment ids are checked before use: an out-of-range index, a negative or
decreasing segment id is an InvalidArgumentError naming the node (``ctx.error``), the
position, the value and the valid range. Sums over sorted segments use ``np.add.reduceat``
on the gathered rows (one pass, no per-row Python); the gradients scatter with
``np.add.at`` because indices may repeat.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors

CPU = "CPU"
_E = errors.InvalidArgumentError


def _vector(ctx, x, what):
    x = np.asarray(x)
    if x.ndim != 1:
        raise ctx.error(_E, f"{what} must be a vector, got shape {list(x.shape)}")
    return x.astype(np.int64, copy=False)


def _check_range(ctx, values, n, what):
    if values.size and (values.min() < 0 or values.max() >= n):
        pos = int(np.flatnonzero((values < 0) | (values >= n))[0])
        raise ctx.error(_E, f"{what}[{pos}] = {int(values[pos])} is not in [0, {n})")


def _segments(ctx, indices, segment_ids, rows):
    """(indices, segment ids, number of segments, first position of each present segment,
    the present segments), all checked."""
    idx = _vector(ctx, indices, "indices")
    seg = _vector(ctx, segment_ids, "segment_ids")
    if idx.shape != seg.shape:
        raise ctx.error(_E, f"indices ({idx.size}) and segment_ids ({seg.size}) must have the same length")
    _check_range(ctx, idx, rows, "indices")
    if not seg.size:
        return idx, seg, 0, seg, seg
    if seg[0] < 0:
        raise ctx.error(_E, f"segment_ids[0] = {int(seg[0])} is negative")
    steps = np.diff(seg)
    if steps.size and steps.min() < 0:
        pos = int(np.flatnonzero(steps < 0)[0]) + 1
        raise ctx.error(_E, f"segment ids are not increasing: segment_ids[{pos}] = {int(seg[pos])} after "
                            f"{int(seg[pos - 1])}")
    starts = np.concatenate([[0], np.flatnonzero(steps) + 1])
    return idx, seg, int(seg[-1]) + 1, starts, seg[starts]


def _sparse_segment(kind):
    def factory(ctx):
        def compute(data, indices, segment_ids):
            data = np.asarray(data)
            if data.ndim == 0:
                raise ctx.error(_E, "data must have rank >= 1, got a scalar")
            idx, seg, num, starts, present = _segments(ctx, indices, segment_ids, data.shape[0])
            out = np.zeros((num,) + data.shape[1:], dtype=data.dtype)
            if not idx.size:
                return out
            out[present] = np.add.reduceat(data[idx], starts, axis=0)
            if kind != "sum":
                counts = np.diff(np.append(starts, idx.size)).astype(data.dtype)
                scale = counts if kind == "mean" else np.sqrt(counts)
                out[present] /= scale.reshape((-1,) + (1,) * (data.ndim - 1))
            return out
        return compute
    return factory


def _sparse_segment_grad(kind):
    def factory(ctx):
        def compute(grad, indices, segment_ids, output_dim0):
            grad = np.asarray(grad)
            rows = int(output_dim0)
            if rows < 0:
                raise ctx.error(_E, f"output_dim0 must be >= 0, got {rows}")
            idx, seg, num, starts, _present = _segments(ctx, indices, segment_ids, rows)
            if num > grad.shape[0]:
                raise ctx.error(_E, f"segment id {num - 1} is not a row of grad (it has {grad.shape[0]})")
            out = np.zeros((rows,) + grad.shape[1:], dtype=grad.dtype)
            if not idx.size:
                return out
            counts = np.diff(np.append(starts, idx.size)).astype(grad.dtype)
            per_segment = np.repeat(counts if kind == "mean" else np.sqrt(counts), np.diff(np.append(starts, idx.size)))
            np.add.at(out, idx, grad[seg] / per_segment.reshape((-1,) + (1,) * (grad.ndim - 1)))
            return out
        return compute
    return factory


def _ids_check(ctx):
    def check(ids, num_ids):
        ids = np.asarray(ids)
        n = int(num_ids)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            flat = ids.reshape(-1)
            pos = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
            raise ctx.error(_E, f"ids[{pos}] = {int(flat[pos])} is not in [0, {n}) (the rows of the sharded table)")
        return ids
    return check


def register(reg):
    reg.register("SparseSegmentSum", CPU, factory=_sparse_segment("sum"))
    reg.register("SparseSegmentMean", CPU, factory=_sparse_segment("mean"))
    reg.register("SparseSegmentSqrtN", CPU, factory=_sparse_segment("sqrtn"))
    reg.register("SparseSegmentMeanGrad", CPU, factory=_sparse_segment_grad("mean"))
    reg.register("SparseSegmentSqrtNGrad", CPU, factory=_sparse_segment_grad("sqrtn"))
    reg.register("EmbeddingIdsCheck", CPU, factory=_ids_check)
