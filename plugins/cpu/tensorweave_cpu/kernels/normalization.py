"""Batch normalization (FusedBatchNorm, FusedBatchNormV3 and their gradients) and local
response normalization (LRN, LRNGrad) with NumPy.

Per-channel statistics are reductions over the other three axes (NHWC or NCHW read in
place). float16 images are computed in float32 (V3: in ``U``). LRN's windowed sum of
squares over the channels is one cumulative sum and a difference, in float64, so no loop
runs over channels or pixels. The shape checks and constants are the core's
(``tensorweave.ops.normalization_ops``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops import normalization_ops as norm

CPU = "CPU"
_E = errors.InvalidArgumentError


def _bn_setup(ctx):
    fmt = ctx.attrs["data_format"]
    axis = norm.bn_channel_axis(fmt)
    reduce_axes = tuple(a for a in range(4) if a != axis)
    bshape = [1, 1, 1, 1]
    return fmt, axis, reduce_axes, bshape, float(ctx.attrs["epsilon"]), bool(ctx.attrs["is_training"])


def _compute_dtype(x, u):
    return np.result_type(np.float32 if x.dtype == np.float16 else x.dtype, u)


def _fused_batch_norm(ctx):
    fmt, axis, red, bshape, eps, training = _bn_setup(ctx)
    v3 = ctx.op_type == "FusedBatchNormV3"

    def fused_batch_norm(x, scale, offset, mean, variance):
        try:
            c = norm.bn_check_inputs(x.shape, scale.shape, offset.shape, mean.shape, variance.shape, fmt, training)
        except _E as e:
            raise ctx.error(_E, e.message) from None
        u = scale.dtype
        ct = _compute_dtype(x, u)
        xf = x.astype(ct, copy=False)
        b = list(bshape)
        b[axis] = c
        if training:
            count = x.size // c if c else 0
            if count:
                m = xf.mean(axis=red)
                v = np.square(xf - m.reshape(b)).mean(axis=red)
            else:
                m = np.full((c,), np.nan, ct)
                v = np.full((c,), np.nan, ct)
            batch_var = v * norm.bessel_factor(count)
        else:
            m, v = mean.astype(ct), variance.astype(ct)
            batch_var = v
        inv = 1.0 / np.sqrt(v + ct.type(eps))
        y = (xf - m.reshape(b)) * (inv * scale).reshape(b) + offset.astype(ct).reshape(b)
        outs = (y.astype(x.dtype, copy=False), m.astype(u), batch_var.astype(u), m.astype(u), v.astype(u))
        return outs + (np.zeros((0,), u),) if v3 else outs
    return fused_batch_norm


def _fused_batch_norm_grad(ctx):
    fmt, axis, red, bshape, eps, training = _bn_setup(ctx)

    def fused_batch_norm_grad(dy, x, scale, r1, r2, *_):
        try:
            c = norm.bn_check_grad_inputs(dy.shape, x.shape, scale.shape, r1.shape, r2.shape, fmt)
        except _E as e:
            raise ctx.error(_E, e.message) from None
        u = scale.dtype
        ct = _compute_dtype(x, u)
        b = list(bshape)
        b[axis] = c
        dyf, xf = dy.astype(ct, copy=False), x.astype(ct, copy=False)
        inv = 1.0 / np.sqrt(r2.astype(ct) + ct.type(eps))
        xc = xf - r1.astype(ct).reshape(b)
        dy_sum = dyf.sum(axis=red)
        dy_xc = (dyf * xc).sum(axis=red)
        if training:
            count = max(x.size // c if c else 0, 1)
            dx = (scale * inv).reshape(b) * (dyf - (dy_sum / count).reshape(b)
                                              - xc * (dy_xc * inv * inv / count).reshape(b))
        else:
            dx = dyf * (scale * inv).reshape(b)
        empty = np.zeros((0,), u)
        return dx.astype(x.dtype, copy=False), (dy_xc * inv).astype(u), dy_sum.astype(u), empty, empty
    return fused_batch_norm_grad


# ---------------------------------------------------------------------------------------
# LRN
def _window_sum(v, r):
    """sum(v[..., d - r : d + r + 1]) along the last axis, for every d."""
    c = v.shape[-1]
    cs = np.zeros(v.shape[:-1] + (c + 1,), v.dtype)
    np.cumsum(v, axis=-1, out=cs[..., 1:])
    d = np.arange(c)
    return cs[..., np.minimum(d + r + 1, c)] - cs[..., np.maximum(d - r, 0)]


def _check4(ctx, *arrays):
    for a in arrays:
        if a.ndim != 4:
            raise ctx.error(_E, f"input must be 4-dimensional (NHWC), got shape {a.shape}")
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ctx.error(_E, f"inputs must have one shape, got {', '.join(str(a.shape) for a in arrays)}")


def _lrn(ctx):
    r, bias, alpha, beta = norm.lrn_params(ctx.attrs)

    def lrn(x):
        _check4(ctx, x)
        xf = x.astype(np.float64)
        n = bias + alpha * _window_sum(xf * xf, r)
        return (xf * n ** -beta).astype(x.dtype)
    return lrn


def _lrn_grad(ctx):
    r, bias, alpha, beta = norm.lrn_params(ctx.attrs)

    def lrn_grad(g, x, y):
        _check4(ctx, g, x, y)
        gf, xf, yf = (a.astype(np.float64) for a in (g, x, y))
        n = bias + alpha * _window_sum(xf * xf, r)
        dx = gf * n ** -beta - (2.0 * alpha * beta) * xf * _window_sum(gf * yf / n, r)
        return dx.astype(x.dtype)
    return lrn_grad


def register(reg):
    reg.register("FusedBatchNorm", CPU, factory=_fused_batch_norm)
    reg.register("FusedBatchNormV3", CPU, factory=_fused_batch_norm)
    reg.register("FusedBatchNormGrad", CPU, factory=_fused_batch_norm_grad)
    reg.register("FusedBatchNormGradV3", CPU, factory=_fused_batch_norm_grad)
    reg.register("LRN", CPU, factory=_lrn)
    reg.register("LRNGrad", CPU, factory=_lrn_grad)
