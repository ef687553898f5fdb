"""``_FusedElementwise``: one node that computes a group of element-wise ops, and the
expression it carries (``FusedExpression``), as data.

The element-wise fusion pass (``passes/fusion.py``) replaces a connected group of element-wise
nodes on one device by one such node. Plans travel as GraphDefs (to worker processes, in
``RunMetadata.partition_graphs``), so the expression is attrs, never code:

- ``Tin``: the dtypes of the node's inputs (tensors computed outside the group);
- ``literals`` / ``literal_types``: scalar constants folded into the expression;
- ``ops`` / ``args`` / ``types``: the steps, in order; step ``k`` applies op ``ops[k]`` (one of
  ``FUSABLE``) to ``FUSABLE[op].arity`` operands taken in turn from ``args`` and has dtype
  ``types[k]``. An operand is a reference: ``0 .. n_inputs-1`` the inputs,
  ``n_inputs .. n_inputs+n_literals-1`` the literals, then the steps' results;
- ``Tout``: the result's dtype, that of the last step, which is the node's output;
- ``names`` (optional): the node each step came from, so that an error raised while the
  fused node runs step by step names the user's node.

``_FusedMatMul`` and ``_FusedConv2D`` (TensorFlow's names and attrs) are a MatMul or a
Conv2D whose result goes straight through the ops ``fused_ops`` names: ``["BiasAdd"]`` (add
``args[0]``, a vector of the product's columns or the convolution's output channels) and
optionally ``"Relu"`` or ``"Relu6"`` after it. The matmul-fusion pass
(``passes/matmul_fusion.py``) makes them where a device has a kernel for them, so the result
is written once, already biased and rectified.

``_MaxPoolGradReluGrad`` is ``ReluGrad(MaxPoolGrad(x, y, g), x)``: the gradient of
``max_pool(relu(...))`` with respect to the ReLU's input, where ``x``, the pooled tensor, is
the ReLU's output (made by ``passes/pool_grad_fusion.py``).

``_MaxPoolArgmax`` is a MaxPool over windows that tile the input (``ksize`` equal to
``strides``, fewer than 255 positions) that also gives, for every output, where in its window
the first maximum is: ``argmax`` (uint8, the output's shape) holds ``i * kw + j`` for window
row ``i`` and column ``j`` (row-major, counted from the window's corner, padding included,
though padding is never chosen), or 255 where no input equals the maximum (a NaN window).
With ``relu``, it pools its input rectified as Relu computes it (``max_pool(relu(x))``, the
argmax among the rectified values): the pass moves a _FusedConv2D's ReLU there, where the
pool reads each value anyway.
``_MaxPoolGradArgmax`` is MaxPoolGrad for such a pool given that ``argmax`` instead of the
pooled tensor: each output's gradient goes to that position, zero everywhere else, an
``input_size`` (height, width) input gradient; with ``relu`` times 1 where the pool's output
is positive, else 0, which is ``_MaxPoolGradReluGrad``'s value (the position a gradient goes
to holds the output's value; the others get zero either way). An argmax that is neither 255
nor a position of its window inside the input is an InvalidArgumentError (kernels trust no
index from a graph). The pool-gradient pass makes
the pair where the device has both, so the gradient reads a byte per output instead of the
pooled tensor, which it no longer keeps alive.

Every fusable op's meaning is fixed by its operand and result dtypes (a Cast's ``SrcT`` and
``DstT`` are those), which is why steps carry no other attrs. Operands broadcast as NumPy
does; the output's shape is the broadcast of the inputs' shapes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import shape_fns
from tensorweave.ops.math_ops import _matmul_shape
from tensorweave.ops.nn_ops import (
    _attr4,
    _conv2d_shape,
    _make_shape,
    _max_pool_grad_shape,
    _nhwc_dims,
    _pool_out_shape,
    _rank4,
    conv_output_size,
)

FUSED = "_FusedElementwise"
FUSED_MATMUL = "_FusedMatMul"
FUSED_CONV2D = "_FusedConv2D"
MAX_POOL_RELU_GRAD = "_MaxPoolGradReluGrad"
MAX_POOL_ARGMAX = "_MaxPoolArgmax"
MAX_POOL_GRAD_ARGMAX = "_MaxPoolGradArgmax"
NO_ARGMAX = 255  # a window whose maximum no input equals (NaN)
# What may follow the bias add in a _FusedMatMul or _FusedConv2D (fused_ops[1:]).
EPILOGUE_ACTIVATIONS = ("Relu", "Relu6")


@dataclasses.dataclass(frozen=True)
class Fusable:
    """How an op takes part in a fused expression: its number of operands and its typing rule
    (``same``: one operand dtype, the result has it; ``compare``: one operand dtype, a bool
    result; ``logical``: bool operands and result; ``cast``: any operand, the declared result)."""

    arity: int
    typing: str = "same"


_UNARY = ("Neg", "Abs", "Exp", "Log", "Log1p", "Expm1", "Sqrt", "Rsqrt", "Square", "Sign", "Reciprocal",
          "Floor", "Ceil", "Round", "Sin", "Cos", "Tanh", "Sigmoid", "Relu", "Relu6", "Elu", "Softplus")
_BINARY = ("Add", "Sub", "Mul", "Div", "RealDiv", "FloorDiv", "FloorMod", "Pow", "Maximum", "Minimum",
           "SquaredDifference", "ReluGrad", "Relu6Grad", "EluGrad", "SoftplusGrad")
_COMPARE = ("Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual")

# The ops a fused expression may contain (the same op types, with the same meaning, as the
# unfused nodes). The pass also turns AddN, BiasAdd (NHWC) and Identity/StopGradient into these.
FUSABLE: dict[str, Fusable] = {
    **{op: Fusable(1) for op in _UNARY},
    **{op: Fusable(2) for op in _BINARY},
    **{op: Fusable(2, "compare") for op in _COMPARE},
    "LogicalAnd": Fusable(2, "logical"), "LogicalOr": Fusable(2, "logical"), "LogicalNot": Fusable(1, "logical"),
    "Cast": Fusable(1, "cast"),
}


@dataclasses.dataclass(frozen=True)
class Step:
    op: str
    args: tuple[int, ...]
    dtype: dtypes.DType


@dataclasses.dataclass(frozen=True)
class FusedExpression:
    """The computation of a ``_FusedElementwise`` node (see the module docstring)."""

    input_types: tuple[dtypes.DType, ...]
    literals: tuple[tuple[float, dtypes.DType], ...]
    steps: tuple[Step, ...]
    names: tuple[str, ...] = dataclasses.field(default=(), compare=False)  # for messages only

    @property
    def output_type(self) -> dtypes.DType:
        return self.steps[-1].dtype

    @property
    def n_inputs(self) -> int:
        return len(self.input_types)

    def ref_type(self, ref: int) -> dtypes.DType:
        """The dtype of the value an operand reference names."""
        n, nl = len(self.input_types), len(self.literals)
        if ref < n:
            return self.input_types[ref]
        if ref < n + nl:
            return self.literals[ref - n][1]
        return self.steps[ref - n - nl].dtype

    def literal_value(self, k: int) -> np.ndarray:
        """Literal ``k`` as a 0-d array of its dtype (what the Const it replaced held)."""
        value, dt = self.literals[k]
        return np.asarray(value, dtype=dt.np_dtype)

    def operand_types(self, step: Step) -> tuple[dtypes.DType, ...]:
        return tuple(self.ref_type(r) for r in step.args)

    def step_attrs(self, step: Step) -> dict:
        """The attrs an unfused node of this step would have (its type attrs)."""
        kind = FUSABLE[step.op].typing
        if kind == "cast":
            return {"SrcT": self.ref_type(step.args[0]), "DstT": step.dtype}
        if kind == "logical":
            return {}
        return {"T": self.ref_type(step.args[0])}

    # -- as attrs, and back ------------------------------------------------------------------
    def to_attrs(self) -> dict:
        return {
            "Tin": list(self.input_types), "Tout": self.output_type,
            "ops": [s.op for s in self.steps], "args": [r for s in self.steps for r in s.args],
            "types": [s.dtype for s in self.steps],
            "literals": [v for v, _ in self.literals], "literal_types": [dt for _, dt in self.literals],
            "names": list(self.names),
        }

    @classmethod
    def from_attrs(cls, attrs: dict, where: str = FUSED) -> FusedExpression:
        """The expression of a node's attrs, checked: every op fusable, every operand an earlier
        value, every step typed as its op requires. Raises InvalidArgumentError saying what
        is wrong."""
        def bad(msg):
            return errors.InvalidArgumentError(f"{where}: malformed fused expression: {msg}")

        try:
            tin = tuple(dtypes.as_dtype(t) for t in attrs["Tin"])
            ops = list(attrs["ops"])
            args = [int(a) for a in attrs["args"]]
            types = [dtypes.as_dtype(t) for t in attrs["types"]]
            lits = [float(v) for v in attrs.get("literals", ())]
            ltypes = [dtypes.as_dtype(t) for t in attrs.get("literal_types", ())]
            tout = dtypes.as_dtype(attrs["Tout"])
            names = tuple(str(n) for n in attrs.get("names", ()))
        except KeyError as e:
            raise bad(f"attr {e.args[0]!r} is missing") from None
        except (TypeError, ValueError) as e:
            raise bad(str(e)) from None
        if not tin:
            raise bad("it has no inputs")
        if not ops or len(ops) != len(types):
            raise bad(f"{len(ops)} ops but {len(types)} step types (one each, at least one)")
        if names and len(names) != len(ops):
            raise bad(f"{len(names)} step names for {len(ops)} steps")
        if len(lits) != len(ltypes):
            raise bad(f"{len(lits)} literals but {len(ltypes)} literal types")
        for v, dt in zip(lits, ltypes):
            if dt.is_string or dt.is_complex or (not math.isfinite(v) and not dt.is_floating):
                raise bad(f"literal {v!r} of dtype {dt.name}")
        steps, pos = [], 0
        expr = cls(tin, tuple(zip(lits, ltypes)), ())
        for k, (op, dt) in enumerate(zip(ops, types)):
            spec = FUSABLE.get(op)
            if spec is None:
                raise bad(f"step {k}: {op!r} is not a fusable op (those are {sorted(FUSABLE)})")
            refs = tuple(args[pos:pos + spec.arity])
            pos += spec.arity
            limit = len(tin) + len(lits) + k
            if len(refs) != spec.arity or any(not 0 <= r < limit for r in refs):
                raise bad(f"step {k} ({op}): operands {list(refs)} must be {spec.arity} references to "
                          f"the inputs, literals or earlier steps (0..{limit - 1})")
            step = Step(op, refs, dt)
            expr = dataclasses.replace(expr, steps=(*expr.steps, step))
            problem = typing_problem(op, expr.operand_types(step), dt)
            if problem:
                raise bad(f"step {k} ({op}): {problem}")
            steps.append(step)
        if pos != len(args):
            raise bad(f"{len(args)} operand references, the steps take {pos}")
        if tout is not types[-1]:
            raise bad(f"Tout is {tout.name} but the last step has dtype {types[-1].name}")
        return dataclasses.replace(expr, names=names)

    # -- for compilers and messages -------------------------------------------------------------
    def key(self) -> tuple:
        """A hashable key naming the computation exactly (compile caches use it)."""
        return (tuple(t.name for t in self.input_types),
                tuple((repr(v), dt.name) for v, dt in self.literals),
                tuple((s.op, s.args, s.dtype.name) for s in self.steps))

    def describe(self) -> str:
        """The expression as text, e.g. ``Add(Mul(x0, 1.0001), 0.5)`` (for messages and docs):
        ``x<i>`` are the inputs, and a value used more than once is shown in parentheses each time."""
        names = [f"x{i}" for i in range(self.n_inputs)] + [str(dt.np_dtype.type(v)) for v, dt in self.literals]
        uses = [0] * (len(names) + len(self.steps))
        for s in self.steps:
            for r in s.args:
                uses[r] += 1
        for s in self.steps:
            text = f"{s.op}({', '.join(names[r] for r in s.args)})"
            names.append(text if uses[len(names)] <= 1 else f"({text})")
        return names[-1]


def c_literal(value: float, dtype, ctype: str, long_suffix: str = "L") -> str:
    """A literal of the expression spelled in C-family source (OpenCL C, CUDA C) as ``ctype``
    of ``dtype``: floats exactly (hex), NaN/infinities through the usual macros, integers with
    ``long_suffix`` (|value| <= 2**53: the pass keeps larger integers as inputs)."""
    if dtype.is_floating:
        if np.isnan(value):
            return f"(({ctype})NAN)"
        if np.isinf(value):
            return f"(({ctype})({'-' if value < 0 else ''}INFINITY))"
        v = float(dtype.np_dtype.type(value))
        return f"(({ctype}){v.hex()}{'f' if ctype == 'float' else ''})"
    if dtype.is_bool:
        return f"(({ctype}){1 if value else 0})"
    return f"(({ctype}){int(value)}{long_suffix})"


def typing_problem(op: str, operand_types, result) -> str | None:
    """Why ``op`` cannot take ``operand_types`` to ``result`` (None when it can)."""
    kind = FUSABLE[op].typing
    if kind == "cast":
        return None
    if len(set(operand_types)) != 1:
        return f"operands of dtypes {[t.name for t in operand_types]} (must be one dtype)"
    t = operand_types[0]
    if kind == "logical" and not (t.is_bool and result.is_bool):
        return f"takes and gives bool, not {t.name} -> {result.name}"
    if kind == "compare" and not result.is_bool:
        return f"gives bool, not {result.name}"
    if kind == "same" and result is not t:
        return f"gives its operands' dtype {t.name}, not {result.name}"
    return None


def _shape(op):
    FusedExpression.from_attrs(op._attrs, f"{FUSED} node '{op.name}'")
    shape = TensorShape([])
    for t in op.inputs:
        shape = shape_fns.broadcast_shapes(shape, t.shape)
    return [shape]


def _check_epilogue(op, kind: str, channels) -> None:
    """``fused_ops`` and the bias of a _FusedMatMul or _FusedConv2D whose result has
    ``channels`` columns or output channels (None: not known yet)."""
    fused = list(op.get_attr("fused_ops"))
    if not fused or fused[0] != "BiasAdd" or len(fused) > 2 or (len(fused) == 2 and fused[1] not in EPILOGUE_ACTIVATIONS):
        raise errors.InvalidArgumentError(
            f"{kind} node '{op.name}': fused_ops must be ['BiasAdd'] optionally followed by one of "
            f"{list(EPILOGUE_ACTIVATIONS)}, got {fused}")
    bias = op.inputs[2].shape
    if op.get_attr("num_args") != 1 or (bias.ndims is not None and bias.ndims != 1):
        raise errors.InvalidArgumentError(f"{kind} node '{op.name}': BiasAdd takes one vector argument, "
                                          f"got {op.get_attr('num_args')} of shape {bias}")
    if bias.ndims == 1 and channels is not None and bias[0] is not None and bias[0] != channels:
        raise errors.InvalidArgumentError(f"{kind} node '{op.name}': bias of length {bias[0]} for a "
                                          f"result with {channels} {'columns' if kind == FUSED_MATMUL else 'channels'}")


def _fused_matmul_shape(op):
    (shape,) = _matmul_shape(op)
    _check_epilogue(op, FUSED_MATMUL, shape[1])
    return [shape]


def _fused_conv2d_shape(op):
    (shape,) = _conv2d_shape(op)
    _check_epilogue(op, FUSED_CONV2D, shape[3 if op.get_attr("data_format") == "NHWC" else 1])
    return [shape]


def argmax_window(op) -> tuple[int, int]:
    """The (height, width) of a _MaxPoolArgmax's or _MaxPoolGradArgmax's windows, checked:
    they tile the input (ksize equal to strides) and have fewer than 255 positions."""
    fmt = op.get_attr("data_format")
    k, s = _attr4(op, "ksize", fmt, "pooling"), _attr4(op, "strides", fmt, "striding")
    if k != s or k[0] * k[1] >= NO_ARGMAX:
        raise errors.InvalidArgumentError(
            f"{op.type} node '{op.name}': its windows must tile the input (ksize equal to strides) and have "
            f"fewer than {NO_ARGMAX} positions, got ksize {k} and strides {s}")
    return k


def _max_pool_argmax_shape(op):
    argmax_window(op)
    out = _pool_out_shape(op, op.inputs[0].shape)
    return [out, out]


def _max_pool_grad_argmax_shape(op):
    kh, kw = argmax_window(op)
    fmt = op.get_attr("data_format")
    y, argmax, g = (_rank4(t.shape, what, fmt) for t, what in zip(op.inputs, ("orig_output", "argmax", "grad")))
    if not (y.is_compatible_with(argmax) and y.is_compatible_with(g)):
        raise errors.InvalidArgumentError(f"{op.type} node '{op.name}': orig_output {y}, argmax {argmax} and grad "
                                          f"{g} must have one shape")
    size = op.get_attr("input_size")
    if len(size) != 2 or min(size) < 1:
        raise errors.InvalidArgumentError(f"{op.type} node '{op.name}': input_size must be the pooled input's "
                                          f"(height, width), got {size}")
    shape = y.merge_with(argmax).merge_with(g)
    n, oh, ow, c = _nhwc_dims(shape, fmt)
    want = tuple(conv_output_size(d, k, k, 1, op.get_attr("padding"))[0] for d, k in zip(size, (kh, kw)))
    if (oh is not None and oh != want[0]) or (ow is not None and ow != want[1]):
        raise errors.InvalidArgumentError(f"{op.type} node '{op.name}': pooling an input of {size[0]}x{size[1]} "
                                          f"gives {want[0]}x{want[1]}, not the {oh}x{ow} of orig_output")
    return [_make_shape(n, size[0], size[1], c, fmt)]


def register_ops(reg) -> None:
    reg.op(FUSED_MATMUL, inputs=["a: T", "b: T", "args: num_args * T"], outputs=["product: T"],
           attrs=["T: {float32, float64}", "num_args: int >= 0", "transpose_a: bool = false",
                  "transpose_b: bool = false", "fused_ops: list(string) = []"],
           shape_fn=_fused_matmul_shape,
           doc="MatMul, then the ops of fused_ops on its result (BiasAdd with args[0], then Relu or Relu6).")
    reg.op(FUSED_CONV2D, inputs=["input: T", "filter: T", "args: num_args * T"], outputs=["output: T"],
           attrs=["T: {float32, float64}", "num_args: int >= 0", "strides: list(int)",
                  "padding: {'SAME', 'VALID'}", "data_format: {'NHWC', 'NCHW'} = 'NHWC'",
                  "dilations: list(int) = [1, 1, 1, 1]", "use_cudnn_on_gpu: bool = true",
                  "fused_ops: list(string) = []"],
           shape_fn=_fused_conv2d_shape,
           doc="Conv2D, then the ops of fused_ops on its result (BiasAdd with args[0] along the channels, "
               "then Relu or Relu6).")
    reg.op(MAX_POOL_RELU_GRAD, inputs=["orig_input: T", "orig_output: T", "grad: T"], outputs=["output: T"],
           attrs=["T: {float32, float64}", "ksize: list(int)", "strides: list(int)", "padding: {'SAME', 'VALID'}",
                  "data_format: {'NHWC', 'NCHW'} = 'NHWC'"],
           shape_fn=_max_pool_grad_shape,
           doc="ReluGrad(MaxPoolGrad(orig_input, orig_output, grad), orig_input): max pooling's gradient "
               "through the ReLU whose output was pooled.")
    pool_attrs = ["T: {float32, float64}", "ksize: list(int)", "strides: list(int)", "padding: {'SAME', 'VALID'}",
                  "data_format: {'NHWC', 'NCHW'} = 'NHWC'"]
    reg.op(MAX_POOL_ARGMAX, inputs=["input: T"], outputs=["output: T", "argmax: uint8"],
           attrs=[*pool_attrs, "relu: bool = false"],
           shape_fn=_max_pool_argmax_shape,
           doc="MaxPool over windows that tile the input, and where in each window its first maximum is "
               "(i * kw + j; 255 for none); with relu, of the input rectified as Relu computes it.")
    reg.op(MAX_POOL_GRAD_ARGMAX, inputs=["orig_output: T", "argmax: uint8", "grad: T"], outputs=["output: T"],
           attrs=[*pool_attrs, "input_size: list(int)", "relu: bool = false"],
           shape_fn=_max_pool_grad_argmax_shape,
           doc="MaxPoolGrad of a _MaxPoolArgmax: each gradient to its window's argmax, over an input of "
               "input_size (height, width); with relu, masked where orig_output is not positive.")
    reg.op(FUSED, inputs=["inputs: Tin"], outputs=["output: Tout"],
           attrs=["Tin: list(type)", "Tout: type", "ops: list(string)", "args: list(int)", "types: list(type)",
                  "literals: list(float) = []", "literal_types: list(type) = []", "names: list(string) = []"],
           shape_fn=_shape,
           doc="A group of element-wise ops computed as one (made by the element-wise fusion pass).")
