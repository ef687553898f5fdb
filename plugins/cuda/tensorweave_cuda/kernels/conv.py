"""Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter: the CPU kernels' im2col formulation,
with the data movement in ``conv.cu`` and the products on cuBLAS (``blas.py``)::

    Conv2D          y[rows, co]      = cols[rows, kh*kw*c] @ f[kh*kw*c, co]
    input gradient  dcols[rows, k]   = dy[rows, co] @ f[k, co]ᵀ, then col2im
    filter gradient df[kh*kw*c, co]  = colsᵀ @ dy[rows, co]

where ``rows = n * oh * ow`` and ``cols`` is the im2col matrix of the input's windows.
col2im is a gather (each input element sums its window entries in a fixed order), so the
input gradient is deterministic. A 1x1 window with unit strides and no padding on NHWC needs
no im2col: the input is the cols matrix.

The cols matrix takes ``kh * kw`` times the input's memory; it is built for at most
``WORKSPACE_BYTES`` of images at a time (at least one image), the GEMMs running per chunk
of the batch (the filter gradient adds the chunks' products up). im2col and col2im read and
write NHWC or NCHW images directly; the GEMMs' ``[rows, co]`` side is NHWC, so on NCHW the
output (Conv2D) or the incoming gradient (both backprops) is transposed by a strided copy.
"""

from __future__ import annotations

import dataclasses

from tensorweave.framework import errors
from tensorweave.ops.nn_ops import conv_output_size, spatial_axes
from tensorweave_cuda import blas, plan
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.array import _strided_copy
from tensorweave_cuda.kernels.util import E, fill, host, int_list, launch
from tensorweave_cuda.kernels.util import register as reg_kernel

# The most bytes of im2col matrix one chunk of the batch may take (module-level so tests can
# shrink it to exercise chunking).
WORKSPACE_BYTES = 256 << 20
_INT_MAX = 2**31 - 1  # cuBLAS dimensions are 32-bit
_NHWC_TO_NCHW = (0, 3, 1, 2)
_NCHW_TO_NHWC = (0, 2, 3, 1)
_PLANS = 64  # geometries kept per node


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    """One convolution, in the order of conv.cu's geometry parameters."""

    n: int
    h: int
    w: int
    c: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    oh: int
    ow: int
    nchw: bool
    co: int

    @property
    def k(self) -> int:
        """Columns of the im2col matrix: one per (ky, kx, channel)."""
        return self.kh * self.kw * self.c

    @property
    def direct(self) -> bool:
        """The NHWC input is its own im2col matrix."""
        return (self.kh == self.kw == self.sh == self.sw == 1 and not self.pt and not self.pl
                and self.oh == self.h and self.ow == self.w and not self.nchw)

    def args(self, images: int) -> tuple:
        return (images, self.h, self.w, self.c, self.kh, self.kw, self.sh, self.sw, self.dh, self.dw, self.pt,
                self.pl, self.oh, self.ow, int(self.nchw))

    def images_per_chunk(self, itemsize: int, workspace_bytes: int) -> int:
        """Images whose im2col rows fit the workspace (at least one) and a 32-bit GEMM."""
        per_image = self.oh * self.ow
        fit = workspace_bytes // max(1, per_image * self.k * itemsize)
        return max(1, min(self.n, fit, _INT_MAX // max(1, per_image)))


def _attrs(ctx):
    fmt = ctx.attrs["data_format"]
    h, w, _ = spatial_axes(fmt)
    strides, dilations = ctx.attrs["strides"], ctx.attrs["dilations"]
    return fmt, strides[h], strides[w], dilations[h], dilations[w]


def _nhwc(dims, fmt):
    return tuple(dims) if fmt == "NHWC" else (dims[0], dims[2], dims[3], dims[1])


def _layout(n, h, w, c, fmt):
    return (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)


def _geometry(ctx, in_nhwc, f_shape, attrs) -> ConvGeometry:
    fmt, sh, sw, dh, dw = attrs
    n, h, w, c = in_nhwc
    kh, kw, ci, co = f_shape
    if c != ci:
        raise ctx.error(E, f"input depth {c} does not match the filter's in_channels {ci}")
    padding = ctx.attrs["padding"]
    try:
        oh, pt, _ = conv_output_size(h, kh, sh, dh, padding)
        ow, pl, _ = conv_output_size(w, kw, sw, dw, padding)
    except E as e:
        raise ctx.error(E, f"input {h}x{w}, window {kh}x{kw}: {e.message}") from None
    g = ConvGeometry(n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fmt == "NCHW", co)
    if max(g.k, co, oh * ow) > _INT_MAX:
        raise ctx.error(errors.UnimplementedError,
                        f"a convolution with {g.k} filter taps x channels, {co} output channels and {oh}x{ow} "
                        "outputs per image exceeds cuBLAS's 32-bit matrix dimensions")
    return g


def _cached(plans, key, make):
    p = plans.get(key)
    if p is None:
        p = make()
        if len(plans) < _PLANS:
            plans[key] = p
    return p


def _transpose(dev, x, perm):
    return _strided_copy(dev, x, tuple(x.shape[i] for i in perm), plan.transpose_strides(x.shape, perm))


def _check_dy(ctx, dy, g: ConvGeometry, fmt):
    want = _layout(g.n, g.oh, g.ow, g.co, fmt)
    if dy.shape != want:
        raise ctx.error(E, f"out_backprop has shape {dy.shape} but the convolution gives {want} ({fmt})")


def _sizes(ctx, v, what) -> tuple:
    d = int_list(ctx, v, what)
    if len(d) != 4 or min(d) < 0:
        raise ctx.error(E, f"{what} must be 4 non-negative ints, got {d}")
    return tuple(d)


class _Chunks:
    """The im2col matrices of a batch, chunk by chunk: (first image, images, cols pointer)."""

    def __init__(self, dev, g: ConvGeometry, dt, x):
        self.dev, self.g, self.dt, self.x = dev, g, dt, x
        self.per = g.images_per_chunk(dt.np.itemsize, WORKSPACE_BYTES)
        self.cols = None if g.direct else dev.empty((self.per * g.oh * g.ow, g.k), dt.np)
        self.im2col = catalog.conv_kernel("im2col", dt)

    def __iter__(self):
        g, item = self.g, self.dt.np.itemsize
        for b0 in range(0, g.n, self.per):
            nb = min(self.per, g.n - b0)
            src = self.x.ptr + b0 * g.h * g.w * g.c * item  # images are contiguous in both layouts
            if self.cols is None:
                yield b0, nb, src
            else:
                launch(self.dev, self.im2col, nb * g.oh * g.ow * g.k, src, self.cols.ptr, *g.args(nb))
                yield b0, nb, self.cols.ptr


def _conv2d(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    attrs = _attrs(ctx)
    fmt = attrs[0]
    plans: dict = {}

    def conv2d(x, f):
        if x.ndim != 4 or f.ndim != 4:
            raise ctx.error(E, f"input and filter must be 4-D, got shapes {x.shape} and {f.shape}")
        g = _cached(plans, (x.shape, f.shape), lambda: _geometry(ctx, _nhwc(x.shape, fmt), f.shape, attrs))
        y = dev.empty((g.n, g.oh, g.ow, g.co), dt.np)
        if y.size == 0:
            return y if fmt == "NHWC" else y.reshape(_layout(g.n, g.oh, g.ow, g.co, fmt))
        if g.k == 0:  # no input channels: a sum of nothing
            fill(dev, y, 0)
        else:
            item = dt.np.itemsize
            for b0, nb, cols in _Chunks(dev, g, dt, x):
                rows = nb * g.oh * g.ow
                call, _ = blas.gemm_plan((rows, g.k), (g.k, g.co))
                dev.blas.gemm(dt.name, call, cols, f.ptr, y.ptr + b0 * g.oh * g.ow * g.co * item)
        return y if fmt == "NHWC" else _transpose(dev, y, _NHWC_TO_NCHW)
    return conv2d


def _conv2d_backprop_input(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    attrs = _attrs(ctx)
    fmt = attrs[0]
    col2im = catalog.conv_kernel("col2im", dt)
    plans: dict = {}

    def backprop_input(sizes, f, dy):
        dims = _sizes(ctx, host(dev, sizes), "input_sizes")
        if f.ndim != 4:
            raise ctx.error(E, f"filter must be 4-D, got shape {f.shape}")
        g = _cached(plans, (dims, f.shape), lambda: _geometry(ctx, _nhwc(dims, fmt), f.shape, attrs))
        _check_dy(ctx, dy, g, fmt)
        dx = dev.empty(dims, dt.np)
        if dx.size == 0:
            return dx
        if g.co == 0 or g.oh * g.ow == 0:
            return fill(dev, dx, 0)
        d = dy if fmt == "NHWC" else _transpose(dev, dy, _NCHW_TO_NHWC)
        item = dt.np.itemsize
        per = g.images_per_chunk(item, WORKSPACE_BYTES)
        dcols = None if g.direct else dev.empty((per * g.oh * g.ow, g.k), dt.np)
        for b0 in range(0, g.n, per):
            nb = min(per, g.n - b0)
            rows = nb * g.oh * g.ow
            out = dx.ptr + b0 * g.h * g.w * g.c * item
            call, _ = blas.gemm_plan((rows, g.co), (g.k, g.co), False, True)
            dev.blas.gemm(dt.name, call, d.ptr + b0 * g.oh * g.ow * g.co * item, f.ptr,
                          out if dcols is None else dcols.ptr)
            if dcols is not None:
                launch(dev, col2im, nb * g.h * g.w * g.c, dcols.ptr, out, *g.args(nb))
        return dx
    return backprop_input


def _conv2d_backprop_filter(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    attrs = _attrs(ctx)
    fmt = attrs[0]
    accumulate = catalog.conv_kernel("accumulate", dt)
    plans: dict = {}

    def backprop_filter(x, sizes, dy):
        dims = _sizes(ctx, host(dev, sizes), "filter_sizes")
        if x.ndim != 4:
            raise ctx.error(E, f"input must be 4-D, got shape {x.shape}")
        g = _cached(plans, (x.shape, dims), lambda: _geometry(ctx, _nhwc(x.shape, fmt), dims, attrs))
        _check_dy(ctx, dy, g, fmt)
        df = dev.empty(dims, dt.np)
        if df.size == 0:
            return df
        if g.n * g.oh * g.ow == 0:
            return fill(dev, df, 0)
        d = dy if fmt == "NHWC" else _transpose(dev, dy, _NCHW_TO_NHWC)
        item = dt.np.itemsize
        part = None
        for b0, nb, cols in _Chunks(dev, g, dt, x):
            rows = nb * g.oh * g.ow
            call, _ = blas.gemm_plan((rows, g.k), (rows, g.co), True, False)
            if b0 == 0:
                dev.blas.gemm(dt.name, call, cols, d.ptr, df.ptr)
                continue
            if part is None:
                part = dev.empty(dims, dt.np)
            dev.blas.gemm(dt.name, call, cols, d.ptr + b0 * g.oh * g.ow * g.co * item, part.ptr)
            launch(dev, accumulate, df.size, df.ptr, part.ptr, df.size)
        return df
    return backprop_filter


def register(reg, device_type):
    reg_kernel(reg, "Conv2D", device_type, _conv2d, catalog.FLOAT)
    reg_kernel(reg, "Conv2DBackpropInput", device_type, _conv2d_backprop_input, catalog.FLOAT,
               host_memory=("input_sizes",))
    reg_kernel(reg, "Conv2DBackpropFilter", device_type, _conv2d_backprop_filter, catalog.FLOAT,
               host_memory=("filter_sizes",))
