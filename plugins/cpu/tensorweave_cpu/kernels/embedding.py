"""Embedding kernels: SparseSegmentSum/Mean/SqrtN, their Mean/SqrtN gradients, and
EmbeddingIdsCheck (``tensorweave.ops.embedding_ops``).

Indices and segment ids are checked before use (``tensorweave.kernels.indexing``, the
checks every device shares): an out-of-range index, a negative or decreasing segment id is
an InvalidArgumentError naming the node (``ctx.error``), the position, the value and the
valid range. Sums over sorted segments use ``np.add.reduceat``
on the gathered rows (one pass, no per-row Python); the gradients scatter with
``np.add.at`` because indices may repeat.
"""

from __future__ import annotations

import numpy as np

from tensorweave.kernels import indexing as checks

CPU = "CPU"


def _sparse_segment(kind):
    def factory(ctx):
        def compute(data, indices, segment_ids):
            data = np.asarray(data)
            idx, seg, num = checks.sparse_segments(ctx, data.shape, indices, segment_ids)
            out = np.zeros((num,) + data.shape[1:], dtype=data.dtype)
            if not idx.size:
                return out
            starts, present = checks.segment_runs(seg)
            out[present] = np.add.reduceat(data[idx], starts[:-1], axis=0)
            if kind != "sum":
                counts = np.diff(starts).astype(data.dtype)
                scale = counts if kind == "mean" else np.sqrt(counts)
                out[present] /= scale.reshape((-1,) + (1,) * (data.ndim - 1))
            return out
        return compute
    return factory


def _sparse_segment_grad(kind):
    def factory(ctx):
        def compute(grad, indices, segment_ids, output_dim0):
            grad = np.asarray(grad)
            rows, idx, seg, _ = checks.sparse_segments_grad(ctx, grad.shape, indices, segment_ids, output_dim0)
            out = np.zeros((rows,) + grad.shape[1:], dtype=grad.dtype)
            if not idx.size:
                return out
            per_segment = checks.segment_divisors(seg, kind, grad.dtype)
            np.add.at(out, idx, grad[seg] / per_segment.reshape((-1,) + (1,) * (grad.ndim - 1)))
            return out
        return compute
    return factory


def _ids_check(ctx):
    def check(ids, num_ids):
        ids = np.asarray(ids)
        checks.embedding_ids(ctx, ids, num_ids)
        return ids
    return check


def register(reg):
    reg.register("SparseSegmentSum", CPU, factory=_sparse_segment("sum"))
    reg.register("SparseSegmentMean", CPU, factory=_sparse_segment("mean"))
    reg.register("SparseSegmentSqrtN", CPU, factory=_sparse_segment("sqrtn"))
    reg.register("SparseSegmentMeanGrad", CPU, factory=_sparse_segment_grad("mean"))
    reg.register("SparseSegmentSqrtNGrad", CPU, factory=_sparse_segment_grad("sqrtn"))
    reg.register("EmbeddingIdsCheck", CPU, factory=_ids_check)
