"""Indexing ops on the GPU (``indexing.cu``): Gather, GatherV2, GatherNd, ScatterNd,
UnsortedSegmentSum/Max/Min, SegmentSum/Mean/Max/Min, SparseSegmentSum/Mean/SqrtN and the
Mean/SqrtN gradients, DynamicPartition, DynamicStitch (and ParallelDynamicStitch), Unique,
UniqueWithCounts, SparseToDense, ReverseV2, Pad, PadV2, MirrorPad, MirrorPadGrad, TopKV2,
Select, Where, OneHot, InTopK and SparseTensorDenseMatMul. (EmbeddingIdsCheck, a check that
must be able to fail, stays on the CPU.)

Where indices live, and what a bad one does (the kernels cannot raise):

- **On the device**, as in TensorFlow's GPU kernels, where the output's shape does not depend
  on them: Gather/GatherV2/GatherNd read **zeros** for an index out of range; ScatterNd,
  UnsortedSegment* and SparseTensorDenseMatMul **drop** an update, id or entry out of range
  (UnsortedSegment*: negative ids are dropped on every device); OneHot gives the off value
  for every depth; InTopK gives false. Updates to one element from repeated indices combine
  by atomics (``atomics.cuh``: atomicAdd for sums, a compare-and-swap loop for max/min), so
  float sums are in no fixed order: equal to the CPU's within rounding.
- **In host memory**, checked as on the CPU (an InvalidArgumentError naming the node, the
  position, the value and the range), where the output's shape depends on them or the CPU
  kernel's order must be kept: segment ids of the sorted Segment* and SparseSegment* ops
  (and SparseSegment*'s indices), DynamicPartition's partitions, DynamicStitch's indices,
  SparseToDense's indices, TopKV2's k, the shapes, axes and paddings. The host groups the
  rows and the kernels fold each output row's inputs in order with one thread per output
  element: deterministic, no atomics (``rows.py``).
- Unique, UniqueWithCounts and Where copy their input to the host (their output's size is
  its values') and the results back.

int32 Gather/GatherV2 follow the int32 convention of ``elementwise.py``: host memory in and
out, computed with NumPy with the CPU's checks (gathers of shapes in gradient code).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels.axes import norm_axis
from tensorweave.ops.indexing_ops import check_axes, check_paddings
from tensorweave_cuda import plan
from tensorweave_cuda.kernels import catalog, rows
from tensorweave_cuda.kernels.util import E, fill, host, int_list, launch, launch_rows
from tensorweave_cuda.kernels.util import register as reg_kernel

DEVICE_ALL = ("float32", "float64", "int64", "bool")
INDEX = list(catalog.INDEX_DTYPES)


def _prod(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _struct(ndim: int, *fields) -> tuple:
    """A TwStrided/TwBcast: ndim, then each field padded to MAX_DIMS."""
    out = [ndim]
    for f in fields:
        f = [int(v) for v in f]
        out += f + [0] * (catalog.MAX_DIMS - len(f))
    return tuple(out)


def _pos(shape, flat: int) -> str:
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]" if shape else ""


def _ctx_dtype(ctx, attr):
    return catalog.dtype(ctx.attrs[attr])


def _zeros(dev, shape, dtype):
    return fill(dev, dev.empty(shape, dtype), 0)


# ---------------------------------------------------------------------------------------
# Gather, GatherV2, GatherNd
def _gather(v2: bool):
    def factory(ctx):
        dev = ctx.device
        ref = catalog.indexing_kernel("gather", _ctx_dtype(ctx, "Tparams"), _ctx_dtype(ctx, "Tindices"))

        def gather(params, indices, axis=None):
            if params.ndim == 0:
                raise ctx.error(E, "cannot gather from a scalar")
            a = norm_axis(ctx, host(dev, axis), params.ndim, "gather axis") if v2 else 0
            out = dev.empty(params.shape[:a] + indices.shape + params.shape[a + 1:], params.dtype)
            n = out.size
            launch(dev, ref, n, params.ptr, indices.ptr, out.ptr, n, indices.size, params.shape[a],
                   _prod(params.shape[a + 1:]))
            return out
        return gather
    return factory


def _gather_host(v2: bool):
    """int32 params (shape arithmetic): NumPy on host values, the CPU kernel's checks."""
    def factory(ctx):
        dev = ctx.device

        def gather(params, indices, axis=None):
            params, indices = np.asarray(params), np.asarray(indices)
            if params.ndim == 0:
                raise ctx.error(E, "cannot gather from a scalar")
            a = norm_axis(ctx, axis, params.ndim, "gather axis") if v2 else 0
            n = params.shape[a]
            bad = (indices < 0) | (indices >= n)
            if bad.any():
                pos = int(np.flatnonzero(bad.reshape(-1))[0])
                raise ctx.error(E, f"indices{_pos(indices.shape, pos)} = {indices.reshape(-1)[pos]} is not in "
                                   f"[0, {n})")
            return dev.host_tensor(np.take(params, indices, axis=a))
        return gather
    return factory


def _nd_rows(ctx, indices, shape, what):
    """K (the depth of each index) after checking it against ``shape``."""
    if indices.ndim == 0:
        raise ctx.error(E, "indices must be at least a vector, got a scalar")
    k = indices.shape[-1]
    if k > len(shape):
        raise ctx.error(E, f"indices.shape[-1] = {k} must be <= the rank of the {what} {list(shape)} ({len(shape)})")
    if k > catalog.MAX_DIMS:
        raise ctx.error(errors.UnimplementedError, f"indices of depth {k}: the CUDA kernels take at most "
                                                   f"{catalog.MAX_DIMS}")
    return k


def _gather_nd(ctx):
    dev = ctx.device
    ref = catalog.indexing_kernel("gather_nd", _ctx_dtype(ctx, "Tparams"), _ctx_dtype(ctx, "Tindices"))

    def gather_nd(params, indices):
        k = _nd_rows(ctx, indices, params.shape, "param shape")
        slice_ = _prod(params.shape[k:])
        out = dev.empty(indices.shape[:-1] + params.shape[k:], params.dtype)
        n = out.size
        strides = plan.contiguous_strides(params.shape)[:k]
        launch(dev, ref, n, params.ptr, indices.ptr, out.ptr, n, slice_, *_struct(k, params.shape[:k], strides))
        return out
    return gather_nd


def _scatter_nd(ctx):
    dev = ctx.device
    ref = catalog.indexing_kernel("scatter_nd_add", _ctx_dtype(ctx, "T"), _ctx_dtype(ctx, "Tindices"))

    def scatter_nd(indices, updates, shape):
        dims = int_list(ctx, host(dev, shape), "shape")
        if any(d < 0 for d in dims):
            raise ctx.error(E, f"shape {dims} must be >= 0")
        k = _nd_rows(ctx, indices, dims, "shape")
        if updates.shape != indices.shape[:-1] + tuple(dims[k:]):
            raise ctx.error(E, f"updates.shape {list(updates.shape)} must be indices.shape[:-1] + "
                               f"shape[indices.shape[-1]:] = {list(indices.shape[:-1]) + dims[k:]} (indices.shape "
                               f"{list(indices.shape)}, shape {dims})")
        out = _zeros(dev, dims, updates.dtype)
        n = updates.size
        if out.size:
            strides = plan.contiguous_strides(dims)[:k]
            launch(dev, ref, n, indices.ptr, updates.ptr, out.ptr, n, _prod(dims[k:]), *_struct(k, dims[:k], strides))
        return out
    return scatter_nd


# ---------------------------------------------------------------------------------------
# segment reductions
def _init(kind: str, dtype: np.dtype):
    """What an empty UnsortedSegment* output holds (the CPU kernels': finite extremes)."""
    if kind == "sum":
        return 0
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return info.min if kind == "max" else info.max


def _unsorted_segment(kind: str):
    def factory(ctx):
        dev = ctx.device
        dt = _ctx_dtype(ctx, "T")
        ref = catalog.indexing_kernel(f"unsorted_segment_{kind}", dt, _ctx_dtype(ctx, "Tindices"))
        init = _init(kind, dt.np)

        def unsorted_segment(data, ids, num_segments):
            num_segments = host(dev, num_segments)
            if num_segments.ndim != 0:
                raise ctx.error(E, f"num_segments must be a scalar, got shape {num_segments.shape}")
            num = int(num_segments)
            if num < 0:
                raise ctx.error(E, f"num_segments must be >= 0, got {num}")
            if data.shape[:ids.ndim] != ids.shape:
                raise ctx.error(E, f"segment_ids of shape {ids.shape} must be a prefix of the shape of data "
                                   f"{data.shape}")
            rest = data.shape[ids.ndim:]
            out = fill(dev, dev.empty((num,) + rest, data.dtype), init)
            inner = _prod(rest)
            if out.size:
                launch(dev, ref, data.size, data.ptr, ids.ptr, out.ptr, data.size, inner, num)
            return out
        return unsorted_segment
    return factory


def _segment_runs(seg):
    """(starts of the runs of equal ids, with the end appended; the id of each run)."""
    first = np.flatnonzero(np.concatenate(([True], seg[1:] != seg[:-1]))) if seg.size else np.zeros(0, np.int64)
    return np.append(first, seg.size), seg[first]


def _reduce_segments(dev, ref, data, rows_at, seg, num, kind):
    """out[s] = the ``kind`` fold of the rows ``data[rows_at[p]]`` (None: row p) with
    ``seg[p] == s``, ``seg`` sorted; zeros for empty segments."""
    rest = data.shape[1:]
    inner = _prod(rest)
    out = dev.empty((num,) + rest, data.dtype)
    starts, present = _segment_runs(seg)
    if out.size and present.size < num:
        fill(dev, out, 0)
    if out.size and present.size:
        r, st, sg = rows.upload(dev, rows_at), rows.upload(dev, starts), rows.upload(dev, present)
        n = present.size * inner
        launch(dev, ref, n, data.ptr, rows.ptr(r), st.ptr, sg.ptr, out.ptr, n, inner, catalog.SEGMENT_KINDS[kind])
    return out


def _segment(kind: str):
    def factory(ctx):
        dev = ctx.device
        ref = catalog.indexing_kernel("segment_reduce", _ctx_dtype(ctx, "T"))

        def segment(data, segment_ids):
            ids = np.asarray(host(dev, segment_ids)).astype(np.int64, copy=False)
            if data.ndim == 0:
                raise ctx.error(E, "data must be at least a vector, got a scalar")
            if ids.ndim != 1 or ids.shape[0] != data.shape[0]:
                raise ctx.error(E, f"segment_ids of shape {ids.shape} must be a vector with one element per row of "
                                   f"data {data.shape}")
            num = 0
            if ids.size:
                if ids[0] < 0:
                    raise ctx.error(E, f"segment_ids[0] = {ids[0]} is not in [0, inf): segment ids must be >= 0")
                down = np.flatnonzero(ids[1:] < ids[:-1])
                if down.size:
                    p = int(down[0])
                    raise ctx.error(E, f"segment ids are not sorted: segment_ids[{p + 1}] = {ids[p + 1]} follows "
                                       f"segment_ids[{p}] = {ids[p]}")
                num = int(ids[-1]) + 1
            return _reduce_segments(dev, ref, data, None, ids, num, kind)
        return segment
    return factory


def _sparse_segments(ctx, indices, segment_ids, n_rows):
    """The SparseSegment* ops' indices and segment ids as int64 host vectors, checked as the
    CPU kernels check them, and the number of segments."""
    idx = np.asarray(indices)
    seg = np.asarray(segment_ids)
    for what, v in (("indices", idx), ("segment_ids", seg)):
        if v.ndim != 1:
            raise ctx.error(E, f"{what} must be a vector, got shape {list(v.shape)}")
    idx, seg = idx.astype(np.int64, copy=False), seg.astype(np.int64, copy=False)
    if idx.shape != seg.shape:
        raise ctx.error(E, f"indices ({idx.size}) and segment_ids ({seg.size}) must have the same length")
    if idx.size and (idx.min() < 0 or idx.max() >= n_rows):
        pos = int(np.flatnonzero((idx < 0) | (idx >= n_rows))[0])
        raise ctx.error(E, f"indices[{pos}] = {int(idx[pos])} is not in [0, {n_rows})")
    if not seg.size:
        return idx, seg, 0
    if seg[0] < 0:
        raise ctx.error(E, f"segment_ids[0] = {int(seg[0])} is negative")
    steps = np.diff(seg)
    if steps.size and steps.min() < 0:
        pos = int(np.flatnonzero(steps < 0)[0]) + 1
        raise ctx.error(E, f"segment ids are not increasing: segment_ids[{pos}] = {int(seg[pos])} after "
                           f"{int(seg[pos - 1])}")
    return idx, seg, int(seg[-1]) + 1


def _sparse_segment(kind: str):
    def factory(ctx):
        dev = ctx.device
        ref = catalog.indexing_kernel("segment_reduce", _ctx_dtype(ctx, "T"))

        def sparse_segment(data, indices, segment_ids):
            if data.ndim == 0:
                raise ctx.error(E, "data must have rank >= 1, got a scalar")
            idx, seg, num = _sparse_segments(ctx, host(dev, indices), host(dev, segment_ids), data.shape[0])
            return _reduce_segments(dev, ref, data, idx, seg, num, kind)
        return sparse_segment
    return factory


def _sparse_segment_grad(kind: str):
    def factory(ctx):
        dev = ctx.device
        dt = _ctx_dtype(ctx, "T")
        ref = catalog.indexing_kernel("segment_grad", dt)

        def sparse_segment_grad(grad, indices, segment_ids, output_dim0):
            n_rows = int(host(dev, output_dim0))
            if n_rows < 0:
                raise ctx.error(E, f"output_dim0 must be >= 0, got {n_rows}")
            idx, seg, num = _sparse_segments(ctx, host(dev, indices), host(dev, segment_ids), n_rows)
            if num > grad.shape[0]:
                raise ctx.error(E, f"segment id {num - 1} is not a row of grad (it has {grad.shape[0]})")
            rest = grad.shape[1:]
            inner = _prod(rest)
            out = _zeros(dev, (n_rows,) + rest, grad.dtype)
            if not idx.size or not inner:
                return out
            # Each position's divisor, in T as the CPU kernel computes it: its segment's count
            # (Mean) or the count's square root (SqrtN).
            starts, _ = _segment_runs(seg)
            counts = np.diff(starts).astype(dt.np)
            div = np.repeat(counts if kind == "mean" else np.sqrt(counts), np.diff(starts))
            at, st, order = rows.groups(idx)
            r, s, o = rows.upload(dev, at), rows.upload(dev, st), rows.upload(dev, order)
            sg, d = rows.upload(dev, seg), dev.to_device(np.ascontiguousarray(div, dtype=dt.np))
            n = at.size * inner
            launch(dev, ref, n, grad.ptr, sg.ptr, d.ptr, r.ptr, rows.ptr(s), rows.ptr(o), out.ptr, n, inner)
            return out
        return sparse_segment_grad
    return factory


# ---------------------------------------------------------------------------------------
# DynamicPartition, DynamicStitch, Unique, Where, SparseToDense
def _dynamic_partition(ctx):
    dev = ctx.device
    num = ctx.attrs["num_partitions"]
    ref = catalog.indexing_kernel("gather", _ctx_dtype(ctx, "T"), catalog.DTYPES["int64"])

    def dynamic_partition(data, partitions):
        p = np.asarray(partitions)
        if data.shape[:p.ndim] != p.shape:
            raise ctx.error(E, f"partitions of shape {p.shape} must be a prefix of the shape of data {data.shape}")
        flat = p.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= num):
            pos = int(np.flatnonzero((flat < 0) | (flat >= num))[0])
            raise ctx.error(E, f"partitions{_pos(p.shape, pos)} = {flat[pos]} is not in [0, {num})")
        rest = data.shape[p.ndim:]
        inner = _prod(rest)
        order = np.argsort(flat, kind="stable")  # each partition's rows in their order
        ends = np.cumsum(np.bincount(flat, minlength=num))
        parts = []
        for k in range(num):
            picked = order[(ends[k - 1] if k else 0):ends[k]]
            out = dev.empty((picked.size,) + rest, data.dtype)
            if out.size:
                sel = rows.upload(dev, picked)
                launch(dev, ref, out.size, data.ptr, sel.ptr, out.ptr, out.size, picked.size, flat.size, inner)
            parts.append(out)
        return parts[0] if num == 1 else tuple(parts)  # the executor stores a single output as is
    return dynamic_partition


def _dynamic_stitch(ctx):
    dev = ctx.device
    n_in = ctx.attrs["N"]
    ref = catalog.indexing_kernel("scatter_rows", _ctx_dtype(ctx, "T"))

    def dynamic_stitch(*args):
        indices, data = [np.asarray(host(dev, i)) for i in args[:n_in]], args[n_in:]
        rest = None
        for i, (ix, d) in enumerate(zip(indices, data, strict=True)):
            if d.shape[:ix.ndim] != ix.shape:
                raise ctx.error(E, f"data[{i}].shape = {list(d.shape)} does not start with indices[{i}].shape = "
                                   f"{list(ix.shape)}")
            r = d.shape[ix.ndim:]
            if rest is None:
                rest = r
            elif r != rest:
                raise ctx.error(E, f"data[{i}].shape = {list(d.shape)} must be indices[{i}].shape + {list(rest)} "
                                   "(the slice shape of data[0])")
        flat = [ix.reshape(-1).astype(np.int64, copy=False) for ix in indices]
        ids = np.concatenate(flat)
        size = int(ids.max()) + 1 if ids.size else 0
        for i, f in enumerate(flat):
            if f.size and f.min() < 0:
                pos = int(np.flatnonzero(f < 0)[0])
                raise ctx.error(E, f"indices[{i}]{_pos(indices[i].shape, pos)} = {f[pos]} is not in [0, {size})")
        inner = _prod(rest)
        out = dev.empty((size,) + rest, data[0].dtype)
        if not out.size:
            return out
        # Of repeated indices the last one (in list order) wins: each row's last writer.
        last = np.full(size, -1, dtype=np.int64)
        np.maximum.at(last, ids, np.arange(ids.size))
        if (last < 0).any():
            fill(dev, out, 0)
        start = 0
        for f, d in zip(flat, data):
            dst = np.flatnonzero((last >= start) & (last < start + f.size))
            if dst.size:
                src = last[dst] - start
                r, o = rows.upload(dev, dst), rows.upload(dev, src)
                n = dst.size * inner
                launch(dev, ref, n, out.ptr, r.ptr, 0, o.ptr, d.ptr, n, inner, 0, catalog.SCATTER_KINDS["update"])
            start += f.size
        return out
    return dynamic_stitch


def _unique(with_counts: bool):
    def factory(ctx):
        dev = ctx.device
        idx_dt = ctx.attrs["out_idx"].np_dtype

        def unique(x):
            if x.ndim != 1:
                raise ctx.error(E, f"x must be a vector, got shape {x.shape}")
            h = host(dev, x)
            if not h.size:
                empty = dev.to_device(np.zeros(0, dtype=idx_dt))
                return (x, empty, empty) if with_counts else (x, empty)
            kw = {"equal_nan": False} if h.dtype.kind == "f" else {}  # NaNs are distinct, as in TF
            _, first, inverse, counts = np.unique(h, return_index=True, return_inverse=True, return_counts=True, **kw)
            order = np.argsort(first, kind="stable")  # distinct values in order of first occurrence
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = dev.to_device(h[first[order]])
            idx = dev.to_device(rank[inverse.reshape(-1)].astype(idx_dt))
            if with_counts:
                return y, idx, dev.to_device(counts[order].astype(idx_dt))
            return y, idx
        return unique
    return factory


def _where(ctx):
    dev = ctx.device
    return lambda x: dev.to_device(np.argwhere(host(dev, x)).astype(np.int64))


def _sparse_to_dense(ctx):
    dev = ctx.device
    validate = ctx.attrs["validate_indices"]
    dt = _ctx_dtype(ctx, "T")
    scatter = catalog.indexing_kernel("scatter_rows", dt)
    fill_from = catalog.fill_from_kernel(dt)

    def sparse_to_dense(indices, output_shape, values, default):
        indices = np.asarray(host(dev, indices))
        dims = int_list(ctx, host(dev, output_shape), "output_shape")
        if any(d < 0 for d in dims):
            raise ctx.error(E, f"output_shape {dims} must be >= 0")
        if default.ndim != 0:
            raise ctx.error(E, f"default_value must be a scalar, got shape {default.shape}")
        if indices.ndim > 2:
            raise ctx.error(E, f"sparse_indices must have rank 0, 1 or 2, got shape {indices.shape}")
        # A scalar is one index of a vector, a vector N indices of a vector, a matrix N full indices.
        idx = indices if indices.ndim == 2 else indices.reshape(-1, 1)
        n, r = idx.shape
        if r != len(dims):
            raise ctx.error(E, f"sparse_indices hold indices of rank {r}, but output_shape {dims} has rank {len(dims)}")
        if values.ndim > 1 or (values.ndim == 1 and values.shape[0] != n):
            raise ctx.error(E, f"sparse_values must be a scalar or a vector of the {n} values of sparse_indices, "
                               f"got shape {values.shape}")
        idx = idx.astype(np.int64, copy=False)
        if n:
            bad = (idx < 0) | (idx >= np.asarray(dims, dtype=np.int64))
            if bad.any():
                row = int(np.flatnonzero(bad.any(axis=1))[0])
                d = int(np.flatnonzero(bad[row])[0])
                raise ctx.error(E, f"sparse_indices[{row}] = {idx[row].tolist()} is out of bounds for output_shape "
                                   f"{dims}: {int(idx[row, d])} is not in [0, {dims[d]}) (dimension {d})")
        flat = np.ravel_multi_index(tuple(idx.T), dims) if r else np.zeros(n, np.int64)
        if validate and n > 1 and r:
            step = np.diff(flat)
            if (step <= 0).any():
                p = int(np.flatnonzero(step <= 0)[0]) + 1
                what = "is repeated" if step[p - 1] == 0 else "is out of order"
                raise ctx.error(E, f"sparse_indices[{p}] = {idx[p].tolist()} {what}: with validate_indices the "
                                   "indices must be sorted in row-major order without repeats")
        out = dev.empty(dims, dt.np)
        if not out.size:
            return out
        launch(dev, fill_from, out.size, out.ptr, default.ptr, out.size)
        if n:
            # Of repeated positions the last value wins (the CPU's NumPy assignment).
            positions, first_from_end = np.unique(flat[::-1], return_index=True)
            at, src = rows.upload(dev, positions), rows.upload(dev, n - 1 - first_from_end)
            launch(dev, scatter, positions.size, out.ptr, at.ptr, 0, src.ptr, values.ptr, positions.size, 1,
                   int(values.ndim == 0), catalog.SCATTER_KINDS["update"])
        return out
    return sparse_to_dense


# ---------------------------------------------------------------------------------------
# ReverseV2, Pad, PadV2, MirrorPad, MirrorPadGrad
def _reverse(ctx):
    dev = ctx.device
    ref = catalog.copy_strided_kernel(_ctx_dtype(ctx, "T"))

    def reverse(x, axis):
        try:
            axes = check_axes(int_list(ctx, host(dev, axis), "axis"), x.ndim)
        except errors.InvalidArgumentError as e:
            raise ctx.error(E, e.message) from None
        axes = [a for a in axes if x.shape[a] > 1]
        if not axes or not x.size:
            return x
        # A strided copy with negative strides along the axes, from the last element of each.
        strides = list(plan.contiguous_strides(x.shape))
        base = 0
        for a in axes:
            base += (x.shape[a] - 1) * strides[a]
            strides[a] = -strides[a]
        try:
            struct = plan.strided_struct(x.shape, strides)
        except plan.BroadcastError as e:
            raise ctx.error(errors.UnimplementedError, str(e)) from None
        out = dev.empty(x.shape, x.dtype)
        launch(dev, ref, out.size, x.ptr + base * x.dtype.itemsize, out.ptr, out.size, *struct)
        return out
    return reverse


def _pads(ctx, x_shape, paddings, mode=None, grad=False):
    paddings = np.asarray(paddings)
    if paddings.shape != (len(x_shape), 2):
        raise ctx.error(E, f"paddings must be a matrix with 2 columns and one row per dimension of the input "
                           f"{list(x_shape)}, got shape {list(paddings.shape)}")
    pads = [(int(b), int(a)) for b, a in paddings.tolist()]
    try:
        check_paddings(pads, list(x_shape), mode, grad)
    except errors.InvalidArgumentError as e:
        raise ctx.error(E, e.message) from None
    return pads


def _pad_struct(ctx, small, pads):
    """The kernels' TwBcast for a padded shape over ``small`` (the unpadded dimensions): runs
    of unpadded dimensions merged (they map one to one), so any rank fits unless more than
    MAX_DIMS dimensions remain."""
    dims = []  # [big, small, before]
    for d, (b, a) in zip(small, pads):
        if dims and not (b or a) and not (dims[-1][2] or dims[-1][0] != dims[-1][1]):
            dims[-1] = [dims[-1][0] * d, dims[-1][1] * d, 0]
        else:
            dims.append([d + b + a, d, b])
    dims = [t for t in dims if t[0] != 1] or [[1, 1, 0]]
    if len(dims) > catalog.MAX_DIMS:
        raise ctx.error(errors.UnimplementedError, f"padding {len(dims)} dimensions: the CUDA kernels take at most "
                                                   f"{catalog.MAX_DIMS} (after merging unpadded ones)")
    return _struct(len(dims), *zip(*dims))


def _pad(ctx):
    dev = ctx.device
    mode = ctx.attrs.get("mode", "CONSTANT")
    ref = catalog.indexing_kernel("pad", _ctx_dtype(ctx, "T"))

    def pad(x, paddings, constant_values=None):
        pads = _pads(ctx, x.shape, host(dev, paddings), None if mode == "CONSTANT" else mode)
        if constant_values is not None and constant_values.ndim != 0:
            raise ctx.error(E, f"constant_values must be a scalar, got shape {constant_values.shape}")
        if not any(b or a for b, a in pads):
            return x
        out = dev.empty(tuple(d + b + a for d, (b, a) in zip(x.shape, pads)), x.dtype)
        n = out.size
        if not x.size:  # nothing to copy or mirror: the constant (mirror modes need a non-empty input)
            launch(dev, ref, n, 0, out.ptr, rows.ptr(constant_values), n, 0, *_struct(1, [n], [1], [n]))
            return out
        launch(dev, ref, n, x.ptr, out.ptr, rows.ptr(constant_values), n, catalog.PAD_MODES[mode],
               *_pad_struct(ctx, x.shape, pads))
        return out
    return pad


def _mirror_pad_grad(ctx):
    dev = ctx.device
    mode = ctx.attrs["mode"]
    ref = catalog.indexing_kernel("mirror_pad_grad", _ctx_dtype(ctx, "T"))

    def mirror_pad_grad(g, paddings):
        pads = _pads(ctx, g.shape, host(dev, paddings), mode, grad=True)
        if not any(b or a for b, a in pads):
            return g
        small = tuple(d - b - a for d, (b, a) in zip(g.shape, pads))
        out = dev.empty(small, g.dtype)
        if out.size:
            struct = _pad_struct(ctx, small, pads)
            # TwBcast fields for this kernel: the output's (unpadded) dims, g's dims, before.
            ndim = struct[0]
            big = struct[1:1 + catalog.MAX_DIMS]
            little = struct[1 + catalog.MAX_DIMS:1 + 2 * catalog.MAX_DIMS]
            before = struct[1 + 2 * catalog.MAX_DIMS:]
            launch(dev, ref, out.size, g.ptr, out.ptr, out.size, catalog.PAD_MODES[mode],
                   *_struct(ndim, little[:ndim], big[:ndim], before[:ndim]))
        return out
    return mirror_pad_grad


# ---------------------------------------------------------------------------------------
# TopKV2, InTopK, Select, OneHot, SparseTensorDenseMatMul
def _top_k(ctx):
    dev = ctx.device
    ref = catalog.indexing_kernel("top_k", _ctx_dtype(ctx, "T"))

    def top_k(x, k):
        k = host(dev, k)
        if k.ndim != 0:
            raise ctx.error(E, f"k must be a scalar, got shape {k.shape}")
        k = int(k)
        if k < 0:
            raise ctx.error(E, f"k must be non-negative, got {k}")
        if x.ndim == 0:
            raise ctx.error(E, "input must be at least a vector, got a scalar")
        n = x.shape[-1]
        if n < k:
            raise ctx.error(E, f"input must have at least k = {k} columns, its shape is {list(x.shape)}")
        values = dev.empty(x.shape[:-1] + (k,), x.dtype)
        indices = dev.empty(x.shape[:-1] + (k,), np.int32)
        rows_ = _prod(x.shape[:-1])
        if values.size:
            launch_rows(dev, ref, rows_, n, x.ptr, values.ptr, indices.ptr, rows_, n, k)
        return values, indices
    return top_k


def _in_top_k(ctx):
    dev = ctx.device
    k = ctx.attrs["k"]
    ref = catalog.indexing_kernel("in_top_k", catalog.DTYPES["float32"], _ctx_dtype(ctx, "T"))

    def in_top_k(predictions, targets):
        if predictions.ndim != 2 or targets.shape != predictions.shape[:1]:
            raise ctx.error(E, f"predictions must be 2-D and targets 1-D with the same first dimension, got "
                               f"{predictions.shape} and {targets.shape}")
        n, c = predictions.shape
        out = dev.empty((n,), np.bool_)
        launch(dev, ref, n, predictions.ptr, targets.ptr, out.ptr, n, c, k)
        return out
    return in_top_k


def _select(ctx):
    dev = ctx.device
    ref = catalog.indexing_kernel("select", _ctx_dtype(ctx, "T"))

    def select(c, t, e):
        if t.shape != e.shape:
            raise ctx.error(E, f"t and e must have the same shape, got {t.shape} and {e.shape}")
        if c.ndim == 0:
            inner = max(t.size, 1)
        elif c.ndim == 1 and t.ndim > 1 and c.shape[0] == t.shape[0]:
            inner = _prod(t.shape[1:])  # a vector condition picks rows
        elif c.shape == t.shape:
            inner = 1
        else:
            raise ctx.error(E, f"condition of shape {c.shape} does not fit t and e of shape {t.shape} "
                               "(it must be a scalar, of their shape, or a vector of their first dimension)")
        out = dev.empty(t.shape, t.dtype)
        launch(dev, ref, out.size, c.ptr, t.ptr, e.ptr, out.ptr, out.size, inner)
        return out
    return select


def _one_hot(ctx):
    dev = ctx.device
    axis = ctx.attrs["axis"]
    ref = catalog.indexing_kernel("one_hot", _ctx_dtype(ctx, "T"), _ctx_dtype(ctx, "TI"))

    def one_hot(indices, depth, on_value, off_value):
        d = int(host(dev, depth))
        if d < 0:
            raise ctx.error(E, f"depth must be >= 0, got {d}")
        for what, v in (("on_value", on_value), ("off_value", off_value)):
            if v.ndim != 0:
                raise ctx.error(E, f"{what} must be a scalar, got shape {v.shape}")
        a = indices.ndim if axis == -1 else axis
        out = dev.empty(indices.shape[:a] + (d,) + indices.shape[a:], on_value.dtype)
        launch(dev, ref, out.size, indices.ptr, on_value.ptr, off_value.ptr, out.ptr, out.size, d,
               _prod(indices.shape[a:]))
        return out
    return one_hot


def _sparse_dense_matmul(ctx):
    dev = ctx.device
    adj_a, adj_b = ctx.attrs["adjoint_a"], ctx.attrs["adjoint_b"]
    ref = catalog.indexing_kernel("sparse_dense_matmul", _ctx_dtype(ctx, "T"), _ctx_dtype(ctx, "Tindices"))

    def matmul(a_indices, a_values, a_shape, b):
        a_shape = np.asarray(host(dev, a_shape))
        if a_indices.ndim != 2 or a_indices.shape[1] != 2:
            raise ctx.error(E, f"a_indices must be a matrix [nnz, 2], got shape {a_indices.shape}")
        if a_values.ndim != 1 or a_values.shape[0] != a_indices.shape[0]:
            raise ctx.error(E, f"a_values must be a vector of the {a_indices.shape[0]} entries of a_indices, "
                               f"got shape {a_values.shape}")
        if a_shape.shape != (2,):
            raise ctx.error(E, f"a must be a matrix (a_shape of 2 elements), got a_shape {a_shape.tolist()}")
        if b.ndim != 2:
            raise ctx.error(E, f"b must be a matrix, got shape {b.shape}")
        m, k = int(a_shape[0]), int(a_shape[1])
        if adj_a:
            m, k = k, m
        bk, n = (b.shape[1], b.shape[0]) if adj_b else b.shape
        if bk != k:
            raise ctx.error(E, f"cannot multiply A of shape {a_shape.tolist()} (adjoint_a={adj_a}) and B of shape "
                               f"{list(b.shape)} (adjoint_b={adj_b}): inner dimensions {k} and {bk} differ")
        out = _zeros(dev, (m, n), b.dtype)
        total = a_values.size * n
        if out.size:
            launch(dev, ref, total, a_indices.ptr, a_values.ptr, b.ptr, out.ptr, total, n, m, k, int(adj_a),
                   int(adj_b))
        return out
    return matmul


# ---------------------------------------------------------------------------------------
def register(reg, device_type):
    def r(op, factory, dtypes, attr="T", **kw):
        reg_kernel(reg, op, device_type, factory, dtypes, attr=attr, **kw)

    idx = {"Tindices": INDEX}
    r("Gather", _gather(False), DEVICE_ALL, attr="Tparams", constraints=idx)
    r("GatherV2", _gather(True), DEVICE_ALL, attr="Tparams", constraints=idx, host_memory=("axis",))
    r("Gather", _gather_host(False), ("int32",), attr="Tparams", constraints=idx,
      host_memory=("params", "indices"), activate=False)
    r("GatherV2", _gather_host(True), ("int32",), attr="Tparams", constraints=idx,
      host_memory=("params", "indices", "axis"), activate=False)
    r("GatherNd", _gather_nd, catalog.ALL, attr="Tparams", constraints=idx)
    r("ScatterNd", _scatter_nd, catalog.NUMERIC, constraints=idx, host_memory=("shape",))
    seg_ids = {"Tindices": INDEX}
    r("UnsortedSegmentSum", _unsorted_segment("sum"), catalog.NUMERIC, constraints=seg_ids,
      host_memory=("num_segments",))
    for op, kind in (("UnsortedSegmentMax", "max"), ("UnsortedSegmentMin", "min")):
        r(op, _unsorted_segment(kind), catalog.NUMERIC, constraints=seg_ids, host_memory=("num_segments",))
    for op, kind in (("SegmentSum", "sum"), ("SegmentMean", "mean"), ("SegmentMax", "max"), ("SegmentMin", "min")):
        r(op, _segment(kind), catalog.NUMERIC, constraints=seg_ids, host_memory=("segment_ids",))
    sparse_seg = {"Tidx": INDEX, "Tsegmentids": INDEX}
    r("SparseSegmentSum", _sparse_segment("sum"), catalog.NUMERIC, constraints=sparse_seg,
      host_memory=("indices", "segment_ids"))
    for op, kind in (("SparseSegmentMean", "mean"), ("SparseSegmentSqrtN", "sqrtn")):
        r(op, _sparse_segment(kind), catalog.FLOAT, constraints=sparse_seg, host_memory=("indices", "segment_ids"))
        r(op + "Grad", _sparse_segment_grad(kind), catalog.FLOAT, constraints=sparse_seg,
          host_memory=("indices", "segment_ids", "output_dim0"))
    r("DynamicPartition", _dynamic_partition, catalog.ALL, host_memory=("partitions",))
    for op in ("DynamicStitch", "ParallelDynamicStitch"):
        r(op, _dynamic_stitch, catalog.ALL, host_memory=("indices",))
    for op, counts in (("Unique", False), ("UniqueWithCounts", True)):
        r(op, _unique(counts), catalog.ALL, constraints={"out_idx": INDEX})
    r("Where", _where, catalog.ALL)
    r("SparseToDense", _sparse_to_dense, catalog.ALL, constraints=idx,
      host_memory=("sparse_indices", "output_shape"))
    r("ReverseV2", _reverse, catalog.ALL, constraints={"Tidx": INDEX}, host_memory=("axis",))
    pad = {"Tpaddings": INDEX}
    for op in ("Pad", "PadV2", "MirrorPad"):
        r(op, _pad, catalog.ALL, constraints=pad, host_memory=("paddings",))
    r("MirrorPadGrad", _mirror_pad_grad, catalog.NUMERIC, constraints=pad, host_memory=("paddings",))
    r("TopKV2", _top_k, catalog.NUMERIC, host_memory=("k",))
    r("InTopK", _in_top_k, INDEX)
    r("Select", _select, catalog.ALL)
    r("OneHot", _one_hot, catalog.ALL, constraints={"TI": INDEX}, host_memory=("depth",))
    r("SparseTensorDenseMatMul", _sparse_dense_matmul, catalog.FLOAT, constraints=idx, host_memory=("a_shape",))
