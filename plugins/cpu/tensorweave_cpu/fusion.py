"""The CPU's element-wise fuser: a fused expression becomes one NumPy ufunc, compiled by numba.

Installed with the ``fusion`` extra (``pip install tensorweave-cpu[fusion]``, which brings
numba); without numba the plugin registers no fuser and the CPU runs every element-wise node
on its own, as before. numba is imported only when the first fused node is compiled.

Each expression becomes a Python function of scalars, one line per step, which
``numba.vectorize`` compiles for the node's dtypes into a real ``numpy.ufunc``: NumPy's
broadcasting, 0-d inputs and the call cost of a ufunc (about 0.3 us) come with it. The
function is compiled once per process and expression (a table keyed by
``FusedExpression.key()``), whatever plan or Session asks for it.

Values are those of the NumPy kernels (``kernels/math.py``, ``kernels/nn.py``): each step
computes in its dtype (constants are typed: no float32 math is done in float64, integers
wrap) and rounds to it, and numba never contracts a multiply and an add into one FMA (no
``fastmath``). Arithmetic, comparisons, casts, ``sqrt``, rounding, min/max and the ReLUs
give the same bits; transcendental functions (exp, log, tanh, sin, pow, ...) come from the C
math library where NumPy uses its own SIMD versions: within a few ulps (< 1e-6 relative) of
NumPy's, and several times slower per element. So a transcendental op fuses only into small
tensors (``TRANSCENDENTAL_MAX_ELEMENTS``), where what fusion saves per node outweighs it.

Not fused here (they run as ordinary nodes): float16 and complex dtypes (numba computes
neither as NumPy does), integer division, modulo and power (their NumPy kernels raise on a
zero divisor or negative power; a ufunc cannot name the node), casts from floats to unsigned
integers (NumPy wraps, a C conversion is undefined), and expressions with more than
``MAX_INPUTS`` inputs (a ufunc takes at most 32 arguments).
"""

from __future__ import annotations

import threading

import numpy as np

from tensorweave_cpu import rowwise
from tensorweave_cpu.jit import numba_available as numba_available  # re-exported: the plugin asks here

# The element count up to which a transcendental op fuses: each element costs 2-40x more
# through the C library than through NumPy's SIMD loops (measured: float32 tanh 13.6 ns
# against 0.36 ns), and a fused node saves about 1 us per node it replaces.
TRANSCENDENTAL_MAX_ELEMENTS = 64
MAX_INPUTS = 31

TRANSCENDENTAL = frozenset({"Exp", "Log", "Log1p", "Expm1", "Sin", "Cos", "Tanh", "Sigmoid", "Elu", "Softplus",
                            "Pow", "EluGrad", "SoftplusGrad"})
FLOAT_ONLY = frozenset({"Exp", "Log", "Log1p", "Expm1", "Sqrt", "Rsqrt", "Reciprocal", "Floor", "Ceil", "Round",
                        "Sin", "Cos", "Tanh", "Sigmoid", "Elu", "Softplus", "EluGrad", "SoftplusGrad",
                        "Div", "RealDiv", "FloorDiv", "FloorMod", "Pow"})
FLOATS = frozenset({"float32", "float64"})
INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
NUMERIC = FLOATS | INTS


class CPUFuser:
    """Registered for ``CPU`` by the plugin when numba is installed."""

    def supports(self, op, operand_types, result, num_elements) -> bool:
        names = [t.name for t in operand_types]
        if op in ("LogicalAnd", "LogicalOr", "LogicalNot"):
            return all(n == "bool" for n in names)
        if op == "Cast":
            src, dst = names[0], result.name
            if src not in NUMERIC | {"bool"} or dst not in NUMERIC | {"bool"}:
                return False
            return not (src in FLOATS and dst.startswith("uint"))
        if op in ("Equal", "NotEqual") and names[0] == "bool":
            return True
        if any(n not in NUMERIC for n in names) or result.name not in NUMERIC | {"bool"}:
            return False
        if op in FLOAT_ONLY and names[0] not in FLOATS:
            return False
        if op in TRANSCENDENTAL:
            return num_elements is not None and num_elements <= TRANSCENDENTAL_MAX_ELEMENTS
        return op in _TEMPLATES

    def compile(self, expr, ctx):
        if expr.n_inputs > MAX_INPUTS:
            return None
        ufunc = compiled_ufunc(expr)
        out = ctx.op.outputs[0]
        if out.shape.is_fully_defined() and out.shape.num_elements() >= rowwise.PARALLEL_MIN:
            # a million elements and more (a convolution's activations): a block of rows per core
            return rowwise.split_ufunc(ufunc, expr.output_type.np_dtype,
                                       in_dtypes=[t.np_dtype for t in expr.input_types])
        return ufunc


# ---------------------------------------------------------------------------------------
# code generation: one Python line per step, typed constants as globals
def _max(a, b, c):
    # np.maximum: NaN in either operand wins; ``a != a`` is False for integers
    return f"({a} if ({a} >= {b} or {a} != {a}) else {b})"


def _min(a, b, c):
    return f"({a} if ({a} <= {b} or {a} != {a}) else {b})"


def _sign(a, c):
    if c.float:
        return f"({c.one} if {a} > {c.zero} else (-{c.one} if {a} < {c.zero} else ({c.zero} if {a} == {c.zero} else {a})))"
    return f"({c.T}({a} > {c.zero}) - {c.T}({a} < {c.zero}))"


def _softplus(a, c):
    # np.logaddexp(x, 0) as NumPy computes it (npy_logaddexp), in the operand's dtype
    return (f"(({a} + {c.ln2}) if {a} == {c.zero} else (({a} + np.log1p(np.exp(-{a}))) if {a} > {c.zero} else "
            f"(({c.zero} + np.log1p(np.exp({a}))) if {a} <= {c.zero} else {a})))")


_TEMPLATES = {
    # unary: f(a, consts)
    "Neg": lambda a, c: f"-{a}",
    "Abs": lambda a, c: f"abs({a})",
    "Square": lambda a, c: f"{a} * {a}",
    "Sign": _sign,
    "Sqrt": lambda a, c: f"np.sqrt({a})",
    "Rsqrt": lambda a, c: f"{c.one} / np.sqrt({a})",
    "Reciprocal": lambda a, c: f"{c.one} / {a}",
    "Floor": lambda a, c: f"np.floor({a})",
    "Ceil": lambda a, c: f"np.ceil({a})",
    "Round": lambda a, c: f"np.rint({a})",
    "Exp": lambda a, c: f"np.exp({a})",
    "Log": lambda a, c: f"np.log({a})",
    "Log1p": lambda a, c: f"np.log1p({a})",
    "Expm1": lambda a, c: f"np.expm1({a})",
    "Sin": lambda a, c: f"np.sin({a})",
    "Cos": lambda a, c: f"np.cos({a})",
    "Tanh": lambda a, c: f"np.tanh({a})",
    "Sigmoid": lambda a, c: f"{c.half} * (np.tanh({c.half} * {a}) + {c.one})",
    "Relu": lambda a, c: _max(a, c.zero, c),
    "Relu6": lambda a, c: _min(_max(a, c.zero, c), c.six, c),
    "Elu": lambda a, c: f"np.expm1({_min(a, c.zero, c)}) + {_max(a, c.zero, c)}",
    "Softplus": _softplus,
    "LogicalNot": lambda a, c: f"not {a}",
    # binary: f(a, b, consts)
    "Add": lambda a, b, c: f"{a} + {b}",
    "Sub": lambda a, b, c: f"{a} - {b}",
    "Mul": lambda a, b, c: f"{a} * {b}",
    "Div": lambda a, b, c: f"{a} / {b}",
    "RealDiv": lambda a, b, c: f"{a} / {b}",
    "FloorDiv": lambda a, b, c: f"np.floor({a} / {b})",
    "FloorMod": lambda a, b, c: f"floormod_{c.name}({a}, {b})",
    "Pow": lambda a, b, c: f"{a} ** {b}",
    "Maximum": _max,
    "Minimum": _min,
    "SquaredDifference": lambda a, b, c: f"({a} - {b}) * ({a} - {b})",
    "ReluGrad": lambda a, b, c: f"{a} * {c.T}({b} > {c.zero})",
    "Relu6Grad": lambda a, b, c: f"{a} * {c.T}(({b} > {c.zero}) and ({b} < {c.six}))",
    "EluGrad": lambda a, b, c: f"{a} * ({_min(b, c.zero, c)} + {c.one})",
    "SoftplusGrad": lambda a, b, c: f"{a} * ({c.half} * (np.tanh({c.half} * {b}) + {c.one}))",
    "Less": lambda a, b, c: f"{a} < {b}",
    "LessEqual": lambda a, b, c: f"{a} <= {b}",
    "Greater": lambda a, b, c: f"{a} > {b}",
    "GreaterEqual": lambda a, b, c: f"{a} >= {b}",
    "Equal": lambda a, b, c: f"{a} == {b}",
    "NotEqual": lambda a, b, c: f"{a} != {b}",
    "LogicalAnd": lambda a, b, c: f"{a} and {b}",
    "LogicalOr": lambda a, b, c: f"{a} or {b}",
}

# NumPy's float remainder (npy_remainder): the sign of the divisor, fmod's NaN for b == 0.
_FLOORMOD = """
def floormod_{name}(a, b):
    m = T_{name}(np.fmod(a, b))
    if not b:
        return m
    if m:
        if (b < Z_{name}) != (m < Z_{name}):
            m = T_{name}(m + b)
    else:
        m = T_{name}(np.copysign(Z_{name}, b))
    return m
"""


class _Consts:
    """Names of the typed constants of one dtype in the generated module's globals."""

    def __init__(self, name: str, glb: dict):
        dt = np.dtype(name)
        self.name = name
        self.float = dt.kind == "f"
        self.T = f"T_{name}"
        glb[self.T] = dt.type
        for attr, value in (("zero", 0), ("one", 1), ("six", 6), ("half", 0.5), ("ln2", np.log(2.0))):
            if not self.float and attr in ("half", "ln2"):
                continue
            ident = f"{attr.upper()}_{name}"
            # NumPy's float32 log(2) is the float32 nearest it, as this is
            glb[ident] = dt.type(value)
            setattr(self, attr, ident)
        self.zero_name = f"Z_{name}"
        glb[self.zero_name] = dt.type(0)


def generate(expr) -> tuple[str, dict]:
    """(Python source of the scalar function, its globals) for ``expr``."""
    glb: dict = {"np": np}
    consts: dict = {}

    def c_of(dt):
        if dt.name not in consts:
            consts[dt.name] = _Consts(dt.name, glb)
        return consts[dt.name]

    n = expr.n_inputs
    names = [f"a{i}" for i in range(n)]
    for k, (value, dt) in enumerate(expr.literals):
        ident = f"L{k}"
        glb[ident] = np.asarray(value, dtype=dt.np_dtype)[()]
        names.append(ident)
    lines = [f"def fused({', '.join(names[:n])}):"]
    helpers = []
    for k, step in enumerate(expr.steps):
        operand_t = expr.operand_types(step)
        c = c_of(operand_t[0])
        out_c = c_of(step.dtype)
        tpl = _TEMPLATES[step.op] if step.op != "Cast" else None
        ops = [names[r] for r in step.args]
        if step.op == "Cast":
            text = f"{ops[0]} != {c.zero}" if step.dtype.is_bool else ops[0]
        else:
            text = tpl(*ops, c)
        if step.op == "FloorMod" and f"floormod_{c.name}" not in helpers:
            helpers.append(f"floormod_{c.name}")
        if step.dtype.is_bool:
            lines.append(f"    v{k} = bool({text})")
        else:
            lines.append(f"    v{k} = {out_c.T}({text})")
        names.append(f"v{k}")
    lines.append(f"    return v{len(expr.steps) - 1}")
    src = "\n".join(lines) + "\n"
    for h in helpers:
        name = h.removeprefix("floormod_")
        src = _FLOORMOD.format(name=name) + "\n" + src
    return src, glb


_cache: dict = {}
_lock = threading.Lock()
# Expressions kept compiled per process; beyond, the oldest is forgotten (plans that use it
# keep their ufunc; a new plan of it compiles again). A program whose constants change from
# plan to plan would otherwise grow it without bound.
MAX_CACHED = 1024


def compiled_ufunc(expr):
    """The ufunc computing ``expr`` (compiled once per process and expression)."""
    key = expr.key()
    u = _cache.get(key)
    if u is not None:
        return u
    with _lock:
        u = _cache.get(key)
        if u is None:
            u = _compile(expr)
            if len(_cache) >= MAX_CACHED:
                del _cache[next(iter(_cache))]
            _cache[key] = u
    return u


def _compile(expr):
    import numba

    src, glb = generate(expr)
    exec(compile(src, f"<tensorweave fused expression {expr.describe()[:200]}>", "exec"), glb)  # noqa: S102 - our own generated code
    for name in [n for n in glb if n.startswith("floormod_")]:
        glb[name] = numba.njit(glb[name])
    sig = numba.from_dtype(expr.output_type.np_dtype)(*[numba.from_dtype(t.np_dtype) for t in expr.input_types])
    return numba.vectorize([sig], nopython=True)(glb["fused"]).ufunc
