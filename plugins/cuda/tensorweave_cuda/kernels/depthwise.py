"""DepthwiseConv2dNative and its two backprops (``depthwise.cu``): direct kernels, a thread
per element computed (the gradients gather, so they are deterministic), NHWC or NCHW read in
place; the geometry is the core's ``conv_output_size``."""

from __future__ import annotations

from tensorweave.ops.nn_ops import conv_output_size, spatial_axes
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, host, int_list, launch
from tensorweave_cuda.kernels.util import register as reg_kernel


def _setup(ctx):
    fmt = ctx.attrs["data_format"]
    h, w, _ = spatial_axes(fmt)
    s, d = ctx.attrs["strides"], ctx.attrs["dilations"]
    return fmt, s[h], s[w], d[h], d[w]


def _nhwc(dims, fmt):
    return tuple(dims) if fmt == "NHWC" else (dims[0], dims[2], dims[3], dims[1])


def _layout(n, h, w, c, fmt):
    return (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)


def _geometry(ctx, in_nhwc, f_shape, setup):
    """(output shape in the op's layout, the kernel's geometry arguments)."""
    fmt, sh, sw, dh, dw = setup
    n, h, w, c = in_nhwc
    kh, kw, ci, m = f_shape
    if c != ci:
        raise ctx.error(E, f"input depth {c} does not match the filter's in_channels {ci}")
    padding = ctx.attrs["padding"]
    try:
        oh, pt, _ = conv_output_size(h, kh, sh, dh, padding)
        ow, pl, _ = conv_output_size(w, kw, sw, dw, padding)
    except E as e:
        raise ctx.error(E, f"input {h}x{w}, window {kh}x{kw}: {e.message}") from None
    return _layout(n, oh, ow, c * m, fmt), (n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, m,
                                            int(fmt == "NCHW"))


def _sizes(ctx, dev, v, what):
    dims = int_list(ctx, host(dev, v), what)
    if len(dims) != 4 or min(dims) < 0:
        raise ctx.error(E, f"{what} must be 4 non-negative ints, got {dims}")
    return dims


def _depthwise(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    ref = catalog.cnn_kernel("depthwise", dt)
    setup = _setup(ctx)

    def depthwise(x, f):
        if x.ndim != 4 or f.ndim != 4:
            raise ctx.error(E, f"input and filter must be 4-D, got shapes {tuple(x.shape)} and {tuple(f.shape)}")
        out_shape, geom = _geometry(ctx, _nhwc(x.shape, setup[0]), tuple(f.shape), setup)
        y = dev.empty(out_shape, dt.np)
        launch(dev, ref, y.size, x.ptr, f.ptr, y.ptr, *geom)
        return y
    return depthwise


def _backprop_input(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    ref = catalog.cnn_kernel("depthwise_backprop_input", dt)
    setup = _setup(ctx)

    def backprop_input(sizes, f, dy):
        dims = _sizes(ctx, dev, sizes, "input_sizes")
        out_shape, geom = _geometry(ctx, _nhwc(dims, setup[0]), tuple(f.shape), setup)
        if tuple(dy.shape) != out_shape:
            raise ctx.error(E, f"out_backprop has shape {tuple(dy.shape)} but the depthwise convolution gives "
                               f"{out_shape}")
        dx = dev.empty(dims, dt.np)
        launch(dev, ref, dx.size, f.ptr, dy.ptr, dx.ptr, *geom)
        return dx
    return backprop_input


def _backprop_filter(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    ref = catalog.cnn_kernel("depthwise_backprop_filter", dt)
    setup = _setup(ctx)

    def backprop_filter(x, sizes, dy):
        dims = _sizes(ctx, dev, sizes, "filter_sizes")
        out_shape, geom = _geometry(ctx, _nhwc(x.shape, setup[0]), tuple(dims), setup)
        if tuple(dy.shape) != out_shape:
            raise ctx.error(E, f"out_backprop has shape {tuple(dy.shape)} but the depthwise convolution gives "
                               f"{out_shape}")
        df = dev.empty(dims, dt.np)
        launch(dev, ref, df.size, x.ptr, dy.ptr, df.ptr, *geom)
        return df
    return backprop_filter


def register(reg, device_type):
    reg_kernel(reg, "DepthwiseConv2dNative", device_type, _depthwise, catalog.FLOAT)
    reg_kernel(reg, "DepthwiseConv2dNativeBackpropInput", device_type, _backprop_input, catalog.FLOAT,
               host_memory=("input_sizes",))
    reg_kernel(reg, "DepthwiseConv2dNativeBackpropFilter", device_type, _backprop_filter, catalog.FLOAT,
               host_memory=("filter_sizes",))
