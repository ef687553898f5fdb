"""Gradients of the sparse segment ops (``embedding_ops.py``), after TensorFlow's
``math_grad.py``: with respect to ``data`` only (indices and segment ids are integers).

SparseSegmentSum's gradient is ``UnsortedSegmentSum(Gather(grad, segment_ids), indices,
rows of data)``; Mean and SqrtN have their own grad ops, which also divide by each
segment's count (or its square root). The gradients are dense in ``data``: in
``embedding_lookup_sparse`` ``data`` is the few looked-up rows, and the sparse gradient of
the table comes from the lookup's Gather.
"""

from __future__ import annotations

from tensorweave.framework import dtypes
from tensorweave.framework.graph import apply_op
from tensorweave.ops import array_ops, math_ops


def register_ops(reg):
    pass


def _rows(data):
    """``data``'s first dimension as an int32 scalar (a constant when known)."""
    if data.shape.ndims and data.shape[0] is not None:
        return array_ops.constant(data.shape[0], dtype=dtypes.int32)
    return array_ops.shape(data, out_type=dtypes.int32)[0]


def _sparse_segment_sum_grad(op, grad):
    data, indices, segment_ids = op.inputs
    per_index = array_ops.gather(grad, segment_ids)
    return [math_ops.unsorted_segment_sum(per_index, indices, _rows(data)), None, None]


def _grad_op(grad_type):
    def f(op, grad):
        data, indices, segment_ids = op.inputs
        return [apply_op(grad_type, [grad, indices, segment_ids, _rows(data)]), None, None]
    return f


def register_gradients(reg):
    reg.gradient("SparseSegmentSum", _sparse_segment_sum_grad)
    reg.gradient("SparseSegmentMean", _grad_op("SparseSegmentMeanGrad"))
    reg.gradient("SparseSegmentSqrtN", _grad_op("SparseSegmentSqrtNGrad"))
