"""Indexing kernels: GatherNd/ScatterNd, segment reductions, DynamicPartition/DynamicStitch,
Unique, SparseToDense, ReverseV2, Pad/PadV2/MirrorPad/MirrorPadGrad and TopKV2.

Every index is checked before it is used: an out-of-range one is an InvalidArgumentError
that names the node (``ctx.error``), the position of the bad index, its value and the valid
range. Scatters add with ``ufunc.at`` so that duplicate indices accumulate (a plain fancy
assignment would keep one of them). Results may be views of inputs (ReverseV2); no kernel
writes into an input.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels.axes import int_list
from tensorweave.ops.indexing_ops import check_axes, check_paddings

CPU = "CPU"
_E = errors.InvalidArgumentError


def _where(shape, pos) -> str:
    """``[i,j]``-style position of flat element ``pos`` of an array of ``shape``."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(pos, shape)) + "]"


def _zeros(shape, dt):
    return np.full(shape, b"", dtype=object) if np.dtype(dt).kind == "O" else np.zeros(shape, dtype=dt)


def _lowest(dt):
    return np.finfo(dt).min if np.issubdtype(dt, np.floating) else np.iinfo(dt).min


def _highest(dt):
    return np.finfo(dt).max if np.issubdtype(dt, np.floating) else np.iinfo(dt).max


# ---------------------------------------------------------------------------------------
# GatherNd / ScatterNd
def _nd_rows(ctx, indices, shape, what):
    """``indices`` ([..., K]) as a [N, K] int64 matrix, every row checked against ``shape``."""
    if indices.ndim == 0:
        raise ctx.error(_E, "indices must be at least a vector, got a scalar")
    k = indices.shape[-1]
    if k > len(shape):
        raise ctx.error(_E, f"indices.shape[-1] = {k} must be <= the rank of the {what} {list(shape)} ({len(shape)})")
    rows = indices.reshape(-1, k).astype(np.int64, copy=False)
    if rows.size:
        bounds = np.asarray(shape[:k], dtype=np.int64)
        bad = (rows < 0) | (rows >= bounds)
        if bad.any():
            r = int(np.flatnonzero(bad.any(axis=1))[0])
            d = int(np.flatnonzero(bad[r])[0])
            raise ctx.error(_E, f"indices{_where(indices.shape[:-1], r)} = {rows[r].tolist()} does not index into "
                                f"{what} {list(shape)}: {int(rows[r, d])} is not in [0, {shape[d]}) "
                                f"(dimension {d})")
    return rows, k


def _gather_nd(ctx):
    def gather_nd(params, indices):
        rows, k = _nd_rows(ctx, indices, params.shape, "param shape")
        out_shape = indices.shape[:-1] + params.shape[k:]
        if k == 0:
            return np.broadcast_to(params, out_shape)  # a read-only view: nothing writes into it
        return params[tuple(rows.T)].reshape(out_shape)
    return gather_nd


def _scatter_nd(ctx):
    dt = ctx.output_dtypes[0].np_dtype

    def scatter_nd(indices, updates, shape):
        dims = int_list(ctx, shape, "shape")
        if any(d < 0 for d in dims):
            raise ctx.error(_E, f"shape {dims} must be >= 0")
        if indices.ndim == 0:
            raise ctx.error(_E, "indices must be at least a vector, got a scalar")
        k = indices.shape[-1]
        if k <= len(dims) and updates.shape != indices.shape[:-1] + tuple(dims[k:]):
            raise ctx.error(_E, f"updates.shape {list(updates.shape)} must be indices.shape[:-1] + "
                                f"shape[indices.shape[-1]:] = {list(indices.shape[:-1]) + dims[k:]} (indices.shape "
                                f"{list(indices.shape)}, shape {dims})")
        rows, k = _nd_rows(ctx, indices, dims, "shape")
        out = np.zeros(dims, dtype=dt)
        upd = updates.reshape((rows.shape[0],) + tuple(dims[k:]))
        if k == 0:
            if rows.shape[0]:
                out += upd.sum(axis=0, dtype=dt)
        else:
            np.add.at(out, tuple(rows.T), upd)  # duplicate indices accumulate
        return out
    return scatter_nd


# ---------------------------------------------------------------------------------------
# segment reductions
def _unsorted_segment(ufunc, init):
    def factory(ctx):
        dt = ctx.output_dtypes[0].np_dtype

        def unsorted_segment(data, ids, num_segments):
            if num_segments.ndim != 0:
                raise ctx.error(_E, f"num_segments must be a scalar, got shape {num_segments.shape}")
            n = int(num_segments)
            if n < 0:
                raise ctx.error(_E, f"num_segments must be >= 0, got {n}")
            if data.shape[:ids.ndim] != ids.shape:
                raise ctx.error(_E, f"segment_ids of shape {ids.shape} must be a prefix of the shape of data "
                                    f"{data.shape}")
            rest = data.shape[ids.ndim:]
            flat = ids.reshape(-1)
            if flat.size and flat.max() >= n:
                pos = int(np.flatnonzero(flat >= n)[0])
                raise ctx.error(_E, f"segment_ids{_where(ids.shape, pos)} = {flat[pos]} is not in [0, {n})")
            vals = data.reshape((flat.size,) + rest)
            keep = flat >= 0  # negative ids are dropped, as in TF
            if not keep.all():
                flat, vals = flat[keep], vals[keep]
            out = np.full((n,) + rest, init(dt), dtype=dt)
            ufunc.at(out, flat, vals)
            return out
        return unsorted_segment
    return factory


def _sorted_ids(ctx, data, ids):
    """The number of segments of a Segment* op, after checking its ids are sorted and >= 0."""
    if data.ndim == 0:
        raise ctx.error(_E, "data must be at least a vector, got a scalar")
    if ids.ndim != 1 or ids.shape[0] != data.shape[0]:
        raise ctx.error(_E, f"segment_ids of shape {ids.shape} must be a vector with one element per row of data "
                            f"{data.shape}")
    if not ids.size:
        return 0
    if ids[0] < 0:
        raise ctx.error(_E, f"segment_ids[0] = {ids[0]} is not in [0, inf): segment ids must be >= 0")
    down = np.flatnonzero(ids[1:] < ids[:-1])
    if down.size:
        p = int(down[0])
        raise ctx.error(_E, f"segment ids are not sorted: segment_ids[{p + 1}] = {ids[p + 1]} follows "
                            f"segment_ids[{p}] = {ids[p]}")
    return int(ids[-1]) + 1


def _segment(kind):
    def factory(ctx):
        dt = ctx.output_dtypes[0].np_dtype

        def segment(data, ids):
            n = _sorted_ids(ctx, data, ids)
            shape = (n,) + data.shape[1:]
            if kind in ("sum", "mean"):
                out = np.zeros(shape, dtype=dt)
                np.add.at(out, ids, data)
                if kind == "mean" and n:
                    counts = np.bincount(ids, minlength=n).reshape((n,) + (1,) * (data.ndim - 1))
                    c = np.maximum(counts, 1)
                    if np.issubdtype(dt, np.integer):  # C++'s integer division: toward zero
                        out = (np.sign(out) * (np.abs(out) // c)).astype(dt)
                    else:
                        out = (out / c).astype(dt)
                return out
            ufunc, init = (np.maximum, _lowest) if kind == "max" else (np.minimum, _highest)
            out = np.full(shape, init(dt), dtype=dt)
            ufunc.at(out, ids, data)
            if n:
                empty = np.bincount(ids, minlength=n) == 0
                out[empty] = 0  # sorted segment ops give 0 for an empty segment, as TF
            return out
        return segment
    return factory


# ---------------------------------------------------------------------------------------
# DynamicPartition / DynamicStitch
def _dynamic_partition(ctx):
    num = ctx.attrs["num_partitions"]

    def dynamic_partition(data, partitions):
        if data.shape[:partitions.ndim] != partitions.shape:
            raise ctx.error(_E, f"partitions of shape {partitions.shape} must be a prefix of the shape of data "
                                f"{data.shape}")
        p = partitions.reshape(-1)
        if p.size and (p.min() < 0 or p.max() >= num):
            pos = int(np.flatnonzero((p < 0) | (p >= num))[0])
            raise ctx.error(_E, f"partitions{_where(partitions.shape, pos)} = {p[pos]} is not in [0, {num})")
        rows = data.reshape((p.size,) + data.shape[partitions.ndim:])
        order = np.argsort(p, kind="stable")  # keeps each partition's rows in their order
        ends = np.cumsum(np.bincount(p, minlength=num))
        parts = np.split(rows[order], ends[:-1])
        return parts[0] if num == 1 else tuple(parts)  # the executor stores a single output as is
    return dynamic_partition


def _dynamic_stitch(ctx):
    n = ctx.attrs["N"]
    dt = ctx.attrs["T"].np_dtype

    def dynamic_stitch(*args):
        indices, data = args[:n], args[n:]
        rest = None
        flat_ids, rows = [], []
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
            flat_ids.append(ix.reshape(-1))
            rows.append(d.reshape((ix.size,) + r))
        ids = np.concatenate(flat_ids).astype(np.int64, copy=False)
        size = int(ids.max()) + 1 if ids.size else 0
        if ids.size and ids.min() < 0:
            for i, f in enumerate(flat_ids):
                if f.size and f.min() < 0:
                    pos = int(np.flatnonzero(f < 0)[0])
                    raise ctx.error(_E, f"indices[{i}]{_where(indices[i].shape, pos)} = {f[pos]} is not in "
                                        f"[0, {size})")
        out = _zeros((size,) + rest, dt)
        if ids.size:
            # Of repeated indices the last one (in list order) wins: pick each row's last writer.
            last = np.full(size, -1, dtype=np.int64)
            np.maximum.at(last, ids, np.arange(ids.size))
            written = np.flatnonzero(last >= 0)
            out[written] = np.concatenate(rows)[last[written]]
        return out
    return dynamic_stitch


# ---------------------------------------------------------------------------------------
# Unique, SparseToDense, ReverseV2
def _unique(with_counts):
    def factory(ctx):
        idx_dt = ctx.attrs["out_idx"].np_dtype

        def unique(x):
            if x.ndim != 1:
                raise ctx.error(_E, f"x must be a vector, got shape {x.shape}")
            if not x.size:
                empty = np.zeros(0, dtype=idx_dt)
                return (x, empty, empty) if with_counts else (x, empty)
            kw = {"equal_nan": False} if x.dtype.kind in "fc" else {}  # NaNs are distinct, as in TF
            _, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, **kw)
            order = np.argsort(first, kind="stable")  # distinct values in order of first occurrence
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = x[first[order]]
            idx = rank[inverse.reshape(-1)].astype(idx_dt)
            if with_counts:
                return y, idx, counts[order].astype(idx_dt)
            return y, idx
        return unique
    return factory


def _sparse_to_dense(ctx):
    validate = ctx.attrs["validate_indices"]
    dt = ctx.attrs["T"].np_dtype

    def sparse_to_dense(indices, output_shape, values, default):
        dims = int_list(ctx, output_shape, "output_shape")
        if any(d < 0 for d in dims):
            raise ctx.error(_E, f"output_shape {dims} must be >= 0")
        if default.ndim != 0:
            raise ctx.error(_E, f"default_value must be a scalar, got shape {default.shape}")
        if indices.ndim > 2:
            raise ctx.error(_E, f"sparse_indices must have rank 0, 1 or 2, got shape {indices.shape}")
        # A scalar is one index of a vector, a vector N indices of a vector, a matrix N full indices.
        idx = indices if indices.ndim == 2 else indices.reshape(-1, 1)
        n, r = idx.shape
        if r != len(dims):
            raise ctx.error(_E, f"sparse_indices hold indices of rank {r}, but output_shape {dims} has rank {len(dims)}")
        if values.ndim > 1 or (values.ndim == 1 and values.shape[0] != n):
            raise ctx.error(_E, f"sparse_values must be a scalar or a vector of the {n} values of sparse_indices, "
                                f"got shape {values.shape}")
        idx = idx.astype(np.int64, copy=False)
        if n:
            bad = (idx < 0) | (idx >= np.asarray(dims, dtype=np.int64))
            if bad.any():
                row = int(np.flatnonzero(bad.any(axis=1))[0])
                d = int(np.flatnonzero(bad[row])[0])
                raise ctx.error(_E, f"sparse_indices[{row}] = {idx[row].tolist()} is out of bounds for output_shape "
                                    f"{dims}: {int(idx[row, d])} is not in [0, {dims[d]}) (dimension {d})")
        if validate and n > 1 and r:
            flat = np.ravel_multi_index(tuple(idx.T), dims)
            step = np.diff(flat)
            if (step <= 0).any():
                p = int(np.flatnonzero(step <= 0)[0]) + 1
                what = "is repeated" if step[p - 1] == 0 else "is out of order"
                raise ctx.error(_E, f"sparse_indices[{p}] = {idx[p].tolist()} {what}: with validate_indices the "
                                    "indices must be sorted in row-major order without repeats")
        out = np.full(dims, default, dtype=dt)
        if n and r:
            out[tuple(idx.T)] = values
        elif n:
            out[()] = values.reshape(-1)[-1]
        return out
    return sparse_to_dense


def _reverse_v2(ctx):
    def reverse(x, axis):
        try:
            axes = check_axes(int_list(ctx, axis, "axis"), x.ndim)
        except errors.InvalidArgumentError as e:
            raise ctx.error(_E, e.message) from None
        return np.flip(x, tuple(axes)) if axes else x
    return reverse


# ---------------------------------------------------------------------------------------
# Pad, PadV2, MirrorPad, MirrorPadGrad
def _paddings(ctx, x, paddings, mode=None, grad=False):
    if paddings.shape != (x.ndim, 2):
        raise ctx.error(_E, f"paddings must be a matrix with 2 columns and one row per dimension of the input "
                            f"{list(x.shape)}, got shape {list(paddings.shape)}")
    pads = [(int(b), int(a)) for b, a in paddings.tolist()]
    try:
        check_paddings(pads, list(x.shape), mode, grad)
    except errors.InvalidArgumentError as e:
        raise ctx.error(_E, e.message) from None
    return pads


def _pad(ctx):
    dt = ctx.attrs["T"].np_dtype

    def pad(x, paddings, constant_values=None):
        pads = _paddings(ctx, x, paddings)
        if constant_values is not None and constant_values.ndim != 0:
            raise ctx.error(_E, f"constant_values must be a scalar, got shape {constant_values.shape}")
        shape = tuple(d + b + a for d, (b, a) in zip(x.shape, pads, strict=True))
        out = _zeros(shape, dt) if constant_values is None else np.full(shape, constant_values, dtype=dt)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, pads, strict=True))] = x
        return out
    return pad


def _mirror_pad(ctx):
    mode = ctx.attrs["mode"]

    def mirror_pad(x, paddings):
        pads = _paddings(ctx, x, paddings, mode)
        if not any(b or a for b, a in pads):
            return x
        return np.pad(x, pads, mode=mode.lower())  # NumPy's reflect/symmetric are TF's REFLECT/SYMMETRIC
    return mirror_pad


def mirror_source(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each position of a dimension of size ``n`` mirror-padded by (before, after), the
    position of the input it copies."""
    shift = 0 if mode == "REFLECT" else 1  # SYMMETRIC repeats the border element
    head = before - shift - np.arange(before)
    tail = n - 2 + shift - np.arange(after)
    return np.concatenate([head, np.arange(n), tail])


def _mirror_pad_grad(ctx):
    mode = ctx.attrs["mode"]
    dt = ctx.attrs["T"].np_dtype

    def mirror_pad_grad(g, paddings):
        pads = _paddings(ctx, g, paddings, mode, grad=True)
        out = g
        for d, (b, a) in enumerate(pads):
            if not (b or a):
                continue
            n = out.shape[d] - b - a
            moved = np.moveaxis(out, d, 0)
            acc = np.zeros((n,) + moved.shape[1:], dtype=dt)
            np.add.at(acc, mirror_source(n, b, a, mode), moved)  # each padded copy adds to its source
            out = np.moveaxis(acc, 0, d)
        return np.ascontiguousarray(out) if out is not g else out
    return mirror_pad_grad


# ---------------------------------------------------------------------------------------
# TopKV2
def _top_k(ctx):
    def top_k(x, k):
        if k.ndim != 0:
            raise ctx.error(_E, f"k must be a scalar, got shape {k.shape}")
        k = int(k)
        if k < 0:
            raise ctx.error(_E, f"k must be non-negative, got {k}")
        if x.ndim == 0:
            raise ctx.error(_E, "input must be at least a vector, got a scalar")
        n = x.shape[-1]
        if n < k:
            raise ctx.error(_E, f"input must have at least k = {k} columns, its shape is {list(x.shape)}")
        # A stable ascending sort of the reversed rows, read backwards, is descending with
        # equal values in increasing index order (TF's tie rule).
        order = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
        idx = (n - 1 - order).astype(np.int32)
        return np.take_along_axis(x, idx, axis=-1), idx
    return top_k


def register(reg):
    reg.register("GatherNd", CPU, factory=_gather_nd)
    reg.register("ScatterNd", CPU, factory=_scatter_nd)
    reg.register("UnsortedSegmentMax", CPU, factory=_unsorted_segment(np.maximum, _lowest))
    reg.register("UnsortedSegmentMin", CPU, factory=_unsorted_segment(np.minimum, _highest))
    for op, kind in (("SegmentSum", "sum"), ("SegmentMean", "mean"), ("SegmentMax", "max"), ("SegmentMin", "min")):
        reg.register(op, CPU, factory=_segment(kind))
    reg.register("DynamicPartition", CPU, factory=_dynamic_partition)
    reg.register("DynamicStitch", CPU, factory=_dynamic_stitch)
    reg.register("ParallelDynamicStitch", CPU, factory=_dynamic_stitch)
    reg.register("Unique", CPU, factory=_unique(False))
    reg.register("UniqueWithCounts", CPU, factory=_unique(True))
    reg.register("SparseToDense", CPU, factory=_sparse_to_dense)
    reg.register("ReverseV2", CPU, factory=_reverse_v2)
    reg.register("Pad", CPU, factory=_pad)
    reg.register("PadV2", CPU, factory=_pad)
    reg.register("MirrorPad", CPU, factory=_mirror_pad)
    reg.register("MirrorPadGrad", CPU, factory=_mirror_pad_grad)
    reg.register("TopKV2", CPU, factory=_top_k)
