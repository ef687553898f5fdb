"""Gather, GatherV2 and UnsortedSegmentSum (kernels/gather.cl).

Indices live on the device, so they are not checked against the range: an index outside
it reads zeros (Gather) or is dropped (UnsortedSegmentSum), as in TensorFlow's GPU kernels;
the CPU kernels raise InvalidArgumentError instead.
"""

from __future__ import annotations

from tensorweave.framework import errors
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


def _segment_sum(ctx):
    dt = ctx.attrs["T"].np_dtype
    ti = ctx.attrs["Tindices"].np_dtype
    launch = launcher(ctx, "gather.cl", "segment_sum", [BUF, BUF, BUF, I32, I32, I32],
                      {"T": program.ctype(dt), "TI": program.ctype(ti)})
    device = ctx.device

    def segment_sum(data, ids, num_segments):
        ns = host(num_segments)
        if ns.ndim != 0:
            raise ctx.error(_E, f"num_segments must be a scalar, got shape {ns.shape}")
        k = int(ns)
        if k < 0:
            raise ctx.error(_E, f"num_segments must be >= 0, got {k}")
        if data.shape[:ids.ndim] != ids.shape:
            raise ctx.error(_E, f"segment_ids of shape {ids.shape} must be a prefix of the shape of data {data.shape}")
        rest = data.shape[ids.ndim:]
        out = device.empty((k,) + rest, dt)
        n = num_elements(out.shape)
        if n:
            launch.run(n, out.block.buf, data.block.buf, ids.block.buf, n, num_elements(ids.shape), num_elements(rest))
        return out
    return segment_sum


def register(reg):
    reg.register("Gather", OPENCL, factory=_gather_factory(False), constraints={"Tparams": ALL, "Tindices": INDEX})
    reg.register("GatherV2", OPENCL, factory=_gather_factory(True), constraints={"Tparams": ALL, "Tindices": INDEX},
                 host_memory=("axis",))
    reg.register("UnsortedSegmentSum", OPENCL, factory=_segment_sum, constraints={"T": NUMERIC, "Tindices": INDEX},
                 host_memory=("num_segments",))
