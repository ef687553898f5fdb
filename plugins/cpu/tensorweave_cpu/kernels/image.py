"""ResizeBilinear, ResizeNearestNeighbor and their gradients with NumPy.

The sampling positions and weights are the core's tables (``tensorweave.ops.image_ops``),
cached per shape. The forward ops are gathers along the height and width axes; bilinear
blends in float32 in TensorFlow's order (along the width, then the height). The bilinear
gradient is the adjoint as two matrix products with the (sparse, here dense) per-axis
interpolation matrices; the nearest gradient adds each output pixel's gradient into its
source pixel with one ``np.add.at``.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops import image_ops
from tensorweave_cpu import blas

CPU = "CPU"
_E = errors.InvalidArgumentError


class _Tables:
    """A node's per-axis tables, keyed by (in_size, out_size)."""

    def __init__(self, ctx, make):
        self.ac, self.hp = bool(ctx.attrs["align_corners"]), bool(ctx.attrs["half_pixel_centers"])
        self.make = make
        self.cache = {}

    def __call__(self, in_size, out_size):
        key = (in_size, out_size)
        t = self.cache.get(key)
        if t is None:
            if len(self.cache) > 16:
                self.cache.clear()
            t = self.cache[key] = self.make(in_size, out_size, self.ac, self.hp)
        return t


def _checked(ctx, fn, *args):
    try:
        return fn(*args)
    except _E as e:
        raise ctx.error(_E, e.message) from None


def _setup(ctx, make):
    _checked(ctx, image_ops.check_resize_attrs, ctx.attrs["align_corners"], ctx.attrs["half_pixel_centers"])
    return _Tables(ctx, make)


def _resize_bilinear(ctx):
    tables = _setup(ctx, image_ops.bilinear_axis)

    def resize_bilinear(x, size):
        _checked(ctx, image_ops.check_images, x.shape)
        oh, ow = _checked(ctx, image_ops.check_size, size)
        _, h, w, _ = x.shape
        ly, uy, fy = tables(h, oh)
        lx, ux, fx = tables(w, ow)
        xf = x.astype(np.float32, copy=False)
        top, bottom = xf[:, ly], xf[:, uy]
        fx = fx[None, None, :, None]
        t = top[:, :, lx] + (top[:, :, ux] - top[:, :, lx]) * fx
        b = bottom[:, :, lx] + (bottom[:, :, ux] - bottom[:, :, lx]) * fx
        return t + (b - t) * fy[None, :, None, None]
    return resize_bilinear


def _interp_matrix(lower, upper, lerp, in_size):
    out = lower.shape[0]
    a = np.zeros((out, in_size), np.float64)
    rows = np.arange(out)
    np.add.at(a, (rows, lower), 1.0 - lerp.astype(np.float64))
    np.add.at(a, (rows, upper), lerp.astype(np.float64))
    return a


def _resize_bilinear_grad(ctx):
    tables = _setup(ctx, lambda i, o, ac, hp: _interp_matrix(*image_ops.bilinear_axis(i, o, ac, hp), i))

    def resize_bilinear_grad(g, x):
        _checked(ctx, image_ops.check_images, x.shape, "original_image")
        if g.ndim != 4 or g.shape[0] != x.shape[0] or g.shape[3] != x.shape[3]:
            raise ctx.error(_E, f"grads {g.shape} must be 4-D with the batch and channels of original_image "
                                f"{x.shape}")
        _, h, w, _ = x.shape
        ay, ax = tables(h, g.shape[1]), tables(w, g.shape[2])
        gt = g.astype(np.float64).transpose(0, 3, 1, 2)           # n, c, oh, ow
        dx = blas.matmul(blas.matmul(ay.T, gt), ax)                  # n, c, h, w
        return dx.transpose(0, 2, 3, 1).astype(x.dtype)
    return resize_bilinear_grad


def _resize_nearest(ctx):
    tables = _setup(ctx, image_ops.nearest_axis)

    def resize_nearest(x, size):
        _checked(ctx, image_ops.check_images, x.shape)
        oh, ow = _checked(ctx, image_ops.check_size, size)
        _, h, w, _ = x.shape
        return x[:, tables(h, oh)][:, :, tables(w, ow)]
    return resize_nearest


def _resize_nearest_grad(ctx):
    tables = _setup(ctx, image_ops.nearest_axis)

    def resize_nearest_grad(g, size):
        if g.ndim != 4:
            raise ctx.error(_E, f"grads must be 4-dimensional [batch, height, width, channels], got shape {g.shape}")
        h, w = _checked(ctx, image_ops.check_size, size)
        n, oh, ow, c = g.shape
        iy, ix = tables(h, oh), tables(w, ow)
        acc = np.float32 if g.dtype == np.float16 else g.dtype
        dx = np.zeros((n, h, w, c), acc)
        np.add.at(dx, (slice(None), iy[:, None], ix[None, :]), g.astype(acc, copy=False))
        return dx.astype(g.dtype, copy=False)
    return resize_nearest_grad


def register(reg):
    reg.register("ResizeBilinear", CPU, factory=_resize_bilinear)
    reg.register("ResizeBilinearGrad", CPU, factory=_resize_bilinear_grad)
    reg.register("ResizeNearestNeighbor", CPU, factory=_resize_nearest)
    reg.register("ResizeNearestNeighborGrad", CPU, factory=_resize_nearest_grad)
