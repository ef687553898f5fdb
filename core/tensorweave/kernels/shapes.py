"""The shape-only kernels, the same on every device: Identity and StopGradient (the input
itself), Reshape, ExpandDims and Squeeze (a new handle on the same memory, through the
tensor's ``reshape``), Shape, Size and Rank (a small int tensor computed from the metadata),
BroadcastGradientArgs (shape arithmetic on host-memory int vectors) and NoOp.

They see device tensors only through ``runtime.device.DeviceTensor`` (``shape``, ``dtype``,
``reshape``). Reshape's ``shape`` and ExpandDims' ``dim`` are host-memory inputs: NumPy
arrays on every device. On a device whose tensors are NumPy arrays (``host_tensors``: the
CPU) the kernels leave the checks NumPy makes anyway to NumPy and put nothing around their
compute functions (Identity is the function ``lambda x: x`` itself): Reshape and Identity
are on the hot path of every CPU graph.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.kernel_registry import passthrough
from tensorweave.kernels import EVERY_DEVICE_DTYPES, dtypes_to_register
from tensorweave.kernels.axes import int_list, norm_axis
from tensorweave.ops import index_math

_E = errors.InvalidArgumentError
# Shape/Size/Rank results kept per node on a device (tensors are immutable, and the same
# shapes come back every step): at most this many distinct input shapes.
CACHED_RESULTS = 64


def _num_elements(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n



def _noop():
    return None


def _reshape(ctx):
    if ctx.device.host_tensors:
        def reshape_host(x, shape):
            dims = int_list(ctx, shape, "shape")
            if dims.count(-1) > 1 or (dims and min(dims) < -1):
                raise ctx.error(_E, f"the requested shape {dims} may hold sizes >= 0 and at most one -1 (inferred)")
            try:
                return x.reshape(dims)  # NumPy infers the -1 and checks the size itself
            except ValueError:
                raise ctx.error(_E, f"cannot reshape a tensor of shape {x.shape} ({x.size} elements) "
                                    f"to shape {dims}") from None
        return reshape_host

    def reshape(x, shape):
        dims = int_list(ctx, shape, "shape")
        if dims.count(-1) > 1 or (dims and min(dims) < -1):
            raise ctx.error(_E, f"the requested shape {dims} may hold sizes >= 0 and at most one -1 (inferred)")
        n = _num_elements(x.shape)
        if -1 in dims:
            known = _num_elements(d for d in dims if d != -1)
            if known == 0 or n % known:
                raise ctx.error(_E, f"cannot reshape a tensor of shape {x.shape} ({n} elements) to shape {dims}")
            dims[dims.index(-1)] = n // known
        elif _num_elements(dims) != n:
            raise ctx.error(_E, f"cannot reshape a tensor of shape {x.shape} ({n} elements) to shape {dims}")
        return x.reshape(tuple(dims))
    return reshape


def _expand_dims(ctx):
    def expand_dims(x, dim):
        if dim.size != 1:
            raise ctx.error(_E, f"the expand_dims axis must be a scalar, got shape {dim.shape}")
        s = x.shape
        a = norm_axis(ctx, dim.reshape(-1)[0], len(s) + 1, "expand_dims axis")
        # A new size-1 axis never needs a copy, not even of a strided NumPy view.
        return x.reshape(s[:a] + (1,) + s[a:])
    return expand_dims


def _squeeze(ctx):
    axes = ctx.attrs["squeeze_dims"]
    host = ctx.device.host_tensors
    if not axes:
        if host:
            return np.squeeze

        def squeeze_all(x):
            return x.reshape([d for d in x.shape if d != 1])
        return squeeze_all

    def squeeze(x):
        s = x.shape
        norm = sorted({norm_axis(ctx, a, len(s), "squeeze axis") for a in axes})
        for a in norm:
            if s[a] != 1:
                raise ctx.error(_E, f"cannot squeeze dimension {a} of shape {s}: its size is not 1")
        if host:
            return x.squeeze(tuple(norm))  # NumPy's own: faster than building the shape here
        return x.reshape([d for i, d in enumerate(s) if i not in norm])
    return squeeze


def _on_device(ctx, fn):
    """compute(x) -> ``fn(x.shape)`` (a small host array) as a tensor of the node's device,
    kept per input shape. (On a host device the kernels return the array itself.)"""
    to_device = ctx.device.to_device
    cache: dict = {}

    def compute(x):
        s = x.shape
        t = cache.get(s)
        if t is None:
            t = to_device(fn(s))
            if len(cache) < CACHED_RESULTS:
                cache[s] = t
        return t
    return compute


def _shape(ctx):
    dt = ctx.attrs["out_type"].np_dtype
    if ctx.device.host_tensors:
        return lambda x: np.array(x.shape, dtype=dt)
    return _on_device(ctx, lambda s: np.array(s, dtype=dt))


def _size(ctx):
    dt = ctx.attrs["out_type"].np_dtype
    if ctx.device.host_tensors:
        return lambda x: np.array(x.size, dtype=dt)
    return _on_device(ctx, lambda s: np.array(_num_elements(s), dtype=dt))


def _rank_host(x):
    return np.array(x.ndim, dtype=np.int32)


def _rank(ctx):
    if ctx.device.host_tensors:
        return _rank_host
    return _on_device(ctx, lambda s: np.array(len(s), dtype=np.int32))


def _broadcast_gradient_args(ctx):
    """The reduction axes of two broadcast operands' gradients, from their shapes (host
    vectors): the arrays themselves on a host device, else device tensors kept per pair of
    shapes (on an accelerator, small int vectors stay in host memory until a kernel reads
    them, e.g. ``CUDADevice.to_device``)."""
    dt = ctx.output_dtypes[0].np_dtype

    def compute(s0, s1):
        try:
            return index_math.broadcast_gradient_args(s0, s1, dt)
        except ValueError as e:
            raise ctx.error(_E, str(e)) from None
    if ctx.device.host_tensors:
        return compute
    to_device = ctx.device.to_device
    cache: dict = {}

    def broadcast_gradient_args(s0, s1):
        key = (tuple(np.asarray(s0).tolist()), tuple(np.asarray(s1).tolist()))
        out = cache.get(key)
        if out is None:
            out = tuple(to_device(r) for r in compute(s0, s1))
            if len(cache) < CACHED_RESULTS:
                cache[key] = out
        return out
    return broadcast_gradient_args


# op -> (factory, host-memory inputs)
_KERNELS = {
    "Identity": (lambda ctx: passthrough, ()),
    "StopGradient": (lambda ctx: passthrough, ()),
    "Reshape": (_reshape, ("shape",)),
    "ExpandDims": (_expand_dims, ("dim",)),
    "Squeeze": (_squeeze, ()),
    "Shape": (_shape, ()),
    "Size": (_size, ()),
    "Rank": (_rank, ()),
}
# Kernels on shapes (int32/int64 vectors): op -> (factory, host-memory inputs).
_INDEX_DTYPES = ("int32", "int64")
_INDEX_KERNELS = {
    "BroadcastGradientArgs": (_broadcast_gradient_args, ("s0", "s1")),
}


def register_kernels(registry, device_type: str = "*", held=None) -> None:
    """The shape-only kernels for ``device_type`` and the dtypes ``held`` there (by default
    ``"*"`` and ``EVERY_DEVICE_DTYPES``; see ``tensorweave.kernels``)."""
    names = dtypes_to_register(device_type, EVERY_DEVICE_DTYPES if held is None else held)
    if device_type == "*":
        registry.register("NoOp", "*", _noop)
    if not names:
        return
    for op, (factory, host_memory) in _KERNELS.items():
        registry.register(op, device_type, factory=factory, constraints={"T": names}, host_memory=host_memory)
    index = [n for n in names if n in _INDEX_DTYPES]
    if index:
        for op, (factory, host_memory) in _INDEX_KERNELS.items():
            registry.register(op, device_type, factory=factory, constraints={"T": index}, host_memory=host_memory)
