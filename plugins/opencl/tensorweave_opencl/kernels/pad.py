"""Padding and reversing (kernels/pad.cl): Pad, PadV2, MirrorPad, MirrorPadGrad, ReverseV2.

Pad/PadV2 fill the output and copy the input into its interior with the strided copy
(``common.StridedCopy``); ReverseV2 is that copy with negative strides. MirrorPad reads each
output element's mirrored source; MirrorPadGrad folds the padding back one dimension at a
time. Paddings and axes arrive in host memory and are checked as on the CPU
(``tensorweave.kernels.indexing``: ``pad_args``, ``paddings``, ``reverse_axes``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.kernels import indexing as checks
from tensorweave_opencl import program
from tensorweave_opencl.kernels.array import fill_value
from tensorweave_opencl.kernels.common import (
    ALL,
    BUF,
    I32,
    INDEX,
    NUMERIC,
    OPENCL,
    StridedCopy,
    contiguous_strides,
    host,
    launcher,
    num_elements,
)


def _pad(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    copy = StridedCopy(ctx, dt)
    fill_from = launcher(ctx, "array.cl", "fill_from", [BUF, BUF, I32], {"T": program.ctype(dt)})
    device = ctx.device

    def pad(x, paddings, constant_values=None):
        pads, shape = checks.pad_args(ctx, x.shape, host(paddings), constant_values)
        out = device.empty(shape, dt)
        n = num_elements(shape)
        if not n:
            return out
        if num_elements(x.shape) != n:  # something to pad
            if constant_values is None:
                fill_value(ctx, out, 0)
            else:
                fill_from.run(n, out.block.buf, constant_values.block.buf, n)
        out_strides = contiguous_strides(shape)
        offset = sum(b * s for (b, _), s in zip(pads, out_strides))
        copy(out, x, x.shape, contiguous_strides(x.shape), out_strides, 0, offset)
        return out
    return pad


def _mirror_pad(ctx):
    mode = ctx.attrs["mode"]
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    launch = launcher(ctx, "pad.cl", "mirror_pad", [BUF, BUF, I32, BUF],
                      {"T": program.ctype(dt), "SHIFT": int(mode == "SYMMETRIC")})
    device = ctx.device

    def mirror_pad(x, paddings):
        pads, shape = checks.pad_args(ctx, x.shape, host(paddings), mode=mode)
        if not any(b or a for b, a in pads):
            return x
        out = device.empty(shape, dt)
        n = num_elements(shape)
        if n:
            meta = device.runtime.int_table([x.ndim, *shape, *x.shape, *(b for b, _ in pads)])
            launch.run(n, out.block.buf, x.block.buf, n, meta)
        return out
    return mirror_pad


def _mirror_pad_grad(ctx):
    mode = ctx.attrs["mode"]
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    launch = launcher(ctx, "pad.cl", "mirror_pad_grad", [BUF, BUF, I32, I32, I32, I32, I32],
                      {"T": program.ctype(dt), "SHIFT": int(mode == "SYMMETRIC")})
    device = ctx.device

    def mirror_pad_grad(g, paddings):
        pads = checks.paddings(ctx, g.shape, host(paddings), mode, grad=True)
        out = g
        for d, (b, a) in enumerate(pads):
            if not (b or a):
                continue
            length = out.shape[d] - b - a
            shape = out.shape[:d] + (length,) + out.shape[d + 1:]
            folded = device.empty(shape, dt)
            total = num_elements(shape)
            if total:
                launch.run(total, folded.block.buf, out.block.buf, length, b, a, num_elements(shape[d + 1:]), total)
            out = folded
        return out
    return mirror_pad_grad


def _reverse(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    copy = StridedCopy(ctx, dt)
    device = ctx.device

    def reverse(x, axis):
        axes = checks.reverse_axes(ctx, host(axis), x.ndim)
        if not axes:
            return x
        out = device.empty(x.shape, dt)
        strides = contiguous_strides(x.shape)
        offset = sum((x.shape[a] - 1) * strides[a] for a in axes)
        x_strides = [-s if i in axes else s for i, s in enumerate(strides)]
        copy(out, x, x.shape, x_strides, strides, offset, 0)
        return out
    return reverse


def register(reg):
    reg.register("Pad", OPENCL, factory=_pad, constraints={"T": ALL, "Tpaddings": INDEX}, host_memory=("paddings",))
    reg.register("PadV2", OPENCL, factory=_pad, constraints={"T": ALL, "Tpaddings": INDEX}, host_memory=("paddings",))
    reg.register("MirrorPad", OPENCL, factory=_mirror_pad, constraints={"T": ALL, "Tpaddings": INDEX},
                 host_memory=("paddings",))
    reg.register("MirrorPadGrad", OPENCL, factory=_mirror_pad_grad, constraints={"T": NUMERIC, "Tpaddings": INDEX},
                 host_memory=("paddings",))
    reg.register("ReverseV2", OPENCL, factory=_reverse, constraints={"T": ALL, "Tidx": INDEX}, host_memory=("axis",))
