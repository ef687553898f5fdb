"""Gradient functions of the array ops (TensorFlow's ``array_grad.py``).

Gradients are dense tensors, except the gradient of a gather along axis 0 (Gather, GatherV2)
with respect to its params: an ``IndexedSlices`` of the incoming gradient's rows at the
gathered indices, as in TensorFlow, so a step that reads a few rows of a large table has a
gradient the size of those rows (``ops/gradients.py`` keeps it sparse). A gather along another
axis gets a dense ``UnsortedSegmentSum``, the gradient of a slice a ``StridedSliceGrad``.
Shapes, axes and sizes known at graph construction are used as constants; otherwise they are
computed in the graph.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes
from tensorweave.framework.graph import Tensor, apply_op, constant_value, constant_value_as_shape
from tensorweave.framework.indexed_slices import IndexedSlices
from tensorweave.ops import array_ops, math_ops
from tensorweave.ops.math_grad import unbroadcast


def register_ops(reg):
    pass


_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _shape_of(t: Tensor, dtype=dtypes.int32):
    """``t``'s shape: a constant when fully known, else a ``Shape`` tensor (of ``dtype``)."""
    if t.shape.is_fully_defined():
        return array_ops.constant(np.array(t.shape.as_list(), dtype=dtype.np_dtype), dtype=dtype)
    return array_ops.shape(t, out_type=dtype)


def _reshape_like(grad: Tensor, x: Tensor) -> Tensor:
    if x.shape.is_fully_defined() and grad.shape.is_fully_defined() and grad.shape == x.shape:
        return grad
    return array_ops.reshape(grad, _shape_of(x))


def _static_axis(axis_t: Tensor, rank):
    """The normalised axis when the axis and the rank are known at construction, else None."""
    v = constant_value(axis_t)
    if v is None or rank is None or rank == 0:
        return None
    return int(np.asarray(v).reshape(-1)[0]) % rank


def _dynamic_axis(axis_t: Tensor, x: Tensor) -> Tensor:
    """The axis normalised in the graph (int32), for an axis or rank unknown at construction."""
    rank = array_ops.rank(x)
    return math_ops.floormod(math_ops.cast(axis_t, dtypes.int32), math_ops.maximum(rank, 1))


def _dim_size(x: Tensor, axis):
    """The size of ``x`` along ``axis`` (an int or a scalar tensor): an int when known, else a tensor."""
    if isinstance(axis, int) and x.shape.ndims is not None and x.shape[axis] is not None:
        return x.shape[axis]
    return array_ops.gather(array_ops.shape(x), axis)


# ---------------------------------------------------------------------------------------
def _identity_grad(op, grad):
    return [grad]


# An IndexedSlices gradient passes through unchanged (ops/gradients.py reads this mark).
_identity_grad.accepts_indexed_slices = True


def _reshape_grad(op, grad):
    return [_reshape_like(grad, op.inputs[0]), None]


def _expand_dims_grad(op, grad):
    return [_reshape_like(grad, op.inputs[0]), None]


def _squeeze_grad(op, grad):
    return [_reshape_like(grad, op.inputs[0])]


def _fill_grad(op, grad):
    return [None, math_ops.reduce_sum(grad)]


def _broadcast_to_grad(op, grad):
    return [unbroadcast(grad, op.inputs[0], constant_value_as_shape(op.inputs[1])), None]


def _one_hot_grad(op, grad):
    # Not differentiable in its indices; on_value and off_value get the sums of the gradient
    # over the positions that hold them.
    indices, depth, _, _ = op.inputs
    mask = array_ops.one_hot(indices, depth, on_value=1, off_value=0, axis=op.get_attr("axis"), dtype=grad.dtype)
    return [None, None, math_ops.reduce_sum(grad * mask), math_ops.reduce_sum(grad * (1 - mask))]


def _pack_grad(op, grad):
    return array_ops.unstack(grad, num=len(op.inputs), axis=op.get_attr("axis"))


def _unpack_grad(op, *grads):
    return [array_ops.stack(list(grads), axis=op.get_attr("axis"))]


def _concat_grad(op, grad):
    values, axis_t = op.inputs[:-1], op.inputs[-1]
    rank = next((t.shape.ndims for t in (*values, grad) if t.shape.ndims is not None), None)
    a = _static_axis(axis_t, rank)
    if a is None:
        a = _dynamic_axis(axis_t, values[0])
    sizes = [_dim_size(v, a) for v in values]
    if any(isinstance(s, Tensor) for s in sizes):
        sizes = array_ops.stack(sizes)
    return array_ops.split(grad, sizes, axis=a, num=len(values)) + [None]


def _split_grad(op, *grads):
    return [None, array_ops.concat(list(grads), op.inputs[0])]


def _split_v_grad(op, *grads):
    return [array_ops.concat(list(grads), op.inputs[2]), None, None]


def _transpose_grad(op, grad):
    perm = op.inputs[1]
    p = constant_value(perm)
    if p is not None:
        inv = np.argsort(np.asarray(p).reshape(-1)).astype(np.int32)
        return [array_ops.transpose(grad, inv), None]
    return [array_ops.transpose(grad, array_ops.invert_permutation(perm)), None]


def _tile_grad(op, grad):
    # Tile's output, reshaped to [m0, d0, m1, d1, ...], summed over the multiples' axes.
    x, multiples = op.inputs
    m = constant_value(multiples)
    rank = x.shape.ndims
    if m is not None and x.shape.is_fully_defined():
        m = [int(v) for v in np.asarray(m).reshape(-1)]
        if all(v == 1 for v in m):
            return [_reshape_like(grad, x), None]
        split_shape = [d for pair in zip(m, x.shape.as_list()) for d in pair]
        return [math_ops.reduce_sum(array_ops.reshape(grad, split_shape), axis=list(range(0, 2 * len(m), 2))), None]
    shape_x = array_ops.shape(x, out_type=multiples.dtype)
    split_shape = array_ops.reshape(array_ops.transpose(array_ops.stack([multiples, shape_x])), [-1])
    axes = (list(range(0, 2 * rank, 2)) if rank is not None
            else array_ops.range(0, array_ops.size(split_shape), 2))
    g = math_ops.reduce_sum(array_ops.reshape(grad, split_shape), axis=axes)
    g.set_shape(x.shape)
    return [g, None]


def _slice_grad(op, grad):
    x, begin, _ = op.inputs
    out = op.outputs[0]
    b = constant_value(begin)
    if b is not None and out.shape.is_fully_defined():
        b = np.asarray(b).reshape(-1)
        end = array_ops.constant((b + np.array(out.shape.as_list(), dtype=b.dtype)).astype(begin.dtype.np_dtype))
        strides = array_ops.constant(np.ones(len(b), dtype=begin.dtype.np_dtype))
    else:
        end = begin + array_ops.shape(out, out_type=begin.dtype)
        strides = array_ops.ones_like(begin)
    g = apply_op("StridedSliceGrad", [_shape_of(x, begin.dtype), begin, end, strides, grad])
    return [g, None, None]


def _strided_slice_grad(op, grad):
    x, begin, end, strides = op.inputs
    masks = {k: op.get_attr(k) for k in _MASKS}
    g = apply_op("StridedSliceGrad", [_shape_of(x, begin.dtype), begin, end, strides, grad], masks)
    return [g, None, None, None]


def _strided_slice_grad_grad(op, grad):
    _, begin, end, strides, _ = op.inputs
    masks = {k: op.get_attr(k) for k in _MASKS}
    return [None, None, None, None, array_ops.strided_slice(grad, begin, end, strides, **masks)]


def _gather_dense_grad(params, indices, grad, axis_t):
    """The gradient of ``gather(params, indices, axis)`` w.r.t. params, as a dense tensor."""
    prank, irank = params.shape.ndims, indices.shape.ndims
    a = _static_axis(axis_t, prank) if axis_t is not None else 0
    if a == 0:
        return math_ops.unsorted_segment_sum(grad, indices, _dim_size(params, 0))
    if a is not None and irank is not None:
        # Move the index dimensions of grad to the front, sum by segment, move the axis back.
        perm1 = list(range(a, a + irank)) + list(range(a)) + list(range(a + irank, prank - 1 + irank))
        perm2 = list(range(1, a + 1)) + [0] + list(range(a + 1, prank))
    else:
        a = _dynamic_axis(axis_t, params)
        ir, pr = array_ops.rank(indices), array_ops.rank(params)
        r = array_ops.range
        perm1 = array_ops.concat([r(a, a + ir), r(0, a), r(a + ir, array_ops.rank(grad))], 0)
        perm2 = array_ops.concat([r(1, a + 1), [0], r(a + 1, pr)], 0)
    seg = math_ops.unsorted_segment_sum(array_ops.transpose(grad, perm1), indices, _dim_size(params, a))
    out = array_ops.transpose(seg, perm2)
    out.set_shape(params.shape)
    return out


def _gather_sparse_grad(params, indices, grad):
    """The gradient of ``gather(params, indices)`` (axis 0) w.r.t. params, as IndexedSlices:
    one row of ``grad`` per gathered index (indices of any rank are flattened, and ``grad``
    reshaped to match), ``dense_shape`` the params' shape."""
    dense_shape = _shape_of(params, dtypes.int64)
    flat_indices = indices if indices.shape.ndims == 1 else array_ops.reshape(indices, [-1])
    row_shape = params.shape[1:] if params.shape.ndims is not None else None
    if (indices.shape.ndims == 1 and grad.shape.ndims is not None and row_shape is not None
            and grad.shape.ndims == row_shape.ndims + 1):
        values = grad  # already one row per index
    elif row_shape is not None and row_shape.is_fully_defined():
        values = array_ops.reshape(grad, [-1] + row_shape.as_list())
    else:
        rows = array_ops.strided_slice(array_ops.shape(params), [1], [2 ** 31 - 1], [1])
        values = array_ops.reshape(grad, array_ops.concat([[-1], rows], 0))
    return IndexedSlices(values, flat_indices, dense_shape)


def _gather_grad(op, grad):
    params, indices = op.inputs
    return [_gather_sparse_grad(params, indices, grad), None]


def _gather_v2_grad(op, grad):
    params, indices, axis = op.inputs
    a = _static_axis(axis, params.shape.ndims) if params.shape.ndims is not None else None
    if a == 0 or (a is None and constant_value(axis) is not None and int(np.asarray(constant_value(axis))) == 0):
        return [_gather_sparse_grad(params, indices, grad), None, None]
    return [_gather_dense_grad(params, indices, grad, axis), None, None]


def _select_grad(op, grad):
    c = op.inputs[0]
    zeros = array_ops.zeros_like(grad)
    return [None, array_ops.select(c, grad, zeros), array_ops.select(c, zeros, grad)]


def register_gradients(reg):
    reg.gradient("Identity", _identity_grad)
    reg.gradient("Select", _select_grad)
    reg.gradient("PlaceholderWithDefault", _identity_grad)
    reg.gradient("Reshape", _reshape_grad)
    reg.gradient("ExpandDims", _expand_dims_grad)
    reg.gradient("Squeeze", _squeeze_grad)
    reg.gradient("Fill", _fill_grad)
    reg.gradient("BroadcastTo", _broadcast_to_grad)
    reg.gradient("OneHot", _one_hot_grad)
    reg.gradient("Pack", _pack_grad)
    reg.gradient("Unpack", _unpack_grad)
    reg.gradient("ConcatV2", _concat_grad)
    reg.gradient("Split", _split_grad)
    reg.gradient("SplitV", _split_v_grad)
    reg.gradient("Transpose", _transpose_grad)
    reg.gradient("Tile", _tile_grad)
    reg.gradient("Slice", _slice_grad)
    reg.gradient("StridedSlice", _strided_slice_grad)
    reg.gradient("StridedSliceGrad", _strided_slice_grad_grad)
    reg.gradient("Gather", _gather_grad)
    reg.gradient("GatherV2", _gather_v2_grad)
    reg.no_gradient("StopGradient", "Const", "Where", "Placeholder", "Range", "InvertPermutation", "ListDiff",
                    "RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt", "RandomShuffle")
