"""Indexing kernels: GatherNd/ScatterNd, segment reductions (UnsortedSegmentSum/Max/Min,
Segment*), DynamicPartition/DynamicStitch, Unique, SparseToDense, ReverseV2,
Pad/PadV2/MirrorPad/MirrorPadGrad and TopKV2.

Every index is checked before it is used, by the core's checks that every device's kernels
share (``tensorweave.kernels.indexing``): an out-of-range one is an InvalidArgumentError
that names the node (``ctx.error``), the position of the bad index, its value and the valid
range. Scatters add with ``ufunc.at`` so that duplicate indices accumulate (a plain fancy
assignment would keep one of them). Results may be views of inputs (ReverseV2); no kernel
writes into an input.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import indexing as checks

CPU = "CPU"
_E = errors.InvalidArgumentError


def _zeros(shape, dt):
    return np.full(shape, b"", dtype=object) if np.dtype(dt).kind == "O" else np.zeros(shape, dtype=dt)


def _zero(dt):
    return 0


def _lowest(dt):
    return np.finfo(dt).min if np.issubdtype(dt, np.floating) else np.iinfo(dt).min


def _highest(dt):
    return np.finfo(dt).max if np.issubdtype(dt, np.floating) else np.iinfo(dt).max


# ---------------------------------------------------------------------------------------
# GatherNd / ScatterNd
def _gather_nd(ctx):
    def gather_nd(params, indices):
        rows, k = checks.nd_rows(ctx, indices, params.shape, "param shape")
        out_shape = indices.shape[:-1] + params.shape[k:]
        if k == 0:
            return np.broadcast_to(params, out_shape)  # a read-only view: nothing writes into it
        return params[tuple(rows.T)].reshape(out_shape)
    return gather_nd


def _scatter_nd(ctx):
    dt = ctx.output_dtypes[0].np_dtype

    def scatter_nd(indices, updates, shape):
        dims = checks.scatter_nd_shape(ctx, indices.shape, updates.shape, shape)
        rows, k = checks.nd_rows(ctx, indices, dims, "shape")
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
            n = checks.unsorted_segments(ctx, data.shape, ids.shape, num_segments)
            rest = data.shape[ids.ndim:]
            flat = ids.reshape(-1)
            if flat.size and flat.max() >= n:
                pos = int(np.flatnonzero(flat >= n)[0])
                raise ctx.error(_E, f"segment_ids{checks.position(ids.shape, pos)} = {flat[pos]} is not in [0, {n})")
            vals = data.reshape((flat.size,) + rest)
            keep = flat >= 0  # negative ids are dropped, as in TF
            if not keep.all():
                flat, vals = flat[keep], vals[keep]
            out = np.full((n,) + rest, init(dt), dtype=dt)
            ufunc.at(out, flat, vals)
            return out
        return unsorted_segment
    return factory


def _segment(kind):
    def factory(ctx):
        dt = ctx.output_dtypes[0].np_dtype

        def segment(data, ids):
            n = checks.sorted_segments(ctx, data.shape, ids)
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
        groups = checks.partition_rows(ctx, data.shape, partitions, num)
        rows = data.reshape((partitions.size,) + data.shape[partitions.ndim:])
        parts = [rows[g] for g in groups]
        return parts[0] if num == 1 else tuple(parts)  # the executor stores a single output as is
    return dynamic_partition


def _dynamic_stitch(ctx):
    n = ctx.attrs["N"]
    dt = ctx.attrs["T"].np_dtype

    def dynamic_stitch(*args):
        indices, data = args[:n], args[n:]
        size, rest, moves, _ = checks.stitch_rows(ctx, indices, [d.shape for d in data])
        out = _zeros((size,) + rest, dt)
        for ix, d, (dst, src) in zip(indices, data, moves):
            if dst.size:  # of repeated indices the last one (in list order) wins
                out[dst] = d.reshape((ix.size,) + rest)[src]
        return out
    return dynamic_stitch


# ---------------------------------------------------------------------------------------
# Unique, SparseToDense, ReverseV2
def _unique(with_counts):
    def factory(ctx):
        idx_dt = ctx.attrs["out_idx"].np_dtype

        def unique(x):
            y, idx, counts = checks.unique(ctx, x, np.asarray, idx_dt)
            return (y, idx, counts) if with_counts else (y, idx)
        return unique
    return factory


def _sparse_to_dense(ctx):
    validate = ctx.attrs["validate_indices"]
    dt = ctx.attrs["T"].np_dtype

    def sparse_to_dense(indices, output_shape, values, default):
        dims, idx, _ = checks.sparse_to_dense(ctx, indices, output_shape, values.shape, default, validate)
        n, r = idx.shape
        out = np.full(dims, default, dtype=dt)
        if n and r:
            out[tuple(idx.T)] = values
        elif n:
            out[()] = values.reshape(-1)[-1]
        return out
    return sparse_to_dense


def _reverse_v2(ctx):
    def reverse(x, axis):
        axes = checks.reverse_axes(ctx, axis, x.ndim)
        return np.flip(x, tuple(axes)) if axes else x
    return reverse


# ---------------------------------------------------------------------------------------
# Pad, PadV2, MirrorPad, MirrorPadGrad
def _pad(ctx):
    dt = ctx.attrs["T"].np_dtype

    def pad(x, paddings, constant_values=None):
        pads, shape = checks.pad_args(ctx, x.shape, paddings, constant_values)
        out = _zeros(shape, dt) if constant_values is None else np.full(shape, constant_values, dtype=dt)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, pads, strict=True))] = x
        return out
    return pad


def _mirror_pad(ctx):
    mode = ctx.attrs["mode"]

    def mirror_pad(x, paddings):
        pads = checks.paddings(ctx, x.shape, paddings, mode)
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
        pads = checks.paddings(ctx, g.shape, paddings, mode, grad=True)
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
        k = checks.top_k(ctx, x.shape, k)
        n = x.shape[-1]
        # A stable ascending sort of the reversed rows, read backwards, is descending with
        # equal values in increasing index order (TF's tie rule).
        order = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
        idx = (n - 1 - order).astype(np.int32)
        return np.take_along_axis(x, idx, axis=-1), idx
    return top_k


def register(reg):
    reg.register("GatherNd", CPU, factory=_gather_nd)
    reg.register("ScatterNd", CPU, factory=_scatter_nd)
    reg.register("UnsortedSegmentSum", CPU, factory=_unsorted_segment(np.add, _zero))
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
