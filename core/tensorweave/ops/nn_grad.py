"""Gradient functions of the neural-net ops, as TensorFlow defines them.

Activation gradients are single helper ops (``ReluGrad``, ``EluGrad``, ...); convolution
and pooling gradients are the ``*Backprop*``/``*Grad`` ops, which themselves have
gradients where TensorFlow gives them (so ``conv2d_transpose`` and second derivatives of
a convolution work). The helper ops are declared with the forward ops in ``nn_ops``.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.ops import array_ops, math_ops, nn_ops

_CONV_ATTRS = ("strides", "padding", "data_format", "dilations", "use_cudnn_on_gpu")
_POOL_ATTRS = ("ksize", "strides", "padding", "data_format")


def register_ops(reg):
    pass  # the helper ops (ReluGrad, Conv2DBackpropInput, MaxPoolGrad, ...) are in nn_ops


def _attrs(op, names):
    return {n: op.get_attr(n) for n in names}


def _shape_of(t):
    """``t``'s shape as an int32 tensor: a constant when known at construction (no Shape
    node to run every step), else ``Shape(t)``."""
    if t.shape.is_fully_defined():
        return array_ops.constant(np.array(t.shape.as_list(), np.int32), name="shape")
    return array_ops.shape(t)


def _is_zeros(t):
    """Whether ``t`` is the zeros the autodiff engine gives an output that received no gradient."""
    return t is None or t.op.type == "ZerosLike"


# ---------------------------------------------------------------------------------------
# activations
def _relu_grad(op, grad):
    return [apply_op("ReluGrad", [grad, op.outputs[0]])]


def _relu6_grad(op, grad):
    return [apply_op("Relu6Grad", [grad, op.inputs[0]])]


def _elu_grad(op, grad):
    return [apply_op("EluGrad", [grad, op.outputs[0]])]


def _softplus_grad(op, grad):
    return [apply_op("SoftplusGrad", [grad, op.inputs[0]])]


def _relu_grad_grad(op, grad):
    # ReluGrad(g, f) is g where f > 0: linear in g, piecewise constant in f.
    return [apply_op(op.type, [grad, op.inputs[1]]), array_ops.zeros_like(op.inputs[1])]


def _elu_grad_grad(op, grad):
    g, y = op.inputs
    negative = math_ops.cast(math_ops.less(y, 0), y.dtype)
    return [apply_op("EluGrad", [grad, y]), grad * g * negative]


def _softplus_grad_grad(op, grad):
    g, x = op.inputs
    s = math_ops.sigmoid(x)
    return [apply_op("SoftplusGrad", [grad, x]), grad * g * s * (1 - s)]


# ---------------------------------------------------------------------------------------
# softmax and cross-entropies
def _softmax_grad(op, grad):
    sm = op.outputs[0]
    dot = math_ops.reduce_sum(grad * sm, axis=-1, keep_dims=True)
    return [(grad - dot) * sm]


def _log_softmax_grad(op, grad):
    sm = math_ops.exp(op.outputs[0])
    return [grad - math_ops.reduce_sum(grad, axis=-1, keep_dims=True) * sm]


def _backprop_through_softmax(grad_grad, logits):
    """The logits gradient of ``sum(grad_grad * softmax(logits))``: the second-order term of
    the cross-entropies, whose ``backprop`` output is ``softmax(logits) - labels``."""
    sm = nn_ops.softmax(logits)
    return (grad_grad - math_ops.reduce_sum(grad_grad * sm, axis=-1, keep_dims=True)) * sm


def _xent_grad(op, grad_loss, grad_grad):
    logits = op.inputs[0]
    g = array_ops.expand_dims(grad_loss, -1)
    logits_grad = g * op.outputs[1]
    labels_grad = g * -nn_ops.log_softmax(logits)
    if not _is_zeros(grad_grad):
        logits_grad = logits_grad + _backprop_through_softmax(grad_grad, logits)
        labels_grad = labels_grad - grad_grad
    return [logits_grad, labels_grad]


def _sparse_xent_grad(op, grad_loss, grad_grad):
    logits_grad = array_ops.expand_dims(grad_loss, -1) * op.outputs[1]
    if not _is_zeros(grad_grad):
        logits_grad = logits_grad + _backprop_through_softmax(grad_grad, op.inputs[0])
    return [logits_grad, None]


# ---------------------------------------------------------------------------------------
# convolution
def _conv2d_grad(op, grad):
    x, f = op.inputs
    attrs = _attrs(op, _CONV_ATTRS)
    return [apply_op("Conv2DBackpropInput", [_shape_of(x), f, grad], attrs),
            apply_op("Conv2DBackpropFilter", [x, _shape_of(f), grad], attrs)]


def _conv2d_backprop_input_grad(op, grad):
    _, f, dy = op.inputs
    attrs = _attrs(op, _CONV_ATTRS)
    return [None,
            apply_op("Conv2DBackpropFilter", [grad, _shape_of(f), dy], attrs),
            apply_op("Conv2D", [grad, f], attrs)]


def _conv2d_backprop_filter_grad(op, grad):
    x, _, dy = op.inputs
    attrs = _attrs(op, _CONV_ATTRS)
    return [apply_op("Conv2DBackpropInput", [_shape_of(x), grad, dy], attrs),
            None,
            apply_op("Conv2D", [x, grad], attrs)]


# ---------------------------------------------------------------------------------------
# pooling
def _max_pool_grad(op, grad):
    return [apply_op("MaxPoolGrad", [op.inputs[0], op.outputs[0], grad], _attrs(op, _POOL_ATTRS))]


def _avg_pool_grad(op, grad):
    return [apply_op("AvgPoolGrad", [_shape_of(op.inputs[0]), grad], _attrs(op, _POOL_ATTRS))]


def _avg_pool_grad_grad(op, grad):
    return [None, apply_op("AvgPool", [grad], _attrs(op, _POOL_ATTRS))]


# ---------------------------------------------------------------------------------------
# bias, losses, checks
def _bias_add_grad(op, grad):
    return [grad, apply_op("BiasAddGrad", [grad], {"data_format": op.get_attr("data_format")})]


def _bias_add_grad_grad(op, grad):
    dy = op.inputs[0]
    nd = dy.shape.ndims
    if nd is None:
        raise errors.UnimplementedError(
            f"gradient of BiasAddGrad node '{op.name}' needs the rank of its input '{dy.name}', which is unknown")
    shape = [1] * nd
    shape[1 if op.get_attr("data_format") == "NCHW" else nd - 1] = -1
    return [array_ops.reshape(grad, shape) * array_ops.ones_like(dy)]


def _l2_loss_grad(op, grad):
    return [op.inputs[0] * grad]


def _check_numerics_grad(op, grad):
    message = op.get_attr("message")
    return [nn_ops.check_numerics(
        grad, "Not a number (NaN) or infinity (Inf) values detected in gradient. " + message)]


def register_gradients(reg):
    reg.gradient("Relu", _relu_grad)
    reg.gradient("Relu6", _relu6_grad)
    reg.gradient("Elu", _elu_grad)
    reg.gradient("Softplus", _softplus_grad)
    reg.gradient("ReluGrad", _relu_grad_grad)
    reg.gradient("Relu6Grad", _relu_grad_grad)
    reg.gradient("EluGrad", _elu_grad_grad)
    reg.gradient("SoftplusGrad", _softplus_grad_grad)
    reg.gradient("Softmax", _softmax_grad)
    reg.gradient("LogSoftmax", _log_softmax_grad)
    reg.gradient("SoftmaxCrossEntropyWithLogits", _xent_grad)
    reg.gradient("SparseSoftmaxCrossEntropyWithLogits", _sparse_xent_grad)
    reg.gradient("Conv2D", _conv2d_grad)
    reg.gradient("Conv2DBackpropInput", _conv2d_backprop_input_grad)
    reg.gradient("Conv2DBackpropFilter", _conv2d_backprop_filter_grad)
    reg.gradient("MaxPool", _max_pool_grad)
    reg.gradient("AvgPool", _avg_pool_grad)
    reg.gradient("AvgPoolGrad", _avg_pool_grad_grad)
    reg.gradient("BiasAdd", _bias_add_grad)
    reg.gradient("BiasAddGrad", _bias_add_grad_grad)
    reg.gradient("L2Loss", _l2_loss_grad)
    reg.gradient("CheckNumerics", _check_numerics_grad)
    reg.no_gradient("InTopK")
