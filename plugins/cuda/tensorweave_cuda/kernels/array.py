"""Array ops: fills (Fill, ZerosLike, OnesLike), strided copies (BroadcastTo, Transpose), and
Const, Placeholder and PlaceholderWithDefault so graphs can be placed on the GPU whole.
(Identity, Reshape, ExpandDims, Squeeze, Shape, Size, Rank and NoOp are the core's, the same
on every device: ``tensorweave/kernels/shapes.py``.)

Shape-like inputs (Fill's dims, BroadcastTo's shape, Transpose's perm) are host memory.
"""

from __future__ import annotations

from tensorweave_cuda import plan
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, fill, int_list, launch
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
    reg_kernel(reg, "Const", device_type, _const, every, attr="dtype", activate=False)
    reg_kernel(reg, "Placeholder", device_type, _placeholder, every, attr="dtype", activate=False)
    reg_kernel(reg, "PlaceholderWithDefault", device_type, _identity, every, attr="dtype", activate=False)
    reg_kernel(reg, "Fill", device_type, _fill, every, host_memory=("dims",))
    reg_kernel(reg, "ZerosLike", device_type, _constant_like(0), every)
    reg_kernel(reg, "OnesLike", device_type, _constant_like(1), every)
    reg_kernel(reg, "BroadcastTo", device_type, _broadcast_to, every, host_memory=("shape",))
    reg_kernel(reg, "Transpose", device_type, _transpose, every, host_memory=("perm",))

