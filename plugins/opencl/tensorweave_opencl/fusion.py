"""The OpenCL element-wise fuser: a fused expression becomes one generated OpenCL C kernel.

Each step is the expression the unfused kernel applies (``kernels/elementwise.py``'s
``UNARY``/``BINARY`` tables and Cast), with ``a``, ``b`` and ``T`` replaced by the step's
operands and their C type, and its result converted to the step's type as the unfused
kernel stores it; so a fused kernel computes exactly what the nodes it replaces did, math
functions included (the same compiler and library), bit for bit. ``#pragma OPENCL
FP_CONTRACT OFF`` keeps the compiler from joining a multiply and an add of two steps into
one FMA, which the unfused kernels never do. Scalar literals are written as exact hex floats.

Inputs broadcast as NumPy does. Per call, each input is read either at the element's own
index (its shape is the output's up to size-1 dimensions), or at index 0 (one element), or
through a stride table (the general case; dimensions merged as ``common.collapse`` does); a
kernel is generated per expression and combination of those modes, and built once per
source text per context (``program.build``'s cache: the source is the key).
"""

from __future__ import annotations

import re

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops.fusion_ops import c_literal
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import (
    ALL,
    BUF,
    I32,
    broadcast_shape,
    broadcast_strides,
    collapse,
    num_elements,
    what,
)
from tensorweave_opencl.kernels.elementwise import BINARY, UNARY

_IPOW = """
inline {t} ipow_{t}({t} base, {t} e) {{
    if (e < 0) return 0;
    {t} r = 1;
    while (e) {{ if (e & 1) r *= base; base *= base; e >>= 1; }}
    return r;
}}
"""

# Modes of an input: read at the element's own index, at index 0, or through the stride table.
SAME, SCALAR, STRIDED = "s", "1", "x"


class OpenCLFuser:
    """Registered for ``OPENCL`` by the plugin: fuses what its own element-wise kernels
    compute (the same ops and dtypes)."""

    def supports(self, op, operand_types, result, num_elements) -> bool:
        names = [t.name for t in operand_types]
        if op == "Cast":
            return names[0] in ALL and result.name in ALL
        entry = UNARY.get(op) or BINARY.get(op)
        if entry is None:
            return False
        if op in ("LogicalAnd", "LogicalOr", "LogicalNot"):
            return all(n == "bool" for n in names)
        return names[0] in entry[0] and _step_expr(op, operand_types[0]) is not None

    def compile(self, expr, ctx):
        return FusedKernel(expr, ctx)


def _step_expr(op, dtype) -> str | None:
    entry = UNARY.get(op) or BINARY.get(op)
    return entry[1] if np.dtype(dtype.np_dtype).kind == "f" else entry[2]


def _literal(value: float, dtype) -> str:
    return c_literal(value, dtype, program.ctype(dtype.np_dtype), "L")


def _substitute(text: str, ctype: str, operands: list[str]) -> str:
    text = re.sub(r"\bT\b", ctype, text)
    text = re.sub(r"\bipow\(", f"ipow_{ctype}(", text)
    names = {"a": operands[0], "b": operands[1] if len(operands) > 1 else "b"}
    return re.sub(r"\b([ab])\b", lambda m: names[m.group(1)], text)


def generate(expr, modes) -> str:
    """OpenCL C for ``expr`` with input ``modes`` (one of SAME/SCALAR/STRIDED each): a
    kernel ``fused(out, x0, ..., n, meta)``."""
    ctypes = [program.ctype(t.np_dtype) for t in expr.input_types]
    out_ct = program.ctype(expr.output_type.np_dtype)
    helpers = []
    body = []
    strided = [i for i, m in enumerate(modes) if m == STRIDED]
    if strided:
        body.append("    const int nd = meta[0];")
        body.append("    " + " ".join(f"int o{i} = 0;" for i in strided))
        body.append("    { int rem = i;")
        body.append("      for (int d = nd - 1; d >= 0; --d) {")
        body.append("        const int idx = rem % meta[1 + d]; rem /= meta[1 + d];")
        for k, i in enumerate(strided):
            body.append(f"        o{i} += idx * meta[1 + {k + 1} * nd + d];")
        body.append("      } }")
    names = []
    for i, (ct, m) in enumerate(zip(ctypes, modes)):
        index = {SAME: "i", SCALAR: "0", STRIDED: f"o{i}"}[m]
        body.append(f"    const {ct} a{i} = x{i}[{index}];")
        names.append(f"a{i}")
    for k, (value, dt) in enumerate(expr.literals):
        body.append(f"    const {program.ctype(dt.np_dtype)} L{k} = {_literal(value, dt)};")
        names.append(f"L{k}")
    for k, step in enumerate(expr.steps):
        operand_t = expr.operand_types(step)
        in_ct = program.ctype(operand_t[0].np_dtype)
        rt = program.ctype(step.dtype.np_dtype)
        ops = [names[r] for r in step.args]
        if step.op == "Cast":
            text = "(a != 0)" if (step.dtype.is_bool or operand_t[0].is_bool) else "a"
        else:
            text = f"({_step_expr(step.op, operand_t[0])})"
        if "ipow(" in text and in_ct not in helpers:
            helpers.append(in_ct)
        body.append(f"    const {rt} v{k} = ({rt})({_substitute(text, in_ct, ops)});")
        names.append(f"v{k}")
    body.append(f"    out[i] = v{len(expr.steps) - 1};")
    params = [f"__global {out_ct}* out"] + [f"__global const {ct}* x{i}" for i, ct in enumerate(ctypes)]
    params += ["const int n", "__global const int* meta"]
    head = "#pragma OPENCL FP_CONTRACT OFF\n"
    if _uses_double(expr):
        head = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + head
    text = head + "".join(_IPOW.format(t=t) for t in helpers)
    text += f"__kernel void fused({', '.join(params)})\n{{\n    const int i = get_global_id(0);\n"
    text += "    if (i >= n) return;\n" + "\n".join(body) + "\n}\n"
    return text


def _uses_double(expr) -> bool:
    types = set(expr.input_types) | {s.dtype for s in expr.steps} | {dt for _, dt in expr.literals}
    return any(t.np_dtype == np.float64 for t in types)


class FusedKernel:
    """The compiled kernel of one fused node: plans per input shapes (modes, stride table),
    a program per combination of modes."""

    def __init__(self, expr, ctx):
        self.expr = expr
        self.ctx = ctx
        self.device = ctx.device
        self.runtime = ctx.device.runtime
        if _uses_double(expr) and not self.runtime.has_fp64:
            raise errors.UnimplementedError(
                f"{what(ctx)}: {self.runtime.name} does not support double precision (cl_khr_fp64)")
        self.out_dtype = expr.output_type.np_dtype
        self.scalars = [BUF] * (1 + expr.n_inputs) + [I32, BUF]
        self.launchers: dict = {}
        self.plans: dict = {}
        self.dummy = self.runtime.int_table([0])
        # the common case, every input of the output's shape, built now: errors surface
        # when the plan is built, not in its first step
        self._launcher((SAME,) * expr.n_inputs)

    def _launcher(self, modes):
        launch = self.launchers.get(modes)
        if launch is None:
            text = generate(self.expr, modes)
            prg = program.build(self.runtime, "fused", {}, what=what(self.ctx), text=text)
            launch = self.launchers[modes] = program.Launcher(self.runtime, prg, "fused", self.scalars)
        return launch

    def plan(self, shapes):
        out_shape = ()
        for s in shapes:
            out_shape = broadcast_shape(self.ctx, out_shape, s)
        n = num_elements(out_shape)
        modes, strided = [], []
        for s in shapes:
            k = num_elements(s)
            if k == n:
                modes.append(SAME)
            elif k == 1:
                modes.append(SCALAR)
            else:
                modes.append(STRIDED)
                strided.append(broadcast_strides(s, out_shape))
        meta = self.dummy
        if strided:
            dims, strides = collapse(list(out_shape), *strided)
            meta = self.runtime.int_table([len(dims), *dims, *[x for st in strides for x in st]])
        p = (self._launcher(tuple(modes)), out_shape, n, meta)
        if len(self.plans) < 64:
            self.plans[shapes] = p
        return p

    def __call__(self, *xs):
        shapes = tuple(x.shape for x in xs)
        p = self.plans.get(shapes) or self.plan(shapes)
        launch, out_shape, n, meta = p
        out = self.device.empty(out_shape, self.out_dtype)
        if n:
            launch.run(n, out.block.buf, *[x.block.buf for x in xs], n, meta)
        return out
