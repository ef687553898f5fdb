"""The CUDA element-wise fuser: a fused expression becomes one generated CUDA C kernel.

Each step is the very expression the unfused kernel applies, read from ``elementwise.cu``
(its ``TW_UNARY``/``TW_BINARY``/``TW_COMPARE`` lines, per kind of dtype) and from
``cast.cu``'s rules, with ``a``, ``b``, ``T`` and the ``TW_ZERO``/``TW_ONE`` constants
replaced by the step's operands and C type; each result is converted to the step's type as
the unfused kernel stores it. The module is compiled like every other (``driver.compile``:
PyCUDA's ``SourceModule`` and nvcc on a GPU, g++ in the emulator), with ``--fmad=false``
so nvcc never joins one step's multiply and the next step's add into an FMA (the unfused
kernels cannot): arithmetic, comparisons, casts and min/max give the unfused kernels' values
bit for bit. Math functions (exp, tanh, ...) come from the same libdevice, but nvcc builds
it without FMA contraction here and with it in the catalog's modules, so they may differ in
the last ulp on a GPU (the emulator's g++ contracts nothing: bit for bit there). Modules are
cached per device by source text (and PyCUDA caches the cubin on disk by the same text).

Fused: float32, float64, int64 and bool, as the unfused kernels compute them. Not fused:
int32 (its element-wise ops are shape arithmetic in host memory, see ``kernels/elementwise.py``),
and ``FloorMod`` and integer ``FloorDiv``, whose expressions call helpers ``elementwise.cu``
defines for its one dtype. Inputs broadcast as NumPy does: each is read at the element's
index (its shape is the output's up to size-1 dimensions), at index 0 (one element), or
through a ``TwStrided`` of its own (``plan.strided_struct``); a kernel is generated per
expression and combination of those modes.
"""

from __future__ import annotations

import re
import threading
import weakref
from functools import cache

from tensorweave.framework import errors
from tensorweave.ops.fusion_ops import c_literal
from tensorweave_cuda import plan
from tensorweave_cuda.driver import DriverError
from tensorweave_cuda.kernels import catalog, source_text
from tensorweave_cuda.kernels.util import driver_failure

DTYPES = ("float32", "float64", "int64", "bool")
KERNEL = "tw_fused"
OPTIONS = ["--fmad=false"]
SAME, SCALAR, STRIDED = "s", "1", "x"
_KIND = {"float": 1, "int": 2, "bool": 3}
_LINE = re.compile(r"^TW_(UNARY|BINARY|COMPARE)\((\w+),\s*(.*)\)\s*$")


@cache
def expressions() -> dict:
    """{(kind, kernel name): expression} of elementwise.cu (kind None: every kind)."""
    out = {}
    kind = None
    for line in source_text("elementwise.cu").splitlines():
        m = re.match(r"#if TW_KIND == (\d)", line)
        if m:
            kind = int(m.group(1))
            continue
        if line.startswith("#endif"):
            kind = None
            continue
        m = _LINE.match(line.strip())
        if m:
            form, name, expr = m.groups()
            out[(kind, name)] = f"(tw_b8)({expr})" if form == "COMPARE" else expr
    return out


@cache
def _common_functions() -> frozenset:
    return frozenset(re.findall(r"\b(tw_\w+)\s*\(", source_text("common.cuh")))


def _op_expr(op: str, dt) -> str | None:
    """The unfused kernel's expression of ``op`` for operands of dtype ``dt`` (a catalog
    DType), or None when it has none a fused kernel can use."""
    if op in catalog.COMPARE:
        name = catalog.COMPARE[op]
    else:
        entry = catalog.UNARY.get(op) or catalog.BINARY.get(op)
        if entry is None or dt.name not in entry[1]:
            return None
        name = entry[0]
    table = expressions()
    expr = table.get((_KIND[dt.kind], name)) or table.get((None, name))
    if expr is None:
        return None
    # a helper elementwise.cu defines for its own dtype only (tw_floormod, tw_floordiv)
    if any(f not in _common_functions() for f in re.findall(r"\b(tw_\w+)\s*\(", expr)):
        return None
    return expr


class CUDAFuser:
    """Registered for ``GPU`` by the plugin (and for the emulator's device type by its tests)."""

    def supports(self, op, operand_types, result, num_elements) -> bool:
        names = [t.name for t in operand_types]
        if any(n not in DTYPES for n in names) or result.name not in DTYPES:
            return False
        if op == "Cast":
            return True
        return _op_expr(op, catalog.dtype(names[0])) is not None

    def compile(self, expr, ctx):
        return FusedKernel(expr, ctx)


def _literal(value: float, dt) -> str:
    return c_literal(value, dt, catalog.dtype(dt.np_dtype).ctype, "LL")


def _substitute(text: str, ct: str, operands) -> str:
    text = text.replace("TW_ZERO", f"(({ct})0)").replace("TW_ONE", f"(({ct})1)")
    text = re.sub(r"\bT\b", ct, text)
    names = {"a": operands[0], "b": operands[1] if len(operands) > 1 else "b"}
    return re.sub(r"\b([ab])\b", lambda m: names[m.group(1)], text)


def generate(expr, modes) -> tuple[str, str]:
    """(CUDA C source, launch signature) of ``expr`` with input ``modes``: a kernel
    ``tw_fused(out, x0, ..., n, strides of each strided input)``."""
    cts = [catalog.dtype(t.np_dtype).ctype for t in expr.input_types]
    out_ct = catalog.dtype(expr.output_type.np_dtype).ctype
    params = [f"{out_ct}* __restrict__ out"] + [f"const {ct}* __restrict__ x{i}" for i, ct in enumerate(cts)]
    params.append("long long n")
    params += [f"TwStrided s{i}" for i, m in enumerate(modes) if m == STRIDED]
    body, names = [], []
    for i, (ct, m) in enumerate(zip(cts, modes)):
        index = {SAME: "i", SCALAR: "0", STRIDED: f"tw_offset(i, s{i})"}[m]
        body.append(f"const {ct} a{i} = x{i}[{index}];")
        names.append(f"a{i}")
    for k, (value, dt) in enumerate(expr.literals):
        body.append(f"const {catalog.dtype(dt.np_dtype).ctype} L{k} = {_literal(value, dt)};")
        names.append(f"L{k}")
    for k, step in enumerate(expr.steps):
        src = expr.operand_types(step)[0]
        in_ct, rt = catalog.dtype(src.np_dtype).ctype, catalog.dtype(step.dtype.np_dtype).ctype
        if step.op == "Cast":  # as cast.cu
            text = "(tw_b8)(a != 0)" if step.dtype.is_bool else f"({rt})a"
        else:
            text = _op_expr(step.op, catalog.dtype(src.np_dtype))
        body.append(f"const {rt} v{k} = ({rt})({_substitute(text, in_ct, [names[r] for r in step.args])});")
        names.append(f"v{k}")
    body.append(f"out[i] = v{len(expr.steps) - 1};")
    src = source_text("common.cuh") + (
        f'extern "C" __global__ void {KERNEL}({", ".join(params)}) {{\n'
        "    TW_GRID_LOOP(i, n) {\n" + "".join(f"        {line}\n" for line in body) + "    }\n}\n")
    sig = "P" * (1 + len(cts)) + "q" + "X" * sum(m == STRIDED for m in modes)
    return src, sig


class FusedKernel:
    """The compiled kernel of one fused node: plans per input shapes, a module per
    combination of input modes (from the device's cache of generated modules)."""

    def __init__(self, expr, ctx):
        self.expr = expr
        self.ctx = ctx
        self.device = ctx.device
        self.driver = ctx.device.driver
        self.out_dtype = expr.output_type.np_dtype
        self.functions: dict = {}
        self.plans: dict = {}
        self._function((SAME,) * expr.n_inputs)  # compile now: errors surface at plan time

    def _function(self, modes):
        fn = self.functions.get(modes)
        if fn is None:
            src, sig = generate(self.expr, modes)
            fn = self.functions[modes] = _module_function(self.driver, src, sig, self.ctx)
        return fn

    def plan(self, shapes):
        try:
            out_shape = plan.broadcast_shape(*shapes) if shapes else ()
            n = plan.num_elements(out_shape)
            modes, structs = [], []
            for s in shapes:
                k = plan.num_elements(s)
                if k == n:
                    modes.append(SAME)
                elif k == 1:
                    modes.append(SCALAR)
                else:
                    modes.append(STRIDED)
                    structs.extend(plan.strided_struct(out_shape, plan.broadcast_strides(s, out_shape)))
        except plan.BroadcastError as e:
            raise self.ctx.error(errors.InvalidArgumentError, str(e)) from None
        p = (self._function(tuple(modes)), tuple(out_shape), n, tuple(structs))
        if len(self.plans) < 64:
            self.plans[shapes] = p
        return p

    def __call__(self, *xs):
        shapes = tuple(tuple(x.shape) for x in xs)
        fn, out_shape, n, structs = self.plans.get(shapes) or self.plan(shapes)
        drv = self.driver
        drv.last_node = f"_FusedElementwise node '{self.ctx.node_name}'"
        with drv.activate():  # as util.register's kernels: allocation and launch in the context
            try:
                out = self.device.empty(out_shape, self.out_dtype)
                if n:
                    grid, block = plan.launch_dims(n)
                    drv.launch(fn, grid, block, (out.ptr, *[x.ptr for x in xs], n, *structs))
            except DriverError as e:
                raise driver_failure(self.ctx, e) from e
        return out


_modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # driver -> {source: function}
_lock = threading.Lock()


def _module_function(driver, src: str, sig: str, ctx):
    """``tw_fused`` of ``src`` compiled for ``driver`` (cached per driver and source)."""
    cached = _modules.get(driver, {}).get(src)
    if cached is not None:
        return cached
    with _lock:
        table = _modules.setdefault(driver, {})
        fn = table.get(src)
        if fn is None:
            try:
                module = driver.compile(src, OPTIONS, signatures={KERNEL: sig})
                fn = table[src] = driver.function(module, KERNEL, catalog.expand_sig(sig))
            except DriverError as e:
                raise driver_failure(ctx, e) from e
    return fn
