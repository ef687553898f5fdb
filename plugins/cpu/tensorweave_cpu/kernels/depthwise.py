"""DepthwiseConv2dNative and its two backprops with NumPy.

One vectorised step per filter tap (``kh * kw`` steps, none per pixel or channel): the
input elements under tap (i, j) for every output are a strided view of the padded input
(``nn._tap``), multiplied by that tap's ``[in, multiplier]`` filter slice. The input
gradient adds each tap's products back through the same views; the filter gradient reduces
each tap's view against the output gradient. NCHW is transposed to NHWC views around the
same code; the geometry is the core's (``conv_output_size``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_cpu.kernels.nn import _conv_setup, _from_nhwc, _geometry, _pad, _sizes, _tap, _to_nhwc

CPU = "CPU"
_E = errors.InvalidArgumentError


def _check_channels(ctx, c, ci):
    if c != ci:
        raise ctx.error(_E, f"input depth {c} does not match the filter's in_channels {ci}")


def _check_dy(ctx, dy, expected):
    if dy.shape != tuple(expected):
        raise ctx.error(_E, f"out_backprop has shape {dy.shape} (NHWC) but the depthwise convolution gives "
                            f"{tuple(expected)}")


def _depthwise(ctx):
    fmt, sh, sw, dh, dw = _conv_setup(ctx)

    def depthwise(x, f):
        if x.ndim != 4 or f.ndim != 4:
            raise ctx.error(_E, f"input and filter must be 4-D, got shapes {x.shape} and {f.shape}")
        x = _to_nhwc(x, fmt)
        n, h, w, c = x.shape
        kh, kw, ci, m = f.shape
        _check_channels(ctx, c, ci)
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, sh, sw, dh, dw)
        xp = _pad(x, pads)
        acc = np.zeros((n, oh, ow, c, m), x.dtype)
        for i in range(kh):
            for j in range(kw):
                acc += _tap(xp, i * dh, j * dw, oh, ow, sh, sw)[..., None] * f[i, j]
        return _from_nhwc(acc.reshape(n, oh, ow, c * m), fmt)
    return depthwise


def _backprop_input(ctx):
    fmt, sh, sw, dh, dw = _conv_setup(ctx)

    def backprop_input(sizes, f, dy):
        sizes = _sizes(ctx, sizes, "input_sizes")
        n, h, w, c = sizes if fmt == "NHWC" else (sizes[0], sizes[2], sizes[3], sizes[1])
        kh, kw, ci, m = f.shape
        _check_channels(ctx, c, ci)
        dy = _to_nhwc(dy, fmt)
        oh, ow, (pt, pb, pl, pr) = _geometry(ctx, h, w, kh, kw, sh, sw, dh, dw)
        _check_dy(ctx, dy, (n, oh, ow, c * m))
        dy5 = dy.reshape(n, oh, ow, c, m)
        dxp = np.zeros((n, h + pt + pb, w + pl + pr, c), dy.dtype)
        for i in range(kh):
            for j in range(kw):
                _tap(dxp, i * dh, j * dw, oh, ow, sh, sw)[...] += np.einsum("nhwcm,cm->nhwc", dy5, f[i, j])
        return _from_nhwc(dxp[:, pt:pt + h, pl:pl + w, :], fmt)
    return backprop_input


def _backprop_filter(ctx):
    fmt, sh, sw, dh, dw = _conv_setup(ctx)

    def backprop_filter(x, sizes, dy):
        kh, kw, ci, m = _sizes(ctx, sizes, "filter_sizes")
        x, dy = _to_nhwc(x, fmt), _to_nhwc(dy, fmt)
        n, h, w, c = x.shape
        _check_channels(ctx, c, ci)
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, sh, sw, dh, dw)
        _check_dy(ctx, dy, (n, oh, ow, c * m))
        dy5 = dy.reshape(n * oh * ow, c, m)
        xp = _pad(x, pads)
        df = np.empty((kh, kw, c, m), dy.dtype)
        for i in range(kh):
            for j in range(kw):
                tap = _tap(xp, i * dh, j * dw, oh, ow, sh, sw).reshape(n * oh * ow, c)
                df[i, j] = np.einsum("rc,rcm->cm", tap, dy5)
        return df
    return backprop_filter


def register(reg):
    reg.register("DepthwiseConv2dNative", CPU, factory=_depthwise)
    reg.register("DepthwiseConv2dNativeBackpropInput", CPU, factory=_backprop_input)
    reg.register("DepthwiseConv2dNativeBackpropFilter", CPU, factory=_backprop_filter)
