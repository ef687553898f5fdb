"""Selections (kernels/selection.cl): Select and TopKV2 on the device; Where, Unique and
UniqueWithCounts through the host.

Where and Unique have outputs whose shapes depend on the values: like TensorFlow's GPU
kernels, which copy a count back before they can allocate, they wait for the input, here by
reading it to the host (NumPy computes the result, which goes back to the device). Their
inputs are small next to what they index (ids, masks), so the round trip is the cost of the
sync, not of the bytes.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import indexing as checks
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import ALL, BUF, FLOAT, I32, INT, OPENCL, host, launcher, num_elements

_E = errors.InvalidArgumentError


def _select(ctx):
    dt = ctx.attrs["T"].np_dtype
    launch = launcher(ctx, "selection.cl", "select_", [BUF, BUF, BUF, BUF, I32, I32], {"T": program.ctype(dt)})
    device = ctx.device

    def select(c, t, e):
        if t.shape != e.shape:
            raise ctx.error(_E, f"t and e must have the same shape, got {t.shape} and {e.shape}")
        n = num_elements(t.shape)
        if c.ndim == 1 and t.ndim > 1 and c.shape[0] == t.shape[0]:
            div = num_elements(t.shape[1:])  # a vector condition picks rows
        elif c.ndim and c.shape != t.shape:
            raise ctx.error(_E, f"condition of shape {c.shape} does not fit t and e of shape {t.shape} "
                                "(it must be a scalar, of their shape, or a vector of their first dimension)")
        else:
            div = 1 if c.ndim else n
        out = device.empty(t.shape, dt)
        if n:
            launch.run(n, out.block.buf, c.block.buf, t.block.buf, e.block.buf, max(div, 1), n)
        return out
    return select


def _where(ctx):
    device = ctx.device

    def where(x):
        return device.to_device(np.argwhere(device.to_host(x)).astype(np.int64))
    return where


def _unique(with_counts):
    def factory(ctx):
        idx_dt = ctx.attrs["out_idx"].np_dtype
        device = ctx.device

        def unique(x):
            out = checks.unique(ctx, x, device.to_host, idx_dt)
            return tuple(device.to_device(a) for a in out[:3 if with_counts else 2])
        return unique
    return factory


def _top_k(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    launch = launcher(ctx, "selection.cl", "top_k", [BUF, BUF, BUF, I32, I32, I32],
                      {"T": program.ctype(dt), "IS_FLOAT": int(dt.kind == "f")})
    device = ctx.device

    def top_k(x, k):
        k = checks.top_k(ctx, x.shape, host(k))
        length = x.shape[-1]
        shape = x.shape[:-1] + (k,)
        values, indices = device.empty(shape, dt), device.empty(shape, np.int32)
        n = num_elements(x.shape)
        if n and k:
            launch.run(n, values.block.buf, indices.block.buf, x.block.buf, length, k, n)
        return values, indices
    return top_k


def register(reg):
    reg.register("Select", OPENCL, factory=_select, constraints={"T": ALL})
    reg.register("Where", OPENCL, factory=_where, constraints={"T": ALL})
    reg.register("Unique", OPENCL, factory=_unique(False), constraints={"T": ALL})
    reg.register("UniqueWithCounts", OPENCL, factory=_unique(True), constraints={"T": ALL})
    # sorted=False may return any order; this kernel always sorts.
    reg.register("TopKV2", OPENCL, factory=_top_k, constraints={"T": FLOAT + INT}, host_memory=("k",))
