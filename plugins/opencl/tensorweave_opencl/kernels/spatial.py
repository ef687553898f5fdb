"""Conv2D and its two backprops, MaxPool/AvgPool and their gradients (kernels/spatial.cl).

Direct kernels, one work item per element computed, in NHWC or NCHW: the layout only
changes the element strides in the geometry table, computed on the host once per shape
with the core's ``conv_output_size`` (TensorFlow's SAME/VALID padding). Sizes given as
tensors (input_sizes, filter_sizes, orig_input_shape) arrive in host memory.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops.nn_ops import conv_output_size, spatial_axes
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, NUMERIC, OPENCL, host, launcher, num_elements

_E = errors.InvalidArgumentError
_LOWEST = {"float32": "-INFINITY", "float64": "-INFINITY", "int32": "INT_MIN", "int64": "LONG_MIN", "uint8": "0"}


def _layout_strides(fmt, dims_nhwc):
    """Element strides for logical (n, h, w, c) of a contiguous tensor in ``fmt``."""
    n, h, w, c = dims_nhwc
    if fmt == "NHWC":
        return [h * w * c, w * c, c, 1]
    return [c * h * w, w, 1, h * w]  # NCHW


def _nhwc(fmt, shape):
    return tuple(shape) if fmt == "NHWC" else (shape[0], shape[2], shape[3], shape[1])


def _from_nhwc(fmt, dims):
    n, h, w, c = dims
    return (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)


class Geometry:
    """The geometry table of a node per input shape (cached)."""

    def __init__(self, ctx, window_attr):
        self.ctx = ctx
        self.fmt = ctx.attrs["data_format"]
        hi, wi, _ = spatial_axes(self.fmt)
        self.strides = ctx.attrs["strides"][hi], ctx.attrs["strides"][wi]
        dil = ctx.attrs.get("dilations") or [1, 1, 1, 1]
        self.dilations = dil[hi], dil[wi]
        self.window = (ctx.attrs[window_attr][hi], ctx.attrs[window_attr][wi]) if window_attr else None
        self.padding = ctx.attrs["padding"]
        self.cache: dict = {}

    def __call__(self, in_nhwc, kh, kw, co):
        key = (in_nhwc, kh, kw, co)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        n, h, w, c = in_nhwc
        (sh, sw), (dh, dw) = self.strides, self.dilations
        try:
            oh, pt, _ = conv_output_size(h, kh, sh, dh, self.padding)
            ow, pl, _ = conv_output_size(w, kw, sw, dw, self.padding)
        except errors.InvalidArgumentError as e:
            raise self.ctx.error(_E, f"input {h}x{w}, window {kh}x{kw}: {e.message}") from None
        out_nhwc = (n, oh, ow, co)
        table = [n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, co,
                 *_layout_strides(self.fmt, in_nhwc), *_layout_strides(self.fmt, out_nhwc)]
        hit = (out_nhwc, self.ctx.device.runtime.int_table(table))
        if len(self.cache) < 32:
            self.cache[key] = hit
        return hit


def _sizes(ctx, v, what):
    arr = host(v)
    if arr.shape != (4,) or (arr < 0).any():
        raise ctx.error(_E, f"{what} must be 4 non-negative ints, got {arr.tolist()}")
    return [int(d) for d in arr]


def _kernel(ctx, name, scalars):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    ct = program.ctype(dt)
    return launcher(ctx, "spatial.cl", name, scalars,
                    {"T": ct, "V": f"{ct}8", "LOWEST": f"(T){_LOWEST.get(dt.name, '0')}"})


class _Conv:
    """A convolution kernel and its vector variant (8 output channels per work item),
    used when the output channels are a multiple of 8."""

    def __init__(self, ctx, name):
        scal = [BUF, BUF, BUF, I32, BUF]
        self.scalar = _kernel(ctx, name, scal)
        self.vector = _kernel(ctx, name + "_vec", scal)

    def pick(self, co):
        return (self.vector, 8) if co % 8 == 0 else (self.scalar, 1)


def _conv2d(ctx):
    geo = Geometry(ctx, None)
    kernels = _Conv(ctx, "conv2d")
    device = ctx.device

    def conv2d(x, f):
        if x.ndim != 4 or f.ndim != 4:
            raise ctx.error(_E, f"input and filter must be 4-D, got shapes {x.shape} and {f.shape}")
        xin = _nhwc(geo.fmt, x.shape)
        kh, kw, ci, co = f.shape
        if xin[3] != ci:
            raise ctx.error(_E, f"input depth {xin[3]} does not match the filter's in_channels {ci}")
        out_nhwc, table = geo(xin, kh, kw, co)
        y = device.empty(_from_nhwc(geo.fmt, out_nhwc), x.dtype)
        launch, per_item = kernels.pick(co)
        n = num_elements(out_nhwc) // per_item
        if n:
            launch.run(n, y.block.buf, x.block.buf, f.block.buf, n, table)
        return y
    return conv2d


def _conv2d_backprop_input(ctx):
    geo = Geometry(ctx, None)
    kernels = _Conv(ctx, "conv2d_backprop_input")
    device = ctx.device

    def backprop_input(sizes, f, dy):
        xin = _nhwc(geo.fmt, _sizes(ctx, sizes, "input_sizes"))
        kh, kw, ci, co = f.shape
        out_nhwc, table = geo(xin, kh, kw, co)
        if _nhwc(geo.fmt, dy.shape) != out_nhwc:
            raise ctx.error(_E, f"out_backprop has shape {dy.shape} but the convolution gives "
                                f"{_from_nhwc(geo.fmt, out_nhwc)}")
        dx = device.empty(_from_nhwc(geo.fmt, xin), dy.dtype)
        launch, _ = kernels.pick(co)  # the vector variant reduces over 8 channels at a time
        n = num_elements(xin)
        if n:
            launch.run(n, dx.block.buf, f.block.buf, dy.block.buf, n, table)
        return dx
    return backprop_input


def _conv2d_backprop_filter(ctx):
    geo = Geometry(ctx, None)
    kernels = _Conv(ctx, "conv2d_backprop_filter")
    device = ctx.device

    def backprop_filter(x, sizes, dy):
        kh, kw, ci, co = _sizes(ctx, sizes, "filter_sizes")
        xin = _nhwc(geo.fmt, x.shape)
        out_nhwc, table = geo(xin, kh, kw, co)
        if _nhwc(geo.fmt, dy.shape) != out_nhwc:
            raise ctx.error(_E, f"out_backprop has shape {dy.shape} but the convolution gives "
                                f"{_from_nhwc(geo.fmt, out_nhwc)}")
        df = device.empty((kh, kw, ci, co), dy.dtype)
        launch, per_item = kernels.pick(co)
        n = kh * kw * ci * co // per_item
        if n:
            launch.run(n, df.block.buf, x.block.buf, dy.block.buf, n, table)
        return df
    return backprop_filter


def _pool(kind):
    def factory(ctx):
        geo = Geometry(ctx, "ksize")
        launch = _kernel(ctx, kind, [BUF, BUF, I32, BUF])
        device = ctx.device

        def pool(x):
            if x.ndim != 4:
                raise ctx.error(_E, f"input must be 4-D, got shape {x.shape}")
            xin = _nhwc(geo.fmt, x.shape)
            out_nhwc, table = geo(xin, *geo.window, xin[3])
            y = device.empty(_from_nhwc(geo.fmt, out_nhwc), x.dtype)
            n = num_elements(out_nhwc)
            if n:
                launch.run(n, y.block.buf, x.block.buf, n, table)
            return y
        return pool
    return factory


def _max_pool_grad(ctx):
    geo = Geometry(ctx, "ksize")
    argmax = _kernel(ctx, "max_pool_argmax", [BUF, BUF, BUF, I32, BUF])
    launch = _kernel(ctx, "max_pool_grad", [BUF, BUF, BUF, I32, BUF])
    device = ctx.device

    def max_pool_grad(x, y, g):
        xin = _nhwc(geo.fmt, x.shape)
        out_nhwc, table = geo(xin, *geo.window, xin[3])
        if _nhwc(geo.fmt, y.shape) != out_nhwc or g.shape != y.shape:
            raise ctx.error(_E, f"orig_output {y.shape} and grad {g.shape} must have the pooled shape "
                                f"{_from_nhwc(geo.fmt, out_nhwc)}")
        dx = device.empty(x.shape, g.dtype)
        n_out, n = num_elements(out_nhwc), num_elements(xin)
        if n_out:
            arg = device.empty(out_nhwc, np.int32)
            argmax.run(n_out, arg.block.buf, x.block.buf, y.block.buf, n_out, table)
        else:
            arg = device.empty((1,), np.int32)  # nothing to route: every window is empty
        if n:
            launch.run(n, dx.block.buf, arg.block.buf, g.block.buf, n, table)
        return dx
    return max_pool_grad


def _avg_pool_grad(ctx):
    geo = Geometry(ctx, "ksize")
    launch = _kernel(ctx, "avg_pool_grad", [BUF, BUF, I32, BUF])
    device = ctx.device

    def avg_pool_grad(sizes, g):
        xin = _nhwc(geo.fmt, _sizes(ctx, sizes, "orig_input_shape"))
        out_nhwc, table = geo(xin, *geo.window, xin[3])
        if _nhwc(geo.fmt, g.shape) != out_nhwc:
            raise ctx.error(_E, f"grad has shape {g.shape} but pooling an input of shape "
                                f"{_from_nhwc(geo.fmt, xin)} gives {_from_nhwc(geo.fmt, out_nhwc)}")
        dx = device.empty(_from_nhwc(geo.fmt, xin), g.dtype)
        n = num_elements(xin)
        if n:
            launch.run(n, dx.block.buf, g.block.buf, n, table)
        return dx
    return avg_pool_grad


def register(reg):
    reg.register("Conv2D", OPENCL, factory=_conv2d, constraints={"T": FLOAT})
    reg.register("Conv2DBackpropInput", OPENCL, factory=_conv2d_backprop_input, constraints={"T": FLOAT},
                 host_memory=("input_sizes",))
    reg.register("Conv2DBackpropFilter", OPENCL, factory=_conv2d_backprop_filter, constraints={"T": FLOAT},
                 host_memory=("filter_sizes",))
    reg.register("MaxPool", OPENCL, factory=_pool("max_pool"), constraints={"T": NUMERIC})
    reg.register("MaxPoolGrad", OPENCL, factory=_max_pool_grad, constraints={"T": FLOAT})
    reg.register("AvgPool", OPENCL, factory=_pool("avg_pool"), constraints={"T": FLOAT})
    reg.register("AvgPoolGrad", OPENCL, factory=_avg_pool_grad, constraints={"T": FLOAT},
                 host_memory=("orig_input_shape",))
