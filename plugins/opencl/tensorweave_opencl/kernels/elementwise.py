"""Element-wise kernels (kernels/elementwise.cl): unary math, binary math with full NumPy
broadcasting, comparisons and logic (results are bool), Cast, AddN, activation gradients.

Each op is one OpenCL C expression per kind of element type; the program is built per
(expression, input type, result type). A binary node picks, per pair of input shapes (and
caches): same shape, one side a single element, or the general broadcasting kernel with a
collapsed stride table.

Semantics follow the CPU kernels, with the differences a GPU kernel has in TensorFlow too:
integer division by zero gives 0 instead of an error (a kernel cannot raise), and integer
``Pow`` with a negative exponent gives 0.
"""

from __future__ import annotations

import numpy as np

from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import (
    ALL,
    BUF,
    FLOAT,
    I32,
    NUMERIC,
    OPENCL,
    broadcast_shape,
    broadcast_strides,
    collapse,
    launcher,
    num_elements,
    what,
)

# op -> (dtypes, expression for floating types, expression for integer/bool types or None)
UNARY = {
    "Neg": (NUMERIC, "-a", "-a"),
    "Abs": (NUMERIC, "fabs(a)", "(a < 0 ? -a : a)"),
    "Square": (NUMERIC, "a * a", "a * a"),
    "Sign": (NUMERIC, "(a > 0 ? (T)1 : (a < 0 ? (T)-1 : a))", "(T)((a > 0) - (a < 0))"),
    "Exp": (FLOAT, "exp(a)", None),
    "Log": (FLOAT, "log(a)", None),
    "Log1p": (FLOAT, "log1p(a)", None),
    "Expm1": (FLOAT, "expm1(a)", None),
    "Sqrt": (FLOAT, "sqrt(a)", None),
    "Rsqrt": (FLOAT, "(T)1 / sqrt(a)", None),
    "Reciprocal": (FLOAT, "(T)1 / a", None),
    "Sin": (FLOAT, "sin(a)", None),
    "Cos": (FLOAT, "cos(a)", None),
    "Tanh": (FLOAT, "tanh(a)", None),
    "Sigmoid": (FLOAT, "(T)1 / ((T)1 + exp(-a))", None),
    "Floor": (FLOAT, "floor(a)", None),
    "Ceil": (FLOAT, "ceil(a)", None),
    "Round": (FLOAT, "rint(a)", None),
    # NaN stays NaN (as np.maximum(x, 0) does): only a < 0 becomes 0.
    "Relu": (NUMERIC, "(a < 0 ? (T)0 : a)", "(a < 0 ? (T)0 : a)"),
    "Relu6": (NUMERIC, "(a < 0 ? (T)0 : (a > 6 ? (T)6 : a))", "(a < 0 ? (T)0 : (a > 6 ? (T)6 : a))"),
    "Elu": (FLOAT, "(a < 0 ? expm1(a) : a)", None),
    "Softplus": (FLOAT, "(fmax(a, (T)0) + log1p(exp(-fabs(a))))", None),
    "LogicalNot": (["bool"], None, "!a"),
}

_INT_DIV = "(b == 0 ? (T)0 : (b == -1 ? -a : a / b))"  # -1: INT_MIN / -1 traps on x86
_INT_FLOORDIV = "(b == 0 ? (T)0 : (b == -1 ? -a : a / b - (T)((a % b != 0) && ((a < 0) != (b < 0)))))"
_INT_FLOORMOD = "((b == 0 || b == -1) ? (T)0 : ((a % b != 0) && ((a % b < 0) != (b < 0)) ? a % b + b : a % b))"
_FLOAT_FLOORMOD = "(fmod(a, b) != 0 && ((fmod(a, b) < 0) != (b < 0)) ? fmod(a, b) + b : fmod(a, b))"

# op -> (dtypes, float expression, integer/bool expression, result is bool)
BINARY = {
    "Add": (NUMERIC, "a + b", "a + b", False),
    "Sub": (NUMERIC, "a - b", "a - b", False),
    "Mul": (NUMERIC, "a * b", "a * b", False),
    "RealDiv": (NUMERIC, "a / b", _INT_DIV, False),
    "Div": (NUMERIC, "a / b", _INT_DIV, False),
    "FloorDiv": (NUMERIC, "floor(a / b)", _INT_FLOORDIV, False),
    "FloorMod": (NUMERIC, _FLOAT_FLOORMOD, _INT_FLOORMOD, False),
    "Pow": (NUMERIC, "pow(a, b)", "ipow(a, b)", False),
    # NaN wins, as with np.maximum / np.minimum (fmax/fmin would drop it).
    "Maximum": (NUMERIC, "((a > b || isnan(a)) ? a : b)", "(a > b ? a : b)", False),
    "Minimum": (NUMERIC, "((a < b || isnan(a)) ? a : b)", "(a < b ? a : b)", False),
    "SquaredDifference": (NUMERIC, "(a - b) * (a - b)", "(a - b) * (a - b)", False),
    "Less": (NUMERIC, "a < b", "a < b", True),
    "LessEqual": (NUMERIC, "a <= b", "a <= b", True),
    "Greater": (NUMERIC, "a > b", "a > b", True),
    "GreaterEqual": (NUMERIC, "a >= b", "a >= b", True),
    "Equal": (ALL, "a == b", "a == b", True),
    "NotEqual": (ALL, "a != b", "a != b", True),
    "LogicalAnd": (["bool"], None, "a && b", True),
    "LogicalOr": (["bool"], None, "a || b", True),
    # Activation gradients: (gradients, features or outputs). A mask multiplies, as on the CPU.
    "ReluGrad": (NUMERIC, "a * (T)(b > 0)", "a * (T)(b > 0)", False),
    "Relu6Grad": (NUMERIC, "a * (T)(b > 0 && b < 6)", "a * (T)(b > 0 && b < 6)", False),
    "EluGrad": (FLOAT, "a * (b < 0 ? b + (T)1 : (T)1)", None, False),
    "SoftplusGrad": (FLOAT, "a / ((T)1 + exp(-b))", None, False),
}

_IPOW = """
inline T ipow(T base, T e) {
    if (e < 0) return 0;
    T r = 1;
    while (e) { if (e & 1) r *= base; base *= base; e >>= 1; }
    return r;
}
"""


def _expr(table_entry, dtype) -> str:
    expr = table_entry[1] if np.dtype(dtype).kind == "f" else table_entry[2]
    return f"({expr})"


class Unary:
    """out = EXPR(x) element by element (also Cast, with its own result type)."""

    def __init__(self, ctx, expr: str, in_dtype, out_dtype):
        self.device = ctx.device
        self.out_dtype = np.dtype(out_dtype)
        defines = {"T": program.ctype(in_dtype), "R": program.ctype(out_dtype), "EXPR": expr}
        self.launch = launcher(ctx, "elementwise.cl", "unary", [BUF, BUF, I32], defines)

    def __call__(self, x):
        out = self.device.empty(x.shape, self.out_dtype)
        n = num_elements(x.shape)
        if n:
            self.launch.run(n, out.block.buf, x.block.buf, n)
        return out


class Binary:
    """out = EXPR(x, y) with NumPy broadcasting."""

    def __init__(self, ctx, expr: str, in_dtype, out_dtype, helpers: str = ""):
        self.ctx = ctx
        self.device = ctx.device
        self.out_dtype = np.dtype(out_dtype)
        defines = {"T": program.ctype(in_dtype), "R": program.ctype(out_dtype), "EXPR": expr, "BINARY": None}
        runtime = ctx.device.runtime
        text = helpers + program.source("elementwise.cl") if helpers else None
        prg = program.build(runtime, "elementwise.cl", defines, what=what(ctx), text=text)
        scal = [BUF, BUF, BUF, I32]
        self.same = program.Launcher(runtime, prg, "binary_same", scal)
        self.scalar_y = program.Launcher(runtime, prg, "binary_scalar_y", scal)
        self.scalar_x = program.Launcher(runtime, prg, "binary_scalar_x", scal)
        self.rows_y = program.Launcher(runtime, prg, "binary_rows_y", scal + [I32])
        self.rows_x = program.Launcher(runtime, prg, "binary_rows_x", scal + [I32])
        self.bcast = program.Launcher(runtime, prg, "binary_bcast", scal + [BUF])
        self.plans: dict = {}

    def plan(self, sa, sb):
        """(launcher, output shape, extra argument or None) for input shapes sa, sb: the
        extra argument is a row length (rows kernels) or a stride table (general kernel)."""
        out_shape = broadcast_shape(self.ctx, sa, sb)
        na, nb = num_elements(sa), num_elements(sb)
        n = num_elements(out_shape)
        if na == n and nb == n:
            p = (self.same, out_shape, None)  # same elements, only size-1 dims differ
        elif nb == 1:
            p = (self.scalar_y, out_shape, None)
        elif na == 1:
            p = (self.scalar_x, out_shape, None)
        else:
            dims, (xs, ys) = collapse(list(out_shape), broadcast_strides(sa, out_shape),
                                      broadcast_strides(sb, out_shape))
            if len(dims) == 2 and xs == [dims[1], 1] and ys == [0, 1]:
                p = (self.rows_y, out_shape, dims[1])
            elif len(dims) == 2 and xs == [0, 1] and ys == [dims[1], 1]:
                p = (self.rows_x, out_shape, dims[1])
            else:
                table = self.device.runtime.int_table([len(dims), *dims, *xs, *ys])
                p = (self.bcast, out_shape, table)
        if len(self.plans) < 64:
            self.plans[(sa, sb)] = p
        return p

    def __call__(self, x, y):
        sa, sb = x.shape, y.shape
        if sa == sb:
            out = self.device.empty(sa, self.out_dtype)
            n = num_elements(sa)
            if n:
                self.same.run(n, out.block.buf, x.block.buf, y.block.buf, n)
            return out
        p = self.plans.get((sa, sb)) or self.plan(sa, sb)
        launch, out_shape, extra = p
        out = self.device.empty(out_shape, self.out_dtype)
        n = num_elements(out_shape)
        if n:
            if extra is None:
                launch.run(n, out.block.buf, x.block.buf, y.block.buf, n)
            else:
                launch.run(n, out.block.buf, x.block.buf, y.block.buf, n, extra)
        return out


def _unary_factory(op):
    entry = UNARY[op]

    def factory(ctx):
        dt = ctx.input_dtypes[0].np_dtype
        return Unary(ctx, _expr(entry, dt), dt, dt)
    return factory


def _binary_factory(op):
    entry = BINARY[op]

    def factory(ctx):
        dt = ctx.input_dtypes[0].np_dtype
        out = np.bool_ if entry[3] else dt
        helpers = _IPOW if op == "Pow" and np.dtype(dt).kind in "iu" else ""
        return Binary(ctx, _expr(entry, dt), dt, out, helpers)
    return factory


def _cast(ctx):
    src, dst = ctx.attrs["SrcT"], ctx.attrs["DstT"]
    if dst.is_bool:
        expr = "(a != 0)"
    elif src.is_bool:
        expr = "(a != 0)"
    else:
        expr = "a"  # C conversion: float -> int rounds toward zero, as the CPU kernel does
    if src is dst:
        return lambda x: x
    return Unary(ctx, expr, src.np_dtype, dst.np_dtype)


def _add_n(ctx):
    dt = ctx.input_dtypes[0].np_dtype
    add = Binary(ctx, "(a + b)", dt, dt)

    def add_n(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = add(out, x)
        return out
    return add_n


def register(reg):
    for op, (types, _f, _i) in UNARY.items():
        reg.register(op, OPENCL, factory=_unary_factory(op), constraints={"T": types} if op != "LogicalNot" else None)
    for op, entry in BINARY.items():
        types = entry[0]
        cons = None if op in ("LogicalAnd", "LogicalOr") else {"T": types}
        reg.register(op, OPENCL, factory=_binary_factory(op), constraints=cons)
    reg.register("Cast", OPENCL, factory=_cast, constraints={"SrcT": ALL, "DstT": ALL})
    reg.register("AddN", OPENCL, factory=_add_n, constraints={"T": NUMERIC})

