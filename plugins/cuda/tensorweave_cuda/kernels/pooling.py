"""MaxPool, AvgPool and their gradients (``pool.cu``): a thread per output element for the
forward ops, a thread per input element for the gradients (a gather over the windows that
cover it: deterministic, no atomics). NHWC and NCHW are read and written directly.

Semantics are the CPU kernels': SAME padding never wins a max and is not counted in a mean,
and MaxPoolGrad routes each gradient to the first element of its window (row-major) equal to
``orig_output``.
"""

from __future__ import annotations

from tensorweave.ops.nn_ops import conv_output_size, spatial_axes
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, host, int_list, launch
from tensorweave_cuda.kernels.util import register as reg_kernel


def _setup(ctx):
    fmt = ctx.attrs["data_format"]
    h, w, _ = spatial_axes(fmt)
    ksize, strides = ctx.attrs["ksize"], ctx.attrs["strides"]
    return fmt, ksize[h], ksize[w], strides[h], strides[w]


def _nhwc(dims, fmt):
    return tuple(dims) if fmt == "NHWC" else (dims[0], dims[2], dims[3], dims[1])


def _layout(n, h, w, c, fmt):
    return (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)


def _geometry(ctx, in_nhwc, setup):
    """(output shape in the op's layout, the kernel's geometry arguments)."""
    fmt, kh, kw, sh, sw = setup
    n, h, w, c = in_nhwc
    padding = ctx.attrs["padding"]
    try:
        oh, pt, _ = conv_output_size(h, kh, sh, 1, padding)
        ow, pl, _ = conv_output_size(w, kw, sw, 1, padding)
    except E as e:
        raise ctx.error(E, f"input {h}x{w}, window {kh}x{kw}: {e.message}") from None
    return _layout(n, oh, ow, c, fmt), (n, h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, int(fmt == "NCHW"))


def _pool(op):
    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.attrs["T"])
        ref = catalog.pool_kernel(op, dt)
        setup = _setup(ctx)

        def pool(x):
            if x.ndim != 4:
                raise ctx.error(E, f"input must be 4-D, got shape {x.shape}")
            out_shape, geom = _geometry(ctx, _nhwc(x.shape, setup[0]), setup)
            y = dev.empty(out_shape, dt.np)
            launch(dev, ref, y.size, x.ptr, y.ptr, *geom)
            return y
        return pool
    return factory


def _max_pool_grad(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    ref = catalog.pool_kernel("MaxPoolGrad", dt)
    setup = _setup(ctx)

    def max_pool_grad(x, y, g):
        if x.ndim != 4:
            raise ctx.error(E, f"orig_input must be 4-D, got shape {x.shape}")
        out_shape, geom = _geometry(ctx, _nhwc(x.shape, setup[0]), setup)
        if y.shape != out_shape or g.shape != out_shape:
            raise ctx.error(E, f"orig_output {y.shape} and grad {g.shape} must have the pooled shape {out_shape} "
                               f"({setup[0]})")
        dx = dev.empty(x.shape, dt.np)
        launch(dev, ref, dx.size, x.ptr, y.ptr, g.ptr, dx.ptr, *geom)
        return dx
    return max_pool_grad


def _avg_pool_grad(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    ref = catalog.pool_kernel("AvgPoolGrad", dt)
    setup = _setup(ctx)

    def avg_pool_grad(sizes, g):
        dims = int_list(ctx, host(dev, sizes), "orig_input_shape")
        if len(dims) != 4 or min(dims) < 0:
            raise ctx.error(E, f"orig_input_shape must be 4 non-negative ints, got {dims}")
        out_shape, geom = _geometry(ctx, _nhwc(dims, setup[0]), setup)
        if g.shape != out_shape:
            raise ctx.error(E, f"grad has shape {g.shape} but pooling an input of shape {tuple(dims)} gives "
                               f"{out_shape} ({setup[0]})")
        dx = dev.empty(dims, dt.np)
        launch(dev, ref, dx.size, g.ptr, dx.ptr, *geom)
        return dx
    return avg_pool_grad


def register(reg, device_type):
    for op in ("MaxPool", "AvgPool"):
        reg_kernel(reg, op, device_type, _pool(op), catalog.pool_dtypes(op))
    reg_kernel(reg, "MaxPoolGrad", device_type, _max_pool_grad, catalog.pool_dtypes("MaxPoolGrad"))
    reg_kernel(reg, "AvgPoolGrad", device_type, _avg_pool_grad, catalog.pool_dtypes("AvgPoolGrad"),
               host_memory=("orig_input_shape",))
