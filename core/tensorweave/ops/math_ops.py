"""Element-wise math, comparisons, logic, casting, reductions and matrix ops, plus the
Tensor operator overloads (``a + b`` is ``tw.add(a, b)``)."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, apply_op, constant_value, convert_to_tensor
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import shape_fns
from tensorweave.ops.constant_op import constant

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
    "conj",
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_all",
    "reduce_any",
    "argmax",
    "argmin",
    "matrix_inverse",
    "matrix_determinant",
    "cumsum",
    "cumprod",
    "unsorted_segment_sum",
]

_NUM = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, complex64, complex128}"
_REAL = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64}"
_FLOAT_CPLX = "T: {float16, float32, float64, complex64, complex128}"
_FLOAT = "T: {float16, float32, float64}"
_SIGNED = "T: {float16, float32, float64, int8, int16, int32, int64, complex64, complex128}"
_SIGNED_REAL = "T: {float16, float32, float64, int8, int16, int32, int64}"
_MATMUL_T = "T: {float16, float32, float64, int32, int64, complex64, complex128}"
_LINALG_T = "T: {float16, float32, float64, complex64, complex128}"
_TIDX = "Tidx: {int32, int64} = int32"

# name -> (type constraint, commutative)
BINARY = {
    "Add": (_NUM.replace("}", ", string}"), True), "Sub": (_NUM, False), "Mul": (_NUM, True),
    "Div": (_NUM, False), "RealDiv": (_NUM, False), "FloorDiv": (_REAL, False), "FloorMod": (_REAL, False),
    "Pow": (_NUM, False), "Maximum": (_REAL, True), "Minimum": (_REAL, True),
    "SquaredDifference": (_NUM, True),
}
UNARY = {
    "Neg": _SIGNED, "Abs": _SIGNED_REAL, "Exp": _FLOAT_CPLX, "Log": _FLOAT_CPLX, "Sqrt": _FLOAT_CPLX,
    "Rsqrt": _FLOAT_CPLX, "Square": _NUM, "Sign": _SIGNED, "Reciprocal": _FLOAT_CPLX, "Floor": _FLOAT,
    "Ceil": _FLOAT, "Round": _FLOAT, "Sin": _FLOAT_CPLX, "Cos": _FLOAT_CPLX, "Tanh": _FLOAT_CPLX,
    "Sigmoid": _FLOAT_CPLX, "Log1p": _FLOAT_CPLX, "Expm1": _FLOAT_CPLX,
}
REDUCTIONS = {"Sum": _NUM, "Mean": _NUM, "Prod": _NUM, "Max": _REAL, "Min": _REAL}
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


def _batch_matmul_shape(op):
    """``[..., m, k] @ [..., k, n] -> [broadcast(...), m, n]``, as TF's BatchMatMulV2."""
    a, b = op.inputs[0].shape, op.inputs[1].shape
    for which, s in (("x", a), ("y", b)):
        if s.ndims is not None and s.ndims < 2:
            raise errors.InvalidArgumentError(f"input {which} must have rank >= 2, got shape {s}")
    if a.ndims is None or b.ndims is None:
        return [TensorShape(None)]
    adj_x, adj_y = op.get_attr("adj_x"), op.get_attr("adj_y")
    m, ka = (a[-1], a[-2]) if adj_x else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if adj_y else (b[-2], b[-1])
    if ka is not None and kb is not None and ka != kb:
        raise errors.InvalidArgumentError(
            f"matrix dimensions are incompatible: x{'ᴴ' if adj_x else ''} has inner dimension {ka} and "
            f"y{'ᴴ' if adj_y else ''} has {kb} (shapes {a} and {b})")
    try:
        batch = shape_fns.broadcast_shapes(a[:-2], b[:-2])
    except errors.InvalidArgumentError:
        raise errors.InvalidArgumentError(
            f"batch dimensions of {a} and {b} cannot be broadcast") from None
    return [batch.concatenate([m, n])]


def _square_matrices(op):
    s = op.inputs[0].shape
    if s.ndims is None:
        return s
    if s.ndims < 2:
        raise errors.InvalidArgumentError(f"input must have rank >= 2 (a batch of square matrices), got shape {s}")
    if s[-1] is not None and s[-2] is not None and s[-1] != s[-2]:
        raise errors.InvalidArgumentError(f"input must be a batch of square matrices, got shape {s}")
    return s


def _matrix_inverse_shape(op):
    s = _square_matrices(op)
    if s.ndims is None:
        return [TensorShape(None)]
    d = s[-1] if s[-1] is not None else s[-2]
    return [s[:-2].concatenate([d, d])]


def _matrix_determinant_shape(op):
    s = _square_matrices(op)
    return [TensorShape(None) if s.ndims is None else s[:-2]]


def _arg_reduction_shape(op):
    x = op.inputs[0].shape
    dim_shape = op.inputs[1].shape
    if dim_shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(f"dimension must be a scalar, got shape {dim_shape}")
    axis = constant_value(op.inputs[1])
    if x.ndims is None:
        return [TensorShape(None)]
    if x.ndims == 0:
        raise errors.InvalidArgumentError("input must have rank >= 1, got a scalar")
    if axis is None:
        return [TensorShape([None] * (x.ndims - 1))]
    axis = shape_fns.normalize_axis(int(axis), x.ndims, "dimension")
    if x[axis] == 0:
        raise errors.InvalidArgumentError(f"cannot reduce over dimension {axis} of {x}: it is empty")
    dims = x.dims
    del dims[axis]
    return [TensorShape(dims)]


def _cumulative_shape(op):
    s = op.inputs[1].shape
    if s.ndims not in (None, 0):
        raise errors.InvalidArgumentError(f"axis must be a scalar, got shape {s}")
    x = op.inputs[0].shape
    axis = constant_value(op.inputs[1])
    if axis is not None and x.ndims is not None:
        shape_fns.normalize_axis(int(axis), x.ndims, "axis")
    return [x]


def _unsorted_segment_sum_shape(op):
    data, ids, num_t = op.inputs
    if num_t.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(f"num_segments must be a scalar, got shape {num_t.shape}")
    num = constant_value(num_t)
    if num is not None and int(num) < 0:
        raise errors.InvalidArgumentError(f"num_segments must be >= 0, got {int(num)}")
    d, i = data.shape, ids.shape
    if d.ndims is None or i.ndims is None:
        return [TensorShape(None)]
    if i.ndims > d.ndims or not d[:i.ndims].is_compatible_with(i):
        raise errors.InvalidArgumentError(
            f"segment_ids of shape {i} must be a prefix of the shape of data {d}")
    return [TensorShape([None if num is None else int(num)]).concatenate(d[i.ndims:])]


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
           attrs=["transpose_a: bool = false", "transpose_b: bool = false", _MATMUL_T],
           shape_fn=_matmul_shape)
    reg.op("ComplexAbs", inputs=["x: T"], outputs=["y: Tout"],
           attrs=["T: {complex64, complex128} = complex64", "Tout: {float32, float64} = float32"],
           shape_fn=shape_fns.unchanged, doc="|x| of a complex tensor, as a real tensor.")
    reg.op("Conj", inputs=["input: T"], outputs=["output: T"], attrs=["T: {complex64, complex128} = complex64"],
           shape_fn=shape_fns.unchanged)
    reg.op("AddN", inputs=["inputs: N * T"], outputs=["sum: T"], attrs=["N: int >= 1", _NUM],
           shape_fn=shape_fns.merge_all, is_commutative=True)
    for name, types in REDUCTIONS.items():
        reg.op(name, inputs=["input: T", "reduction_indices: Tidx"], outputs=["output: T"],
               attrs=["keep_dims: bool = false", types, _TIDX], shape_fn=shape_fns.reduction)
    for name in ("All", "Any"):
        reg.op(name, inputs=["input: bool", "reduction_indices: Tidx"], outputs=["output: bool"],
               attrs=["keep_dims: bool = false", _TIDX], shape_fn=shape_fns.reduction)
    for name in ("ArgMax", "ArgMin"):
        reg.op(name, inputs=["input: T", "dimension: Tidx"], outputs=["output: output_type"],
               attrs=[_REAL, _TIDX, "output_type: {int32, int64} = int64"], shape_fn=_arg_reduction_shape)
    reg.op("BatchMatMul", inputs=["x: T", "y: T"], outputs=["output: T"],
           attrs=[_MATMUL_T, "adj_x: bool = false", "adj_y: bool = false"], shape_fn=_batch_matmul_shape,
           doc="Matrix products over the last two dimensions; the batch dimensions broadcast.")
    reg.op("MatrixInverse", inputs=["input: T"], outputs=["output: T"], attrs=["adjoint: bool = false", _LINALG_T],
           shape_fn=_matrix_inverse_shape)
    reg.op("MatrixDeterminant", inputs=["input: T"], outputs=["output: T"], attrs=[_LINALG_T],
           shape_fn=_matrix_determinant_shape)
    for name in ("Cumsum", "Cumprod"):
        reg.op(name, inputs=["x: T", "axis: Tidx"], outputs=["out: T"],
               attrs=["exclusive: bool = false", "reverse: bool = false", _NUM, _TIDX], shape_fn=_cumulative_shape,
               doc=f"Cumulative {'sum' if name == 'Cumsum' else 'product'} along axis; exclusive leaves out the "
                   "element itself, reverse runs from the end.")
    reg.op("UnsortedSegmentSum", inputs=["data: T", "segment_ids: Tindices", "num_segments: Tnumsegments"],
           outputs=["output: T"],
           attrs=[_NUM, "Tindices: {int32, int64}", "Tnumsegments: {int32, int64} = int32"],
           shape_fn=_unsorted_segment_sum_shape,
           doc="output[j, ...] = sum of data[i..., ...] over the i with segment_ids[i...] == j; negative ids "
               "are dropped.")


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
_abs = _unary("Abs")
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


def _is_tensor_like(v) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _convert_pair(x, y):
    """Convert two operands, taking the dtype from whichever is already a tensor (so that
    ``2 / t`` with a float ``t`` gives a float constant 2, as in TF)."""
    if _is_tensor_like(x) and _is_tensor_like(y):
        return convert_to_tensor(x), convert_to_tensor(y)  # a dtype mismatch is the op's to report
    if _is_tensor_like(y):
        y = convert_to_tensor(y)
        return convert_to_tensor(x, dtype=y.dtype), y
    x = convert_to_tensor(x)
    return x, convert_to_tensor(y, dtype=x.dtype)


def abs(x, name=None):  # noqa: A001 - TF1 name
    """Element-wise absolute value; for a complex ``x`` the result is real (``ComplexAbs``)."""
    x = convert_to_tensor(x)
    if x.dtype.is_complex:
        return apply_op("ComplexAbs", [x], {"Tout": x.dtype.real_dtype}, name=name or "ComplexAbs")
    return _abs(x, name=name)


def conj(x, name=None):
    """Complex conjugate; a real tensor is returned unchanged (``tf.conj``)."""
    x = convert_to_tensor(x)
    if not x.dtype.is_complex:
        if not x.dtype.is_numeric:
            raise errors.InvalidArgumentError(f"conj expects a numeric tensor, got {x.dtype.name} '{x.name}'")
        return x
    return apply_op("Conj", [x], name=name)


def truediv(x, y, name=None):
    """Python-3 division: integer inputs are cast to float64 (int8/16 to float32) first."""
    x, y = _convert_pair(x, y)
    if x.dtype is not y.dtype:
        return apply_op("RealDiv", [x, y], name=name or "truediv")  # raises, naming the node
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


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, name=None):
    """Matrix product (``tf.matmul``).

    Two rank-2 inputs give a ``MatMul`` node; if either has rank > 2 (or unknown rank) it is a
    ``BatchMatMul`` over the last two dimensions, with the leading (batch) dimensions
    broadcast. ``adjoint_*`` is the conjugate transpose; for real dtypes it equals
    ``transpose_*``. The ``*_is_sparse`` hints are accepted and ignored.
    """
    def check_bool(what, v):
        if not isinstance(v, bool | np.bool_):
            raise errors.InvalidArgumentError(f"matmul: attr {what!r} expected a bool, got {v!r} ({type(v).__name__})")
        return bool(v)

    adjoint_a, adjoint_b = check_bool("adjoint_a", adjoint_a), check_bool("adjoint_b", adjoint_b)
    if adjoint_a and check_bool("transpose_a", transpose_a):
        raise errors.InvalidArgumentError("matmul: only one of transpose_a and adjoint_a can be True")
    if adjoint_b and check_bool("transpose_b", transpose_b):
        raise errors.InvalidArgumentError("matmul: only one of transpose_b and adjoint_b can be True")
    a, b = _convert_pair(a, b)
    ra, rb = a.shape.ndims, b.shape.ndims
    if ra == 2 and rb == 2:
        # MatMul only transposes; the conjugate half of a complex adjoint is a Conj node. The
        # transpose flags go to apply_op as given, so a bad value is reported naming the node.
        if adjoint_a:
            a, transpose_a = conj(a), True
        if adjoint_b:
            b, transpose_b = conj(b), True
        return apply_op("MatMul", [a, b], {"transpose_a": transpose_a, "transpose_b": transpose_b}, name=name)
    transpose_a, transpose_b = check_bool("transpose_a", transpose_a), check_bool("transpose_b", transpose_b)
    if a.dtype.is_complex:
        # BatchMatMul only takes adjoints: a plain transpose is the adjoint of the conjugate.
        if transpose_a:
            a, adjoint_a = conj(a), True
        if transpose_b:
            b, adjoint_b = conj(b), True
    return apply_op("BatchMatMul", [a, b], {"adj_x": transpose_a or adjoint_a, "adj_y": transpose_b or adjoint_b},
                    name=name or "MatMul")


def add_n(inputs, name=None):
    """Sum of a list of tensors of one shape and dtype (``tf.add_n``)."""
    inputs = list(inputs)
    if not inputs:
        raise errors.InvalidArgumentError("add_n needs at least one input")
    if len(inputs) == 1:
        return convert_to_tensor(inputs[0])
    return apply_op("AddN", [inputs], name=name)


# ---------------------------------------------------------------------------------------
# reductions
def _reduction_axes(input_tensor, axis, reduction_indices, fn_name):
    """The ``reduction_indices`` input for a reduction over ``axis``.

    ``axis=None`` means every axis. With a known rank that is a constant ``range(rank)``, so
    the output shape is inferred at construction. With an unknown rank it is built in the
    graph as ``Range(0, Rank(x), 1)``.
    """
    if axis is not None and reduction_indices is not None:
        raise errors.InvalidArgumentError(f"{fn_name}: pass only one of axis and reduction_indices")
    if axis is None:
        axis = reduction_indices
    if axis is None:
        nd = input_tensor.shape.ndims
        if nd is not None:
            return constant(np.arange(nd, dtype=np.int32), name="Const")
        return apply_op("Range", [0, apply_op("Rank", [input_tensor]), 1], name="range")
    if _is_tensor_like(axis):
        return axis
    try:
        arr = np.asarray(axis)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim > 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise errors.InvalidArgumentError(f"{fn_name}: axis must be an int or a list of ints, got {axis!r}")
    small = arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31)
    return constant(arr.astype(np.int32 if small else np.int64), name="Const")


def _keep(keep_dims, keepdims, fn_name):
    if keepdims is not None:
        if keep_dims not in (None, False) and bool(keep_dims) != bool(keepdims):
            raise errors.InvalidArgumentError(f"{fn_name}: keep_dims and keepdims disagree")
        return bool(keepdims)
    return bool(keep_dims)


def _reduction(op_type, fn_name, doc):
    def f(input_tensor, axis=None, keep_dims=False, name=None, reduction_indices=None, keepdims=None):
        x = convert_to_tensor(input_tensor, dtype=dtypes.bool_ if op_type in ("All", "Any") and
                              not _is_tensor_like(input_tensor) else None)
        keep = _keep(keep_dims, keepdims, fn_name)
        axes = _reduction_axes(x, axis, reduction_indices, fn_name)
        return apply_op(op_type, [x, axes], {"keep_dims": keep}, name=name or op_type)
    f.__name__ = f.__qualname__ = fn_name
    f.__doc__ = doc + """

    ``axis`` (alias ``reduction_indices``) is an int, a list of ints or an int tensor; None
    reduces every axis. ``keep_dims`` (alias ``keepdims``) keeps reduced axes with size 1.
    """
    return f


reduce_sum = _reduction("Sum", "reduce_sum", "Sum of elements across axes (``tf.reduce_sum``).")
reduce_mean = _reduction(
    "Mean", "reduce_mean",
    "Mean across axes (``tf.reduce_mean``); integer inputs give the integer (truncated) mean.")
reduce_max = _reduction("Max", "reduce_max", "Maximum across axes (``tf.reduce_max``).")
reduce_min = _reduction("Min", "reduce_min", "Minimum across axes (``tf.reduce_min``).")
reduce_prod = _reduction("Prod", "reduce_prod", "Product across axes (``tf.reduce_prod``).")
reduce_all = _reduction("All", "reduce_all", "Logical and across axes of a bool tensor (``tf.reduce_all``).")
reduce_any = _reduction("Any", "reduce_any", "Logical or across axes of a bool tensor (``tf.reduce_any``).")


def _arg_reduction(op_type, fn_name):
    def f(input, axis=None, name=None, dimension=None, output_type=dtypes.int64):  # noqa: A002 - TF1 name
        if axis is not None and dimension is not None:
            raise errors.InvalidArgumentError(f"{fn_name}: pass only one of axis and dimension")
        if axis is None:
            axis = dimension if dimension is not None else 0
        if not _is_tensor_like(axis):
            if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
                raise errors.InvalidArgumentError(f"{fn_name}: axis must be an int, got {axis!r}")
            axis = int(axis)
        return apply_op(op_type, [input, axis], {"output_type": dtypes.as_dtype(output_type)}, name=name or op_type)
    f.__name__ = f.__qualname__ = fn_name
    f.__doc__ = (f"Index of the {'largest' if op_type == 'ArgMax' else 'smallest'} value along ``axis`` "
                 f"(default 0; ``dimension`` is the old name), as ``output_type`` (``tf.{fn_name}``).")
    return f


argmax = _arg_reduction("ArgMax", "argmax")
argmin = _arg_reduction("ArgMin", "argmin")


# ---------------------------------------------------------------------------------------
# linear algebra
def matrix_inverse(input, adjoint=False, name=None):  # noqa: A002 - TF1 name
    """Inverse of each square matrix in the last two dimensions (``tf.matrix_inverse``).
    A singular matrix fails at run time with InvalidArgumentError naming the node."""
    return apply_op("MatrixInverse", [input], {"adjoint": adjoint}, name=name)


def matrix_determinant(input, name=None):  # noqa: A002 - TF1 name
    """Determinant of each square matrix in the last two dimensions (``tf.matrix_determinant``)."""
    return apply_op("MatrixDeterminant", [input], name=name)


# ---------------------------------------------------------------------------------------
# scans and segments
def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Cumulative sum along ``axis`` (``tf.cumsum``): ``exclusive`` leaves each element out
    of its own sum, ``reverse`` sums from the end."""
    return apply_op("Cumsum", [x, axis], {"exclusive": exclusive, "reverse": reverse}, name=name)


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Cumulative product along ``axis`` (``tf.cumprod``), with ``exclusive`` and ``reverse``
    as in ``cumsum``."""
    return apply_op("Cumprod", [x, axis], {"exclusive": exclusive, "reverse": reverse}, name=name)


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """Sums of the slices of ``data`` by segment (``tf.unsorted_segment_sum``).

    ``segment_ids`` has the shape of a prefix of ``data``'s; the result has shape
    ``[num_segments] + data.shape[segment_ids.ndim:]``, zeros for empty segments. Negative
    ids are dropped; ids >= ``num_segments`` are an error.
    """
    return apply_op("UnsortedSegmentSum", [data, segment_ids, num_segments], name=name)


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
