"""Element-wise math, comparisons, logic, casting, reductions and matrix ops, plus the
Tensor operator overloads (``a + b`` is ``tw.add(a, b)``)."""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, apply_op, convert_to_tensor
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import shape_fns

__all__ = [
    "add",
    "subtract",
    "sub",
    "multiply",
    "mul",
    "div",
    "realdiv",
    "floordiv",
    "floor_div",
    "floormod",
    "mod",
    "pow",
    "maximum",
    "minimum",
    "squared_difference",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "equal",
    "not_equal",
    "logical_and",
    "logical_or",
    "negative",
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "square",
    "sign",
    "reciprocal",
    "floor",
    "ceil",
    "round",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "log1p",
    "expm1",
    "logical_not",
    "truediv",
    "divide",
    "cast",
    "to_float",
    "to_int32",
    "to_int64",
    "matmul",
    "add_n",
]

_NUM = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, complex64, complex128}"
_REAL = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64}"
_FLOAT_CPLX = "T: {float16, float32, float64, complex64, complex128}"
_FLOAT = "T: {float16, float32, float64}"
_SIGNED = "T: {float16, float32, float64, int8, int16, int32, int64, complex64, complex128}"

# name -> (type constraint, commutative)
BINARY = {
    "Add": (_NUM.replace("}", ", string}"), True), "Sub": (_NUM, False), "Mul": (_NUM, True),
    "Div": (_NUM, False), "RealDiv": (_NUM, False), "FloorDiv": (_REAL, False), "FloorMod": (_REAL, False),
    "Pow": (_NUM, False), "Maximum": (_REAL, True), "Minimum": (_REAL, True),
    "SquaredDifference": (_NUM, True),
}
UNARY = {
    "Neg": _SIGNED, "Abs": _SIGNED, "Exp": _FLOAT_CPLX, "Log": _FLOAT_CPLX, "Sqrt": _FLOAT_CPLX,
    "Rsqrt": _FLOAT_CPLX, "Square": _NUM, "Sign": _SIGNED, "Reciprocal": _FLOAT_CPLX, "Floor": _FLOAT,
    "Ceil": _FLOAT, "Round": _FLOAT, "Sin": _FLOAT_CPLX, "Cos": _FLOAT_CPLX, "Tanh": _FLOAT_CPLX,
    "Sigmoid": _FLOAT_CPLX, "Log1p": _FLOAT_CPLX, "Expm1": _FLOAT_CPLX,
}
COMPARISON = {"Greater": _REAL, "GreaterEqual": _REAL, "Less": _REAL, "LessEqual": _REAL,
              "Equal": _NUM.replace("}", ", bool, string}"), "NotEqual": _NUM.replace("}", ", bool, string}")}


def _matmul_shape(op):
    a, b = op.inputs[0].shape.with_rank(2), op.inputs[1].shape.with_rank(2)
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    m, ka = (a[1], a[0]) if ta else (a[0], a[1])
    kb, n = (b[1], b[0]) if tb else (b[0], b[1])
    if ka is not None and kb is not None and ka != kb:
        raise errors.InvalidArgumentError(
            f"matrix dimensions are incompatible: a{'ᵀ' if ta else ''} is {m}x{ka} and "
            f"b{'ᵀ' if tb else ''} is {kb}x{n} (inner dimensions {ka} != {kb})")
    return [TensorShape([m, n])]


def _cast_shape(op):
    return [op.inputs[0].shape]


def register_ops(reg):
    for name, (types, comm) in BINARY.items():
        reg.op(name, inputs=["x: T", "y: T"], outputs=["z: T"], attrs=[types], shape_fn=shape_fns.broadcast,
               is_commutative=comm)
    for name, types in UNARY.items():
        reg.op(name, inputs=["x: T"], outputs=["y: T"], attrs=[types], shape_fn=shape_fns.unchanged)
    for name, types in COMPARISON.items():
        reg.op(name, inputs=["x: T", "y: T"], outputs=["z: bool"], attrs=[types], shape_fn=shape_fns.broadcast)
    reg.op("LogicalAnd", inputs=["x: bool", "y: bool"], outputs=["z: bool"], shape_fn=shape_fns.broadcast)
    reg.op("LogicalOr", inputs=["x: bool", "y: bool"], outputs=["z: bool"], shape_fn=shape_fns.broadcast)
    reg.op("LogicalNot", inputs=["x: bool"], outputs=["y: bool"], shape_fn=shape_fns.unchanged)
    reg.op("Cast", inputs=["x: SrcT"], outputs=["y: DstT"], attrs=["SrcT: type", "DstT: type"], shape_fn=_cast_shape)
    reg.op("MatMul", inputs=["a: T", "b: T"], outputs=["product: T"],
           attrs=["transpose_a: bool = false", "transpose_b: bool = false",
                  "T: {float16, float32, float64, int32, int64, complex64, complex128}"],
           shape_fn=_matmul_shape)


# ---------------------------------------------------------------------------------------
# wrappers
def _binary(op_type):
    def f(x, y, name=None):
        return apply_op(op_type, [x, y], name=name)
    f.__name__ = op_type
    f.__doc__ = f"Element-wise {op_type} with NumPy broadcasting (``tf.{op_type.lower()}``)."
    return f


def _unary(op_type):
    def f(x, name=None):
        return apply_op(op_type, [x], name=name)
    f.__name__ = op_type
    f.__doc__ = f"Element-wise {op_type}."
    return f


add = _binary("Add")
subtract = sub = _binary("Sub")
multiply = mul = _binary("Mul")
div = _binary("Div")
realdiv = _binary("RealDiv")
floordiv = floor_div = _binary("FloorDiv")
floormod = mod = _binary("FloorMod")
pow = _binary("Pow")  # noqa: A001 - TF1 name
maximum = _binary("Maximum")
minimum = _binary("Minimum")
squared_difference = _binary("SquaredDifference")
greater = _binary("Greater")
greater_equal = _binary("GreaterEqual")
less = _binary("Less")
less_equal = _binary("LessEqual")
equal = _binary("Equal")
not_equal = _binary("NotEqual")
logical_and = _binary("LogicalAnd")
logical_or = _binary("LogicalOr")
negative = neg = _unary("Neg")
abs = _unary("Abs")  # noqa: A001 - TF1 name
exp = _unary("Exp")
log = _unary("Log")
sqrt = _unary("Sqrt")
rsqrt = _unary("Rsqrt")
square = _unary("Square")
sign = _unary("Sign")
reciprocal = _unary("Reciprocal")
floor = _unary("Floor")
ceil = _unary("Ceil")
round = _unary("Round")  # noqa: A001 - TF1 name
sin = _unary("Sin")
cos = _unary("Cos")
tanh = _unary("Tanh")
sigmoid = _unary("Sigmoid")
log1p = _unary("Log1p")
expm1 = _unary("Expm1")
logical_not = _unary("LogicalNot")


def truediv(x, y, name=None):
    """Python-3 division: integer inputs are cast to float64 (int8/16 to float32) first."""
    x = convert_to_tensor(x)
    y = convert_to_tensor(y, dtype=x.dtype)
    if x.dtype.is_integer:
        target = dtypes.float32 if x.dtype.size <= 2 else dtypes.float64
        x, y = cast(x, target), cast(y, target)
    return apply_op("RealDiv", [x, y], name=name or "truediv")


divide = truediv


def cast(x, dtype, name=None):
    """Convert ``x`` to ``dtype`` (``tf.cast``)."""
    x = convert_to_tensor(x)
    dtype = dtypes.as_dtype(dtype)
    if x.dtype is dtype:
        return x
    return apply_op("Cast", [x], {"DstT": dtype}, name=name or "Cast")


def to_float(x, name="ToFloat"):
    return cast(x, dtypes.float32, name=name)


def to_int32(x, name="ToInt32"):
    return cast(x, dtypes.int32, name=name)


def to_int64(x, name="ToInt64"):
    return cast(x, dtypes.int64, name=name)


def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    """Matrix product of two rank-2 tensors (``tf.matmul``)."""
    return apply_op("MatMul", [a, b], {"transpose_a": transpose_a, "transpose_b": transpose_b}, name=name)


def add_n(inputs, name=None):
    """Sum of a list of tensors of one shape and dtype."""
    inputs = list(inputs)
    if not inputs:
        raise errors.InvalidArgumentError("add_n needs at least one input")
    if len(inputs) == 1:
        return convert_to_tensor(inputs[0])
    return apply_op("AddN", [inputs], name=name)


# ---------------------------------------------------------------------------------------
# operator overloads on Tensor
def _r(fn):
    return lambda self, other: fn(other, self)


def _install_operators():
    def binary_op(fn):
        def op(self, other):
            return fn(self, other)
        return op

    T = Tensor
    T.__add__ = binary_op(add)
    T.__radd__ = _r(add)
    T.__sub__ = binary_op(subtract)
    T.__rsub__ = _r(subtract)
    T.__mul__ = binary_op(multiply)
    T.__rmul__ = _r(multiply)
    T.__truediv__ = binary_op(truediv)
    T.__rtruediv__ = _r(truediv)
    T.__floordiv__ = binary_op(floordiv)
    T.__rfloordiv__ = _r(floordiv)
    T.__mod__ = binary_op(floormod)
    T.__rmod__ = _r(floormod)
    T.__pow__ = binary_op(pow)
    T.__rpow__ = _r(pow)
    T.__matmul__ = binary_op(matmul)
    T.__rmatmul__ = _r(matmul)
    T.__lt__ = binary_op(less)
    T.__le__ = binary_op(less_equal)
    T.__gt__ = binary_op(greater)
    T.__ge__ = binary_op(greater_equal)
    T.__and__ = binary_op(logical_and)
    T.__rand__ = _r(logical_and)
    T.__or__ = binary_op(logical_or)
    T.__ror__ = _r(logical_or)
    T.__invert__ = lambda self: logical_not(self)
    T.__neg__ = lambda self: negative(self)
    T.__abs__ = lambda self: abs(self)


_install_operators()
