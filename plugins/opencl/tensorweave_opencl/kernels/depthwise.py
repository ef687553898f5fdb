"""DepthwiseConv2dNative and its two backprops (kernels/depthwise.cl): direct kernels, one
work item per element computed, NHWC or NCHW through spatial.py's geometry table (the
core's ``conv_output_size``); sizes given as tensors arrive in host memory."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, OPENCL, launcher, num_elements
from tensorweave_opencl.kernels.spatial import Geometry, _from_nhwc, _nhwc, _sizes

_E = errors.InvalidArgumentError


def _kernel(ctx, name):
    return launcher(ctx, "depthwise.cl", name, [BUF, BUF, BUF, I32, BUF],
                    {"T": program.ctype(ctx.attrs["T"].np_dtype)})


def _check_channels(ctx, c, ci):
    if c != ci:
        raise ctx.error(_E, f"input depth {c} does not match the filter's in_channels {ci}")


def _check_dy(ctx, geo, dy, out_nhwc):
    if _nhwc(geo.fmt, dy.shape) != out_nhwc:
        raise ctx.error(_E, f"out_backprop has shape {dy.shape} but the depthwise convolution gives "
                            f"{_from_nhwc(geo.fmt, out_nhwc)}")


def _depthwise(ctx):
    geo = Geometry(ctx, None)
    launch = _kernel(ctx, "depthwise")
    device = ctx.device

    def depthwise(x, f):
        if x.ndim != 4 or f.ndim != 4:
            raise ctx.error(_E, f"input and filter must be 4-D, got shapes {x.shape} and {f.shape}")
        xin = _nhwc(geo.fmt, x.shape)
        kh, kw, ci, m = f.shape
        _check_channels(ctx, xin[3], ci)
        out_nhwc, table = geo(xin, kh, kw, ci * m)
        y = device.empty(_from_nhwc(geo.fmt, out_nhwc), x.dtype)
        n = num_elements(out_nhwc)
        if n:
            launch.run(n, y.block.buf, x.block.buf, f.block.buf, n, table)
        return y
    return depthwise


def _backprop_input(ctx):
    geo = Geometry(ctx, None)
    launch = _kernel(ctx, "depthwise_backprop_input")
    device = ctx.device

    def backprop_input(sizes, f, dy):
        xin = _nhwc(geo.fmt, _sizes(ctx, sizes, "input_sizes"))
        kh, kw, ci, m = f.shape
        _check_channels(ctx, xin[3], ci)
        out_nhwc, table = geo(xin, kh, kw, ci * m)
        _check_dy(ctx, geo, dy, out_nhwc)
        dx = device.empty(_from_nhwc(geo.fmt, xin), dy.dtype)
        n = num_elements(xin)
        if n:
            launch.run(n, dx.block.buf, f.block.buf, dy.block.buf, n, table)
        return dx
    return backprop_input


def _backprop_filter(ctx):
    geo = Geometry(ctx, None)
    launch = _kernel(ctx, "depthwise_backprop_filter")
    device = ctx.device

    def backprop_filter(x, sizes, dy):
        kh, kw, ci, m = _sizes(ctx, sizes, "filter_sizes")
        xin = _nhwc(geo.fmt, x.shape)
        _check_channels(ctx, xin[3], ci)
        out_nhwc, table = geo(xin, kh, kw, ci * m)
        _check_dy(ctx, geo, dy, out_nhwc)
        df = device.empty((kh, kw, ci, m), dy.dtype)
        n = kh * kw * ci * m
        if n:
            launch.run(n, df.block.buf, x.block.buf, dy.block.buf, n, table)
        return df
    return backprop_filter


def register(reg):
    reg.register("DepthwiseConv2dNative", OPENCL, factory=_depthwise, constraints={"T": FLOAT})
    reg.register("DepthwiseConv2dNativeBackpropInput", OPENCL, factory=_backprop_input, constraints={"T": FLOAT},
                 host_memory=("input_sizes",))
    reg.register("DepthwiseConv2dNativeBackpropFilter", OPENCL, factory=_backprop_filter, constraints={"T": FLOAT},
                 host_memory=("filter_sizes",))
