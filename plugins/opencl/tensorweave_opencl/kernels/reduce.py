"""Reductions (kernels/reduce.cl): Sum, Mean, Prod, Max, Min, All, Any over given axes with
keep_dims, ArgMax/ArgMin, L2Loss, BiasAddGrad. Axes arrive in host memory.

The input is viewed with size-1 dimensions dropped and neighbouring dimensions of the same
kind (kept or reduced) merged. Each run of reduced dimensions is then one pass over an
``[outer, len, inner]`` view; several runs (axes 0 and 2 of a 3-D tensor) take several
passes, the intermediate results in the accumulator type. A node caches its plan per input
shape, so a step is one or two kernel launches.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels.axes import norm_axis
from tensorweave_opencl import program
from tensorweave_opencl.buffer import CLTensor
from tensorweave_opencl.kernels.common import (
    BUF,
    FLOAT,
    I32,
    INDEX,
    NUMERIC,
    OPENCL,
    host,
    launcher,
    num_elements,
)

WG = 64            # work-group size of reduce_rows
ROWS_MIN_LEN = 256  # below this a work item per output is as fast and needs no barriers

_LOWEST = {"float32": "-INFINITY", "float64": "-INFINITY", "int32": "INT_MIN", "int64": "LONG_MIN",
           "uint8": "0", "bool": "0"}
_HIGHEST = {"float32": "INFINITY", "float64": "INFINITY", "int32": "INT_MAX", "int64": "LONG_MAX",
            "uint8": "UCHAR_MAX", "bool": "1"}


def _kind(name, acc_dtype):
    """(INIT, MAP, COMBINE, FINAL) of reduction ``name`` accumulating in ``acc_dtype``."""
    ct = np.dtype(acc_dtype).name
    floating = np.dtype(acc_dtype).kind == "f"
    if name in ("Sum", "Mean", "L2Loss"):
        final = "(s)"
        if name == "Mean":
            final = "((s) / (A)(n))" if floating else "((n) == 0 ? (A)0 : (s) / (A)(n))"
        elif name == "L2Loss":
            final = "((s) * (A)0.5)"
        return "(A)0", "(x * x)" if name == "L2Loss" else "(x)", "((s) + (v))", final
    if name == "Prod":
        return "(A)1", "(x)", "((s) * (v))", "(s)"
    if name == "Max":
        comb = "(((s) > (v) || isnan(s)) ? (s) : (v))" if floating else "((s) > (v) ? (s) : (v))"
        return f"(A){_LOWEST[ct]}", "(x)", comb, "(s)"
    if name == "Min":
        comb = "(((s) < (v) || isnan(s)) ? (s) : (v))" if floating else "((s) < (v) ? (s) : (v))"
        return f"(A){_HIGHEST[ct]}", "(x)", comb, "(s)"
    if name == "All":
        return "(A)1", "(x)", "((s) && (v))", "(s)"
    if name == "Any":
        return "(A)0", "(x)", "((s) || (v))", "(s)"
    raise KeyError(name)


class _Pass:
    """One pass: [outer, len, inner] -> [outer, inner]."""

    def __init__(self, ctx, name, in_dtype, acc_dtype, out_dtype):
        ct_acc = program.ctype(acc_dtype)
        init, map_, comb, final = _kind(name, acc_dtype)
        defines = {"T": program.ctype(in_dtype), "A": ct_acc, "R": program.ctype(out_dtype),
                   "INIT": init, "MAP(x)": map_, "COMBINE(s,v)": comb, "FINAL(s,n)": final, "WG": WG}
        self.strided = launcher(ctx, "reduce.cl", "reduce_strided", [BUF, BUF, I32, I32, I32, I32], defines)
        self.rows = launcher(ctx, "reduce.cl", "reduce_rows", [BUF, BUF, I32, I32, I32], defines)
        self.out_dtype = np.dtype(out_dtype)

    def __call__(self, device, x, outer, length, inner, count):
        out = device.empty((outer, inner), self.out_dtype)
        if outer * inner == 0:
            return out
        if inner == 1 and length >= ROWS_MIN_LEN:
            self.rows((outer * WG,), (WG,), out.block.buf, x.block.buf, outer, length, count)
        else:
            self.strided.run(outer * inner, out.block.buf, x.block.buf, outer, length, inner, count)
        return out


def _runs(shape, axes):
    """Merged dims of ``shape`` as [(size, reduced)], size-1 dims dropped."""
    runs = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        red = i in axes
        if runs and runs[-1][1] == red:
            runs[-1][0] *= d
        else:
            runs.append([d, red])
    return runs


class Reduction:
    """A reduction node: plan per (shape, axes), passes per dtype chain."""

    def __init__(self, ctx, name, keep_dims=False):
        self.ctx = ctx
        self.device = ctx.device
        self.name = name
        self.keep = keep_dims
        dt = np.dtype(ctx.input_dtypes[0].np_dtype)
        self.dtype = dt
        # Integer means accumulate in int64 (as the CPU kernel does); the rest in their type.
        self.acc = np.dtype(np.int64) if name == "Mean" and dt.kind in "iu" else dt
        self.first_name = "Sum" if name == "Mean" else name
        self._passes: dict = {}
        self._plans: dict = {}

    def _pass(self, name, in_dt, out_dt):
        key = (name, in_dt, out_dt)
        p = self._passes.get(key)
        if p is None:
            p = self._passes[key] = _Pass(self.ctx, name, in_dt, self.acc if in_dt == self.dtype else in_dt, out_dt)
        return p

    def plan(self, shape, axes: tuple):
        out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) if self.keep else \
            tuple(d for i, d in enumerate(shape) if i not in axes)
        count = num_elements([shape[a] for a in axes])
        runs = _runs(shape, set(axes))
        steps = []
        while any(r for _, r in runs):
            k = next(i for i, (_, r) in enumerate(runs) if r)
            outer = num_elements([d for d, _ in runs[:k]])
            inner = num_elements([d for d, _ in runs[k + 1:]])
            last = not any(r for _, r in runs[k + 1:])
            steps.append((outer, runs[k][0], inner, last))
            runs = runs[:k] + runs[k + 1:]
            runs = _runs([d for d, _ in runs], {i for i, (_, r) in enumerate(runs) if r})
        passes = []
        in_dt = self.dtype
        for outer, length, inner, last in steps:
            out_dt = self.dtype if last else self.acc
            name = self.name if last else self.first_name
            passes.append((self._pass(name, in_dt, out_dt), outer, length, inner))
            in_dt = out_dt
        p = (out_shape, passes, count)
        if len(self._plans) < 64:
            self._plans[(shape, axes)] = p
        return p

    def run(self, x: CLTensor, axes: tuple) -> CLTensor:
        p = self._plans.get((x.shape, axes)) or self.plan(x.shape, axes)
        out_shape, passes, count = p
        if not passes:  # only size-1 (or no) axes: the values are the input's
            return x.reshape(out_shape)
        y = x
        for fn, outer, length, inner in passes:
            y = fn(self.device, y, outer, length, inner, count)
        return y.reshape(out_shape)


def _axes(ctx, value, nd) -> tuple:
    arr = host(value).reshape(-1)
    return tuple(sorted({norm_axis(ctx, int(a), nd, "reduction axis") for a in arr.tolist()})) if nd else ()


def _reduce_factory(name):
    def factory(ctx):
        r = Reduction(ctx, name, ctx.attrs["keep_dims"])
        cache: dict = {}

        def reduce(x, axes):
            key = (axes.tobytes(), x.ndim) if isinstance(axes, np.ndarray) else None
            ax = cache.get(key) if key is not None else None
            if ax is None:
                ax = _axes(ctx, axes, x.ndim)
                if key is not None and len(cache) < 64:
                    cache[key] = ax
            return r.run(x, ax)
        return reduce
    return factory


def _l2_loss(ctx):
    dt = ctx.input_dtypes[0].np_dtype
    full = _Pass(ctx, "L2Loss", dt, dt, dt)

    def l2_loss(t):
        n = num_elements(t.shape)
        return full(ctx.device, t, 1, n, 1, n).reshape(())
    return l2_loss


def _bias_add_grad(ctx):
    nchw = ctx.attrs["data_format"] == "NCHW"
    r = Reduction(ctx, "Sum")

    def bias_add_grad(g):
        if g.ndim < 2:
            raise ctx.error(errors.InvalidArgumentError, f"out_backprop must have rank at least 2, got shape {g.shape}")
        keep = 1 if nchw else g.ndim - 1
        return r.run(g, tuple(a for a in range(g.ndim) if a != keep))
    return bias_add_grad


def _arg_factory(better, what):
    def factory(ctx):
        dt = np.dtype(ctx.input_dtypes[0].np_dtype)
        out_dt = np.dtype(ctx.attrs["output_type"].np_dtype)
        ct = program.ctype(dt)
        defines = {"ARG": None, "T": ct, "R": program.ctype(out_dt), "BETTER(v,b)": f"((v) {better} (b))",
                   "IS_NAN(v)": "isnan(v)" if dt.kind == "f" else "((v) != (v))"}
        launch = launcher(ctx, "reduce.cl", "arg_reduce", [BUF, BUF, I32, I32, I32], defines)
        device = ctx.device

        def arg(x, axis):
            a = int(host(axis).reshape(-1)[0])
            nd = x.ndim
            if not -nd <= a < nd:
                raise ctx.error(errors.InvalidArgumentError, f"dimension {a} is out of range for input of rank {nd}")
            a %= nd
            if x.shape[a] == 0:
                raise ctx.error(errors.InvalidArgumentError,
                                f"cannot take the {what} over dimension {a} of shape {x.shape}: it is empty")
            outer = num_elements(x.shape[:a])
            inner = num_elements(x.shape[a + 1:])
            out = device.empty(x.shape[:a] + x.shape[a + 1:], out_dt)
            if outer * inner:
                launch.run(outer * inner, out.block.buf, x.block.buf, outer, x.shape[a], inner)
            return out
        return arg
    return factory


def register(reg):
    for name in ("Sum", "Mean", "Prod", "Max", "Min"):
        reg.register(name, OPENCL, factory=_reduce_factory(name), constraints={"T": NUMERIC, "Tidx": INDEX},
                     host_memory=("reduction_indices",))
    for name in ("All", "Any"):
        reg.register(name, OPENCL, factory=_reduce_factory(name), constraints={"Tidx": INDEX},
                     host_memory=("reduction_indices",))
    reg.register("ArgMax", OPENCL, factory=_arg_factory(">", "argmax"), constraints={"T": NUMERIC},
                 host_memory=("dimension",))
    reg.register("ArgMin", OPENCL, factory=_arg_factory("<", "argmin"), constraints={"T": NUMERIC},
                 host_memory=("dimension",))
    reg.register("L2Loss", OPENCL, factory=_l2_loss, constraints={"T": FLOAT})
    reg.register("BiasAddGrad", OPENCL, factory=_bias_add_grad, constraints={"T": NUMERIC})
