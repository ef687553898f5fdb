"""FusedBatchNorm (and V3) with its gradients, LRN and LRNGrad (``normalization.cu``): a
thread per channel for the batch statistics and the scale/offset gradients, a thread per
element for the rest; NHWC and NCHW are read in place. The shape checks and constants are
the core's (``tensorweave.ops.normalization_ops``). ``scale``/``offset``/``mean``/``variance``
have the image's type (V3 with ``U == T``)."""

from __future__ import annotations

from tensorweave.ops import normalization_ops as norm
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, launch
from tensorweave_cuda.kernels.util import register as reg_kernel


def _layout(x_shape, fmt):
    """(channels, rows, hw, nchw) of a 4-D tensor."""
    c = x_shape[norm.bn_channel_axis(fmt)]
    n = 1
    for d in x_shape:
        n *= d
    return c, (n // c if c else 0), (x_shape[2] * x_shape[3] if fmt == "NCHW" else 1), int(fmt == "NCHW")


def _attrs(ctx):
    return ctx.attrs["data_format"], float(ctx.attrs["epsilon"]), bool(ctx.attrs["is_training"])


def _fused_batch_norm(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    stats, apply = catalog.cnn_kernel("bn_stats", dt), catalog.cnn_kernel("bn_apply", dt)
    fmt, eps, training = _attrs(ctx)
    v3 = ctx.op_type == "FusedBatchNormV3"

    def fused_batch_norm(x, scale, offset, mean, variance):
        try:
            norm.bn_check_inputs(x.shape, scale.shape, offset.shape, mean.shape, variance.shape, fmt, training)
        except E as e:
            raise ctx.error(E, e.message) from None
        c, rows, hw, nchw = _layout(x.shape, fmt)
        if training:
            mean, batch_var, r1, variance = (dev.empty((c,), dt.np) for _ in range(4))
            launch(dev, stats, c, x.ptr, mean.ptr, batch_var.ptr, r1.ptr, variance.ptr, c, rows, hw, nchw,
                   norm.bessel_factor(rows))
            outs = [mean, batch_var, r1, variance]
        else:
            outs = [mean, variance, mean, variance]
        y = dev.empty(x.shape, dt.np)
        launch(dev, apply, y.size, x.ptr, scale.ptr, offset.ptr, outs[0].ptr, outs[3].ptr, y.ptr, eps, y.size, c,
               hw, nchw)
        return tuple([y] + outs + ([dev.empty((0,), dt.np)] if v3 else []))
    return fused_batch_norm


def _fused_batch_norm_grad(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    sums, grad_dx = catalog.cnn_kernel("bn_grad_sums", dt), catalog.cnn_kernel("bn_grad_dx", dt)
    fmt, eps, training = _attrs(ctx)

    def fused_batch_norm_grad(dy, x, scale, r1, r2, *_):
        try:
            norm.bn_check_grad_inputs(dy.shape, x.shape, scale.shape, r1.shape, r2.shape, fmt)
        except E as e:
            raise ctx.error(E, e.message) from None
        c, rows, hw, nchw = _layout(x.shape, fmt)
        doffset, dscale, dy_xc = (dev.empty((c,), dt.np) for _ in range(3))
        launch(dev, sums, c, dy.ptr, x.ptr, r1.ptr, r2.ptr, doffset.ptr, dscale.ptr, dy_xc.ptr, eps, c, rows, hw,
               nchw)
        dx = dev.empty(x.shape, dt.np)
        launch(dev, grad_dx, dx.size, dy.ptr, x.ptr, scale.ptr, r1.ptr, r2.ptr, doffset.ptr, dy_xc.ptr, dx.ptr, eps,
               dx.size, c, hw, nchw, int(training), float(max(rows, 1)))
        return dx, dscale, doffset, dev.empty((0,), dt.np), dev.empty((0,), dt.np)
    return fused_batch_norm_grad


def _check4(ctx, *tensors):
    if any(t.ndim != 4 for t in tensors) or any(tuple(t.shape) != tuple(tensors[0].shape) for t in tensors):
        raise ctx.error(E, f"inputs must be 4-dimensional (NHWC) and of one shape, got "
                           f"{', '.join(str(tuple(t.shape)) for t in tensors)}")


def _lrn(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    ref = catalog.cnn_kernel("lrn", dt)
    r, bias, alpha, beta = norm.lrn_params(ctx.attrs)

    def lrn(x):
        _check4(ctx, x)
        y = dev.empty(x.shape, dt.np)
        launch(dev, ref, y.size, x.ptr, y.ptr, y.size, x.shape[3], r, bias, alpha, beta)
        return y
    return lrn


def _lrn_grad(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    ref = catalog.cnn_kernel("lrn_grad", dt)
    r, bias, alpha, beta = norm.lrn_params(ctx.attrs)

    def lrn_grad(g, x, y):
        _check4(ctx, g, x, y)
        dx = dev.empty(x.shape, dt.np)
        launch(dev, ref, dx.size, g.ptr, x.ptr, y.ptr, dx.ptr, dx.size, x.shape[3], r, bias, alpha, beta)
        return dx
    return lrn_grad


def register(reg, device_type):
    for t in catalog.FLOAT:
        reg_kernel(reg, "FusedBatchNorm", device_type, _fused_batch_norm, [t])
        reg_kernel(reg, "FusedBatchNormV3", device_type, _fused_batch_norm, [t], constraints={"U": [t]})
        reg_kernel(reg, "FusedBatchNormGrad", device_type, _fused_batch_norm_grad, [t])
        reg_kernel(reg, "FusedBatchNormGradV3", device_type, _fused_batch_norm_grad, [t], constraints={"U": [t]})
    reg_kernel(reg, "LRN", device_type, _lrn, catalog.FLOAT)
    reg_kernel(reg, "LRNGrad", device_type, _lrn_grad, catalog.FLOAT)
