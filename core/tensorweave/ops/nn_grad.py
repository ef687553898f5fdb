"""Gradient functions of the neural-net ops."""

from __future__ import annotations

from tensorweave.ops import math_ops


def register_ops(reg):
    pass


def _relu_grad(op, grad):
    x = op.inputs[0]
    return [grad * math_ops.cast(x > 0, x.dtype)]


def register_gradients(reg):
    reg.gradient("Relu", _relu_grad)
