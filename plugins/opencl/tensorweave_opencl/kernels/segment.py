"""Sorted segment reductions (kernels/segment.cl): SegmentSum/Mean/Max/Min,
SparseSegmentSum/Mean/SqrtN and the gradients SparseSegmentMeanGrad/SqrtNGrad.

Their segment ids are read in host memory: the number of output rows is the last id + 1,
so the host must see them anyway, and it checks them as the CPU does
(``tensorweave.kernels.indexing``: a negative or decreasing id is an InvalidArgumentError)
and hands the kernel each segment's first entry.
The SparseSegment ops' ``indices`` (rows of ``data``) stay on the device: an index outside
``data``'s rows reads zeros there (counted in the mean), where the CPU raises. The gradients
take their indices in host memory too: they group the entries by destination row, so
repeated indices sum without atomics, and an index outside ``output_dim0`` is an
InvalidArgumentError, as on the CPU.
"""

from __future__ import annotations

import numpy as np

from tensorweave.kernels import indexing as checks
from tensorweave_opencl import program
from tensorweave_opencl.kernels.array import fill_value
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, INDEX, NUMERIC, OPENCL, host, launcher, num_elements
from tensorweave_opencl.kernels.gather import reduce_defines
from tensorweave_opencl.kernels.scatter import row_groups, upload_ints

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


def _segment(kind, sparse=False):
    """Segment* (``sparse``: SparseSegment*, whose indices stay on the device)."""
    def factory(ctx):
        dt = ctx.attrs["T"].np_dtype
        launch = launcher(ctx, "segment.cl", "segment_reduce", [BUF, BUF, BUF, BUF, I32, I32, I32],
                          _defines(kind, dt, ctx.attrs["Tidx"].np_dtype if sparse else None))
        device = ctx.device

        def reduce(data, indices, seg, num):
            """out[s]: the fold of the rows of data (``indices``: data[indices[p]]) at the
            positions p of the sorted ids ``seg`` with ``seg[p] == s``."""
            out = device.empty((num,) + data.shape[1:], dt)
            n = num_elements(out.shape)
            if n:
                # Each segment's first entry, and the end.
                off = upload_ints(device, np.searchsorted(seg, np.arange(num + 1), side="left"))
                rows, n_rows = (off, 0) if indices is None else (indices, data.shape[0])
                launch.run(n, out.block.buf, data.block.buf, rows.block.buf, off.block.buf, n_rows,
                           num_elements(data.shape[1:]), n)
            return out

        if sparse:
            def sparse_segment(data, indices, segment_ids):
                _, seg, num = checks.sparse_segments(ctx, data.shape, indices, host(segment_ids), check_indices=False)
                return reduce(data, indices, seg, num)
            return sparse_segment

        def segment(data, ids):
            ids = host(ids)
            return reduce(data, None, ids, checks.sorted_segments(ctx, data.shape, ids))
        return segment
    return factory


def _sparse_segment_grad(kind):
    def factory(ctx):
        dt = ctx.attrs["T"].np_dtype
        launch = launcher(ctx, "segment.cl", "segment_grad", [BUF, BUF, BUF, BUF, I32, I32, I32, I32],
                          _defines(kind, dt))
        device = ctx.device

        def sparse_segment_grad(grad, indices, segment_ids, output_dim0):
            rows, idx, seg, num = checks.sparse_segments_grad(ctx, grad.shape, host(indices), host(segment_ids),
                                                              host(output_dim0))
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
        reg.register(f"SparseSegment{name}", OPENCL, factory=_segment(kind, sparse=True),
                     constraints={"T": types, "Tidx": INDEX, "Tsegmentids": INDEX}, host_memory=("segment_ids",))
    for kind, name in (("mean", "Mean"), ("sqrtn", "SqrtN")):
        reg.register(f"SparseSegment{name}Grad", OPENCL, factory=_sparse_segment_grad(kind),
                     constraints={"T": FLOAT, "Tidx": INDEX, "Tsegmentids": INDEX},
                     host_memory=("indices", "segment_ids", "output_dim0"))
