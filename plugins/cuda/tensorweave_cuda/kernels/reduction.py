"""Reductions (Sum, Mean, Max, Min, Prod over any axes) and ArgMax/ArgMin.

``plan.plan_reduction`` turns the axes into one or more passes over contiguous views; this
module allocates the intermediates and launches ``reduce.cu``. Axes arrive in host memory
(TF's HostMemory("reduction_indices")), so planning never waits for the device.
"""

from __future__ import annotations

import numpy as np

from tensorweave.kernels.axes import norm_axis
from tensorweave_cuda import plan
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, fill, launch, launch_rows
from tensorweave_cuda.kernels.util import register as reg_kernel

_KIND = {"Sum": "sum", "Mean": "mean", "Prod": "prod", "Max": "max", "Min": "min"}


def identity(kind: str, dtype: np.dtype):
    """What each output of an empty reduction is (as the CPU kernels and TF)."""
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if kind == "mean":
        return float("nan")
    floating = np.issubdtype(dtype, np.floating)
    if kind == "max":
        return -np.inf if floating else np.iinfo(dtype).min
    return np.inf if floating else np.iinfo(dtype).max


def run_reduction(dev, p: plan.ReducePlan, kind: str, dt: catalog.DType, x):
    """Execute plan ``p`` on GPU tensor ``x``; returns the output tensor."""
    if not p.passes and not p.fill:
        if plan.num_elements(p.out_shape) == 0:
            return dev.empty(p.out_shape, dt.np)
        return x.reshape(p.out_shape)  # only size-1 axes reduced: the values are the input's
    out = dev.empty(p.out_shape, dt.np)
    if p.fill:
        return fill(dev, out, identity(kind, dt.np))
    kern = "sum" if kind == "mean" else kind
    cur = x
    for i, ps in enumerate(p.passes):
        last = i == len(p.passes) - 1
        dst = out if last else dev.empty((ps.out_elements,), dt.np)
        scale = plan.reduction_scale(kind, p.count, last)
        if ps.layout == "rows":
            ref = catalog.reduce_kernel(kern, dt, "rows")
            launch_rows(dev, ref, ps.outer * ps.parts, ps.chunk,
                        cur.ptr, dst.ptr, ps.outer, ps.r, ps.chunk, ps.parts, scale)
        else:
            ref = catalog.reduce_kernel(kern, dt, "cols")
            launch(dev, ref, ps.outer * ps.inner, cur.ptr, dst.ptr, ps.outer, ps.r, ps.inner, scale)
        cur = dst
    return out


def _reduce(op):
    kind = _KIND[op]

    def factory(ctx):
        dev = ctx.device
        keep = ctx.attrs["keep_dims"]
        dt = catalog.dtype(ctx.attrs["T"])
        plans: dict = {}

        def reduce(x, axes):
            a = np.asarray(axes)
            key = (x.shape, a.tobytes(), a.dtype.char)
            p = plans.get(key)
            if p is None:
                try:
                    p = plan.plan_reduction(x.shape, a.reshape(-1).tolist(), keep)
                except ValueError as e:
                    raise ctx.error(E, str(e)) from None
                if len(plans) < 64:
                    plans[key] = p
            return run_reduction(dev, p, kind, dt, x)
        return reduce
    return factory


def _arg(op):
    what = "argmax" if op == "ArgMax" else "argmin"

    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.attrs["T"])
        out_dt = catalog.dtype(ctx.attrs["output_type"])
        ref = catalog.arg_kernel(op, dt, out_dt)

        def arg(x, dimension):
            d = np.asarray(dimension)
            if d.size != 1:
                raise ctx.error(E, f"dimension must be a scalar, got shape {d.shape}")
            a = norm_axis(ctx, d.reshape(-1)[0], x.ndim, "dimension")
            if x.shape[a] == 0:
                raise ctx.error(E, f"cannot take the {what} over dimension {a} of shape {x.shape}: it is empty")
            outer, r, inner = plan.plan_arg_reduction(x.shape, a)
            out = dev.empty(x.shape[:a] + x.shape[a + 1:], out_dt.np)
            launch(dev, ref, outer * inner, x.ptr, out.ptr, outer, r, inner)
            return out
        return arg
    return factory


def register(reg, device_type):
    for op in ("Sum", "Prod", "Max", "Min"):
        reg_kernel(reg, op, device_type, _reduce(op), catalog.REDUCE_DTYPES, host_memory=("reduction_indices",))
    reg_kernel(reg, "Mean", device_type, _reduce("Mean"), catalog.MEAN_DTYPES, host_memory=("reduction_indices",))
    for op in ("ArgMax", "ArgMin"):
        reg_kernel(reg, op, device_type, _arg(op), catalog.ARG_DTYPES, host_memory=("dimension",))
