"""Variables on the device: the VariableStore holds a CLTensor. Assign stores the tensor it
is given (tensors are immutable, so no copy is needed); AssignAdd/AssignSub store a fresh
tensor; IsVariableInitialized answers with a device bool."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_opencl.buffer import CLTensor
from tensorweave_opencl.kernels.common import ALL, NUMERIC, OPENCL
from tensorweave_opencl.kernels.elementwise import Binary


def read_here(store, device):
    """The store's value as a tensor of ``device``. A value another device wrote (an earlier
    plan placed the variable on the CPU) is copied over; the executor does the same for
    plain reads, but update kernels read their ref inputs themselves."""
    v = store.read()
    if isinstance(v, CLTensor):
        return v
    src = getattr(store, "device", None)
    if src is not None and not src.host_tensors:
        return device.copy_from(v, src)
    return device.to_device(np.asarray(v))


def _variable(ctx):
    # Variable nodes do not run as steps (the executor reads the store at each consumer);
    # this kernel declares that variables can live on OPENCL and serves direct reads.
    return ctx.resources.state_for_op(ctx.op).read


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


def _update(expr):
    def factory(ctx):
        store = ctx.ref_input(0)
        dt = ctx.attrs["T"].np_dtype
        op = Binary(ctx, expr, dt, dt)
        device = ctx.device

        def update(delta):
            with store.lock:
                cur = read_here(store, device)
                new = op(cur, delta)
                if new.shape != cur.shape:
                    raise ctx.error(errors.InvalidArgumentError,
                                    f"update of shape {delta.shape} does not match variable {store.name} of shape {cur.shape}")
                store.value = new
            return new
        return update
    return factory


def _is_initialized(ctx):
    store = ctx.ref_input(0)
    answers = {v: ctx.device.to_device(np.array(v)) for v in (False, True)}
    return lambda: answers[store.value is not None]


def register(reg):
    reg.register("Variable", OPENCL, factory=_variable, constraints={"dtype": ALL})
    reg.register("Assign", OPENCL, factory=_assign, constraints={"T": ALL})
    reg.register("AssignAdd", OPENCL, factory=_update("(a + b)"), constraints={"T": NUMERIC})
    reg.register("AssignSub", OPENCL, factory=_update("(a - b)"), constraints={"T": NUMERIC})
    reg.register("IsVariableInitialized", OPENCL, factory=_is_initialized, constraints={"dtype": ALL})
