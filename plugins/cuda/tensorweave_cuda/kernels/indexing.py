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
- **In host memory**, checked as on the CPU (the same checks: ``tensorweave.kernels.indexing``;
  an InvalidArgumentError naming the node, the position, the value and the range), where the
  output's shape depends on them or the CPU kernel's order must be kept: segment ids of the
  sorted Segment* and SparseSegment* ops (and SparseSegment*'s indices), DynamicPartition's
  partitions, DynamicStitch's indices, SparseToDense's indices, TopKV2's k, the shapes, axes
  and paddings. The host groups the rows (``group_rows``) and the kernels fold each output
  row's inputs in order with one thread per output element: deterministic, no atomics
  (``rows.py``).
- Unique, UniqueWithCounts and Where copy their input to the host (their output's size is
  its values') and the results back.

int32 Gather/GatherV2 follow the int32 convention of ``elementwise.py``: host memory in and
out, computed with NumPy with the CPU's checks (gathers of shapes in gradient code).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import indexing as checks
from tensorweave.kernels.axes import norm_axis
from tensorweave_cuda import plan
from tensorweave_cuda.kernels import catalog, rows
from tensorweave_cuda.kernels.util import E, fill, host, launch, launch_rows
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
                raise ctx.error(E, f"indices{checks.position(indices.shape, pos)} = {indices.reshape(-1)[pos]} is "
                                   f"not in [0, {n})")
            return dev.host_tensor(np.take(params, indices, axis=a))
        return gather
    return factory


def _nd_depth(ctx, indices, shape, what):
    """K (the depth of each index) after checking it against ``shape``, and against the
    kernels' limit."""
    k = checks.nd_depth(ctx, indices.shape, shape, what)
    if k > catalog.MAX_DIMS:
        raise ctx.error(errors.UnimplementedError, f"indices of depth {k}: the CUDA kernels take at most "
                                                   f"{catalog.MAX_DIMS}")
    return k


def _gather_nd(ctx):
    dev = ctx.device
    ref = catalog.indexing_kernel("gather_nd", _ctx_dtype(ctx, "Tparams"), _ctx_dtype(ctx, "Tindices"))

    def gather_nd(params, indices):
        k = _nd_depth(ctx, indices, params.shape, "param shape")
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
        dims = checks.scatter_nd_shape(ctx, indices.shape, updates.shape, host(dev, shape))
        k = _nd_depth(ctx, indices, dims, "shape")
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
            num = checks.unsorted_segments(ctx, data.shape, ids.shape, host(dev, num_segments))
            rest = data.shape[ids.ndim:]
            out = fill(dev, dev.empty((num,) + rest, data.dtype), init)
            inner = _prod(rest)
            if out.size:
                launch(dev, ref, data.size, data.ptr, ids.ptr, out.ptr, data.size, inner, num)
            return out
        return unsorted_segment
    return factory


def _reduce_segments(dev, ref, data, rows_at, seg, num, kind):
    """out[s] = the ``kind`` fold of the rows ``data[rows_at[p]]`` (None: row p) with
    ``seg[p] == s``, ``seg`` sorted; zeros for empty segments."""
    rest = data.shape[1:]
    inner = _prod(rest)
    out = dev.empty((num,) + rest, data.dtype)
    starts, present = checks.segment_runs(seg)
    if out.size and present.size < num:
        fill(dev, out, 0)
    if out.size and present.size:
        r, st, sg = rows.upload(dev, rows_at), rows.upload(dev, starts), rows.upload(dev, present)
        n = present.size * inner
        launch(dev, ref, n, data.ptr, rows.ptr(r), st.ptr, sg.ptr, out.ptr, n, inner, catalog.SEGMENT_KINDS[kind])
    return out


def _segment(kind: str, sparse: bool = False):
    """Segment* (``sparse``: SparseSegment*, whose indices pick the rows of data)."""
    def factory(ctx):
        dev = ctx.device
        ref = catalog.indexing_kernel("segment_reduce", _ctx_dtype(ctx, "T"))

        if sparse:
            def sparse_segment(data, indices, segment_ids):
                idx, seg, num = checks.sparse_segments(ctx, data.shape, host(dev, indices), host(dev, segment_ids))
                return _reduce_segments(dev, ref, data, idx, seg, num, kind)
            return sparse_segment

        def segment(data, segment_ids):
            ids = np.asarray(host(dev, segment_ids)).astype(np.int64, copy=False)
            return _reduce_segments(dev, ref, data, None, ids, checks.sorted_segments(ctx, data.shape, ids), kind)
        return segment
    return factory


def _sparse_segment_grad(kind: str):
    def factory(ctx):
        dev = ctx.device
        dt = _ctx_dtype(ctx, "T")
        ref = catalog.indexing_kernel("segment_grad", dt)

        def sparse_segment_grad(grad, indices, segment_ids, output_dim0):
            n_rows, idx, seg, _ = checks.sparse_segments_grad(ctx, grad.shape, host(dev, indices),
                                                              host(dev, segment_ids), host(dev, output_dim0))
            rest = grad.shape[1:]
            inner = _prod(rest)
            out = _zeros(dev, (n_rows,) + rest, grad.dtype)
            if not idx.size or not inner:
                return out
            div = checks.segment_divisors(seg, kind, dt.np)  # in T, as the CPU kernel computes them
            at, st, order = checks.group_rows(idx)
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
        groups = checks.partition_rows(ctx, data.shape, p, num)
        rest = data.shape[p.ndim:]
        inner = _prod(rest)
        parts = []
        for picked in groups:
            out = dev.empty((picked.size,) + rest, data.dtype)
            if out.size:
                sel = rows.upload(dev, picked)
                launch(dev, ref, out.size, data.ptr, sel.ptr, out.ptr, out.size, picked.size, p.size, inner)
            parts.append(out)
        return parts[0] if num == 1 else tuple(parts)  # the executor stores a single output as is
    return dynamic_partition


def _dynamic_stitch(ctx):
    dev = ctx.device
    n_in = ctx.attrs["N"]
    ref = catalog.indexing_kernel("scatter_rows", _ctx_dtype(ctx, "T"))

    def dynamic_stitch(*args):
        indices, data = [np.asarray(host(dev, i)) for i in args[:n_in]], args[n_in:]
        size, rest, moves, complete = checks.stitch_rows(ctx, indices, [d.shape for d in data])
        inner = _prod(rest)
        out = dev.empty((size,) + rest, data[0].dtype)
        if not out.size:
            return out
        if not complete:
            fill(dev, out, 0)
        for d, (dst, src) in zip(data, moves):  # of repeated indices the last one (in list order) wins
            if dst.size:
                r, o = rows.upload(dev, dst), rows.upload(dev, src)
                n = dst.size * inner
                launch(dev, ref, n, out.ptr, r.ptr, 0, o.ptr, d.ptr, n, inner, 0, catalog.SCATTER_KINDS["update"])
        return out
    return dynamic_stitch


def _unique(with_counts: bool):
    def factory(ctx):
        dev = ctx.device
        idx_dt = ctx.attrs["out_idx"].np_dtype

        def unique(x):
            out = checks.unique(ctx, x, lambda t: host(dev, t), idx_dt)
            return tuple(dev.to_device(a) for a in out[:3 if with_counts else 2])
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
        dims, idx, flat = checks.sparse_to_dense(ctx, np.asarray(host(dev, indices)), host(dev, output_shape),
                                                 values.shape, default, validate)
        n = idx.shape[0]
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
        axes = checks.reverse_axes(ctx, host(dev, axis), x.ndim)
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
        pads, shape = checks.pad_args(ctx, x.shape, host(dev, paddings), constant_values,
                                      None if mode == "CONSTANT" else mode)
        if not any(b or a for b, a in pads):
            return x
        out = dev.empty(shape, x.dtype)
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
        pads = checks.paddings(ctx, g.shape, host(dev, paddings), mode, grad=True)
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
        k = checks.top_k(ctx, x.shape, host(dev, k))
        n = x.shape[-1]
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
        # A's indices stay on the device: an entry out of range is dropped there.
        m, k, n = checks.sparse_dense_matmul(ctx, a_indices, a_values, np.asarray(host(dev, a_shape)), b.shape, adj_a,
                                             adj_b, in_bounds=False)
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
    r("SparseSegmentSum", _segment("sum", sparse=True), catalog.NUMERIC, constraints=sparse_seg,
      host_memory=("indices", "segment_ids"))
    for op, kind in (("SparseSegmentMean", "mean"), ("SparseSegmentSqrtN", "sqrtn")):
        r(op, _segment(kind, sparse=True), catalog.FLOAT, constraints=sparse_seg,
          host_memory=("indices", "segment_ids"))
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
