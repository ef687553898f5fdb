"""Sorted segment reductions (kernels/segment.cl): SegmentSum/Mean/Max/Min,
SparseSegmentSum/Mean/SqrtN and the gradients SparseSegmentMeanGrad/SqrtNGrad.

Their segment ids are read in host memory: the number of output rows is the last id + 1,
so the host must see them anyway, and it checks them as the CPU does (a negative or
decreasing id is an InvalidArgumentError) and hands the kernel each segment's first entry.
The SparseSegment ops' ``indices`` (rows of ``data``) stay on the device: an index outside
``data``'s rows reads zeros there (counted in the mean), where the CPU raises. The gradients
take their indices in host memory too: they group the entries by destination row, so
repeated indices sum without atomics, and an index outside ``output_dim0`` is an
InvalidArgumentError, as on the CPU.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_opencl import program
from tensorweave_opencl.kernels.array import fill_value
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, INDEX, NUMERIC, OPENCL, host, launcher, num_elements
from tensorweave_opencl.kernels.gather import reduce_defines
from tensorweave_opencl.kernels.scatter import row_groups, upload_ints

_E = errors.InvalidArgumentError
_SCALES = {"mean": "((T)(count))", "sqrtn": "sqrt((T)(count))"}


def _defines(kind, dt, ti=None):
    d = {"T": program.ctype(dt)}
    if ti is not None:
        d.update(TI=program.ctype(ti), SPARSE=1)
    if kind in _SCALES:
        d["SCALE(count)"] = _SCALES[kind]
    if kind in ("max", "min"):
        d.update(reduce_defines(kind, dt))
    return d


def _check_sorted(ctx, seg):
    """Raise unless the host vector ``seg`` is non-negative and non-decreasing."""
    if not seg.size:
        return
    if seg[0] < 0:
        raise ctx.error(_E, f"segment_ids[0] = {int(seg[0])} is not in [0, inf): segment ids must be >= 0")
    down = np.flatnonzero(seg[1:] < seg[:-1])
    if down.size:
        p = int(down[0])
        raise ctx.error(_E, f"segment ids are not sorted: segment_ids[{p + 1}] = {int(seg[p + 1])} follows "
                            f"segment_ids[{p}] = {int(seg[p])}")


def _offsets(seg) -> tuple[np.ndarray, int]:
    """Each segment's first entry (and the end) for sorted ids ``seg``; the number of segments."""
    num = int(seg[-1]) + 1 if seg.size else 0
    return np.searchsorted(seg, np.arange(num + 1), side="left"), num


def _segment(kind):
    def factory(ctx):
        dt = ctx.attrs["T"].np_dtype
        launch = launcher(ctx, "segment.cl", "segment_reduce", [BUF, BUF, BUF, BUF, I32, I32, I32],
                          _defines(kind, dt))
        device = ctx.device

        def segment(data, ids):
            ids = host(ids)
            if data.ndim == 0:
                raise ctx.error(_E, "data must be at least a vector, got a scalar")
            if ids.ndim != 1 or ids.shape[0] != data.shape[0]:
                raise ctx.error(_E, f"segment_ids of shape {ids.shape} must be a vector with one element per row "
                                    f"of data {data.shape}")
            _check_sorted(ctx, ids)
            off, num = _offsets(ids)
            out = device.empty((num,) + data.shape[1:], dt)
            n = num_elements(out.shape)
            if n:
                t = upload_ints(device, off)
                launch.run(n, out.block.buf, data.block.buf, t.block.buf, t.block.buf, 0,
                           num_elements(data.shape[1:]), n)
            return out
        return segment
    return factory


def _sparse_segment(kind):
    def factory(ctx):
        dt = ctx.attrs["T"].np_dtype
        launch = launcher(ctx, "segment.cl", "segment_reduce", [BUF, BUF, BUF, BUF, I32, I32, I32],
                          _defines(kind, dt, ctx.attrs["Tidx"].np_dtype))
        device = ctx.device

        def sparse_segment(data, indices, segment_ids):
            seg = host(segment_ids)
            if data.ndim == 0:
                raise ctx.error(_E, "data must have rank >= 1, got a scalar")
            if indices.ndim != 1 or seg.ndim != 1:
                raise ctx.error(_E, f"indices and segment_ids must be vectors, got shapes {list(indices.shape)} and "
                                    f"{list(seg.shape)}")
            if indices.shape != seg.shape:
                raise ctx.error(_E, f"indices ({indices.shape[0]}) and segment_ids ({seg.size}) must have the same "
                                    "length")
            _check_sorted(ctx, seg)
            off, num = _offsets(seg)
            out = device.empty((num,) + data.shape[1:], dt)
            n = num_elements(out.shape)
            if n:
                t = upload_ints(device, off)
                launch.run(n, out.block.buf, data.block.buf, indices.block.buf, t.block.buf, data.shape[0],
                           num_elements(data.shape[1:]), n)
            return out
        return sparse_segment
    return factory


def _sparse_segment_grad(kind):
    def factory(ctx):
        dt = ctx.attrs["T"].np_dtype
        launch = launcher(ctx, "segment.cl", "segment_grad", [BUF, BUF, BUF, BUF, I32, I32, I32, I32],
                          _defines(kind, dt))
        device = ctx.device

        def sparse_segment_grad(grad, indices, segment_ids, output_dim0):
            idx, seg = host(indices), host(segment_ids)
            rows = int(host(output_dim0))
            if rows < 0:
                raise ctx.error(_E, f"output_dim0 must be >= 0, got {rows}")
            if grad.ndim == 0:
                raise ctx.error(_E, "grad must have rank >= 1, got a scalar")
            if idx.ndim != 1 or seg.ndim != 1 or idx.shape != seg.shape:
                raise ctx.error(_E, f"indices ({list(idx.shape)}) and segment_ids ({list(seg.shape)}) must be vectors "
                                    "of the same length")
            if idx.size and (idx.min() < 0 or idx.max() >= rows):
                pos = int(np.flatnonzero((idx < 0) | (idx >= rows))[0])
                raise ctx.error(_E, f"indices[{pos}] = {int(idx[pos])} is not in [0, {rows})")
            _check_sorted(ctx, seg)
            num = int(seg[-1]) + 1 if seg.size else 0
            if num > grad.shape[0]:
                raise ctx.error(_E, f"segment id {num - 1} is not a row of grad (it has {grad.shape[0]})")
            out = fill_value(ctx, device.empty((rows,) + grad.shape[1:], dt), 0)
            inner = num_elements(grad.shape[1:])
            if idx.size and inner:
                g, m = row_groups(device, idx)
                segs = upload_ints(device, np.concatenate([seg, np.bincount(seg, minlength=num)]))
                n = m * inner
                launch.run(n, out.block.buf, grad.block.buf, g.block.buf, segs.block.buf, m, idx.size, inner, n)
            return out
        return sparse_segment_grad
    return factory


def register(reg):
    for kind in ("sum", "mean", "max", "min"):
        reg.register(f"Segment{kind.title()}", OPENCL, factory=_segment(kind),
                     constraints={"T": NUMERIC, "Tindices": INDEX}, host_memory=("segment_ids",))
    for kind, name, types in (("sum", "Sum", NUMERIC), ("mean", "Mean", FLOAT), ("sqrtn", "SqrtN", FLOAT)):
        reg.register(f"SparseSegment{name}", OPENCL, factory=_sparse_segment(kind),
                     constraints={"T": types, "Tidx": INDEX, "Tsegmentids": INDEX}, host_memory=("segment_ids",))
    for kind, name in (("mean", "Mean"), ("sqrtn", "SqrtN")):
        reg.register(f"SparseSegment{name}Grad", OPENCL, factory=_sparse_segment_grad(kind),
                     constraints={"T": FLOAT, "Tidx": INDEX, "Tsegmentids": INDEX},
                     host_memory=("indices", "segment_ids", "output_dim0"))
