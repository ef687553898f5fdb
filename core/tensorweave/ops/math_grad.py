"""Gradient functions of the math ops, and ``unbroadcast`` for element-wise gradients.

Each ``fn(op, *output_grads)`` returns one gradient per input of ``op``; registered by
``register_gradients`` (called from the built-in plugin's ``tensorweave_register_ops``).
The formulas are TensorFlow's (``math_grad.py``); complex inputs follow TF's convention
(the gradient of a real loss L is dL/dRe + i dL/dIm, so holomorphic ops multiply by the
conjugate of their derivative).

Shapes known at graph construction are used as constants (reduction axes, kept-dims
shapes, element counts); otherwise the gradient computes them in the graph (``Shape``,
``BroadcastGradientArgs``, ``ReducedShape``, ...).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, apply_op, constant_value
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops, math_ops


def _broadcast_gradient_args_shape(op):
    return [TensorShape([None]), TensorShape([None])]


def _reduced_shape_shape(op):
    s = op.inputs[0].shape
    if s.ndims is not None and s.ndims != 1:
        raise errors.InvalidArgumentError(f"input_shape must be a vector, got shape {s}")
    return [TensorShape([None if s.ndims is None else s[0]])]


def register_ops(reg):
    reg.op("BroadcastGradientArgs", inputs=["s0: T", "s1: T"], outputs=["r0: T", "r1: T"],
           attrs=["T: {int32, int64} = int32"], shape_fn=_broadcast_gradient_args_shape,
           doc="The axes along which the gradients of two broadcast operands must be summed.")
    reg.op("ReducedShape", inputs=["input_shape: int32", "axes: Tidx"], outputs=["output: int32"],
           attrs=["Tidx: {int32, int64} = int32"], shape_fn=_reduced_shape_shape,
           doc="input_shape with the entries at axes (negative counts from the end) set to 1: the "
               "shape of a reduction's result with keep_dims (TF's reduced_shape).")


# ---------------------------------------------------------------------------------------
# shape helpers
def static_reduction_axes(x_shape: TensorShape, g_shape: TensorShape):
    """Axes of a broadcast result ``g_shape`` to sum to get back ``x_shape``, or None when
    that is not known at graph construction."""
    if not x_shape.is_fully_defined() or g_shape.ndims is None:
        return None
    xd = x_shape.as_list()
    gd = g_shape.dims
    lead = len(gd) - len(xd)
    if lead < 0:
        return None
    axes = list(range(lead))
    for i, d in enumerate(xd):
        gdim = gd[lead + i]
        if d == 1 and gdim != 1:
            axes.append(lead + i)  # summing a size-1 axis of g is harmless if gdim turns out 1
        elif d != 1 and gdim is not None and gdim != d:
            return None
    return axes


def pairwise_reduction_axes(x_shape: TensorShape, y_shape: TensorShape):
    """For ``z = f(x, y)`` broadcast, the axes of z to sum to get back x's shape, from the
    static shapes of both operands: ``(leading_axes, size_one_axes)`` (the first are
    dropped, the second kept with size 1), or None when that depends on run-time sizes.

    Unlike ``static_reduction_axes`` this also works for an x with unknown dimensions, as
    long as y cannot broadcast along them (a ``[None, 3]`` x plus a ``[3]`` y needs no sum).
    """
    if x_shape.ndims is None or y_shape.ndims is None:
        return None
    xd, yd = x_shape.dims, y_shape.dims
    n = max(len(xd), len(yd))
    lead = n - len(xd)
    ones = []
    for j in range(lead, n):
        a = xd[j - lead]
        k = j - (n - len(yd))
        b = yd[k] if k >= 0 else 1
        if a == 1:
            if b != 1:
                ones.append(j)  # harmless if b turns out to be 1
        elif a is None and b != 1:
            return None  # x's dimension may be 1 and broadcast: only known at run time
    return list(range(lead)), ones


def unbroadcast(grad: Tensor, x: Tensor, other=None) -> Tensor:
    """Sum ``grad`` (shaped like a broadcast result) down to the shape of ``x``.

    ``other`` is the shape (a TensorShape) of the operand x was broadcast against, when known:
    it lets the reduction be decided at construction for more partially known shapes.
    """
    if grad.shape.is_fully_defined() and x.shape.is_fully_defined() and grad.shape == x.shape:
        return grad
    axes = static_reduction_axes(x.shape, grad.shape)
    if axes is not None:
        if not axes:
            return grad
        lead = grad.shape.ndims - x.shape.ndims
        if all(a < lead for a in axes):  # only leading axes: the plain sum has x's shape
            return math_ops.reduce_sum(grad, axis=axes)
        summed = math_ops.reduce_sum(grad, axis=axes, keep_dims=True)
        return array_ops.reshape(summed, x.shape.as_list())
    pair = pairwise_reduction_axes(x.shape, other) if other is not None else None
    if pair is not None:
        lead, ones = pair
        if ones:
            grad = math_ops.reduce_sum(grad, axis=ones, keep_dims=True)
        if lead:
            grad = math_ops.reduce_sum(grad, axis=lead)
        if ones or lead:
            grad.set_shape(x.shape)
        return grad
    sx, sg = array_ops.shape(x), array_ops.shape(grad)
    rx, _ = apply_op("BroadcastGradientArgs", [sx, sg])
    out = array_ops.reshape(math_ops.reduce_sum(grad, axis=rx, keep_dims=True), sx)
    out.set_shape(x.shape)
    return out


def _shape_of(t: Tensor):
    """``t``'s shape as a list of ints when fully known, else a ``Shape`` tensor."""
    return t.shape.as_list() if t.shape.is_fully_defined() else array_ops.shape(t)


def _const_axes(axes: Tensor, ndims):
    """The sorted, normalised reduction axes when known at construction, else None."""
    if ndims is None:
        return None
    v = constant_value(axes)
    if v is None:
        return None
    flat = [int(a) for a in np.asarray(v).reshape(-1)]
    if not ndims:
        return []
    return sorted({a % ndims for a in flat})


def _kept_dims_shape(x: Tensor, axes: Tensor):
    """The shape of ``reduce(x, axes, keep_dims=True)``: a list of ints (with at most one -1,
    usable by Reshape) when known at construction, else an int32 tensor."""
    ax = _const_axes(axes, x.shape.ndims)
    if ax is not None:
        dims = [1 if i in ax else d for i, d in enumerate(x.shape.dims)]
        unknown = [i for i, d in enumerate(dims) if d is None]
        if not unknown:
            return dims
        if len(unknown) == 1 and all(d != 0 for d in dims if d is not None):
            dims[unknown[0]] = -1
            return dims
    return apply_op("ReducedShape", [array_ops.shape(x), axes])


def _reshape_to_kept(t: Tensor, x: Tensor, axes: Tensor, kept=None) -> Tensor:
    """A reduction's result (or its gradient) without keep_dims, reshaped to the keep_dims shape."""
    kept = _kept_dims_shape(x, axes) if kept is None else kept
    if isinstance(kept, list) and t.shape.is_fully_defined() and t.shape.as_list() == kept:
        return t
    return array_ops.reshape(t, kept)


def _broadcast_like(g: Tensor, x: Tensor) -> Tensor:
    """``g`` broadcast to the shape of ``x``."""
    if x.shape.is_fully_defined():
        if g.shape.is_fully_defined() and g.shape == x.shape:
            return g
        return array_ops.broadcast_to(g, x.shape.as_list())
    return array_ops.broadcast_to(g, array_ops.shape(x))


def _conj(t: Tensor) -> Tensor:
    return math_ops.conj(t) if t.dtype.is_complex else t


def _scalar(v, dtype) -> Tensor:
    return array_ops.constant(np.asarray(v, dtype=dtype.np_dtype), dtype=dtype)


# ---------------------------------------------------------------------------------------
# element-wise binary ops
def _wanted(op) -> tuple[bool, bool]:
    """Whether the gradients of a two-input op's inputs are wanted: not where tw.gradients
    says no path from the xs comes through the input (``Operation.skip_input_indices``).
    Not building them matters in a while loop: a forward value they read would be pushed
    and popped every iteration."""
    skip = op.skip_input_indices or ()
    return 0 not in skip, 1 not in skip


def _binary_grads(gx, gy, op):
    x, y = op.inputs
    return [unbroadcast(gx, x, y.shape) if gx is not None else None,
            unbroadcast(gy, y, x.shape) if gy is not None else None]


def _add_grad(op, grad):
    wx, wy = _wanted(op)
    return _binary_grads(grad if wx else None, grad if wy else None, op)


def _sub_grad(op, grad):
    wx, wy = _wanted(op)
    return _binary_grads(grad if wx else None, -grad if wy else None, op)


def _mul_grad(op, grad):
    x, y = op.inputs
    wx, wy = _wanted(op)
    return _binary_grads(grad * _conj(y) if wx else None, _conj(x) * grad if wy else None, op)


def _div_grad(op, grad):
    x, y = (_conj(t) for t in op.inputs)
    wx, wy = _wanted(op)
    gx = grad / y
    return _binary_grads(gx if wx else None, -gx * (x / y) if wy else None, op)


def _pow_grad(op, grad):
    x, y = (_conj(t) for t in op.inputs)
    z = _conj(op.outputs[0])
    gx = grad * y * math_ops.pow(x, y - 1)
    # d/dy x^y = x^y log(x), taken as 0 where log(x) is undefined (x <= 0; x == 0 for complex).
    positive = math_ops.not_equal(x, 0) if x.dtype.is_complex else math_ops.greater(x, 0)
    m = math_ops.cast(positive, x.dtype)
    log_x = math_ops.log(x * m + (1 - m))
    return _binary_grads(gx, grad * z * log_x, op)


def _maximum_minimum_grad(select_x):
    def grad_fn(op, grad):
        x, y = op.inputs
        gx = grad * math_ops.cast(select_x(x, y), grad.dtype)
        return _binary_grads(gx, grad - gx, op)
    return grad_fn


def _squared_difference_grad(op, grad):
    x, y = op.inputs
    gx = (grad * 2) * (x - y)
    return _binary_grads(gx, -gx, op)


def _floor_mod_grad(op, grad):
    x, y = op.inputs
    return _binary_grads(grad, -grad * math_ops.floordiv(x, y), op)


# ---------------------------------------------------------------------------------------
# element-wise unary ops
def _neg_grad(op, grad):
    return [-grad]


def _square_grad(op, grad):
    x = op.inputs[0]
    return [grad * (_conj(x) * 2)]


def _exp_grad(op, grad):
    return [grad * _conj(op.outputs[0])]


def _log_grad(op, grad):
    return [grad / _conj(op.inputs[0])]


def _log1p_grad(op, grad):
    return [grad / (_conj(op.inputs[0]) + 1)]


def _expm1_grad(op, grad):
    return [grad * math_ops.exp(_conj(op.inputs[0]))]


def _sqrt_grad(op, grad):
    return [grad / (_conj(op.outputs[0]) * 2)]


def _rsqrt_grad(op, grad):
    y = _conj(op.outputs[0])
    return [grad * (y * y * y) * -0.5]


def _reciprocal_grad(op, grad):
    y = _conj(op.outputs[0])
    return [-grad * (y * y)]


def _sigmoid_grad(op, grad):
    y = _conj(op.outputs[0])
    return [grad * (y * (1 - y))]


def _tanh_grad(op, grad):
    y = _conj(op.outputs[0])
    return [grad * (1 - y * y)]


def _sin_grad(op, grad):
    return [grad * math_ops.cos(_conj(op.inputs[0]))]


def _cos_grad(op, grad):
    return [-grad * math_ops.sin(_conj(op.inputs[0]))]


def _abs_grad(op, grad):
    return [grad * math_ops.sign(op.inputs[0])]


def _complex_abs_grad(op, grad):
    # grad * z / |z|, and 0 where z == 0 (TF's div_no_nan).
    x, r = op.inputs[0], op.outputs[0]
    safe_r = r + math_ops.cast(math_ops.equal(r, 0), r.dtype)
    return [math_ops.cast(grad, x.dtype) * (x / math_ops.cast(safe_r, x.dtype))]


def _conj_grad(op, grad):
    return [math_ops.conj(grad)]


_GRAD_CASTABLE = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128)


def _cast_grad(op, grad):
    src, dst = op.get_attr("SrcT"), op.get_attr("DstT")
    if src in _GRAD_CASTABLE and dst in _GRAD_CASTABLE:
        return [math_ops.cast(grad, src)]
    return [None]


def _add_n_grad(op, grad):
    return [grad] * len(op.inputs)


# ---------------------------------------------------------------------------------------
# reductions
def _sum_grad(op, grad):
    x, axes = op.inputs
    if not op.get_attr("keep_dims"):
        grad = _reshape_to_kept(grad, x, axes)
    return [_broadcast_like(grad, x), None]


def _mean_grad(op, grad):
    x, axes = op.inputs
    y = op.outputs[0]
    if x.shape.is_fully_defined() and y.shape.is_fully_defined():
        factor = x.shape.num_elements() // max(y.shape.num_elements(), 1)
        grad = grad / _scalar(max(factor, 1), grad.dtype)
    else:
        one = array_ops.constant(1, dtype=dtypes.int32)
        factor = math_ops.floordiv(array_ops.size(x), math_ops.maximum(array_ops.size(y), one))
        grad = grad / math_ops.cast(math_ops.maximum(factor, one), grad.dtype)
    return _sum_grad(op, grad)


def _min_or_max_grad(op, grad):
    # The gradient is split equally among the elements equal to the extremum (TF).
    x, axes = op.inputs
    y = op.outputs[0]
    if not op.get_attr("keep_dims"):
        kept = _kept_dims_shape(x, axes)
        y = _reshape_to_kept(y, x, axes, kept)
        grad = _reshape_to_kept(grad, x, axes, kept)
    indicators = math_ops.cast(math_ops.equal(y, x), grad.dtype)
    num_selected = math_ops.reduce_sum(indicators, axis=axes, keep_dims=True)
    return [indicators / num_selected * grad, None]


def _prod_grad(op, grad):
    """d prod / d x_i = product of the other elements of x_i's group, computed without
    division (so zeros are fine) from exclusive cumulative products, as TF does."""
    x, axes = op.inputs
    if not op.get_attr("keep_dims"):
        grad = _reshape_to_kept(grad, x, axes)
    grad = _broadcast_like(grad, x)
    nd = x.shape.ndims
    ax = _const_axes(axes, nd)
    if ax is not None and len(ax) <= 1:
        if not ax:
            return [grad, None]  # nothing reduced
        a = ax[0]
        left = math_ops.cumprod(x, a, exclusive=True)
        right = math_ops.cumprod(x, a, exclusive=True, reverse=True)
        return [grad * _conj(left * right), None]
    # Several axes: bring the reduced axes to the front and flatten them into one.
    if ax is not None:
        other = [i for i in range(nd) if i not in ax]
        perm = ax + other
        inv_perm = list(np.argsort(perm))
        dims = x.shape.dims
        reduced_num = _prod_or_none([dims[i] for i in ax])
        other_num = _prod_or_none([dims[i] for i in other])
        sx = None
        if reduced_num is None or other_num is None:
            sx = array_ops.shape(x)
        if reduced_num is None:
            reduced_num = math_ops.reduce_prod(array_ops.gather(sx, ax))
        if other_num is None:
            other_num = math_ops.reduce_prod(array_ops.gather(sx, other))
    else:
        rank = array_ops.rank(x)
        sx = array_ops.shape(x)
        reduced = math_ops.floormod(math_ops.cast(array_ops.reshape(axes, [-1]), dtypes.int32),
                                    math_ops.maximum(rank, 1))
        other, _ = array_ops.setdiff1d(array_ops.range(0, rank), reduced)
        perm = array_ops.concat([reduced, other], 0)
        inv_perm = array_ops.invert_permutation(perm)
        reduced_num = math_ops.reduce_prod(array_ops.gather(sx, reduced))
        other_num = math_ops.reduce_prod(array_ops.gather(sx, other))
    permuted = array_ops.transpose(x, perm)
    permuted_shape = _shape_of(permuted)
    reshaped = array_ops.reshape(permuted, array_ops.stack([reduced_num, other_num])
                                 if isinstance(reduced_num, Tensor) or isinstance(other_num, Tensor)
                                 else [reduced_num, other_num])
    left = math_ops.cumprod(reshaped, 0, exclusive=True)
    right = math_ops.cumprod(reshaped, 0, exclusive=True, reverse=True)
    others = array_ops.reshape(_conj(left * right), permuted_shape)
    return [grad * array_ops.transpose(others, inv_perm), None]


def _prod_or_none(dims):
    n = 1
    for d in dims:
        if d is None:
            return None
        n *= d
    return n


def _cumsum_grad(op, grad):
    axis = op.inputs[1]
    return [math_ops.cumsum(grad, axis, exclusive=op.get_attr("exclusive"), reverse=not op.get_attr("reverse")),
            None]


def _cumprod_grad(op, grad):
    # TF's formula: exact where x != 0 (where x == 0 it gives 0, as TF's does).
    x, axis = op.inputs
    exclusive, reverse = op.get_attr("exclusive"), op.get_attr("reverse")
    prod = math_ops.cumprod(x, axis, exclusive=exclusive, reverse=reverse)
    out = math_ops.cumsum(prod * grad, axis, exclusive=exclusive, reverse=not reverse)
    zero = math_ops.cast(math_ops.equal(x, 0), x.dtype)
    return [out / _conj(x + zero) * (1 - zero), None]


def _unsorted_segment_sum_grad(op, grad):
    # Each data slice gets the gradient of its segment; dropped (negative) ids get zeros.
    _, ids, _ = op.inputs
    zero = array_ops.constant(0, dtype=ids.dtype)
    g = array_ops.gather(grad, math_ops.maximum(ids, zero))
    keep = math_ops.cast(math_ops.greater_equal(ids, zero), grad.dtype)
    if ids.shape.ndims is not None and g.shape.ndims is not None:
        extra = g.shape.ndims - ids.shape.ndims
        if extra:
            keep = array_ops.reshape(keep, ids.shape.as_list() + [1] * extra if ids.shape.is_fully_defined()
                                     else array_ops.concat([array_ops.shape(ids), [1] * extra], 0))
    else:
        keep = array_ops.reshape(keep, array_ops.concat(
            [array_ops.shape(ids), array_ops.ones_like(array_ops.shape(grad))[1:]], 0))
    return [g * keep, None, None]


# ---------------------------------------------------------------------------------------
# matrix ops
def _matmul_grad(op, grad):
    x, y = op.inputs
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    wx, wy = _wanted(op)
    mm, c = math_ops.matmul, _conj
    if not ta and not tb:
        gx, gy = (lambda: mm(grad, c(y), transpose_b=True)), (lambda: mm(c(x), grad, transpose_a=True))
    elif not ta and tb:
        gx, gy = (lambda: mm(grad, c(y))), (lambda: mm(grad, c(x), transpose_a=True))
    elif ta and not tb:
        gx, gy = (lambda: mm(c(y), grad, transpose_b=True)), (lambda: mm(c(x), grad))
    else:
        gx, gy = (lambda: mm(c(y), grad, transpose_a=True, transpose_b=True)), (
            lambda: mm(grad, c(x), transpose_a=True, transpose_b=True))
    # each built only if wanted: the other operand's value is read only then
    return [gx() if wx else None, gy() if wy else None]


def _batch_matmul_grad(op, grad):
    x, y = op.inputs
    adj_x, adj_y = op.get_attr("adj_x"), op.get_attr("adj_y")

    def mm(a, b, aa=False, ab=False):
        return apply_op("BatchMatMul", [a, b], {"adj_x": aa, "adj_y": ab})

    wx, wy = _wanted(op)
    if not adj_x and not adj_y:
        gx, gy = (lambda: mm(grad, y, ab=True)), (lambda: mm(x, grad, aa=True))
    elif not adj_x and adj_y:
        gx, gy = (lambda: mm(grad, y)), (lambda: mm(grad, x, aa=True))
    elif adj_x and not adj_y:
        gx, gy = (lambda: mm(y, grad, ab=True)), (lambda: mm(x, grad))
    else:
        gx, gy = (lambda: mm(y, grad, aa=True, ab=True)), (lambda: mm(grad, x, aa=True, ab=True))
    # each built only if wanted (_wanted): the other operand's value is read only then
    return [unbroadcast(gx(), x, _matrix_batch_shape(y.shape)) if wx else None,
            unbroadcast(gy(), y, _matrix_batch_shape(x.shape)) if wy else None]


def _matrix_batch_shape(s: TensorShape) -> TensorShape:
    """A BatchMatMul operand's shape as seen by the other's batch broadcasting: the matrix
    dimensions count as 1 (they are never summed)."""
    return s if s.ndims is None else s[:-2].concatenate([1, 1])


def _matrix_inverse_grad(op, grad):
    # C = inv(A): dA = -C^H dC C^H. With adjoint=True C = inv(A^H), and dA = -C dC^H C.
    c = op.outputs[0]
    if op.get_attr("adjoint"):
        return [-math_ops.matmul(c, math_ops.matmul(grad, c, adjoint_a=True))]
    return [-math_ops.matmul(c, math_ops.matmul(grad, c, adjoint_b=True), adjoint_a=True)]


def _matrix_determinant_grad(op, grad):
    # d det(A) / dA = det(A) inv(A)^T (conjugated for complex, as TF).
    a, det = op.inputs[0], op.outputs[0]
    a_adj_inv = math_ops.matrix_inverse(a, adjoint=True)
    multipliers = array_ops.expand_dims(array_ops.expand_dims(grad * _conj(det), -1), -1)
    return [multipliers * a_adj_inv]


def register_gradients(reg):
    reg.gradient("Add", _add_grad)
    reg.gradient("Sub", _sub_grad)
    reg.gradient("Mul", _mul_grad)
    reg.gradient("Div", _div_grad)
    reg.gradient("RealDiv", _div_grad)
    reg.gradient("Pow", _pow_grad)
    reg.gradient("Maximum", _maximum_minimum_grad(math_ops.greater_equal))
    reg.gradient("Minimum", _maximum_minimum_grad(math_ops.less_equal))
    reg.gradient("SquaredDifference", _squared_difference_grad)
    reg.gradient("FloorMod", _floor_mod_grad)
    reg.gradient("Neg", _neg_grad)
    reg.gradient("Square", _square_grad)
    reg.gradient("Exp", _exp_grad)
    reg.gradient("Log", _log_grad)
    reg.gradient("Log1p", _log1p_grad)
    reg.gradient("Expm1", _expm1_grad)
    reg.gradient("Sqrt", _sqrt_grad)
    reg.gradient("Rsqrt", _rsqrt_grad)
    reg.gradient("Reciprocal", _reciprocal_grad)
    reg.gradient("Sigmoid", _sigmoid_grad)
    reg.gradient("Tanh", _tanh_grad)
    reg.gradient("Sin", _sin_grad)
    reg.gradient("Cos", _cos_grad)
    reg.gradient("Abs", _abs_grad)
    reg.gradient("ComplexAbs", _complex_abs_grad)
    reg.gradient("Conj", _conj_grad)
    reg.gradient("Cast", _cast_grad)
    reg.gradient("AddN", _add_n_grad)
    reg.gradient("MatMul", _matmul_grad)
    reg.gradient("BatchMatMul", _batch_matmul_grad)
    reg.gradient("MatrixInverse", _matrix_inverse_grad)
    reg.gradient("MatrixDeterminant", _matrix_determinant_grad)
    reg.gradient("Sum", _sum_grad)
    reg.gradient("Mean", _mean_grad)
    reg.gradient("Max", _min_or_max_grad)
    reg.gradient("Min", _min_or_max_grad)
    reg.gradient("Prod", _prod_grad)
    reg.gradient("Cumsum", _cumsum_grad)
    reg.gradient("Cumprod", _cumprod_grad)
    reg.gradient("UnsortedSegmentSum", _unsorted_segment_sum_grad)
    reg.no_gradient("BroadcastGradientArgs", "ReducedShape", "Shape", "Rank", "Size", "Greater", "GreaterEqual",
                    "Less", "LessEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "All",
                    "Any", "ArgMax", "ArgMin", "Floor", "Ceil", "Round", "Sign", "FloorDiv", "OnesLike",
                    "ZerosLike")
