"""Sparse-tensor kernels: SparseTensorDenseMatMul, SparseReorder, SparseAdd, SparseAddGrad
and SparseTensorDenseAdd.

No kernel loops over entries in Python: products are gathered rows of B scaled by the
values and summed per output row with one ``np.add.reduceat`` over the entries sorted by
row; matching indices between two SparseTensors is one ``np.unique`` over their rows.
Every kernel checks indices against the dense shape first (TensorFlow's matmul kernel
does too), so a bad index fails with the entry, the index and the bound.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors

CPU = "CPU"
_E = errors.InvalidArgumentError


def _check_sparse(ctx, indices, values, shape, what="a"):
    if indices.ndim != 2:
        raise ctx.error(_E, f"{what}_indices must be a matrix [nnz, rank], got shape {indices.shape}")
    if values.ndim != 1 or values.shape[0] != indices.shape[0]:
        raise ctx.error(_E, f"{what}_values must be a vector of the {indices.shape[0]} entries of {what}_indices, "
                            f"got shape {values.shape}")
    if shape.ndim != 1 or shape.shape[0] != indices.shape[1]:
        raise ctx.error(_E, f"{what}_shape must be a vector with one element per column of {what}_indices "
                            f"({indices.shape[1]}), got {shape.tolist()}")
    if indices.size:
        bad = (indices < 0) | (indices >= shape)
        if bad.any():
            entry, dim = np.argwhere(bad)[0]
            raise ctx.error(_E, f"index {indices[entry].tolist()} of {what} (entry {entry}) is out of bounds for "
                                f"dense shape {shape.tolist()}: dimension {dim} must be in [0, {shape[dim]})")


def _sum_rows_by(contrib, rows, n_rows):
    """``out[r] = sum of contrib[i] for rows[i] == r`` for ``n_rows`` rows."""
    out = np.zeros((n_rows,) + contrib.shape[1:], contrib.dtype)
    if not rows.size:
        return out
    order = np.argsort(rows, kind="stable")
    srows = rows[order]
    starts = np.flatnonzero(np.concatenate(([True], srows[1:] != srows[:-1])))
    out[srows[starts]] = np.add.reduceat(contrib[order], starts, axis=0)
    return out


def _dense_matmul(ctx):
    adj_a, adj_b = ctx.attrs["adjoint_a"], ctx.attrs["adjoint_b"]

    def matmul(a_indices, a_values, a_shape, b):
        _check_sparse(ctx, a_indices, a_values, a_shape)
        if a_shape.shape[0] != 2:
            raise ctx.error(_E, f"a must be a matrix (a_shape of 2 elements), got a_shape {a_shape.tolist()}")
        if b.ndim != 2:
            raise ctx.error(_E, f"b must be a matrix, got shape {b.shape}")
        rows, cols = a_indices[:, 0], a_indices[:, 1]
        n_rows, inner = int(a_shape[0]), int(a_shape[1])
        if adj_a:
            rows, cols, n_rows, inner = cols, rows, inner, n_rows
        bm = b.conj().T if adj_b else b
        if bm.shape[0] != inner:
            raise ctx.error(_E, f"cannot multiply A of shape {a_shape.tolist()} (adjoint_a={adj_a}) and B of shape "
                                f"{list(b.shape)} (adjoint_b={adj_b}): inner dimensions {inner} and {bm.shape[0]} "
                                "differ")
        vals = a_values.conj() if adj_a else a_values
        return _sum_rows_by(bm[cols] * vals[:, None], rows, n_rows)
    return matmul


def _reorder(ctx):
    def reorder(indices, values, shape):
        _check_sparse(ctx, indices, values, shape, "input")
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
        _check_sparse(ctx, a_indices, a_values, a_shape, "a")
        _check_sparse(ctx, b_indices, b_values, b_shape, "b")
        if a_shape.tolist() != b_shape.tolist():
            raise ctx.error(_E, f"the operands' dense shapes differ: {a_shape.tolist()} and {b_shape.tolist()}")
        if thresh.ndim:
            raise ctx.error(_E, f"thresh must be a scalar, got shape {thresh.shape}")
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
        _check_sparse(ctx, a_indices, a_values, a_shape)
        if a_shape.tolist() != list(b.shape):
            raise ctx.error(_E, f"the sparse operand's dense shape {a_shape.tolist()} differs from the dense "
                                f"operand's shape {list(b.shape)}")
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
