"""Fused optimizer updates on the GPU (``training.cu``): ApplyGradientDescent, ApplyMomentum,
ApplyAdam. Each writes new buffers for the variable and its slots and stores them, as every
device's variable updates do (``tensorweave/kernels/state.py``): values already handed to
consumers or fetched keep theirs, and a failed update leaves the variable as it was. The
locks of the variable and its slots are held together around read-compute-store.
"""

from __future__ import annotations

from tensorweave.runtime.containers import StoreUpdate
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, launch
from tensorweave_cuda.kernels.util import register as reg_kernel

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
                cur = [s.read_on(dev) for s in stores]
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
    for op in _TRAINING:
        reg_kernel(reg, op, device_type, _training(op), catalog.FLOAT)
