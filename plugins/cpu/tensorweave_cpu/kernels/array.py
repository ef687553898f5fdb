"""Array kernels: identity, packing, shapes, slicing, joining, gathering, random."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors

CPU = "CPU"


def _identity(x):
    return x


def _const(ctx):
    value = ctx.attrs["value"]
    return lambda: value  # the executor places constants in the slot template instead


def _placeholder(ctx):
    def fail():
        raise ctx.error(errors.InvalidArgumentError, "a placeholder must be fed")
    return fail


def register(reg):
    reg.register("Const", CPU, factory=_const)
    reg.register("Placeholder", CPU, factory=_placeholder)
    reg.register("Identity", CPU, _identity)
    reg.register("Pack", CPU, factory=lambda ctx: (lambda *xs, _a=ctx.attrs["axis"]: np.stack(xs, axis=_a)))
