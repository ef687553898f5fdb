"""ResizeBilinear, ResizeNearestNeighbor and their gradients (``image.cu``), NHWC, a thread
per element computed. The sampling tables are the core's (``image_ops.resize_table``),
uploaded once per (node, shape) and kept; the gradients are gathers (no atomics). Sizes given
as tensors arrive in host memory."""

from __future__ import annotations

import numpy as np

from tensorweave.ops import image_ops
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, host, launch
from tensorweave_cuda.kernels.util import register as reg_kernel


def _checked(ctx, fn, *args):
    try:
        return fn(*args)
    except E as e:
        raise ctx.error(E, e.message) from None


class _Resize:
    def __init__(self, ctx, base, kind, dtype_attr="T"):
        self.ctx, self.dev, self.kind = ctx, ctx.device, kind
        self.ac, self.hp = bool(ctx.attrs["align_corners"]), bool(ctx.attrs["half_pixel_centers"])
        _checked(ctx, image_ops.check_resize_attrs, self.ac, self.hp)
        self.dt = catalog.dtype(ctx.attrs[dtype_attr])
        self.ref = catalog.cnn_kernel(base, self.dt)
        self.tables = {}

    def table(self, h, w, oh, ow):
        key = (h, w, oh, ow)
        t = self.tables.get(key)
        if t is None:
            t = self.dev.to_device(image_ops.resize_table(self.kind, h, w, oh, ow, self.ac, self.hp))
            if len(self.tables) < 32:
                self.tables[key] = t
        return t

    def run(self, out, src, hw, ohw, items):
        (h, w), (oh, ow) = hw, ohw
        t = self.table(h, w, oh, ow)
        launch(self.dev, self.ref, items, src.ptr, out.ptr, t.ptr, items, out.shape[3], h, w, oh, ow)
        return out


def _forward(base, kind, float_out):
    def factory(ctx):
        r = _Resize(ctx, base, kind)

        def resize(x, size):
            _checked(ctx, image_ops.check_images, tuple(x.shape))
            oh, ow = _checked(ctx, image_ops.check_size, host(r.dev, size))
            n, h, w, c = x.shape
            y = r.dev.empty((n, oh, ow, c), np.float32 if float_out else r.dt.np)
            return r.run(y, x, (h, w), (oh, ow), y.size)
        return resize
    return factory


def _resize_bilinear_grad(ctx):
    r = _Resize(ctx, "resize_bilinear_grad", "bilinear_grad")

    def resize_bilinear_grad(g, x):
        _checked(ctx, image_ops.check_images, tuple(x.shape), "original_image")
        if g.ndim != 4 or g.shape[0] != x.shape[0] or g.shape[3] != x.shape[3]:
            raise ctx.error(E, f"grads {tuple(g.shape)} must be 4-D with the batch and channels of original_image "
                               f"{tuple(x.shape)}")
        dx = r.dev.empty(x.shape, r.dt.np)
        return r.run(dx, g, x.shape[1:3], g.shape[1:3], dx.size)
    return resize_bilinear_grad


def _resize_nearest_grad(ctx):
    r = _Resize(ctx, "resize_nearest_grad", "nearest_grad")

    def resize_nearest_grad(g, size):
        if g.ndim != 4:
            raise ctx.error(E, f"grads must be 4-dimensional [batch, height, width, channels], got shape "
                               f"{tuple(g.shape)}")
        h, w = _checked(ctx, image_ops.check_size, host(r.dev, size))
        dx = r.dev.empty((g.shape[0], h, w, g.shape[3]), r.dt.np)
        return r.run(dx, g, (h, w), g.shape[1:3], dx.size)
    return resize_nearest_grad


def register(reg, device_type):
    sigs = catalog.CNN_SIGS
    reg_kernel(reg, "ResizeBilinear", device_type, _forward("resize_bilinear", "bilinear", True),
               sigs["resize_bilinear"][2], host_memory=("size",))
    reg_kernel(reg, "ResizeNearestNeighbor", device_type, _forward("resize_nearest", "nearest", False),
               sigs["resize_nearest"][2], host_memory=("size",))
    reg_kernel(reg, "ResizeBilinearGrad", device_type, _resize_bilinear_grad, sigs["resize_bilinear_grad"][2])
    reg_kernel(reg, "ResizeNearestNeighborGrad", device_type, _resize_nearest_grad, sigs["resize_nearest_grad"][2],
               host_memory=("size",))
