"""Sparse-tensor kernels (kernels/sparse.cl): SparseTensorDenseMatMul, SparseTensorDenseAdd,
SparseReorder. (SparseAdd and SparseAddGrad stay on the CPU, as in TensorFlow: matching two
index sets is host work.)

The sparse operand's indices and dense shape are read in host memory, its values and the
dense operand stay on the device. The host checks the indices against the shape (an
InvalidArgumentError naming the entry, as on the CPU) and groups the entries by output row,
so that one work item sums a row's products in entry order, without atomics.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_opencl import program
from tensorweave_opencl.kernels.array import fill_value
from tensorweave_opencl.kernels.common import ALL, BUF, FLOAT, I32, INDEX, INT, OPENCL, host, launcher, num_elements
from tensorweave_opencl.kernels.scatter import CLRows, RowCopy, Scatter, row_groups, upload_ints

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


def _dense_matmul(ctx):
    adj_a, adj_b = ctx.attrs["adjoint_a"], ctx.attrs["adjoint_b"]
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    launch = launcher(ctx, "sparse.cl", "spmm", [BUF, BUF, BUF, BUF, BUF, I32, I32, I32, I32, I32],
                      {"T": program.ctype(dt)})
    device = ctx.device

    def matmul(a_indices, a_values, a_shape, b):
        a_indices, a_shape = host(a_indices), host(a_shape)
        _check_sparse(ctx, a_indices, a_values, a_shape)
        if a_shape.shape[0] != 2:
            raise ctx.error(_E, f"a must be a matrix (a_shape of 2 elements), got a_shape {a_shape.tolist()}")
        if b.ndim != 2:
            raise ctx.error(_E, f"b must be a matrix, got shape {b.shape}")
        rows, cols = a_indices[:, 0], a_indices[:, 1]
        n_rows, inner = int(a_shape[0]), int(a_shape[1])
        if adj_a:
            rows, cols, n_rows, inner = cols, rows, inner, n_rows
        b_rows, ncols = (b.shape[1], b.shape[0]) if adj_b else b.shape
        if b_rows != inner:
            raise ctx.error(_E, f"cannot multiply A of shape {a_shape.tolist()} (adjoint_a={adj_a}) and B of shape "
                                f"{list(b.shape)} (adjoint_b={adj_b}): inner dimensions {inner} and {b_rows} "
                                "differ")
        out = device.empty((n_rows, ncols), dt)
        if not num_elements(out.shape):
            return out
        g, m = row_groups(device, rows)
        if m < n_rows:
            fill_value(ctx, out, 0)
        n = m * ncols
        if n:
            bs_row, bs_col = (1, b.shape[1]) if adj_b else (b.shape[1], 1)
            col_table = upload_ints(device, cols)
            launch.run(n, out.block.buf, a_values.block.buf, b.block.buf, g.block.buf, col_table.block.buf, m, ncols,
                       bs_row, bs_col, n)
        return out
    return matmul


def _sparse_dense_add(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    add = Scatter(ctx, "add", dt)
    rows = CLRows(ctx)

    def sparse_dense_add(a_indices, a_values, a_shape, b):
        a_indices, a_shape = host(a_indices), host(a_shape)
        _check_sparse(ctx, a_indices, a_values, a_shape)
        if a_shape.tolist() != list(b.shape):
            raise ctx.error(_E, f"the sparse operand's dense shape {a_shape.tolist()} differs from the dense "
                                f"operand's shape {list(b.shape)}")
        out = rows.copy(b)
        if a_indices.shape[0]:
            keys = np.ravel_multi_index(tuple(a_indices.T), b.shape) if b.ndim else np.zeros(a_indices.shape[0], np.int64)
            add(out, keys, a_values, 1)  # repeated indices add up, in order
        return out
    return sparse_dense_add


def _reorder(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    copy = RowCopy(ctx, dt)
    device = ctx.device

    def reorder(indices, values, shape):
        indices, shape = host(indices), host(shape)
        _check_sparse(ctx, indices, values, shape, "input")
        order = np.lexsort(indices.T[::-1]) if indices.shape[0] > 1 else np.arange(indices.shape[0])
        out = device.empty(values.shape, dt)
        copy(out, values, np.arange(order.size), order, 1)
        return device.to_device(indices[order].astype(np.int64, copy=False)), out
    return reorder


def register(reg):
    reg.register("SparseTensorDenseMatMul", OPENCL, factory=_dense_matmul, constraints={"T": FLOAT + INT[:2],
                 "Tindices": INDEX}, host_memory=("a_indices", "a_shape"))
    reg.register("SparseTensorDenseAdd", OPENCL, factory=_sparse_dense_add, constraints={"T": FLOAT + INT,
                 "Tindices": INDEX}, host_memory=("a_indices", "a_shape"))
    reg.register("SparseReorder", OPENCL, factory=_reorder, constraints={"T": ALL},
                 host_memory=("input_indices", "input_shape"))
