"""Variable update kernels: Assign, AssignAdd, AssignSub, IsVariableInitialized.

Updates never write into an existing array: they store a new one. Arrays already handed to
consumers or returned to the user keep their values, and a step that fails halfway leaves
each variable either fully updated or untouched.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors

CPU = "CPU"


def _assign(ctx):
    store = ctx.ref_input(0)
    validate = ctx.attrs["validate_shape"]

    def assign(value):
        if validate and store.shape.ndims is not None and not store.shape.is_compatible_with(value.shape):
            raise ctx.error(errors.InvalidArgumentError,
                            f"cannot assign a value of shape {value.shape} to variable {store.name} of shape {store.shape}")
        with store.lock:
            store.value = value
        return value
    return assign


def _update(fn):
    def factory(ctx):
        store = ctx.ref_input(0)

        def update(delta):
            with store.lock:
                cur = store.read()
                new = fn(cur, delta)
                if new.shape != cur.shape:
                    raise ctx.error(errors.InvalidArgumentError,
                                    f"update of shape {delta.shape} does not match variable {store.name} of shape {cur.shape}")
                store.value = new
            return new
        return update
    return factory


def _variable(ctx):
    # Variable nodes do not run as steps (the executor reads the store at each consumer);
    # this kernel declares that variables can live on the CPU and serves direct reads.
    return ctx.resources.state_for_op(ctx.op).read


def register(reg):
    reg.register("Variable", CPU, factory=_variable)
    reg.register("Assign", CPU, factory=_assign)
    reg.register("AssignAdd", CPU, factory=_update(np.add))
    reg.register("AssignSub", CPU, factory=_update(np.subtract))
    reg.register("IsVariableInitialized", CPU,
                 factory=lambda ctx: (lambda s=ctx.ref_input(0): np.array(s.value is not None)))
