"""Gradient functions of the array ops."""

from __future__ import annotations

from tensorweave.ops import array_ops


def register_ops(reg):
    pass


def _identity_grad(op, grad):
    return [grad]


def _reshape_grad(op, grad):
    return [array_ops.reshape(grad, array_ops.shape(op.inputs[0])
                              if not op.inputs[0].shape.is_fully_defined() else op.inputs[0].shape.as_list()),
            None]


def register_gradients(reg):
    reg.gradient("Identity", _identity_grad)
    reg.gradient("Reshape", _reshape_grad)
    reg.no_gradient("StopGradient", "Const", "Placeholder", "Fill", "Range", "RandomUniform",
                    "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt", "RandomShuffle")
