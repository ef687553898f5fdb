"""Variables on the GPU: the VariableStore holds a GPU tensor. Assign stores the value's
handle (tensors are immutable, so no copy is needed); AssignAdd/AssignSub and the fused
optimizer updates (ApplyGradientDescent, ApplyMomentum, ApplyAdam) write new buffers and
store them, as the CPU kernels store new arrays: values already handed to consumers or
fetched keep theirs, and a failed update leaves the variable as it was. The store's lock is
held around read-modify-store, so concurrent updates of one variable serialise.
"""

from __future__ import annotations

import numpy as np

from tensorweave.runtime.containers import StoreUpdate
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, gpu, launch
from tensorweave_cuda.kernels.util import register as reg_kernel


def _variable(ctx):
    # Variable nodes do not run as steps (the executor reads the store at each consumer);
    # this kernel declares that variables can live on this device.
    return ctx.resources.state_for_op(ctx.op).read


def _assign(ctx):
    dev = ctx.device
    store = ctx.ref_input(0)
    validate = ctx.attrs["validate_shape"]

    def assign(value):
        value = gpu(dev, value)
        if validate and store.shape.ndims is not None and not store.shape.is_compatible_with(value.shape):
            raise ctx.error(E, f"cannot assign a value of shape {value.shape} to variable {store.name} "
                               f"of shape {store.shape}")
        with store.lock:
            store.value = value
        return value
    return assign


def _update(op):
    def factory(ctx):
        dev = ctx.device
        store = ctx.ref_input(0)
        ref = catalog.binary_kernel("Add" if op == "AssignAdd" else "Sub", catalog.dtype(ctx.attrs["T"]), False)

        def update(delta):
            with store.lock:
                cur = gpu(dev, store.read())
                if delta.shape != cur.shape:
                    raise ctx.error(E, f"update of shape {delta.shape} does not match variable {store.name} "
                                       f"of shape {cur.shape}")
                new = dev.empty(cur.shape, cur.dtype)
                launch(dev, ref, new.size, cur.ptr, delta.ptr, new.ptr, new.size)
                store.value = new
            return new
        return update
    return factory


def _is_initialized(ctx):
    dev = ctx.device
    store = ctx.ref_input(0)
    return lambda: dev.host_tensor(np.array(store.value is not None))


# op -> (ref inputs: the variable, then its slots; index of the gradient among the others)
_TRAINING = {"ApplyGradientDescent": (1, 1), "ApplyMomentum": (2, 1), "ApplyAdam": (3, 6)}


def _training(op):
    n_refs, grad_index = _TRAINING[op]

    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.attrs["T"])
        ref = catalog.training_kernel(op, dt)
        stores = [ctx.ref_input(i) for i in range(n_refs)]
        guard = StoreUpdate(ctx, stores)
        nesterov = int(bool(ctx.attrs.get("use_nesterov", False)))
        names = [t.name for t in ctx.op.inputs[n_refs:]]

        def apply(*args):
            with guard:
                cur = [gpu(dev, s.read()) for s in stores]
                shape = cur[0].shape
                for s, c in zip(stores[1:], cur[1:]):
                    if c.shape != shape:
                        raise ctx.error(E, f"slot {s.name} has shape {c.shape}, the variable {shape}")
                for i, (name, a) in enumerate(zip(names, args)):
                    if i == grad_index and a.shape != shape:
                        raise ctx.error(E, f"gradient {name} has shape {a.shape}, the variable {shape}")
                    if i != grad_index and a.size != 1:
                        raise ctx.error(E, f"{name} must be a scalar, got shape {a.shape}")
                outs = [dev.empty(shape, c.dtype) for c in cur]
                n = outs[0].size
                # the kernel's order is the op's: refs, the other inputs, then the new values
                ptrs = [c.ptr for c in cur] + [a.ptr for a in args] + [o.ptr for o in outs]
                extra = (nesterov,) if op != "ApplyGradientDescent" else ()
                launch(dev, ref, n, *ptrs, n, *extra)
                for s, o in zip(stores, outs):
                    s.value = o
            return outs[0]
        return apply
    return factory


def register(reg, device_type):
    every = catalog.ALL
    reg_kernel(reg, "Variable", device_type, _variable, every, attr="dtype", activate=False)
    reg_kernel(reg, "Assign", device_type, _assign, every)
    for op in ("AssignAdd", "AssignSub"):
        reg_kernel(reg, op, device_type, _update(op), ("float32", "float64", "int32", "int64"))
    reg_kernel(reg, "IsVariableInitialized", device_type, _is_initialized, every, attr="dtype", activate=False)
    for op in _TRAINING:
        reg_kernel(reg, op, device_type, _training(op), catalog.FLOAT)

