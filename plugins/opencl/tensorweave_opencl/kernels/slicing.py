"""Slicing kernels: StridedSlice and its gradient, Split, SplitV, Unpack. All are strided
copies (kernels/array.cl); the slice specs arrive in host memory.

A StridedSlice spec is resolved on the host exactly as the CPU kernel resolves it (the
core's ``strided_slice_index``), applied to a stand-in NumPy view that has the tensor's
shape and element strides but no memory of its own: the resulting view's shape, strides
and offset are the copy's table. Negative strides (reversed slices) come out naturally.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tensorweave.framework import errors
from tensorweave.kernels.axes import norm_axis
from tensorweave.ops import index_math
from tensorweave.ops.array_ops import strided_slice_index
from tensorweave_opencl.kernels.array import fill_value
from tensorweave_opencl.kernels.common import ALL, OPENCL, StridedCopy, contiguous_strides, host, int_list

_E = errors.InvalidArgumentError
_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def slice_view(ctx, shape, begin, end, strides, masks):
    """(shape, element strides, offset) of ``x[spec]`` for a contiguous x of ``shape``."""
    idx = strided_slice_index(begin, end, strides, *masks)
    if not any(e is Ellipsis for e in idx):
        idx += (Ellipsis,)
    base = np.zeros(1, np.uint8)
    stand_in = as_strided(base, shape=tuple(shape), strides=tuple(contiguous_strides(shape)), writeable=False)
    try:
        v = stand_in[idx]
    except IndexError as e:
        raise ctx.error(_E, f"slice spec is invalid for an input of shape {tuple(shape)}: {e}") from None
    offset = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return v.shape, list(v.strides), offset


def _spec_cache(ctx):
    masks = tuple(ctx.attrs[k] for k in _MASKS)
    cache: dict = {}

    def view(shape, begin, end, strides):
        b, e, s = (host(v) for v in (begin, end, strides))
        key = (tuple(shape), b.tobytes(), e.tobytes(), s.tobytes())
        hit = cache.get(key)
        if hit is None:
            hit = slice_view(ctx, shape, int_list(ctx, b, "begin"), int_list(ctx, e, "end"),
                             int_list(ctx, s, "strides"), masks)
            if len(cache) < 64:
                cache[key] = hit
        return hit
    return view


def _strided_slice(ctx):
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    view = _spec_cache(ctx)
    device = ctx.device

    def strided_slice(x, begin, end, strides):
        shape, st, off = view(x.shape, begin, end, strides)
        out = device.empty(shape, x.dtype)
        copy(out, x, shape, st, contiguous_strides(shape), x_off=off)
        return out
    return strided_slice


def _strided_slice_grad(ctx):
    dt = ctx.attrs["T"].np_dtype
    copy = StridedCopy(ctx, dt)
    view = _spec_cache(ctx)
    device = ctx.device

    def strided_slice_grad(shape, begin, end, strides, dy):
        dims = tuple(int_list(ctx, shape, "shape"))
        vshape, st, off = view(dims, begin, end, strides)
        if tuple(vshape) != tuple(dy.shape):
            raise ctx.error(_E, f"cannot write a gradient of shape {dy.shape} into shape {dims} with this slice "
                                f"spec (it selects shape {tuple(vshape)})")
        out = fill_value(ctx, device.empty(dims, dt), 0)
        copy(out, dy, vshape, contiguous_strides(vshape), st, out_off=off)
        return out
    return strided_slice_grad


def _pieces(ctx, copy, device, x, axis, sizes, squeeze=False):
    """x cut along ``axis`` into pieces of ``sizes`` (each a contiguous copy)."""
    xs = contiguous_strides(x.shape)
    outs = []
    start = 0
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        piece = device.empty(shape, x.dtype)
        copy(piece, x, shape, xs, contiguous_strides(shape), x_off=start * xs[axis])
        start += size
        outs.append(piece.reshape(tuple(shape[:axis] + shape[axis + 1:])) if squeeze else piece)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _split(ctx):
    num = ctx.attrs["num_split"]
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def split(axis, value):
        if value.ndim == 0:
            raise ctx.error(_E, "cannot split a scalar")
        a = norm_axis(ctx, int(host(axis)), value.ndim, "split axis")
        if value.shape[a] % num:
            raise ctx.error(_E, f"the number of splits {num} must evenly divide dimension {a} of the input "
                                f"{value.shape} (size {value.shape[a]})")
        return _pieces(ctx, copy, device, value, a, [value.shape[a] // num] * num)
    return split


def _split_v(ctx):
    num = ctx.attrs["num_split"]
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def split_v(value, size_splits, axis):
        if value.ndim == 0:
            raise ctx.error(_E, "cannot split a scalar")
        a = norm_axis(ctx, int(host(axis)), value.ndim, "split axis")
        sizes = int_list(ctx, size_splits, "size_splits")
        try:
            sizes = index_math.resolve_split_sizes(sizes, value.shape[a], a, value.shape, num)
        except ValueError as e:
            raise ctx.error(_E, str(e)) from None
        return _pieces(ctx, copy, device, value, a, sizes)
    return split_v


def _unpack(ctx):
    num, axis = ctx.attrs["num"], ctx.attrs["axis"]
    copy = StridedCopy(ctx, ctx.attrs["T"].np_dtype)
    device = ctx.device

    def unpack(x):
        if x.ndim == 0:
            raise ctx.error(_E, "cannot unstack a scalar")
        a = norm_axis(ctx, axis, x.ndim)
        if x.shape[a] != num:
            raise ctx.error(_E, f"input of shape {x.shape} has {x.shape[a]} elements along axis {a}, not num={num}")
        return _pieces(ctx, copy, device, x, a, [1] * num, squeeze=True)
    return unpack


def register(reg):
    idx = ("begin", "end", "strides")
    reg.register("StridedSlice", OPENCL, factory=_strided_slice, constraints={"T": ALL}, host_memory=idx)
    reg.register("StridedSliceGrad", OPENCL, factory=_strided_slice_grad, constraints={"T": ALL},
                 host_memory=("shape",) + idx)
    reg.register("Split", OPENCL, factory=_split, constraints={"T": ALL}, host_memory=("split_dim",))
    reg.register("SplitV", OPENCL, factory=_split_v, constraints={"T": ALL},
                 host_memory=("size_splits", "split_dim"))
    reg.register("Unpack", OPENCL, factory=_unpack, constraints={"T": ALL})
