"""Axis and shape arguments, checked and normalised the same way by every kernel on every device.

An axis arrives as an attr or a host-memory input (a Python or NumPy integer); for an input
of rank ``ndim`` it is valid in ``[-ndim, ndim)``. The core's kernels and the device
plugins' kernels all call ``norm_axis``, so an out-of-range axis is the same error, with the
same message, wherever the node runs.
"""

from __future__ import annotations

from tensorweave.framework import errors


def norm_axis(ctx, axis, ndim: int, what: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``; an InvalidArgumentError naming the node (``ctx`` is its
    KernelContext) and ``what`` the axis is for when it is out of range. A scalar has no
    axis: callers that accept one (ExpandDims, Pack) pass the rank of their output."""
    a = int(axis)
    if not -ndim <= a < ndim:
        raise ctx.error(errors.InvalidArgumentError, f"{what} {a} is out of range for an input of rank {ndim}")
    return a % ndim


def int_list(ctx, t, what: str) -> list[int]:
    """A host-memory vector input (a shape, dims, multiples) as a list of ints; an
    InvalidArgumentError naming the node and ``what`` when it is not a vector."""
    if t.ndim != 1:
        raise ctx.error(errors.InvalidArgumentError, f"{what} must be a vector, got shape {t.shape}")
    return t.tolist()
