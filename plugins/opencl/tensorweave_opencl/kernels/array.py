"""Array kernels (kernels/array.cl): Const, Placeholder(WithDefault), Fill/ZerosLike/OnesLike,
and the strided copies BroadcastTo, Tile, Transpose, Slice, ConcatV2, Pack, plus OneHot.
(Identity, Reshape, ExpandDims, Squeeze, Shape, Size and Rank are the core's, the same on
every device: ``tensorweave/kernels/shapes.py``.)

Shapes, axes and sizes arrive in host memory (``host_memory=``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels.axes import norm_axis
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import (
    ALL,
    BUF,
    I32,
    INDEX,
    NUMERIC,
    OPENCL,
    StridedCopy,
    broadcast_strides,
    contiguous_strides,
    host,
    int_list,
    launcher,
    num_elements,
)

_E = errors.InvalidArgumentError
CACHE_FILLS_UP_TO = 64 * 1024  # bytes: ZerosLike/OnesLike results this small are kept per shape


def _fill_launcher(ctx, dtype):
    dt = np.dtype(dtype)
    return launcher(ctx, "array.cl", "fill", [BUF, dt.type if dt != np.bool_ else np.uint8, I32],
                    {"T": program.ctype(dt)})


_fills: dict = {}


def fill_value(ctx, out, value):
    """Set every element of ``out`` to ``value``; returns ``out``. (One launcher per device
    and dtype, shared by the nodes that zero-fill as part of their work.)"""
    n = num_elements(out.shape)
    if n:
        key = (ctx.device.runtime.index, out.dtype)
        fill = _fills.get(key)
        if fill is None:
            fill = _fills[key] = _fill_launcher(ctx, out.dtype)
        fill.run(n, out.block.buf, value, n)
    return out


def _identity(ctx):
    return lambda x: x


def _const(ctx):
    # The executor places constants in the slot template itself (device.to_device at plan
    # time); this kernel says OPENCL can hold them and serves direct calls.
    value = ctx.device.to_device(np.asarray(ctx.attrs["value"]))
    return lambda: value


def _placeholder(ctx):
    def fail():
        raise ctx.error(_E, "a placeholder must be fed")
    return fail


def _fill(ctx):
    dt = ctx.attrs["T"].np_dtype
    launch = launcher(ctx, "array.cl", "fill_from", [BUF, BUF, I32], {"T": program.ctype(dt)})
    device = ctx.device

    def fill(dims, value):
        d = int_list(ctx, dims, "dims")
        if any(n < 0 for n in d):
            raise ctx.error(_E, f"dims {d} must be >= 0")
        if value.shape != ():
            raise ctx.error(_E, f"the fill value must be a scalar, got shape {value.shape}")
        out = device.empty(d, dt)
        n = num_elements(d)
        if n:
            launch.run(n, out.block.buf, value.block.buf, n)
        return out
    return fill


def _fill_like(v):
    def factory(ctx):
        dt = np.dtype(ctx.attrs["T"].np_dtype)
        launch = _fill_launcher(ctx, dt)
        value = np.array(v, dtype=dt if dt != np.bool_ else np.uint8)[()]
        device = ctx.device

        cache: dict = {}

        def fill_like(x):
            out = cache.get(x.shape)
            if out is not None:
                return out  # tensors are immutable: a small filled one is reused every step
            out = device.empty(x.shape, dt)
            n = num_elements(x.shape)
            if n:
                launch.run(n, out.block.buf, value, n)
            if n * dt.itemsize <= CACHE_FILLS_UP_TO and len(cache) < 8:
                cache[x.shape] = out
            return out
        return fill_like
    return factory


def _broadcast_to(ctx):
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def broadcast_to(x, shape):
        dims = tuple(int_list(ctx, shape, "shape"))
        if len(dims) < x.ndim or any(s != 1 and s != d for s, d in zip(x.shape, dims[len(dims) - x.ndim:])):
            raise ctx.error(_E, f"cannot broadcast a tensor of shape {x.shape} to shape {dims}")
        if dims == x.shape:
            return x
        out = device.empty(dims, x.dtype)
        copy(out, x, dims, broadcast_strides(x.shape, dims), contiguous_strides(dims))
        return out
    return broadcast_to


def _tile(ctx):
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def tile(x, multiples):
        m = int_list(ctx, multiples, "multiples")
        if len(m) != x.ndim:
            raise ctx.error(_E, f"multiples {m} must have one element per dimension of the input {x.shape}")
        if any(k < 0 for k in m):
            raise ctx.error(_E, f"multiples {m} must be >= 0")
        # Tiling is broadcasting [1, d0, 1, d1, ...] to [m0, d0, m1, d1, ...].
        xs = contiguous_strides(x.shape)
        dims, strides = [], []
        for k, d, s in zip(m, x.shape, xs):
            dims += [k, d]
            strides += [0, s]
        out_shape = tuple(k * d for k, d in zip(m, x.shape))
        out = device.empty(out_shape, x.dtype)
        copy(out, x, dims, strides, contiguous_strides(dims))
        return out
    return tile


def _transpose(ctx):
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def transpose(x, perm):
        p = int_list(ctx, perm, "perm")
        if sorted(p) != list(range(x.ndim)):
            raise ctx.error(_E, f"perm {p} is not a permutation of the dimensions of a rank-{x.ndim} tensor")
        if p == list(range(x.ndim)):
            return x
        xs = contiguous_strides(x.shape)
        dims = [x.shape[i] for i in p]
        out = device.empty(dims, x.dtype)
        copy(out, x, dims, [xs[i] for i in p], contiguous_strides(dims))
        return out
    return transpose


def _slice(ctx):
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def slice_(x, begin, size):
        b = int_list(ctx, begin, "begin")
        s = int_list(ctx, size, "size")
        if len(b) != x.ndim or len(s) != x.ndim:
            raise ctx.error(_E, f"begin {b} and size {s} must have one element per dimension of {x.shape}")
        s = [d - bi if si == -1 else si for si, bi, d in zip(s, b, x.shape)]
        if any(bi < 0 or si < 0 or bi + si > d for bi, si, d in zip(b, s, x.shape)):
            raise ctx.error(_E, f"slice begin {b} size {s} is out of bounds for shape {x.shape}")
        if s == list(x.shape):
            return x
        xs = contiguous_strides(x.shape)
        out = device.empty(s, x.dtype)
        copy(out, x, s, xs, contiguous_strides(s), x_off=sum(bi * st for bi, st in zip(b, xs)))
        return out
    return slice_


def _concat_into(ctx, copy, device, xs, axis, stacked=False):
    """Concatenate (or stack, for Pack) ``xs`` along ``axis`` with one strided copy each."""
    first = xs[0].shape
    if stacked:
        shapes = [x.shape[:axis] + (1,) + x.shape[axis:] for x in xs]
    else:
        shapes = [x.shape for x in xs]
    base = shapes[0]
    for x, s in zip(xs, shapes):
        if len(s) != len(base) or any(a != b for i, (a, b) in enumerate(zip(s, base)) if i != axis):
            raise ctx.error(_E, f"shapes {first} and {x.shape} cannot be "
                                f"{'stacked' if stacked else 'concatenated'} along axis {axis}")
    out_shape = list(base)
    out_shape[axis] = sum(s[axis] for s in shapes)
    out = device.empty(out_shape, xs[0].dtype)
    os_ = contiguous_strides(out_shape)
    off = 0
    for x, s in zip(xs, shapes):
        copy(out, x, s, contiguous_strides(s), os_, out_off=off * os_[axis])
        off += s[axis]
    return out


def _concat(ctx):
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def concat(*args):
        xs, axis = args[:-1], int(host(args[-1]))
        nd = xs[0].ndim
        if nd == 0:
            raise ctx.error(_E, "cannot concatenate scalars; use stack")
        return _concat_into(ctx, copy, device, xs, norm_axis(ctx, axis, nd, "concat axis"))
    return concat


def _pack(ctx):
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device
    axis = ctx.attrs["axis"]

    def pack(*xs):
        return _concat_into(ctx, copy, device, xs, norm_axis(ctx, axis, xs[0].ndim + 1, "stack axis"), stacked=True)
    return pack


def _one_hot(ctx):
    dt = np.dtype(ctx.attrs["T"].np_dtype)
    ti = np.dtype(ctx.attrs["TI"].np_dtype)
    launch = launcher(ctx, "array.cl", "one_hot", [BUF, BUF, BUF, BUF, I32, I32, I32],
                      {"T": program.ctype(dt), "TI": program.ctype(ti)})
    axis = ctx.attrs["axis"]
    device = ctx.device

    def one_hot(indices, depth, on_value, off_value):
        d = int(host(depth))
        if d < 0:
            raise ctx.error(_E, f"depth must be >= 0, got {d}")
        nd = indices.ndim
        a = nd if axis == -1 else axis
        if not 0 <= a <= nd:
            raise ctx.error(_E, f"axis {axis} is out of range for indices of rank {nd}")
        out_shape = indices.shape[:a] + (d,) + indices.shape[a:]
        out = device.empty(out_shape, dt)
        n = num_elements(out_shape)
        if n:
            launch.run(n, out.block.buf, indices.block.buf, on_value.block.buf, off_value.block.buf, n, d,
                   num_elements(indices.shape[a:]))
        return out
    return one_hot


def register(reg):
    reg.register("Const", OPENCL, factory=_const, constraints={"dtype": ALL})
    reg.register("Placeholder", OPENCL, factory=_placeholder, constraints={"dtype": ALL})
    reg.register("PlaceholderWithDefault", OPENCL, factory=_identity, constraints={"dtype": ALL})
    reg.register("Fill", OPENCL, factory=_fill, constraints={"T": ALL}, host_memory=("dims",))
    reg.register("ZerosLike", OPENCL, factory=_fill_like(0), constraints={"T": ALL})
    reg.register("OnesLike", OPENCL, factory=_fill_like(1), constraints={"T": ALL})
    reg.register("BroadcastTo", OPENCL, factory=_broadcast_to, constraints={"T": ALL}, host_memory=("shape",))
    reg.register("Tile", OPENCL, factory=_tile, constraints={"T": ALL}, host_memory=("multiples",))
    reg.register("Transpose", OPENCL, factory=_transpose, constraints={"T": ALL}, host_memory=("perm",))
    reg.register("Slice", OPENCL, factory=_slice, constraints={"T": ALL}, host_memory=("begin", "size"))
    reg.register("ConcatV2", OPENCL, factory=_concat, constraints={"T": ALL}, host_memory=("axis",))
    reg.register("Pack", OPENCL, factory=_pack, constraints={"T": ALL})
    reg.register("OneHot", OPENCL, factory=_one_hot, constraints={"T": NUMERIC, "TI": INDEX},
                 host_memory=("depth",))
