"""Gradients of the sparse-tensor ops (``ops/sparse_ops.py``), as TensorFlow defines them:
w.r.t. a SparseTensor's values and the dense operand; indices and shapes get none."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.ops import array_ops, math_ops


def register_ops(reg):
    pass  # SparseAddGrad is declared with the forward ops in sparse_ops


def _sparse_dense_matmul_grad(op, grad):
    a_indices, a_values, a_shape, b = op.inputs
    adj_a, adj_b = op.get_attr("adjoint_a"), op.get_attr("adjoint_b")
    if a_values.dtype.is_complex:
        raise errors.UnimplementedError(
            f"the gradient of SparseTensorDenseMatMul node '{op.name}' is implemented for real dtypes only, "
            f"not {a_values.dtype.name}")
    # d/dB: A' @ grad, with A' the other adjoint of A; transposed back when B entered adjoint.
    b_grad = apply_op("SparseTensorDenseMatMul", [a_indices, a_values, a_shape, grad],
                      {"adjoint_a": not adj_a, "adjoint_b": False})
    if adj_b:
        b_grad = array_ops.transpose(b_grad)
    # d/dA[i, k] = sum_j grad[i, j] * B[k, j] at each stored (i, k) only (swapped when A entered adjoint).
    rows, cols = a_indices[:, 0], a_indices[:, 1]
    parts_a = array_ops.gather(grad, cols if adj_a else rows)
    b_rows = array_ops.transpose(b) if adj_b else b
    parts_b = array_ops.gather(b_rows, rows if adj_a else cols)
    values_grad = math_ops.reduce_sum(parts_a * parts_b, axis=1)
    return [None, values_grad, None, b_grad]


def _sparse_reorder_grad(op, _indices_grad, values_grad):
    # Reorder the entry numbers 0..n-1 the same way; the inverse permutation takes the
    # gradient of the reordered values back to the original order.
    indices, _, shape = op.inputs
    entries = array_ops.range(array_ops.shape(indices)[0])
    _, order = apply_op("SparseReorder", [indices, entries, shape])
    return [None, array_ops.gather(values_grad, array_ops.invert_permutation(order)), None]


def _sparse_add_grad(op, _indices_grad, values_grad, _shape_grad):
    a_grad, b_grad = apply_op("SparseAddGrad", [values_grad, op.inputs[0], op.inputs[3], op.outputs[0]])
    a_grad.set_shape(op.inputs[1].shape)
    b_grad.set_shape(op.inputs[4].shape)
    return [None, a_grad, None, None, b_grad, None, None]


def _sparse_dense_add_grad(op, grad):
    return [None, apply_op("GatherNd", [grad, op.inputs[0]]), None, grad]


def register_gradients(reg):
    reg.gradient("SparseTensorDenseMatMul", _sparse_dense_matmul_grad)
    reg.gradient("SparseReorder", _sparse_reorder_grad)
    reg.gradient("SparseAdd", _sparse_add_grad)
    reg.gradient("SparseTensorDenseAdd", _sparse_dense_add_grad)
    reg.no_gradient("SparseAddGrad")
