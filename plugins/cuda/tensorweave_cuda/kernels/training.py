"""Fused optimizer updates on the GPU (``training.cu``): ApplyGradientDescent, ApplyMomentum,
ApplyAdam, and the sparse forms SparseApplyMomentum, SparseApplyAdagrad, SparseApplyRMSProp,
SparseApplyFtrl.

The dense updates write new buffers for the variable and its slots and store them, as every
device's whole-value updates do (``tensorweave/kernels/state.py``): values already handed to
consumers or fetched keep theirs, and a failed update leaves the variable as it was.

The sparse updates touch only the rows at ``indices``, in place: ``state.SparseApply``
checks the indices (host memory) and the gradient's shape before anything is written (an
InvalidArgumentError as on the CPU, variables unchanged) and makes the stores' buffers their
own (``writable``: copy-on-write, ``rows.GPU_ROWS``), and one kernel updates the variable
and its slots row by row. Repeated indices are applied one after the other in their order
(``tensorweave.kernels.indexing.group_rows``), as the CPU kernels and TensorFlow's do. The locks of the
variable and its slots are held together around read-compute-store in both forms.
"""

from __future__ import annotations

from tensorweave.kernels import indexing as checks
from tensorweave.kernels import state
from tensorweave.runtime.containers import StoreUpdate
from tensorweave_cuda.kernels import catalog, rows
from tensorweave_cuda.kernels.util import E, host, launch
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


# op -> (ref inputs; among the others: position of grad, of indices; the int attr passed last)
_SPARSE = {
    "SparseApplyMomentum": (2, 1, 2, "use_nesterov"),
    "SparseApplyAdagrad": (2, 1, 2, "update_slots"),
    "SparseApplyRMSProp": (3, 4, 5, None),
    "SparseApplyFtrl": (3, 0, 1, None),
}


def _sparse_training(op):
    n_refs, grad_pos, idx_pos, flag = _SPARSE[op]

    def factory(ctx):
        dev = ctx.device
        ref = catalog.training_kernel(op, catalog.dtype(ctx.attrs["T"]))
        sparse = state.SparseApply(ctx, n_refs, grad_pos, idx_pos, rows.GPU_ROWS)
        extra = () if flag is None else (int(bool(ctx.attrs.get(flag, flag == "update_slots"))),)

        def apply(*args):
            others = [a for i, a in enumerate(args) if i != idx_pos]
            with sparse.guard:
                idx, targets = sparse.targets(args, host(dev, args[idx_pos]))
                shape = targets[0].shape
                inner = targets[0].size // shape[0] if shape[0] else 0
                if idx.size and inner:
                    at, starts, order = checks.group_rows(idx)
                    r, st, o = rows.upload(dev, at), rows.upload(dev, starts), rows.upload(dev, order)
                    n = at.size * inner
                    launch(dev, ref, n, *[t.ptr for t in targets], *[a.ptr for a in others], r.ptr, rows.ptr(st),
                           rows.ptr(o), n, inner, *extra)
            return targets[0]
        return apply
    return factory


def register(reg, device_type):
    for op in _TRAINING:
        reg_kernel(reg, op, device_type, _training(op), catalog.FLOAT)
    for op in _SPARSE:
        reg_kernel(reg, op, device_type, _sparse_training(op), catalog.FLOAT,
                   constraints={"Tindices": list(catalog.INDEX_DTYPES)}, host_memory=("indices",))
