"""Op definitions (``OpDef``) and the op registry.

An op is declared once, by the core's built-in plugin or any third-party plugin, with the
compact TensorFlow ``REGISTER_OP`` notation::

    registry.op("MatMul",
                inputs=["a: T", "b: T"], outputs=["product: T"],
                attrs=["transpose_a: bool = false", "transpose_b: bool = false",
                       "T: {float16, float32, float64, int32, int64, complex64, complex128}"],
                shape_fn=_matmul_shape)

Argument forms: ``x: T`` (dtype given by type attr T), ``x: float32`` (fixed dtype),
``values: N * T`` (a list of N tensors of one dtype), ``ref: Ref(T)`` (a variable reference).
Attr types: type, int, float, bool, string, shape, tensor, func, list(type), list(int),
list(float), list(string), list(shape); ``T: {float32, float64}`` restricts a type attr,
``T: numbertype`` uses a named set, ``N: int >= 1`` sets a minimum, ``= value`` a default.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.registry import Registry
from tensorweave.framework.tensor_shape import TensorShape, as_shape

_TYPE_SETS = {
    "numbertype": dtypes.NUMBER,
    "realnumbertype": dtypes.REAL_NUMBER,
    "floatingtype": dtypes.FLOATING,
    "integertype": dtypes.INTEGER,
    "complextype": dtypes.COMPLEX,
    "alltypes": frozenset(dtypes.ALL_DTYPES),
    "type": None,
}
_ATTR_TYPES = {
    "type", "int", "float", "bool", "string", "shape", "tensor", "func", "any",
    "list(type)", "list(int)", "list(float)", "list(string)", "list(shape)", "list(bool)",
}


@dataclasses.dataclass(frozen=True)
class ArgDef:
    name: str
    type_attr: str | None = None      # dtype comes from this attr
    fixed_dtype: dtypes.DType | None = None
    number_attr: str | None = None    # a list of `number_attr` tensors
    type_list_attr: str | None = None  # a list with one dtype per element
    is_ref: bool = False

    @property
    def is_list(self) -> bool:
        return self.number_attr is not None or self.type_list_attr is not None


@dataclasses.dataclass(frozen=True)
class AttrDef:
    name: str
    type: str
    default: Any = None
    has_default: bool = False
    allowed: frozenset | None = None   # allowed dtypes for a type attr, or allowed values
    minimum: int | None = None


@dataclasses.dataclass
class OpDef:
    name: str
    inputs: list[ArgDef]
    outputs: list[ArgDef]
    attrs: dict[str, AttrDef]
    shape_fn: Callable | None = None
    stateful: bool = False
    is_commutative: bool = False
    doc: str = ""
    source: str = "<unknown>"          # the distribution that registered it
    gradient: Callable | None = None   # set by gradient registration (autodiff)
    outputs_ref: bool = False          # the op's output refers to persistent state (Variable)

    def attr(self, name: str) -> AttrDef:
        return self.attrs[name]

    def flat_inputs(self, attrs: dict) -> list[ArgDef]:
        """The argument each flat input of a node with ``attrs`` belongs to (list arguments
        expand to their length)."""
        out = []
        for arg in self.inputs:
            if arg.number_attr:
                n = attrs[arg.number_attr]
            elif arg.type_list_attr:
                n = len(attrs[arg.type_list_attr])
            else:
                n = 1
            out.extend([arg] * n)
        return out


def flat_input_is_ref(op) -> list[bool]:
    """For each flat input of node ``op``, whether its argument is a Ref (variable) input."""
    return [arg.is_ref for arg in op.op_def.flat_inputs(op._attrs)]


def _parse_default(text: str, attr_type: str):
    text = text.strip()
    if attr_type == "bool":
        if text not in ("true", "false"):
            raise ValueError(f"bad bool default {text!r}")
        return text == "true"
    if attr_type == "int":
        return int(text)
    if attr_type == "float":
        return float(text)
    if attr_type == "string":
        return text.strip("'\"")
    if attr_type == "type":
        return dtypes.as_dtype(text)
    if attr_type.startswith("list("):
        inner = text.strip()[1:-1].strip()
        if not inner:
            return []
        return [_parse_default(x, attr_type[5:-1]) for x in inner.split(",")]
    if attr_type == "shape":
        if text in ("unknown", "None"):
            return TensorShape(None)
        inner = text.strip()[1:-1].strip()
        return TensorShape([] if not inner else [None if x.strip() in ("?", "-1") else int(x) for x in inner.split(",")])
    if text == "None":
        return None
    raise ValueError(f"no default syntax for attr type {attr_type!r}")


_ATTR_RE = re.compile(r"^\s*(\w+)\s*:\s*(.+?)\s*(?:>=\s*(-?\d+)\s*)?(?:=\s*(.+))?$")


def parse_attr(spec: str) -> AttrDef:
    m = _ATTR_RE.match(spec)
    if not m:
        raise ValueError(f"cannot parse attr spec {spec!r}")
    name, typ, minimum, default = m.groups()
    allowed = None
    typ = typ.strip()
    if typ.startswith("{"):
        members = [x.strip() for x in typ.strip("{}").split(",") if x.strip()]
        if all(x in {d.name for d in dtypes.ALL_DTYPES} or x in ("float", "double", "half") for x in members):
            allowed = frozenset(dtypes.as_dtype(x) for x in members)
            typ = "type"
        else:  # an enumeration of string/int values
            allowed = frozenset(x.strip("'\"") for x in members)
            typ = "string"
    elif typ in _TYPE_SETS:
        allowed = _TYPE_SETS[typ]
        typ = "type"
    if typ not in _ATTR_TYPES:
        raise ValueError(f"unknown attr type {typ!r} in {spec!r}")
    has_default = default is not None
    return AttrDef(
        name=name, type=typ,
        default=_parse_default(default, typ) if has_default else None,
        has_default=has_default, allowed=allowed,
        minimum=int(minimum) if minimum is not None else None,
    )


_ARG_RE = re.compile(r"^\s*(\w+)\s*:\s*(?:(\w+)\s*\*\s*)?(Ref\((\w+)\)|\w+)\s*$")


def parse_arg(spec: str, attrs: dict[str, AttrDef]) -> ArgDef:
    m = _ARG_RE.match(spec)
    if not m:
        raise ValueError(f"cannot parse argument spec {spec!r}")
    name, number, typ, ref_inner = m.groups()
    is_ref = ref_inner is not None
    if is_ref:
        typ = ref_inner
    if typ in attrs:
        a = attrs[typ]
        if a.type == "list(type)":
            return ArgDef(name, type_list_attr=typ, is_ref=is_ref)
        if a.type != "type":
            raise ValueError(f"argument {name!r} refers to attr {typ!r}, which is not a type attr")
        return ArgDef(name, type_attr=typ, number_attr=number, is_ref=is_ref)
    try:
        fixed = dtypes.as_dtype(typ)
    except errors.InvalidArgumentError:
        raise ValueError(f"argument {spec!r}: {typ!r} is neither an attr nor a dtype") from None
    return ArgDef(name, fixed_dtype=fixed, number_attr=number, is_ref=is_ref)


def NO_GRADIENT(op, *grads):  # noqa: N802 - a marker, used by identity
    """Marker gradient: the op is not differentiable; gradients stop at it silently."""
    return [None] * len(op.inputs)


class OpRegistry(Registry):
    """All op definitions known to this process, filled through ``tensorweave_register_ops``.

    Ops and their gradient functions are two tables under the one registration rule of
    ``framework/registry.py``; a gradient may be registered before its op (it is attached
    when the op arrives).
    """

    def __init__(self):
        super().__init__("op")
        self.gradients = Registry("gradient for op")

    @property
    def source(self) -> str:
        return self._source

    @source.setter
    def source(self, value: str) -> None:
        # the loader sets one source for both tables around each plugin's hook call
        self._source = value
        if hasattr(self, "gradients"):
            self.gradients.source = value

    def op(self, name: str, inputs=(), outputs=(), attrs=(), shape_fn=None, stateful=False,
           is_commutative=False, doc="", outputs_ref=False, override=False) -> OpDef:
        """Declare an op. Raises PluginConflictError if another distribution declared it."""
        # A leading underscore marks an op the runtime inserts itself (TF's _Send, _Recv).
        if not re.match(r"^_?[A-Z][A-Za-z0-9_]*$", name):
            raise errors.InvalidArgumentError(f"op name {name!r} must be CamelCase, e.g. 'MatMul'")
        try:
            attr_defs = {a.name: a for a in map(parse_attr, attrs)}
            in_defs = [parse_arg(s, attr_defs) for s in inputs]
            out_defs = [parse_arg(s, attr_defs) for s in outputs]
        except ValueError as e:
            raise errors.InvalidArgumentError(f"while registering op {name!r} from {self.source}: {e}") from None
        for arg in in_defs + out_defs:
            if arg.number_attr and arg.number_attr not in attr_defs:
                attr_defs[arg.number_attr] = AttrDef(arg.number_attr, "int", minimum=0)
        op_def = OpDef(name, in_defs, out_defs, attr_defs, shape_fn, stateful, is_commutative,
                       doc, self.source, outputs_ref=outputs_ref)
        in_place = self.claim(name, op_def, override)
        if in_place is op_def and name in self.gradients:
            op_def.gradient = self.gradients.get(name)
        return in_place

    def gradient(self, op_name: str, fn: Callable | None = None, override: bool = False):
        """Register the gradient function of ``op_name`` (usable as a decorator).

        ``fn(op, *output_grads)`` returns one gradient per input of ``op`` (a Tensor, or None
        where the input gets no gradient); ``output_grads`` holds one Tensor per output
        (zeros for outputs that received none). ``fn=NO_GRADIENT`` declares the op not
        differentiable: gradients stop there without an error.
        """
        def deco(f):
            in_place = self.gradients.claim(op_name, f, override)
            if op_name in self:
                self.get(op_name).gradient = in_place
            return f
        return deco(fn) if fn is not None else deco

    def no_gradient(self, *op_names: str) -> None:
        """Declare ops not differentiable (Shape, ArgMax, comparisons, ...)."""
        for name in op_names:
            self.gradient(name, NO_GRADIENT)

    def get(self, name: str) -> OpDef:
        try:
            return self._entries[name]
        except KeyError:
            raise errors.NotFoundError(
                f"op type {name!r} is not registered (known: {len(self._entries)} ops); "
                "is the plugin that defines it installed? See `tensorweave plugins`."
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)


def check_attr_value(op_type: str, node: str, a: AttrDef, value, where: str | None = None):
    """Validate and normalise one attr value; raise InvalidArgumentError naming the node.

    The one set of attr checks: ``apply_op`` runs them when a node is built, and
    ``distributed/wire.py`` on every attr of a received GraphDef (``where`` overrides how
    the message names the attr there).
    """
    where = where or f"attr {a.name!r} of {op_type} node {node!r}"

    def bad(expected):
        return errors.InvalidArgumentError(f"{where}: expected {expected}, got {value!r} ({type(value).__name__})")

    t = a.type
    if t == "type":
        try:
            v = dtypes.as_dtype(value)
        except errors.InvalidArgumentError:
            raise bad("a dtype") from None
        if a.allowed is not None and v not in a.allowed:
            raise errors.InvalidArgumentError(
                f"{where}: dtype {v.name} is not allowed; expected one of {sorted(d.name for d in a.allowed)}")
        return v
    if t == "int":
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise bad("an int")
        value = int(value)
        if a.minimum is not None and value < a.minimum:
            raise errors.InvalidArgumentError(f"{where}: must be >= {a.minimum}, got {value}")
        return value
    if t == "float":
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise bad("a float")
        return float(value)
    if t == "bool":
        if not isinstance(value, bool | np.bool_):
            raise bad("a bool")
        return bool(value)
    if t == "string":
        if isinstance(value, bytes):
            value = value.decode()
        if not isinstance(value, str):
            raise bad("a string")
        if a.allowed is not None and value not in a.allowed:
            raise errors.InvalidArgumentError(f"{where}: {value!r} is not one of {sorted(a.allowed)}")
        return value
    if t == "shape":
        try:
            return as_shape(value)
        except errors.InvalidArgumentError:
            raise bad("a shape") from None
    if t.startswith("list("):
        if not isinstance(value, list | tuple):
            raise bad(f"a {t}")
        inner = AttrDef(a.name, t[5:-1], allowed=a.allowed)
        out = [check_attr_value(op_type, node, inner, v, where) for v in value]
        if a.minimum is not None and len(out) < a.minimum:
            raise errors.InvalidArgumentError(f"{where}: needs at least {a.minimum} elements")
        return out
    return value  # tensor, func, any: checked by the op's own shape function

