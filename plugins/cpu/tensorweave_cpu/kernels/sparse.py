"""Sparse-tensor kernels: SparseTensorDenseMatMul, SparseReorder, SparseAdd, SparseAddGrad
and SparseTensorDenseAdd.

No kernel loops over entries in Python: products are gathered rows of B scaled by the
values and summed per output row with one ``np.add.reduceat`` over the entries sorted by
row; matching indices between two SparseTensors is one ``np.unique`` over their rows.
Every kernel checks indices against the dense shape first (TensorFlow's matmul kernel
does too; ``tensorweave.kernels.indexing``, the checks every device shares), so a bad index
fails with the entry, the index and the bound.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import indexing as checks

CPU = "CPU"
_E = errors.InvalidArgumentError


def _sum_rows_by(contrib, rows, n_rows):
    """``out[r] = sum of contrib[i] for rows[i] == r`` for ``n_rows`` rows."""
    out = np.zeros((n_rows,) + contrib.shape[1:], contrib.dtype)
    if not rows.size:
        return out
    at, starts, order = checks.group_rows(rows)
    out[at] = contrib if starts is None else np.add.reduceat(contrib[order], starts[:-1], axis=0)
    return out


def _dense_matmul(ctx):
    adj_a, adj_b = ctx.attrs["adjoint_a"], ctx.attrs["adjoint_b"]

    def matmul(a_indices, a_values, a_shape, b):
        n_rows, _, _ = checks.sparse_dense_matmul(ctx, a_indices, a_values, a_shape, b.shape, adj_a, adj_b)
        rows, cols = a_indices[:, 0], a_indices[:, 1]
        if adj_a:
            rows, cols = cols, rows
        bm = b.conj().T if adj_b else b
        vals = a_values.conj() if adj_a else a_values
        return _sum_rows_by(bm[cols] * vals[:, None], rows, n_rows)
    return matmul


def _reorder(ctx):
    def reorder(indices, values, shape):
        checks.sparse_operand(ctx, indices, values, shape, "input")
        if indices.shape[0] <= 1:
            return indices, values
        order = np.lexsort(indices.T[::-1])  # lexsort sorts by its last key first
        return indices[order], values[order]
    return reorder


def _row_ids(*index_sets):
    """One integer id per distinct index row across ``index_sets`` (equal rows, equal ids),
    the ids of each set, and the distinct rows in row-major order."""
    rank = index_sets[0].shape[1]
    both = np.concatenate([s.reshape(-1, rank) for s in index_sets]) if index_sets else np.zeros((0, rank), np.int64)
    uniq, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    out, start = [], 0
    for s in index_sets:
        out.append(inv[start:start + s.shape[0]])
        start += s.shape[0]
    return uniq, out


def _sparse_add(ctx):
    def sparse_add(a_indices, a_values, a_shape, b_indices, b_values, b_shape, thresh):
        checks.sparse_operand(ctx, a_indices, a_values, a_shape, "a")
        checks.sparse_operand(ctx, b_indices, b_values, b_shape, "b")
        if a_shape.tolist() != b_shape.tolist():
            raise ctx.error(_E, f"the operands' dense shapes differ: {a_shape.tolist()} and {b_shape.tolist()}")
        checks.check_scalar(ctx, thresh, "thresh")
        uniq, (ia, ib) = _row_ids(a_indices, b_indices)
        sums = np.zeros(uniq.shape[0], a_values.dtype)
        np.add.at(sums, ia, a_values)
        np.add.at(sums, ib, b_values)
        # TF keeps an entry when thresh <= |sum|: thresh 0 keeps every entry, zeros included.
        keep = np.abs(sums) >= thresh
        return uniq[keep].astype(np.int64, copy=False), sums[keep], a_shape.copy()
    return sparse_add


def _sparse_add_grad(ctx):
    def sparse_add_grad(grad, a_indices, b_indices, sum_indices):
        if grad.ndim != 1 or grad.shape[0] != sum_indices.shape[0]:
            raise ctx.error(_E, f"backprop_val_grad must be a vector of the {sum_indices.shape[0]} entries of the sum, "
                                f"got shape {grad.shape}")
        _, (i_sum, ia, ib) = _row_ids(sum_indices, a_indices, b_indices)
        pos = np.full(i_sum.size + ia.size + ib.size, -1, np.int64)
        pos[i_sum] = np.arange(i_sum.size)
        out = []
        for ids in (ia, ib):
            p = pos[ids]
            g = np.zeros(ids.size, grad.dtype)
            found = p >= 0  # entries dropped by the threshold get no gradient
            g[found] = grad[p[found]]
            out.append(g)
        return tuple(out)
    return sparse_add_grad


def _sparse_dense_add(ctx):
    def sparse_dense_add(a_indices, a_values, a_shape, b):
        checks.sparse_dense_add(ctx, a_indices, a_values, a_shape, b.shape)
        out = b.copy()
        np.add.at(out, tuple(a_indices.T), a_values)
        return out
    return sparse_dense_add


def register(reg):
    reg.register("SparseTensorDenseMatMul", CPU, factory=_dense_matmul)
    reg.register("SparseReorder", CPU, factory=_reorder)
    reg.register("SparseAdd", CPU, factory=_sparse_add)
    reg.register("SparseAddGrad", CPU, factory=_sparse_add_grad)
    reg.register("SparseTensorDenseAdd", CPU, factory=_sparse_dense_add)
