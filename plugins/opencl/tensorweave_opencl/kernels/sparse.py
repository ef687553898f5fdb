"""Sparse-tensor kernels (kernels/sparse.cl): SparseTensorDenseMatMul, SparseTensorDenseAdd,
SparseReorder. (SparseAdd and SparseAddGrad stay on the CPU, as in TensorFlow: matching two
index sets is host work.)

The sparse operand's indices and dense shape are read in host memory, its values and the
dense operand stay on the device. The host checks the indices against the shape (an
InvalidArgumentError naming the entry, the CPU's check: ``tensorweave.kernels.indexing``)
and groups the entries by output row, so that one work item sums a row's products in entry
order, without atomics.
"""

from __future__ import annotations

import numpy as np

from tensorweave.kernels import indexing as checks
from tensorweave_opencl import program
from tensorweave_opencl.kernels.array import fill_value
from tensorweave_opencl.kernels.common import ALL, BUF, FLOAT, I32, INDEX, INT, OPENCL, host, launcher, num_elements
from tensorweave_opencl.kernels.scatter import CLRows, RowCopy, Scatter, row_groups, upload_ints


def _dense_matmul(ctx):
    adj_a, adj_b = ctx.attrs["adjoint_a"], ctx.attrs["adjoint_b"]
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    launch = launcher(ctx, "sparse.cl", "spmm", [BUF, BUF, BUF, BUF, BUF, I32, I32, I32, I32, I32],
                      {"T": program.ctype(dt)})
    device = ctx.device

    def matmul(a_indices, a_values, a_shape, b):
        a_indices, a_shape = host(a_indices), host(a_shape)
        n_rows, _, ncols = checks.sparse_dense_matmul(ctx, a_indices, a_values, a_shape, b.shape, adj_a, adj_b)
        rows, cols = a_indices[:, 0], a_indices[:, 1]
        if adj_a:
            rows, cols = cols, rows
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
        checks.sparse_dense_add(ctx, a_indices, a_values, a_shape, b.shape)
        out = rows.copy(b)
        if a_indices.shape[0]:
            add(out, checks.flat_index(a_indices, b.shape), a_values, 1)  # repeated indices add up, in order
        return out
    return sparse_dense_add


def _reorder(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    copy = RowCopy(ctx, dt)
    device = ctx.device

    def reorder(indices, values, shape):
        indices, shape = host(indices), host(shape)
        checks.sparse_operand(ctx, indices, values, shape, "input")
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
