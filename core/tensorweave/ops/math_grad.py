"""Gradient functions of the math ops, and ``unbroadcast`` for element-wise gradients.

Each ``fn(op, *output_grads)`` returns one gradient per input of ``op``; registered by
``register_gradients`` (called from the built-in plugin's ``tensorweave_register_ops``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.graph import Tensor, apply_op
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops, math_ops


def _broadcast_gradient_args_shape(op):
    return [TensorShape([None]), TensorShape([None])]


def register_ops(reg):
    reg.op("BroadcastGradientArgs", inputs=["s0: T", "s1: T"], outputs=["r0: T", "r1: T"],
           attrs=["T: {int32, int64} = int32"], shape_fn=_broadcast_gradient_args_shape,
           doc="The axes along which the gradients of two broadcast operands must be summed.")


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


def unbroadcast(grad: Tensor, x: Tensor) -> Tensor:
    """Sum ``grad`` (shaped like a broadcast result) down to the shape of ``x``."""
    if grad.shape.is_fully_defined() and x.shape.is_fully_defined() and grad.shape == x.shape:
        return grad
    axes = static_reduction_axes(x.shape, grad.shape)
    if axes is not None:
        if not axes:
            return grad
        summed = math_ops.reduce_sum(grad, axis=axes, keep_dims=True)
        return array_ops.reshape(summed, x.shape.as_list())
    sx, sg = array_ops.shape(x), array_ops.shape(grad)
    rx, _ = apply_op("BroadcastGradientArgs", [sx, sg])
    return array_ops.reshape(math_ops.reduce_sum(grad, axis=rx, keep_dims=True), sx)


def _binary_grads(gx, gy, op):
    x, y = op.inputs
    return [unbroadcast(gx, x) if gx is not None else None,
            unbroadcast(gy, y) if gy is not None else None]


def _add_grad(op, grad):
    return _binary_grads(grad, grad, op)


def _sub_grad(op, grad):
    return _binary_grads(grad, -grad, op)


def _mul_grad(op, grad):
    x, y = op.inputs
    return _binary_grads(grad * _conj(y), _conj(x) * grad, op)


def _conj(t: Tensor) -> Tensor:
    return math_ops.conj(t) if t.dtype.is_complex else t


def _matmul_grad(op, grad):
    a, b = op.inputs
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    mm = math_ops.matmul
    if not ta and not tb:
        return [mm(grad, b, transpose_b=True), mm(a, grad, transpose_a=True)]
    if not ta and tb:
        return [mm(grad, b), mm(grad, a, transpose_a=True)]
    if ta and not tb:
        return [mm(b, grad, transpose_b=True), mm(a, grad)]
    return [mm(b, grad, transpose_a=True, transpose_b=True), mm(grad, a, transpose_a=True, transpose_b=True)]


def _neg_grad(op, grad):
    return [-grad]


def _square_grad(op, grad):
    x = op.inputs[0]
    return [grad * (x * np.asarray(2, x.dtype.np_dtype))]


def _sum_grad(op, grad):
    x, axes = op.inputs
    keep = op.get_attr("keep_dims")
    if not keep:
        # put back the reduced axes as size-1 dims, then broadcast
        if x.shape.ndims is not None and grad.shape.ndims is not None:
            from tensorweave.framework.graph import constant_value
            ax = constant_value(axes)
            if ax is not None:
                nd = x.shape.ndims
                ax = sorted({int(a) % nd for a in np.asarray(ax).reshape(-1)}) if nd else []
                kept = [1 if i in ax else (x.shape[i] if x.shape[i] is not None else -1) for i in range(nd)]
                if kept.count(-1) <= 1:
                    grad = array_ops.reshape(grad, kept)
                else:
                    grad = _reshape_dynamic_keepdims(grad, x, axes)
            else:
                grad = _reshape_dynamic_keepdims(grad, x, axes)
        else:
            grad = _reshape_dynamic_keepdims(grad, x, axes)
    return [grad * array_ops.ones_like(x), None]


def _reshape_dynamic_keepdims(grad, x, axes):
    raise errors.UnimplementedError(
        "gradient of a reduction over axes unknown at graph construction is not supported yet")


def register_gradients(reg):
    reg.gradient("Add", _add_grad)
    reg.gradient("Sub", _sub_grad)
    reg.gradient("Mul", _mul_grad)
    reg.gradient("Neg", _neg_grad)
    reg.gradient("Square", _square_grad)
    reg.gradient("MatMul", _matmul_grad)
    reg.gradient("Sum", _sum_grad)
    reg.no_gradient("BroadcastGradientArgs", "Shape", "Rank", "Size", "Greater", "GreaterEqual", "Less",
                    "LessEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "ArgMax",
                    "ArgMin", "Floor", "Ceil", "Round", "Sign", "FloorDiv", "OnesLike", "ZerosLike")
