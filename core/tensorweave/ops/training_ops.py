"""Training ops: fused optimizer updates (ApplyGradientDescent, ApplyAdam, ...) that update
variables in place of a chain of Assign ops, as in TensorFlow."""

from __future__ import annotations


def register_ops(reg):
    pass
