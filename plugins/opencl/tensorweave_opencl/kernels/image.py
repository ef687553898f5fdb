"""ResizeBilinear, ResizeNearestNeighbor and their gradients (kernels/image.cl), NHWC, one
work item per element computed. The sampling tables are the core's
(``image_ops.resize_table``), uploaded once per shape as an int32 table; the gradients are
gathers (each input pixel sums the outputs that read it), so no atomics are needed. Sizes
given as tensors arrive in host memory."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops import image_ops
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, NUMERIC, OPENCL, host, launcher, num_elements

_E = errors.InvalidArgumentError
_SCALARS = [BUF, BUF, I32, I32, I32, I32, I32, I32, BUF]


def _checked(ctx, fn, *args):
    try:
        return fn(*args)
    except _E as e:
        raise ctx.error(_E, e.message) from None


class _Resize:
    def __init__(self, ctx, kernel, table_kind):
        self.ctx, self.kind, self.device = ctx, table_kind, ctx.device
        self.ac, self.hp = bool(ctx.attrs["align_corners"]), bool(ctx.attrs["half_pixel_centers"])
        _checked(ctx, image_ops.check_resize_attrs, self.ac, self.hp)
        dt = np.dtype(ctx.attrs["T"].np_dtype)
        acc = {"float64": "double", "float32": "float"}.get(dt.name, "long")
        self.launch = launcher(ctx, "image.cl", kernel, _SCALARS, {"T": program.ctype(dt), "ACC": acc})
        self.cache = {}

    def table(self, h, w, oh, ow):
        key = (h, w, oh, ow)
        t = self.cache.get(key)
        if t is None:
            arr = image_ops.resize_table(self.kind, h, w, oh, ow, self.ac, self.hp)
            t = self.device.runtime.int_table(arr.tolist())
            if len(self.cache) < 32:
                self.cache[key] = t
        return t

    def run(self, out_shape, out_dtype, src, in_hw, out_hw, n_items):
        out = self.device.empty(out_shape, out_dtype)
        (h, w), (oh, ow) = in_hw, out_hw
        if n_items:
            self.launch.run(n_items, out.block.buf, src.block.buf, n_items, out_shape[3], oh, ow, h, w,
                            self.table(h, w, oh, ow))
        return out


def _forward(kernel, kind, float_out):
    def factory(ctx):
        r = _Resize(ctx, kernel, kind)

        def resize(x, size):
            _checked(ctx, image_ops.check_images, x.shape)
            oh, ow = _checked(ctx, image_ops.check_size, host(size))
            n, h, w, c = x.shape
            out_shape = (n, oh, ow, c)
            return r.run(out_shape, np.float32 if float_out else x.dtype, x, (h, w), (oh, ow),
                         num_elements(out_shape))
        return resize
    return factory


def _resize_bilinear_grad(ctx):
    r = _Resize(ctx, "resize_bilinear_grad", "bilinear_grad")

    def resize_bilinear_grad(g, x):
        _checked(ctx, image_ops.check_images, x.shape, "original_image")
        if g.ndim != 4 or g.shape[0] != x.shape[0] or g.shape[3] != x.shape[3]:
            raise ctx.error(_E, f"grads {g.shape} must be 4-D with the batch and channels of original_image "
                                f"{x.shape}")
        return r.run(x.shape, x.dtype, g, x.shape[1:3], g.shape[1:3], num_elements(x.shape))
    return resize_bilinear_grad


def _resize_nearest_grad(ctx):
    r = _Resize(ctx, "resize_nearest_grad", "nearest_grad")

    def resize_nearest_grad(g, size):
        if g.ndim != 4:
            raise ctx.error(_E, f"grads must be 4-dimensional [batch, height, width, channels], got shape {g.shape}")
        h, w = _checked(ctx, image_ops.check_size, host(size))
        out_shape = (g.shape[0], h, w, g.shape[3])
        return r.run(out_shape, g.dtype, g, (h, w), g.shape[1:3], num_elements(out_shape))
    return resize_nearest_grad


def register(reg):
    reg.register("ResizeBilinear", OPENCL, factory=_forward("resize_bilinear", "bilinear", True),
                 constraints={"T": NUMERIC}, host_memory=("size",))
    reg.register("ResizeNearestNeighbor", OPENCL, factory=_forward("resize_nearest", "nearest", False),
                 constraints={"T": NUMERIC}, host_memory=("size",))
    reg.register("ResizeBilinearGrad", OPENCL, factory=_resize_bilinear_grad, constraints={"T": FLOAT})
    reg.register("ResizeNearestNeighborGrad", OPENCL, factory=_resize_nearest_grad,
                 constraints={"T": ["float32", "float64", "int32", "uint8"]}, host_memory=("size",))
