"""Gather, GatherV2, GatherNd, UnsortedSegmentSum/Max/Min (kernels/gather.cl) and
EmbeddingIdsCheck.

Indices live on the device, so they are not checked against the range: an index outside
it reads zeros (Gather, GatherV2; GatherNd: a row with any coordinate outside its dimension)
or is dropped (UnsortedSegmentSum/Max/Min; negative ids are dropped on every device, as in
TensorFlow), as in TensorFlow's GPU kernels; the CPU kernels raise InvalidArgumentError
instead. EmbeddingIdsCheck exists to raise: it reads its ids to the host to check them and
passes the device tensor through.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import indexing as checks
from tensorweave.kernels.axes import norm_axis
from tensorweave_opencl import program
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

_E = errors.InvalidArgumentError


def _gather_factory(has_axis):
    def factory(ctx):
        dt = ctx.attrs["Tparams"].np_dtype
        ti = ctx.attrs["Tindices"].np_dtype
        launch = launcher(ctx, "gather.cl", "gather", [BUF, BUF, BUF, I32, I32, I32, I32],
                          {"T": program.ctype(dt), "TI": program.ctype(ti)})
        device = ctx.device

        def gather(params, indices, axis=None):
            if params.ndim == 0:
                raise ctx.error(_E, "cannot gather from a scalar")
            a = norm_axis(ctx, int(host(axis)), params.ndim, "gather axis") if has_axis else 0
            out_shape = params.shape[:a] + indices.shape + params.shape[a + 1:]
            out = device.empty(out_shape, dt)
            n = num_elements(out_shape)
            if n:
                launch.run(n, out.block.buf, params.block.buf, indices.block.buf, n, num_elements(indices.shape),
                           num_elements(params.shape[a + 1:]), params.shape[a])
            return out
        return gather
    return factory


# The empty segment of UnsortedSegmentMax/Min: the dtype's lowest/highest value (the CPU's).
LOWEST = {"float": "(-FLT_MAX)", "double": "(-DBL_MAX)", "int": "INT_MIN", "long": "LONG_MIN", "uchar": "0"}
HIGHEST = {"float": "FLT_MAX", "double": "DBL_MAX", "int": "INT_MAX", "long": "LONG_MAX", "uchar": "UCHAR_MAX"}


def reduce_defines(kind, dt) -> dict:
    """The COMBINE and INIT defines of a sum, max or min (gather.cl, segment.cl)."""
    c = program.ctype(dt)
    if kind == "sum":
        return {}
    # NaN propagates, as NumPy's maximum/minimum
    nan = "isnan(v) || " if np.dtype(dt).kind == "f" else ""
    cmp = ">" if kind == "max" else "<"
    return {"INIT": (LOWEST if kind == "max" else HIGHEST)[c],
            "COMBINE(a,v)": f"(({nan}(v) {cmp} (a)) ? (v) : (a))"}


def _segment_factory(kind):
    def factory(ctx):
        return _segment_reduce(ctx, kind)
    return factory


def _segment_reduce(ctx, kind):
    dt = ctx.attrs["T"].np_dtype
    ti = ctx.attrs["Tindices"].np_dtype
    launch = launcher(ctx, "gather.cl", "segment_sum", [BUF, BUF, BUF, I32, I32, I32],
                      {"T": program.ctype(dt), "TI": program.ctype(ti), **reduce_defines(kind, dt)})
    device = ctx.device

    def segment_sum(data, ids, num_segments):
        k = checks.unsorted_segments(ctx, data.shape, ids.shape, host(num_segments))
        rest = data.shape[ids.ndim:]
        out = device.empty((k,) + rest, dt)
        n = num_elements(out.shape)
        if n:
            launch.run(n, out.block.buf, data.block.buf, ids.block.buf, n, num_elements(ids.shape), num_elements(rest))
        return out
    return segment_sum


def _gather_nd(ctx):
    dt = ctx.attrs["Tparams"].np_dtype
    ti = ctx.attrs["Tindices"].np_dtype
    launch = launcher(ctx, "gather.cl", "gather_nd", [BUF, BUF, BUF, I32, I32, BUF],
                      {"T": program.ctype(dt), "TI": program.ctype(ti)})
    device = ctx.device

    def gather_nd(params, indices):
        k = checks.nd_depth(ctx, indices.shape, params.shape, "param shape")
        out_shape = indices.shape[:-1] + params.shape[k:]
        out = device.empty(out_shape, dt)
        n = num_elements(out_shape)
        if n:
            dims = device.runtime.int_table([k, *params.shape[:k]])
            launch.run(n, out.block.buf, params.block.buf, indices.block.buf, n, num_elements(params.shape[k:]), dims)
        return out
    return gather_nd


def _ids_check(ctx):
    device = ctx.device

    def check(ids, num_ids):
        checks.embedding_ids(ctx, device.to_host(ids), host(num_ids))
        return ids
    return check


def register(reg):
    reg.register("Gather", OPENCL, factory=_gather_factory(False), constraints={"Tparams": ALL, "Tindices": INDEX})
    reg.register("GatherV2", OPENCL, factory=_gather_factory(True), constraints={"Tparams": ALL, "Tindices": INDEX},
                 host_memory=("axis",))
    reg.register("GatherNd", OPENCL, factory=_gather_nd, constraints={"Tparams": ALL, "Tindices": INDEX})
    for kind in ("sum", "max", "min"):
        reg.register(f"UnsortedSegment{kind.title()}", OPENCL, factory=_segment_factory(kind),
                     constraints={"T": NUMERIC, "Tindices": INDEX}, host_memory=("num_segments",))
    reg.register("EmbeddingIdsCheck", OPENCL, factory=_ids_check, constraints={"Tindices": INDEX},
                 host_memory=("num_ids",))
