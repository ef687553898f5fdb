"""Array ops: metadata only (Identity, Reshape, ExpandDims, Squeeze, Shape, Size, Rank), fills
(Fill, ZerosLike, OnesLike), strided copies (BroadcastTo, Transpose), and Const, Placeholder
and NoOp so graphs can be placed on the GPU whole.

Shape-like inputs (Reshape's shape, ExpandDims' dim, Fill's dims, BroadcastTo's shape,
Transpose's perm) are host memory. Shape, Size and Rank answer from the handle's metadata
with host-backed tensors: nothing runs on the device.
"""

from __future__ import annotations

import numpy as np

from tensorweave_cuda import plan
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, fill, int_list, launch, norm_axis
from tensorweave_cuda.kernels.util import register as reg_kernel


def _identity(ctx):
    return lambda x: x


def _const(ctx):
    value = ctx.attrs["value"]
    return lambda: value  # the executor puts constants in the slot template (to_device)


def _placeholder(ctx):
    def fail():
        raise ctx.error(E, "a placeholder must be fed")
    return fail


def _noop(ctx):
    return lambda *args: None


def _reshape(ctx):
    def reshape(x, shape):
        dims = int_list(ctx, shape, "shape")
        if dims.count(-1) > 1 or (dims and min(dims) < -1):
            raise ctx.error(E, f"the requested shape {dims} may hold sizes >= 0 and at most one -1 (inferred)")
        n = x.size
        if -1 in dims:
            known = plan.num_elements([d for d in dims if d != -1])
            if known == 0 or n % known:
                raise ctx.error(E, f"cannot reshape a tensor of shape {x.shape} ({n} elements) to shape {dims}")
            dims[dims.index(-1)] = n // known
        if plan.num_elements(dims) != n:
            raise ctx.error(E, f"cannot reshape a tensor of shape {x.shape} ({n} elements) to shape {dims}")
        return x.reshaped(tuple(dims))
    return reshape


def _expand_dims(ctx):
    def expand_dims(x, dim):
        d = np.asarray(dim)
        if d.size != 1:
            raise ctx.error(E, f"the expand_dims axis must be a scalar, got shape {d.shape}")
        a = norm_axis(ctx, d.reshape(-1)[0], x.ndim + 1, "expand_dims axis")
        return x.reshaped(x.shape[:a] + (1,) + x.shape[a:])
    return expand_dims


def _squeeze(ctx):
    axes = ctx.attrs["squeeze_dims"]

    def squeeze(x):
        if not axes:
            return x.reshaped(tuple(d for d in x.shape if d != 1))
        norm = {norm_axis(ctx, a, x.ndim, "squeeze axis") for a in axes}
        for a in norm:
            if x.shape[a] != 1:
                raise ctx.error(E, f"cannot squeeze dimension {a} of shape {x.shape}: its size is not 1")
        return x.reshaped(tuple(d for i, d in enumerate(x.shape) if i not in norm))
    return squeeze


def _shape(ctx):
    dev, dt = ctx.device, ctx.attrs["out_type"].np_dtype
    return lambda x: dev.host_tensor(np.array(x.shape, dtype=dt))


def _size(ctx):
    dev, dt = ctx.device, ctx.attrs["out_type"].np_dtype
    return lambda x: dev.host_tensor(np.array(x.size, dtype=dt))


def _rank(ctx):
    dev = ctx.device
    return lambda x: dev.host_tensor(np.array(x.ndim, dtype=np.int32))


def _fill(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    from_device = catalog.fill_from_kernel(dt)

    def fill_(dims, value):
        d = int_list(ctx, dims, "dims")
        if any(n < 0 for n in d):
            raise ctx.error(E, f"dims {d} must be >= 0")
        if value.ndim != 0:
            raise ctx.error(E, f"the fill value must be a scalar, got shape {value.shape}")
        out = dev.empty(d, dt.np)
        h = value.host_value
        if h is not None:
            return fill(dev, out, h.item())
        launch(dev, from_device, out.size, out.ptr, value.ptr, out.size)
        return out
    return fill_


def _constant_like(v):
    def factory(ctx):
        dev = ctx.device
        return lambda x: fill(dev, dev.empty(x.shape, x.dtype), v)
    return factory


def _strided_copy(dev, x, out_shape, strides):
    dt = catalog.dtype(x.dtype)
    out = dev.empty(out_shape, x.dtype)
    if out.size:
        launch(dev, catalog.copy_strided_kernel(dt), out.size, x.ptr, out.ptr, out.size,
               *plan.strided_struct(out_shape, strides))
    return out


def _broadcast_to(ctx):
    dev = ctx.device

    def broadcast_to(x, shape):
        dims = tuple(int_list(ctx, shape, "shape"))
        if dims == x.shape:
            return x
        try:
            if plan.broadcast_shape(x.shape, dims) != dims:
                raise plan.BroadcastError("")
            strides = plan.broadcast_strides(x.shape, dims)
        except plan.BroadcastError:
            raise ctx.error(E, f"cannot broadcast a tensor of shape {x.shape} to shape {dims}") from None
        return _strided_copy(dev, x, dims, strides)
    return broadcast_to


def _transpose(ctx):
    dev = ctx.device

    def transpose(x, perm):
        p = int_list(ctx, perm, "perm")
        if len(p) != x.ndim or sorted(p) != list(range(x.ndim)):
            raise ctx.error(E, f"perm {p} is not a permutation of the {x.ndim} dimensions of the input {x.shape}")
        if p == sorted(p):
            return x
        out_shape = tuple(x.shape[i] for i in p)
        return _strided_copy(dev, x, out_shape, plan.transpose_strides(x.shape, p))
    return transpose


def register(reg, device_type):
    every = catalog.ALL
    meta = dict(dtypes=every, activate=False)
    reg_kernel(reg, "Const", device_type, _const, every, attr="dtype", activate=False)
    reg_kernel(reg, "Placeholder", device_type, _placeholder, every, attr="dtype", activate=False)
    reg_kernel(reg, "PlaceholderWithDefault", device_type, _identity, every, attr="dtype", activate=False)
    reg_kernel(reg, "NoOp", device_type, _noop, activate=False)
    for op in ("Identity", "StopGradient", "Squeeze"):
        reg_kernel(reg, op, device_type, _squeeze if op == "Squeeze" else _identity, **meta)
    reg_kernel(reg, "Reshape", device_type, _reshape, host_memory=("shape",), **meta)
    reg_kernel(reg, "ExpandDims", device_type, _expand_dims, host_memory=("dim",), **meta)
    reg_kernel(reg, "Shape", device_type, _shape, **meta)
    reg_kernel(reg, "Size", device_type, _size, **meta)
    reg_kernel(reg, "Rank", device_type, _rank, **meta)
    reg_kernel(reg, "Fill", device_type, _fill, every, host_memory=("dims",))
    reg_kernel(reg, "ZerosLike", device_type, _constant_like(0), every)
    reg_kernel(reg, "OnesLike", device_type, _constant_like(1), every)
    reg_kernel(reg, "BroadcastTo", device_type, _broadcast_to, every, host_memory=("shape",))
    reg_kernel(reg, "Transpose", device_type, _transpose, every, host_memory=("perm",))

