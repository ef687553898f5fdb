"""Element-wise math, comparison, logic, cast and matrix kernels.

Most element-wise kernels are the NumPy ufunc itself: no wrapper, no per-step overhead.
Results keep the dtype of the inputs (NumPy would otherwise promote e.g. int8 ** int8).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors

CPU = "CPU"

_UFUNCS = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Maximum": np.maximum, "Minimum": np.minimum,
    "Neg": np.negative, "Abs": np.absolute, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
    "Square": np.square, "Sign": np.sign, "Floor": np.floor, "Ceil": np.ceil, "Round": np.rint,
    "Sin": np.sin, "Cos": np.cos, "Tanh": np.tanh, "Log1p": np.log1p, "Expm1": np.expm1,
    "Greater": np.greater, "GreaterEqual": np.greater_equal, "Less": np.less, "LessEqual": np.less_equal,
    "Equal": np.equal, "NotEqual": np.not_equal,
    "LogicalAnd": np.logical_and, "LogicalOr": np.logical_or, "LogicalNot": np.logical_not,
}


def _div(ctx):
    if ctx.attrs["T"].is_integer:
        # TF's Div on integers truncates toward zero (C semantics); division by zero is an error.
        def idiv(x, y):
            if np.any(y == 0):
                raise errors.InvalidArgumentError("integer division by zero")
            q = np.abs(x) // np.abs(y)
            return (q * (np.sign(x) * np.sign(y))).astype(x.dtype, copy=False)
        return idiv
    return np.true_divide


def _floordiv(ctx):
    if ctx.attrs["T"].is_integer:
        def f(x, y):
            if np.any(y == 0):
                raise errors.InvalidArgumentError("integer division by zero")
            return np.floor_divide(x, y)
        return f
    return lambda x, y: np.floor(np.true_divide(x, y))


def _floormod(ctx):
    if ctx.attrs["T"].is_integer:
        def f(x, y):
            if np.any(y == 0):
                raise errors.InvalidArgumentError("integer division by zero")
            return np.mod(x, y)
        return f
    return np.mod


def _pow(ctx):
    dt = ctx.attrs["T"].np_dtype
    if ctx.attrs["T"].is_integer:
        def ipow(x, y):
            if np.any(y < 0):
                raise errors.InvalidArgumentError("integers to negative integer powers are not allowed")
            return np.power(x, y).astype(dt, copy=False)
        return ipow
    return np.power


def _same_dtype(fn):
    def factory(ctx):
        dt = ctx.output_dtypes[0].np_dtype
        return lambda *xs: np.asarray(fn(*xs), dtype=dt)
    return factory


def _cast(ctx):
    src, dst = ctx.attrs["SrcT"], ctx.attrs["DstT"]
    if dst.is_string or src.is_string:
        raise ctx.error(errors.UnimplementedError, f"Cast from {src.name} to {dst.name} is not supported")
    np_dst = dst.np_dtype
    if src.is_complex and not dst.is_complex:
        return lambda x: np.real(x).astype(np_dst)
    if src.is_floating and dst.is_integer:
        return lambda x: np.trunc(x).astype(np_dst)  # round toward zero, as C casts do
    return lambda x: x.astype(np_dst)


def _matmul(ctx):
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    if not ta and not tb:
        return np.matmul
    if ta and tb:
        return lambda a, b: np.matmul(a.T, b.T)
    if ta:
        return lambda a, b: np.matmul(a.T, b)
    return lambda a, b: np.matmul(a, b.T)


def register(reg):
    for op, fn in _UFUNCS.items():
        reg.register(op, CPU, fn)
    reg.register("Add", CPU, _string_concat, constraints={"T": ["string"]}, priority=1)
    reg.register("Div", CPU, factory=_div)
    reg.register("RealDiv", CPU, factory=_div)
    reg.register("FloorDiv", CPU, factory=_floordiv)
    reg.register("FloorMod", CPU, factory=_floormod)
    reg.register("Pow", CPU, factory=_pow)
    reg.register("SquaredDifference", CPU, lambda x, y: np.square(x - y))
    reg.register("Rsqrt", CPU, factory=_same_dtype(lambda x: 1 / np.sqrt(x)))
    reg.register("Reciprocal", CPU, factory=_same_dtype(np.reciprocal))
    reg.register("Sigmoid", CPU, factory=_same_dtype(lambda x: 0.5 * (np.tanh(0.5 * x) + 1)))
    reg.register("Cast", CPU, factory=_cast)
    reg.register("MatMul", CPU, factory=_matmul)


def _string_concat(x, y):
    return np.frompyfunc(lambda a, b: a + b, 2, 1)(x, y).astype(object)
