"""Scatters on the device (kernels/scatter.cl): the ref-variable Scatter ops
(ScatterUpdate/Add/Sub/Mul/Div/Min/Max, ScatterNdUpdate/Add) in place, ScatterNd,
SparseToDense, DynamicStitch/ParallelDynamicStitch and DynamicPartition; and what the other
sparse kernels share: ``row_groups`` and ``Scatter`` (updates grouped by destination row),
``CLRows`` (the device's ``RowWriter`` for copy-on-write updates of variables).

Indices of these ops are read in host memory (``host_memory=``): the shapes of
DynamicPartition's and DynamicStitch's outputs depend on them, and for the scatters the host
groups the updates by destination row (``row_groups``, the core's
``tensorweave.kernels.indexing.group_rows``), so that one work item applies all the updates
of its row in their order: repeated indices need no atomics (every dtype, the order of the
CPU's ``ufunc.at``, bit for bit; for ScatterUpdate and SparseToDense the last one wins),
and an index out of range is an InvalidArgumentError as on the CPU (the same checks,
``tensorweave.kernels.indexing``), raised before anything is written, rather than silently
dropped.

The ref-variable scatters are the core's (``tensorweave.kernels.state.scatter_factory``:
validation, locking, copy-on-write) with ``CLRows`` writing the rows into the variable's
buffer in place: a step touches the indexed rows only, never copies the table (unless a
value of it is still held elsewhere: then once, see ``writable``).
"""

from __future__ import annotations

import sys

import numpy as np

from tensorweave.kernels import indexing as checks
from tensorweave.kernels import state
from tensorweave.ops.state_ops import SCATTER_OPS
from tensorweave_opencl import program
from tensorweave_opencl.buffer import CLTensor
from tensorweave_opencl.kernels.array import fill_value
from tensorweave_opencl.kernels.common import (
    ALL,
    BUF,
    I32,
    INDEX,
    NUMERIC,
    OPENCL,
    host,
    launcher,
    num_elements,
)

# How an update u combines with the current value a, per kind (floats: min/max propagate
# NaN like NumPy's minimum/maximum; integer division truncates, and by zero gives 0 as on
# the CPU, where C would be undefined).
_FLOAT_APPLY = {"update": "(u)", "add": "((a) + (u))", "sub": "((a) - (u))", "mul": "((a) * (u))",
                "div": "((a) / (u))", "min": "((isnan(u) || (u) < (a)) ? (u) : (a))",
                "max": "((isnan(u) || (u) > (a)) ? (u) : (a))"}
_INT_APPLY = dict(_FLOAT_APPLY, div="((u) == 0 ? (T)0 : (T)((a) / (u)))", min="((u) < (a) ? (u) : (a))",
                  max="((u) > (a) ? (u) : (a))")


def upload_ints(device, values) -> CLTensor:
    """A host int array as a fresh int32 device tensor (per-step index tables: not the
    runtime's value-keyed cache, whose entries are reused shapes)."""
    return device.to_device(np.ascontiguousarray(values, dtype=np.int32))


def row_groups(device, keys) -> tuple[CLTensor, int]:
    """The positions of the host array ``keys`` grouped by key (``group_rows``), as
    scatter.cl's table ``[rows[m], off[m + 1], order[n]]`` on ``device``, and m (the number
    of distinct keys). Each group keeps its positions in their original order."""
    rows, off, order = checks.group_rows(keys)
    if off is None:  # one group per key
        off, order = np.arange(rows.size + 1), np.arange(rows.size)
    return upload_ints(device, np.concatenate([rows, off, order])), int(rows.size)


def _apply_expr(kind: str, dtype) -> str:
    return (_FLOAT_APPLY if np.dtype(dtype).kind == "f" else _INT_APPLY)[kind]


class Scatter:
    """``target[keys[j]] = APPLY(target[keys[j]], updates[j])`` in place, rows of ``inner``
    elements, for one kind and dtype (one launcher per node)."""

    def __init__(self, ctx, kind: str, dtype):
        self.device = ctx.device
        self.launch = launcher(ctx, "scatter.cl", "scatter_rows", [BUF, BUF, BUF, I32, I32, I32, I32],
                               {"T": program.ctype(dtype), "APPLY(a,u)": _apply_expr(kind, dtype)})

    def __call__(self, target: CLTensor, keys, updates: CLTensor, inner: int) -> None:
        if not np.size(keys) or not inner:
            return
        table, m = row_groups(self.device, keys)
        n = m * inner
        scalar = int(updates.ndim == 0)
        self.launch.run(n, target.block.buf, updates.block.buf, table.block.buf, m, inner, scalar, n)


class RowCopy:
    """``out[dst[j]] = x[src[j]]`` for rows of ``inner`` elements (dst, src host int arrays)."""

    def __init__(self, ctx, dtype):
        self.device = ctx.device
        self.launch = launcher(ctx, "scatter.cl", "copy_rows", [BUF, BUF, BUF, I32, I32, I32],
                               {"T": program.ctype(dtype)})

    def __call__(self, out: CLTensor, x: CLTensor, dst, src, inner: int) -> None:
        rows = int(np.size(dst))
        n = rows * inner
        if n:
            table = upload_ints(self.device, np.concatenate([np.ravel(dst), np.ravel(src)]))
            self.launch.run(n, out.block.buf, x.block.buf, table.block.buf, rows, inner, n)


# ---------------------------------------------------------------------------------------
# copy-on-write row updates of variables
class _Probe:
    __slots__ = ("block",)


def _block_refs(t) -> int:
    return sys.getrefcount(t.block)


def _calibrate() -> int:
    # The count _block_refs sees when one tensor alone holds the block (measured: the
    # interpreter's own temporaries differ between versions).
    probe = _Probe()
    probe.block = object()
    return _block_refs(probe)


_BLOCK_ALONE = _calibrate()


class CLRows(state.RowWriter):
    """The OPENCL device's in-place row updates (``tensorweave.kernels.state.RowWriter``).
    A tensor owns its memory when no other tensor views its block (Reshape, Identity and
    ExpandDims make new tensors over the same block: they hold it too)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.device = ctx.device
        self._kinds: dict = {}

    def owns(self, t) -> bool:
        return isinstance(t, CLTensor) and _block_refs(t) <= _BLOCK_ALONE

    def copy(self, t):
        out = self.device.empty(t.shape, t.dtype)
        if t.nbytes:
            import pyopencl as cl

            cl.enqueue_copy(self.device.queue, out.block.buf, t.block.buf, byte_count=t.nbytes)
        return out

    def _scatter(self, kind, target, dtype):
        s = self._kinds.get((kind, dtype))
        if s is None:
            s = self._kinds[(kind, dtype)] = Scatter(self.ctx, kind, dtype)
        return s

    def scatter(self, kind, target, indices, updates):
        inner = num_elements(target.shape[1:])
        self._scatter(kind, target, target.dtype)(target, indices, updates, inner)

    def scatter_nd(self, kind, target, indices, updates):
        keys = checks.flat_index(indices, target.shape)
        self._scatter(kind, target, target.dtype)(target, keys, updates, num_elements(target.shape[indices.shape[1]:]))


def _ref_scatter(op_type):
    def factory(ctx):  # the core's kernel, with a writer of this node's device
        return state.scatter_factory(op_type, CLRows(ctx))(ctx)
    return factory


# ---------------------------------------------------------------------------------------
# ScatterNd, SparseToDense
def _scatter_nd(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    add = Scatter(ctx, "add", dt)
    device = ctx.device

    def scatter_nd(indices, updates, shape):
        indices = host(indices)
        dims = checks.scatter_nd_shape(ctx, indices.shape, updates.shape, host(shape))
        rows, k = checks.nd_rows(ctx, indices, dims, "shape")
        out = fill_value(ctx, device.empty(dims, dt), 0)
        add(out, checks.flat_index(rows, dims), updates, num_elements(dims[k:]))  # repeated indices add up, in order
        return out
    return scatter_nd


def _sparse_to_dense(ctx):
    validate = ctx.attrs["validate_indices"]
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    put = Scatter(ctx, "update", dt)
    fill = launcher(ctx, "array.cl", "fill_from", [BUF, BUF, I32], {"T": program.ctype(dt)})
    device = ctx.device

    def sparse_to_dense(indices, output_shape, values, default):
        dims, _, keys = checks.sparse_to_dense(ctx, host(indices), host(output_shape), values.shape, default,
                                               validate)
        out = device.empty(dims, dt)
        total = num_elements(dims)
        if total:
            fill.run(total, out.block.buf, default.block.buf, total)
            put(out, keys, values, 1)  # of repeated indices the last one wins, as on the CPU
        return out
    return sparse_to_dense


# ---------------------------------------------------------------------------------------
# DynamicPartition, DynamicStitch
def _dynamic_partition(ctx):
    num = ctx.attrs["num_partitions"]
    dt = ctx.attrs["T"].np_dtype
    copy = RowCopy(ctx, dt)
    device = ctx.device

    def dynamic_partition(data, partitions):
        partitions = host(partitions)
        groups = checks.partition_rows(ctx, data.shape, partitions, num)
        rest = data.shape[partitions.ndim:]
        inner = num_elements(rest)
        parts = []
        for rows in groups:
            out = device.empty((rows.size,) + rest, dt)
            copy(out, data, np.arange(rows.size), rows, inner)
            parts.append(out)
        return parts[0] if num == 1 else tuple(parts)  # the executor stores a single output as is
    return dynamic_partition


def _dynamic_stitch(ctx):
    n = ctx.attrs["N"]
    dt = ctx.attrs["T"].np_dtype
    copy = RowCopy(ctx, dt)
    device = ctx.device

    def dynamic_stitch(*args):
        indices, data = [host(i) for i in args[:n]], args[n:]
        size, rest, moves, complete = checks.stitch_rows(ctx, indices, [d.shape for d in data])
        out = device.empty((size,) + rest, dt)
        inner = num_elements(rest)
        if not size or not inner:
            return out
        if not complete:
            fill_value(ctx, out, 0)
        for d, (dst, src) in zip(data, moves):  # of repeated indices the last one (in list order) wins
            copy(out, d, dst, src, inner)
        return out
    return dynamic_stitch


# ---------------------------------------------------------------------------------------
def register(reg):
    numbers = [d for d in ALL if d != "bool"]
    for op_type in SCATTER_OPS:
        kind = op_type.replace("ScatterNd", "").replace("Scatter", "").lower()
        allowed = ALL if kind == "update" else numbers
        # priority: ahead of the core's through-the-host kernel (kernels/__init__.py adds it
        # for OPENCL's uint8).
        reg.register(op_type, OPENCL, factory=_ref_scatter(op_type), host_memory=("indices",), priority=1,
                     constraints={"T": allowed, "Tindices": INDEX})
    reg.register("ScatterNd", OPENCL, factory=_scatter_nd, constraints={"T": NUMERIC, "Tindices": INDEX},
                 host_memory=("indices", "shape"))
    reg.register("SparseToDense", OPENCL, factory=_sparse_to_dense, constraints={"T": ALL, "Tindices": INDEX},
                 host_memory=("sparse_indices", "output_shape"))
    reg.register("DynamicPartition", OPENCL, factory=_dynamic_partition, constraints={"T": ALL},
                 host_memory=("partitions",))
    for op_type in ("DynamicStitch", "ParallelDynamicStitch"):
        reg.register(op_type, OPENCL, factory=_dynamic_stitch, constraints={"T": ALL}, host_memory=("indices",))
