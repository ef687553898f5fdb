"""Cumsum and Cumprod (kernels/scan.cl) with TensorFlow's exclusive/reverse attrs; the
axis arrives in host memory."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, I32, NUMERIC, OPENCL, host, launcher, num_elements

_E = errors.InvalidArgumentError


def _scan(op, init):
    def factory(ctx):
        dt = ctx.attrs["T"].np_dtype
        defines = {"T": program.ctype(dt), "OP(s,v)": op, "INIT": init,
                   "EXCLUSIVE": int(ctx.attrs["exclusive"]), "REVERSE": int(ctx.attrs["reverse"])}
        launch = launcher(ctx, "scan.cl", "scan", [BUF, BUF, I32, I32, I32], defines)
        device = ctx.device

        def scan(x, axis):
            if x.ndim == 0:
                raise ctx.error(_E, "cannot take a cumulative reduction of a scalar")
            a = int(host(axis))
            if not -x.ndim <= a < x.ndim:
                raise ctx.error(_E, f"axis {a} is out of range for input of rank {x.ndim}")
            a %= x.ndim
            out = device.empty(x.shape, dt)
            outer, inner = num_elements(x.shape[:a]), num_elements(x.shape[a + 1:])
            if outer * inner and x.shape[a]:
                launch.run(outer * inner, out.block.buf, x.block.buf, outer, x.shape[a], inner)
            return out
        return scan
    return factory


def register(reg):
    reg.register("Cumsum", OPENCL, factory=_scan("((s) + (v))", "(T)0"), constraints={"T": NUMERIC},
                 host_memory=("axis",))
    reg.register("Cumprod", OPENCL, factory=_scan("((s) * (v))", "(T)1"), constraints={"T": NUMERIC},
                 host_memory=("axis",))
