"""Sparse-tensor ops and their TF1 wrappers: ``tw.sparse_placeholder``,
``tw.sparse_tensor_dense_matmul`` (SparseTensorDenseMatMul), ``tw.sparse_reorder``
(SparseReorder), ``tw.sparse_add`` (SparseAdd, SparseTensorDenseAdd and SparseAddGrad) and
``tw.sparse_tensor_to_dense`` (over SparseToDense, which ``ops/indexing_ops.py`` owns).

A SparseTensor (``framework/sparse_tensor.py``) enters an op as its three component
tensors, as in TensorFlow. Gradients are in ``ops/sparse_grad.py``: w.r.t. the values and
the dense operand, never the indices or shapes.
"""

from __future__ import annotations

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
from tensorweave.framework.sparse_tensor import SparseTensor, SparseTensorValue
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops, math_ops

__all__ = [
    "sparse_placeholder", "sparse_tensor_dense_matmul", "sparse_tensor_to_dense", "sparse_reorder", "sparse_add",
    "convert_to_tensor_or_sparse_tensor",
]

_E = errors.InvalidArgumentError
_NUMBERS = "{float16, float32, float64, int32, int64, complex64, complex128}"
_INDEX = "{int32, int64}"


# ---------------------------------------------------------------------------------------
# shape functions
def _require_rank(t, rank, what):
    if t.shape.ndims is not None and t.shape.ndims != rank:
        raise _E(f"{what} must have rank {rank}, got shape {t.shape}")


def _nnz(op, i_idx, i_val):
    """The number of entries of the SparseTensor at inputs (i_idx, i_val), checked to agree."""
    a, b = op.inputs[i_idx].shape, op.inputs[i_val].shape
    n_a = a[0] if a.ndims else None
    n_b = b[0] if b.ndims else None
    if n_a is not None and n_b is not None and n_a != n_b:
        raise _E(f"indices {a} and values {b} must have the same number of entries")
    return n_a if n_a is not None else n_b


def _matmul_shape(op):
    a_indices, a_values, a_shape, b = op.inputs
    _require_rank(a_indices, 2, "a_indices")
    _require_rank(a_values, 1, "a_values")
    _require_rank(a_shape, 1, "a_shape")
    _nnz(op, 0, 1)
    sa = constant_value_as_shape(a_shape)
    if sa.ndims is not None and sa.ndims != 2:
        raise _E(f"a must be a matrix (a_shape of 2 elements), got a_shape {sa}")
    if b.shape.ndims is not None and b.shape.ndims != 2:
        raise _E(f"b must be a matrix, got shape {b.shape}")
    sa = sa if sa.ndims is not None else TensorShape([None, None])
    sb = b.shape if b.shape.ndims is not None else TensorShape([None, None])
    adj_a, adj_b = op.get_attr("adjoint_a"), op.get_attr("adjoint_b")
    rows, inner_a = (sa[1], sa[0]) if adj_a else (sa[0], sa[1])
    inner_b, cols = (sb[1], sb[0]) if adj_b else (sb[0], sb[1])
    if inner_a is not None and inner_b is not None and inner_a != inner_b:
        raise _E(f"cannot multiply A {sa} (adjoint_a={adj_a}) and B {sb} (adjoint_b={adj_b}): inner dimensions "
                 f"{inner_a} and {inner_b} differ")
    return [TensorShape([rows, cols])]


def _reorder_shape(op):
    _require_rank(op.inputs[0], 2, "input_indices")
    _require_rank(op.inputs[1], 1, "input_values")
    _require_rank(op.inputs[2], 1, "input_shape")
    n = _nnz(op, 0, 1)
    return [TensorShape([n, op.inputs[0].shape[1] if op.inputs[0].shape.ndims else None]), TensorShape([n])]


def _sparse_add_shape(op):
    for i, rank, what in ((0, 2, "a_indices"), (1, 1, "a_values"), (2, 1, "a_shape"), (3, 2, "b_indices"),
                          (4, 1, "b_values"), (5, 1, "b_shape"), (6, 0, "thresh")):
        _require_rank(op.inputs[i], rank, what)
    sa, sb = constant_value(op.inputs[2]), constant_value(op.inputs[5])
    if sa is not None and sb is not None and list(sa) != list(sb):
        raise _E(f"the operands' dense shapes differ: {list(sa)} and {list(sb)}")
    rank = op.inputs[2].shape[0] if op.inputs[2].shape.ndims else None
    return [TensorShape([None, rank]), TensorShape([None]), TensorShape(op.inputs[2].shape)]


def _sparse_dense_add_shape(op):
    _require_rank(op.inputs[0], 2, "a_indices")
    _require_rank(op.inputs[1], 1, "a_values")
    _require_rank(op.inputs[2], 1, "a_shape")
    sa = constant_value_as_shape(op.inputs[2])
    if not sa.is_compatible_with(op.inputs[3].shape):
        raise _E(f"the sparse operand's shape {sa} differs from the dense operand's {op.inputs[3].shape}")
    return [op.inputs[3].shape.merge_with(sa)]


def _sparse_add_grad_shape(op):
    def nnz(t):
        return t.shape[0] if t.shape.ndims else None
    return [TensorShape([nnz(op.inputs[1])]), TensorShape([nnz(op.inputs[2])])]


def register_ops(reg):
    reg.op("SparseTensorDenseMatMul", inputs=["a_indices: Tindices", "a_values: T", "a_shape: int64", "b: T"],
           outputs=["product: T"],
           attrs=[f"T: {_NUMBERS}", f"Tindices: {_INDEX} = int64", "adjoint_a: bool = false",
                  "adjoint_b: bool = false"],
           shape_fn=_matmul_shape,
           doc="The product of the sparse matrix A (indices, values, shape) and the dense matrix B, either "
               "adjoint (transposed) first. Indices must lie inside a_shape.")
    reg.op("SparseReorder", inputs=["input_indices: int64", "input_values: T", "input_shape: int64"],
           outputs=["output_indices: int64", "output_values: T"], attrs=["T: type"], shape_fn=_reorder_shape,
           doc="The same SparseTensor with its entries in row-major (lexicographic) order of their indices.")
    reg.op("SparseAdd", inputs=["a_indices: int64", "a_values: T", "a_shape: int64", "b_indices: int64",
                                "b_values: T", "b_shape: int64", "thresh: Treal"],
           outputs=["sum_indices: int64", "sum_values: T", "sum_shape: int64"],
           attrs=[f"T: {_NUMBERS}", "Treal: {float16, float32, float64, int32, int64}"],
           shape_fn=_sparse_add_shape,
           doc="A + B for two SparseTensors of one shape; sums whose magnitude is below thresh are dropped. "
               "The output's indices are in row-major order.")
    reg.op("SparseAddGrad", inputs=["backprop_val_grad: T", "a_indices: int64", "b_indices: int64",
                                    "sum_indices: int64"],
           outputs=["a_val_grad: T", "b_val_grad: T"], attrs=[f"T: {_NUMBERS}"], shape_fn=_sparse_add_grad_shape,
           doc="The gradients of SparseAdd's two value vectors given the gradient of the sum's values.")
    reg.op("SparseTensorDenseAdd", inputs=["a_indices: Tindices", "a_values: T", "a_shape: Tindices", "b: T"],
           outputs=["output: T"], attrs=[f"T: {_NUMBERS}", f"Tindices: {_INDEX}"],
           shape_fn=_sparse_dense_add_shape, doc="The dense tensor B plus the SparseTensor A (of B's shape).")


# ---------------------------------------------------------------------------------------
# wrappers
def _as_sparse(x, fn, what="sp_a"):
    if isinstance(x, SparseTensorValue):
        return SparseTensor.from_value(x)
    if not isinstance(x, SparseTensor):
        raise _E(f"{fn}: {what} must be a tw.SparseTensor or tw.SparseTensorValue, got {type(x).__name__}")
    return x


def convert_to_tensor_or_sparse_tensor(value, dtype=None, name=None):
    """``value`` as a SparseTensor when it is one (or a SparseTensorValue), else as a Tensor."""
    if isinstance(value, SparseTensorValue):
        value = SparseTensor.from_value(value)
    if isinstance(value, SparseTensor):
        if dtype is not None and value.dtype is not dtypes.as_dtype(dtype):
            raise _E(f"SparseTensor {value} has dtype {value.dtype.name}, but {dtypes.as_dtype(dtype).name} "
                     "was expected")
        return value
    return convert_to_tensor(value, dtype=dtype, name=name)


def sparse_placeholder(dtype, shape=None, name=None):
    """A SparseTensor to be fed at run time with a ``tw.SparseTensorValue`` or an
    ``(indices, values, dense_shape)`` tuple.

    Three placeholders: ``name/indices`` (int64 ``[None, rank]``), ``name/values``
    (``[None]``) and ``name/shape``: a fully unknown ``shape`` makes the dense shape a plain
    int64 placeholder; a given one (``None`` or -1 for unknown dims) a placeholder with that
    default, and the SparseTensor's static shape."""
    dtype = dtypes.as_dtype(dtype)

    def sub(suffix):
        return None if name is None else f"{name}/{suffix}"

    if shape is None:
        dense_shape = array_ops.placeholder(dtypes.int64, [None], name=sub("shape"))
        rank, static = None, TensorShape(None)
    else:
        static = as_shape(shape)
        if static.ndims is None:
            dense_shape = array_ops.placeholder(dtypes.int64, [None], name=sub("shape"))
            rank = None
        else:
            rank = static.ndims
            default = np.array([-1 if d is None else d for d in static.as_list()], np.int64)
            dense_shape = array_ops.placeholder_with_default(
                array_ops.constant(default, name=None if name is None else f"{name}/shape_default"),
                [rank], name=sub("shape"))
    sp = SparseTensor(indices=array_ops.placeholder(dtypes.int64, [None, rank], name=sub("indices")),
                      values=array_ops.placeholder(dtype, [None], name=sub("values")),
                      dense_shape=dense_shape)
    sp.set_shape(static)
    return sp


def sparse_tensor_dense_matmul(sp_a, b, adjoint_a=False, adjoint_b=False, name=None):
    """``A @ B`` for a SparseTensor ``A`` (rank 2) and a dense matrix ``B``; ``adjoint_*``
    transposes (and conjugates) an operand first. Indices outside ``A``'s dense shape fail
    with InvalidArgumentError when the op runs."""
    sp_a = _as_sparse(sp_a, "sparse_tensor_dense_matmul")
    with get_default_graph().name_scope(name or "SparseTensorDenseMatMul") as scope:
        b = convert_to_tensor(b, dtype=sp_a.dtype, name="b")
        return apply_op("SparseTensorDenseMatMul", [sp_a.indices, sp_a.values, sp_a.dense_shape, b],
                        {"adjoint_a": bool(adjoint_a), "adjoint_b": bool(adjoint_b)}, _exact_name=scope.rstrip("/"))


def sparse_tensor_to_dense(sp_input, default_value=0, validate_indices=True, name=None):
    """The dense tensor of ``sp_input``: its values at its indices, ``default_value``
    elsewhere. With ``validate_indices`` the indices must be in row-major order without
    repeats (``tw.sparse_reorder`` sorts them); indices outside the dense shape always fail."""
    sp_input = _as_sparse(sp_input, "sparse_tensor_to_dense", "sp_input")
    with get_default_graph().name_scope(name or "SparseToDense") as scope:
        default = convert_to_tensor(default_value, dtype=sp_input.dtype, name="default_value")
        out = apply_op("SparseToDense", [sp_input.indices, sp_input.dense_shape, sp_input.values, default],
                       {"validate_indices": bool(validate_indices)}, _exact_name=scope.rstrip("/"))
    out.set_shape(sp_input.shape)
    return out


def sparse_reorder(sp_input, name=None):
    """``sp_input`` with its entries sorted into row-major order (same dense value)."""
    sp_input = _as_sparse(sp_input, "sparse_reorder", "sp_input")
    indices, values = apply_op("SparseReorder", [sp_input.indices, sp_input.values, sp_input.dense_shape],
                               name=name or "SparseReorder")
    out = SparseTensor(indices, values, sp_input.dense_shape)
    out.set_shape(sp_input.shape)
    return out


def sparse_add(a, b, thresh=0, threshold=None):
    """``a + b`` where at least one is sparse. Two SparseTensors give a SparseTensor (sums
    with magnitude below ``thresh`` dropped, indices in row-major order); a SparseTensor and a
    dense tensor give a dense tensor."""
    if threshold is not None:
        thresh = threshold
    a_sparse = isinstance(a, SparseTensor | SparseTensorValue)
    b_sparse = isinstance(b, SparseTensor | SparseTensorValue)
    if not (a_sparse or b_sparse):
        raise _E("sparse_add: at least one operand must be a tw.SparseTensor (use tw.add for two dense tensors)")
    if a_sparse and b_sparse:
        a, b = _as_sparse(a, "sparse_add", "a"), _as_sparse(b, "sparse_add", "b")
        if a.dtype is not b.dtype:
            raise _E(f"sparse_add: the operands' dtypes differ: {a.dtype.name} and {b.dtype.name}")
        with get_default_graph().name_scope("SparseAdd"):
            real = a.dtype.real_dtype if a.dtype.is_complex else a.dtype
            t = math_ops.cast(convert_to_tensor(thresh, name="threshold"), real) \
                if isinstance(thresh, Tensor) else convert_to_tensor(np.asarray(thresh, real.np_dtype),
                                                                     name="threshold")
            idx, val, shp = apply_op("SparseAdd", [a.indices, a.values, a.dense_shape, b.indices, b.values,
                                                   b.dense_shape, t])
        out = SparseTensor(idx, val, shp)
        out.set_shape(a.shape.merge_with(b.shape) if a.shape.is_compatible_with(b.shape) else a.shape)
        return out
    if b_sparse:  # the sparse operand goes first
        a, b = b, a
    a = _as_sparse(a, "sparse_add", "a")
    with get_default_graph().name_scope("SparseTensorDenseAdd") as scope:
        b = convert_to_tensor(b, dtype=a.dtype, name="b")
        return apply_op("SparseTensorDenseAdd", [a.indices, a.values, a.dense_shape, b],
                        _exact_name=scope.rstrip("/"))
