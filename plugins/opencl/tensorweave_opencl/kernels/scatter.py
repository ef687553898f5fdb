"""Scatters on the device (kernels/scatter.cl): the ref-variable Scatter ops
(ScatterUpdate/Add/Sub/Mul/Div/Min/Max, ScatterNdUpdate/Add) in place, ScatterNd,
SparseToDense, DynamicStitch/ParallelDynamicStitch and DynamicPartition; and what the other
sparse kernels share: ``row_groups`` and ``Scatter`` (updates grouped by destination row),
``CLRows`` (the device's ``RowWriter`` for copy-on-write updates of variables).

Indices of these ops are read in host memory (``host_memory=``): the shapes of
DynamicPartition's and DynamicStitch's outputs depend on them, and for the scatters the host
groups the updates by destination row (``row_groups``), so that one work item applies all
the updates of its row in their order: repeated indices need no atomics (every dtype, the
order of the CPU's ``ufunc.at``, bit for bit; for ScatterUpdate and SparseToDense the last
one wins), and an index out of range is an InvalidArgumentError as on the CPU, raised
before anything is written, rather than silently dropped.

The ref-variable scatters are the core's (``tensorweave.kernels.state.scatter_factory``:
validation, locking, copy-on-write) with ``CLRows`` writing the rows into the variable's
buffer in place: a step touches the indexed rows only, never copies the table (unless a
value of it is still held elsewhere: then once, see ``writable``).
"""

from __future__ import annotations

import sys

import numpy as np

from tensorweave.framework import errors
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
    int_list,
    launcher,
    num_elements,
)

_E = errors.InvalidArgumentError

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
    """The positions of the 1-D host array ``keys`` grouped by key, as scatter.cl's table
    ``[rows[m], off[m + 1], order[n]]`` on ``device``, and m (the number of distinct keys).
    Each group keeps its positions in their original order."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    n = keys.size
    if n < 2 or bool((keys[1:] > keys[:-1]).all()):
        rows, off, order = keys, np.arange(n + 1), np.arange(n)  # already one group per key, in order
    else:
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        first = np.flatnonzero(np.concatenate([[True], sk[1:] != sk[:-1]]))
        rows, off = sk[first], np.append(first, n)
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
        k = indices.shape[1]
        keys = (np.ravel_multi_index(tuple(indices.T), target.shape[:k]) if k
                else np.zeros(indices.shape[0], dtype=np.int64))
        self._scatter(kind, target, target.dtype)(target, keys, updates, num_elements(target.shape[k:]))


def _ref_scatter(op_type):
    def factory(ctx):  # the core's kernel, with a writer of this node's device
        return state.scatter_factory(op_type, CLRows(ctx))(ctx)
    return factory


# ---------------------------------------------------------------------------------------
# ScatterNd, SparseToDense
def _nd_keys(ctx, indices, dims, what):
    """The flat row numbers of N-d ``indices`` ([..., K]) into ``dims`` (every coordinate
    checked), and K."""
    if indices.ndim == 0:
        raise ctx.error(_E, "indices must be at least a vector, got a scalar")
    k = indices.shape[-1]
    if k > len(dims):
        raise ctx.error(_E, f"indices.shape[-1] = {k} must be <= the rank of the {what} {list(dims)} ({len(dims)})")
    rows = indices.reshape(-1, k).astype(np.int64, copy=False)
    if rows.size:
        bounds = np.asarray(dims[:k], dtype=np.int64)
        bad = (rows < 0) | (rows >= bounds)
        if bad.any():
            r = int(np.flatnonzero(bad.any(axis=1))[0])
            d = int(np.flatnonzero(bad[r])[0])
            raise ctx.error(_E, f"indices[{r}] (flattened) = {rows[r].tolist()} does not index into {what} "
                                f"{list(dims)}: {int(rows[r, d])} is not in [0, {dims[d]}) (dimension {d})")
    keys = np.ravel_multi_index(tuple(rows.T), dims[:k]) if k else np.zeros(rows.shape[0], np.int64)
    return keys, k


def _scatter_nd(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    add = Scatter(ctx, "add", dt)
    device = ctx.device

    def scatter_nd(indices, updates, shape):
        dims = int_list(ctx, host(shape), "shape")
        if any(d < 0 for d in dims):
            raise ctx.error(_E, f"shape {dims} must be >= 0")
        indices = host(indices)
        if indices.ndim == 0:
            raise ctx.error(_E, "indices must be at least a vector, got a scalar")
        k = indices.shape[-1]
        if k <= len(dims) and updates.shape != indices.shape[:-1] + tuple(dims[k:]):
            raise ctx.error(_E, f"updates.shape {list(updates.shape)} must be indices.shape[:-1] + "
                                f"shape[indices.shape[-1]:] = {list(indices.shape[:-1]) + dims[k:]} (indices.shape "
                                f"{list(indices.shape)}, shape {dims})")
        keys, k = _nd_keys(ctx, indices, dims, "shape")
        out = fill_value(ctx, device.empty(dims, dt), 0)
        add(out, keys, updates, num_elements(dims[k:]))  # repeated indices add up, in order
        return out
    return scatter_nd


def _sparse_to_dense(ctx):
    validate = ctx.attrs["validate_indices"]
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    put = Scatter(ctx, "update", dt)
    fill = launcher(ctx, "array.cl", "fill_from", [BUF, BUF, I32], {"T": program.ctype(dt)})
    device = ctx.device

    def sparse_to_dense(indices, output_shape, values, default):
        dims = int_list(ctx, host(output_shape), "output_shape")
        indices = host(indices)
        if any(d < 0 for d in dims):
            raise ctx.error(_E, f"output_shape {dims} must be >= 0")
        if default.ndim != 0:
            raise ctx.error(_E, f"default_value must be a scalar, got shape {default.shape}")
        if indices.ndim > 2:
            raise ctx.error(_E, f"sparse_indices must have rank 0, 1 or 2, got shape {indices.shape}")
        idx = indices if indices.ndim == 2 else indices.reshape(-1, 1)
        n, r = idx.shape
        if r != len(dims):
            raise ctx.error(_E, f"sparse_indices hold indices of rank {r}, but output_shape {dims} has rank {len(dims)}")
        if values.ndim > 1 or (values.ndim == 1 and values.shape[0] != n):
            raise ctx.error(_E, f"sparse_values must be a scalar or a vector of the {n} values of sparse_indices, "
                                f"got shape {values.shape}")
        keys, _ = _nd_keys(ctx, idx, dims, "output_shape")
        if validate and n > 1 and r:
            step = np.diff(keys)
            if (step <= 0).any():
                p = int(np.flatnonzero(step <= 0)[0]) + 1
                what = "is repeated" if step[p - 1] == 0 else "is out of order"
                raise ctx.error(_E, f"sparse_indices[{p}] = {idx[p].tolist()} {what}: with validate_indices the "
                                    "indices must be sorted in row-major order without repeats")
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
        if data.shape[:partitions.ndim] != partitions.shape:
            raise ctx.error(_E, f"partitions of shape {partitions.shape} must be a prefix of the shape of data "
                                f"{data.shape}")
        p = partitions.reshape(-1)
        if p.size and (p.min() < 0 or p.max() >= num):
            pos = int(np.flatnonzero((p < 0) | (p >= num))[0])
            raise ctx.error(_E, f"partitions[{pos}] (flattened) = {p[pos]} is not in [0, {num})")
        rest = data.shape[partitions.ndim:]
        inner = num_elements(rest)
        order = np.argsort(p, kind="stable")  # keeps each partition's rows in their order
        ends = np.cumsum(np.bincount(p, minlength=num))
        parts = []
        for rows in np.split(order, ends[:-1]):
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
        rest = None
        flat_ids = []
        for i, (ix, d) in enumerate(zip(indices, data, strict=True)):
            if d.shape[:ix.ndim] != ix.shape:
                raise ctx.error(_E, f"data[{i}].shape = {list(d.shape)} does not start with indices[{i}].shape = "
                                    f"{list(ix.shape)}")
            r = d.shape[ix.ndim:]
            if rest is None:
                rest = r
            elif r != rest:
                raise ctx.error(_E, f"data[{i}].shape = {list(d.shape)} must be indices[{i}].shape + {list(rest)} "
                                    "(the slice shape of data[0])")
            f = ix.reshape(-1).astype(np.int64, copy=False)
            if f.size and f.min() < 0:
                pos = int(np.flatnonzero(f < 0)[0])
                raise ctx.error(_E, f"indices[{i}][{pos}] (flattened) = {f[pos]} is not in [0, inf)")
            flat_ids.append(f)
        ids = np.concatenate(flat_ids)
        size = int(ids.max()) + 1 if ids.size else 0
        out = device.empty((size,) + rest, dt)
        inner = num_elements(rest)
        if not ids.size or not inner:
            return out
        # Of repeated indices the last one (in list order) wins: each row's last writer.
        last = np.full(size, -1, dtype=np.int64)
        np.maximum.at(last, ids, np.arange(ids.size))
        if (last < 0).any():
            fill_value(ctx, out, 0)
        start = 0
        for f, d in zip(flat_ids, data):
            pos = np.arange(start, start + f.size)
            wins = last[f] == pos
            copy(out, d, f[wins], np.flatnonzero(wins), inner)
            start += f.size
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
