"""FusedBatchNorm (and V3) with its gradients, LRN and LRNGrad (kernels/normalization.cl).

Batch statistics: one work item per channel (a two-pass mean and variance over the other
axes, NHWC or NCHW read in place); the normalisation and the input gradient: one per
element. The shape checks and constants are the core's (``ops/normalization_ops.py``).
``scale``/``offset``/``mean``/``variance`` have the image's type (V3 with ``U == T``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops import normalization_ops as norm
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, OPENCL, launcher, num_elements

_E = errors.InvalidArgumentError


def _kernels(ctx, names):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    scal = dt.type
    sigs = {
        "bn_stats": [BUF, BUF, BUF, BUF, BUF, I32, I32, I32, I32, scal],
        "bn_apply": [BUF] * 6 + [scal, I32, I32, I32, I32],
        "bn_grad_sums": [BUF] * 7 + [scal, I32, I32, I32, I32],
        "bn_grad_dx": [BUF] * 8 + [scal, I32, I32, I32, I32, I32, scal],
        "lrn": [BUF, BUF, I32, I32, I32, scal, scal, scal],
        "lrn_grad": [BUF] * 4 + [I32, I32, I32, scal, scal, scal],
    }
    return dt, [launcher(ctx, "normalization.cl", n, sigs[n], {"T": program.ctype(dt)}) for n in names]


def _layout(x_shape, fmt):
    """(channels, rows, HW, nchw) of a 4-D tensor."""
    c = x_shape[norm.bn_channel_axis(fmt)]
    hw = x_shape[2] * x_shape[3] if fmt == "NCHW" else 1
    return c, (num_elements(x_shape) // c if c else 0), hw, int(fmt == "NCHW")


def _fused_batch_norm(ctx):
    fmt, eps, training = ctx.attrs["data_format"], float(ctx.attrs["epsilon"]), bool(ctx.attrs["is_training"])
    v3 = ctx.op_type == "FusedBatchNormV3"
    dt, (stats, apply) = _kernels(ctx, ["bn_stats", "bn_apply"])
    device = ctx.device

    def fused_batch_norm(x, scale, offset, mean, variance):
        try:
            norm.bn_check_inputs(x.shape, scale.shape, offset.shape, mean.shape, variance.shape, fmt, training)
        except _E as e:
            raise ctx.error(_E, e.message) from None
        c, rows, hw, nchw = _layout(x.shape, fmt)
        if training:
            mean = device.empty((c,), dt)
            batch_var, r1, variance = (device.empty((c,), dt) for _ in range(3))
            if c:
                stats.run(c, mean.block.buf, batch_var.block.buf, r1.block.buf, variance.block.buf, x.block.buf,
                          c, rows, hw, nchw, dt.type(norm.bessel_factor(rows)))
            outs = [mean, batch_var, r1, variance]
        else:
            outs = [mean, variance, mean, variance]
        y = device.empty(x.shape, dt)
        n = num_elements(x.shape)
        if n:
            apply.run(n, y.block.buf, x.block.buf, scale.block.buf, offset.block.buf, outs[0].block.buf,
                      outs[3].block.buf, dt.type(eps), n, c, hw, nchw)
        return tuple([y] + outs + ([device.empty((0,), dt)] if v3 else []))
    return fused_batch_norm


def _fused_batch_norm_grad(ctx):
    fmt, eps, training = ctx.attrs["data_format"], float(ctx.attrs["epsilon"]), bool(ctx.attrs["is_training"])
    dt, (sums, grad_dx) = _kernels(ctx, ["bn_grad_sums", "bn_grad_dx"])
    device = ctx.device

    def fused_batch_norm_grad(dy, x, scale, r1, r2, *_):
        try:
            norm.bn_check_grad_inputs(dy.shape, x.shape, scale.shape, r1.shape, r2.shape, fmt)
        except _E as e:
            raise ctx.error(_E, e.message) from None
        c, rows, hw, nchw = _layout(x.shape, fmt)
        doffset, dscale, dy_xc = (device.empty((c,), dt) for _ in range(3))
        if c:
            sums.run(c, doffset.block.buf, dscale.block.buf, dy_xc.block.buf, dy.block.buf, x.block.buf,
                     r1.block.buf, r2.block.buf, dt.type(eps), c, rows, hw, nchw)
        dx = device.empty(x.shape, dt)
        n = num_elements(x.shape)
        if n:
            grad_dx.run(n, dx.block.buf, dy.block.buf, x.block.buf, scale.block.buf, r1.block.buf, r2.block.buf,
                        doffset.block.buf, dy_xc.block.buf, dt.type(eps), n, c, hw, nchw, int(training),
                        dt.type(max(rows, 1)))
        return dx, dscale, doffset, device.empty((0,), dt), device.empty((0,), dt)
    return fused_batch_norm_grad


def _lrn_args(ctx, dt):
    r, bias, alpha, beta = norm.lrn_params(ctx.attrs)
    return r, dt.type(bias), dt.type(alpha), dt.type(beta)


def _check4(ctx, *tensors):
    if any(t.ndim != 4 for t in tensors) or any(t.shape != tensors[0].shape for t in tensors):
        raise ctx.error(_E, f"inputs must be 4-dimensional (NHWC) and of one shape, got "
                            f"{', '.join(str(t.shape) for t in tensors)}")


def _lrn(ctx):
    dt, (launch,) = _kernels(ctx, ["lrn"])
    args = _lrn_args(ctx, dt)
    device = ctx.device

    def lrn(x):
        _check4(ctx, x)
        y = device.empty(x.shape, dt)
        n = num_elements(x.shape)
        if n:
            launch.run(n, y.block.buf, x.block.buf, n, x.shape[3], *args)
        return y
    return lrn


def _lrn_grad(ctx):
    dt, (launch,) = _kernels(ctx, ["lrn_grad"])
    args = _lrn_args(ctx, dt)
    device = ctx.device

    def lrn_grad(g, x, y):
        _check4(ctx, g, x, y)
        dx = device.empty(x.shape, dt)
        n = num_elements(x.shape)
        if n:
            launch.run(n, dx.block.buf, g.block.buf, x.block.buf, y.block.buf, n, x.shape[3], *args)
        return dx
    return lrn_grad


def register(reg):
    for t in FLOAT:
        reg.register("FusedBatchNorm", OPENCL, factory=_fused_batch_norm, constraints={"T": [t]})
        reg.register("FusedBatchNormV3", OPENCL, factory=_fused_batch_norm, constraints={"T": [t], "U": [t]})
        reg.register("FusedBatchNormGrad", OPENCL, factory=_fused_batch_norm_grad, constraints={"T": [t]})
        reg.register("FusedBatchNormGradV3", OPENCL, factory=_fused_batch_norm_grad,
                     constraints={"T": [t], "U": [t]})
    reg.register("LRN", OPENCL, factory=_lrn, constraints={"T": FLOAT})
    reg.register("LRNGrad", OPENCL, factory=_lrn_grad, constraints={"T": FLOAT})
