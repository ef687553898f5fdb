"""Gradient functions of the batch-normalization, LRN, depthwise-convolution and resize ops
(``normalization_ops``, ``depthwise_conv_ops``, ``image_ops``), as TensorFlow defines them.

FusedBatchNorm's gradient is the FusedBatchNormGrad op, fed with the batch statistics the
forward op saved in its reserve spaces (training) or with the population mean and variance it
was given (inference); ``mean``/``variance`` inputs get no gradient, and the gradients of the
``batch_mean``/``batch_variance`` outputs are ignored, as in TensorFlow. Depthwise
convolutions differentiate into their backprop ops, which themselves have gradients (so a
second derivative works), as Conv2D's do.
"""

from __future__ import annotations

from tensorweave.framework import dtypes
from tensorweave.framework.graph import apply_op
from tensorweave.ops import array_ops
from tensorweave.ops.nn_grad import _shape_of

_BN_ATTRS = ("epsilon", "data_format", "is_training")
_DW_ATTRS = ("strides", "padding", "data_format", "dilations")
_RESIZE_ATTRS = ("align_corners", "half_pixel_centers")


def register_ops(reg):
    pass  # the helper ops (FusedBatchNormGrad, LRNGrad, ...) are declared with the forward ops


def _attrs(op, names):
    return {n: op.get_attr(n) for n in names}


def _fused_batch_norm_grad(op, grad_y, *_):
    x, scale = op.inputs[0], op.inputs[1]
    attrs = _attrs(op, _BN_ATTRS)
    if attrs["is_training"]:
        r1, r2 = op.outputs[3], op.outputs[4]
    else:
        r1, r2 = op.inputs[3], op.inputs[4]
    if op.type == "FusedBatchNormV3":
        outs = apply_op("FusedBatchNormGradV3", [grad_y, x, scale, r1, r2, op.outputs[5]], attrs)
    else:
        outs = apply_op("FusedBatchNormGrad", [grad_y, x, scale, r1, r2], attrs)
    return [outs[0], outs[1], outs[2], None, None]


def _lrn_grad(op, grad):
    attrs = _attrs(op, ("depth_radius", "bias", "alpha", "beta"))
    return [apply_op("LRNGrad", [grad, op.inputs[0], op.outputs[0]], attrs)]


def _depthwise_grad(op, grad):
    x, f = op.inputs
    attrs = _attrs(op, _DW_ATTRS)
    return [apply_op("DepthwiseConv2dNativeBackpropInput", [_shape_of(x), f, grad], attrs),
            apply_op("DepthwiseConv2dNativeBackpropFilter", [x, _shape_of(f), grad], attrs)]


def _depthwise_backprop_input_grad(op, grad):
    _, f, dy = op.inputs
    attrs = _attrs(op, _DW_ATTRS)
    return [None,
            apply_op("DepthwiseConv2dNativeBackpropFilter", [grad, _shape_of(f), dy], attrs),
            apply_op("DepthwiseConv2dNative", [grad, f], attrs)]


def _depthwise_backprop_filter_grad(op, grad):
    x, _, dy = op.inputs
    attrs = _attrs(op, _DW_ATTRS)
    return [apply_op("DepthwiseConv2dNativeBackpropInput", [_shape_of(x), grad, dy], attrs),
            None,
            apply_op("DepthwiseConv2dNative", [x, grad], attrs)]


def _resize_bilinear_grad(op, grad):
    x = op.inputs[0]
    if x.dtype not in (dtypes.float16, dtypes.float32, dtypes.float64):
        return [None, None]
    return [apply_op("ResizeBilinearGrad", [grad, x], _attrs(op, _RESIZE_ATTRS)), None]


def _resize_nearest_neighbor_grad(op, grad):
    x = op.inputs[0]
    if x.shape.ndims == 4 and x.shape[1:3].is_fully_defined():
        size = array_ops.constant(x.shape[1:3].as_list(), dtype=dtypes.int32, name="size")
    else:
        size = array_ops.strided_slice(array_ops.shape(x), [1], [3], [1])
    return [apply_op("ResizeNearestNeighborGrad", [grad, size], _attrs(op, _RESIZE_ATTRS)), None]


def register_gradients(reg):
    reg.gradient("FusedBatchNorm", _fused_batch_norm_grad)
    reg.gradient("FusedBatchNormV3", _fused_batch_norm_grad)
    reg.gradient("LRN", _lrn_grad)
    reg.gradient("DepthwiseConv2dNative", _depthwise_grad)
    reg.gradient("DepthwiseConv2dNativeBackpropInput", _depthwise_backprop_input_grad)
    reg.gradient("DepthwiseConv2dNativeBackpropFilter", _depthwise_backprop_filter_grad)
    reg.gradient("ResizeBilinear", _resize_bilinear_grad)
    reg.gradient("ResizeNearestNeighbor", _resize_nearest_neighbor_grad)
