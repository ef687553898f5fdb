"""Shape arithmetic on OPENCL: Range, ReducedShape, InvertPermutation, ListDiff
(BroadcastGradientArgs is the core's, for every device: ``tensorweave.kernels.shapes``). Their inputs are small and arrive in host memory; the result
is computed on the host with the CPU plugin's rules and placed on the device (cached per
value: the same shapes come back every step). They exist so that gradient graphs with
dynamic shapes can stay on the device without soft placement."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops import index_math
from tensorweave.ops.array_ops import range_length
from tensorweave_opencl.kernels.common import ALL, INDEX, NUMERIC, OPENCL, host, int_list

_E = errors.InvalidArgumentError


def _on_device(ctx, fn):
    """compute(*host inputs) -> fn(...) on the device; outputs cached by the inputs' bytes."""
    cache: dict = {}
    device = ctx.device

    def compute(*args):
        arrs = [host(a) for a in args]
        key = tuple((a.tobytes(), a.dtype.char, a.shape) for a in arrs)
        hit = cache.get(key)
        if hit is None:
            res = fn(*arrs)
            hit = tuple(device.to_device(r) for r in res) if isinstance(res, tuple) else device.to_device(res)
            if len(cache) < 64:
                cache[key] = hit
        return hit
    return compute


def _range(ctx):
    dt = ctx.attrs["Tidx"]

    def range_(start, limit, delta):
        s, lim, d = start.item(), limit.item(), delta.item()
        n = range_length(s, lim, d)
        if dt.is_integer:
            return np.arange(s, lim, d, dtype=dt.np_dtype)
        return (np.arange(n, dtype=np.float64) * d + s).astype(dt.np_dtype)
    return _on_device(ctx, range_)


def _reduced_shape(ctx):
    def reduced_shape(input_shape, axes):
        out = np.array(input_shape, dtype=np.int32).reshape(-1)
        n = out.size
        for a in np.asarray(axes).reshape(-1).tolist():
            if not -n <= a < max(n, 1):
                raise ctx.error(_E, f"reduction axis {a} is out of range for input of rank {n}")
            if n:
                out[a % n] = 1
        return out
    return _on_device(ctx, reduced_shape)


def _invert_permutation(ctx):
    def invert_permutation(x):
        try:
            return index_math.invert_permutation(int_list(ctx, x, "x"), x.dtype)
        except ValueError as e:
            raise ctx.error(_E, str(e)) from None
    return _on_device(ctx, invert_permutation)


def _list_diff(ctx):
    idx_dt = ctx.attrs["out_idx"].np_dtype

    def list_diff(x, y):
        if x.ndim != 1 or y.ndim != 1:
            raise ctx.error(_E, f"x and y must be vectors, got shapes {x.shape} and {y.shape}")
        keep = ~np.isin(x, y)
        return x[keep], np.flatnonzero(keep).astype(idx_dt)
    return _on_device(ctx, list_diff)


def register(reg):
    reg.register("Range", OPENCL, factory=_range, constraints={"Tidx": NUMERIC},
                 host_memory=("start", "limit", "delta"))
    reg.register("ReducedShape", OPENCL, factory=_reduced_shape, host_memory=("input_shape", "axes"))
    reg.register("InvertPermutation", OPENCL, factory=_invert_permutation, constraints={"T": INDEX},
                 host_memory=("x",))
    reg.register("ListDiff", OPENCL, factory=_list_diff, constraints={"T": ALL}, host_memory=("x", "y"))
