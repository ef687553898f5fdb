"""Fused optimizer updates on the device (kernels/training.cl): ApplyGradientDescent,
ApplyMomentum, ApplyAdagrad, ApplyAdam, ApplyRMSProp, and the sparse forms
SparseApplyMomentum, SparseApplyAdagrad, SparseApplyRMSProp, SparseApplyFtrl.

As on the CPU, a dense update stores fresh tensors rather than writing into the ones it
read, and every update holds the locks of the variable and its slots together (in a fixed
order) while it reads and stores them. Hyper-parameters stay on the device: no step waits
for the host.

A sparse update writes the rows of its indices in place, copy-on-write
(``tensorweave.kernels.state.SparseApply``: the checks first, then ``writable`` with the
device's ``CLRows``), and touches no other row. Its indices are read in host memory: an
index out of range is an InvalidArgumentError as on the CPU (nothing written), and the host
groups repeated indices by row so that one work item applies a row's slices in order (no
atomics; TensorFlow's semantics: a repeated index is applied twice).
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.kernels import state
from tensorweave.ops.training_ops import GROUPED_GD
from tensorweave.runtime.containers import StoreUpdate
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, INDEX, OPENCL, host, launcher, num_elements, what
from tensorweave_opencl.kernels.scatter import CLRows, row_groups

# op -> (kernel, number of ref inputs, index of the gradient among the other inputs)
KERNELS = {
    "ApplyGradientDescent": ("gradient_descent", 1, 1),
    "ApplyMomentum": ("momentum", 2, 1),
    "ApplyAdagrad": ("adagrad", 2, 1),
    "ApplyAdam": ("adam", 3, 6),
    "ApplyRMSProp": ("rms_prop", 3, 4),
}


def _factory(op_type):
    kernel, n_refs, grad_index = KERNELS[op_type]

    def factory(ctx):
        attrs = ctx.attrs
        dt = attrs["T"].np_dtype
        n_other = len(ctx.op.inputs) - n_refs
        defines = {"T": program.ctype(dt), "NESTEROV": int(bool(attrs.get("use_nesterov", False)))}
        launch = launcher(ctx, "training.cl", kernel, [BUF] * (2 * n_refs + n_other) + [I32], defines)
        stores = [ctx.ref_input(i) for i in range(n_refs)]
        guard = StoreUpdate(ctx, stores)
        arg_names = [t.name for t in ctx.op.inputs[n_refs:]]
        device = ctx.device

        def update(*args):
            grad = args[grad_index]
            for i, (name, a) in enumerate(zip(arg_names, args)):
                if i != grad_index and a.shape != ():
                    raise ctx.error(errors.InvalidArgumentError,
                                    f"'{name}' must be a scalar, got a value of shape {a.shape}")
            with guard:
                current = [s.read_on(device) for s in stores]
                guard.check_shapes(current, grad)
                var = current[0]
                new = [device.empty(var.shape, var.dtype) for _ in stores]
                n = num_elements(var.shape)
                if n:
                    launch.run(n, *[t.block.buf for t in new], *[t.block.buf for t in current],
                               *[a.block.buf for a in args], n)
                for s, x in zip(stores, new):
                    s.value = x
            return new[0]
        return update
    return factory


# op -> (kernel, number of ref inputs, index of the gradient, of the indices among the others)
SPARSE_KERNELS = {
    "SparseApplyMomentum": ("sparse_momentum", 2, 1, 2),
    "SparseApplyAdagrad": ("sparse_adagrad", 2, 1, 2),
    "SparseApplyRMSProp": ("sparse_rms_prop", 3, 4, 5),
    "SparseApplyFtrl": ("sparse_ftrl", 3, 0, 1),
}


def _sparse_factory(op_type):
    kernel, n_refs, grad_index, idx_index = SPARSE_KERNELS[op_type]

    def factory(ctx):
        attrs = ctx.attrs
        dt = attrs["T"].np_dtype
        n_other = len(ctx.op.inputs) - n_refs - 1
        defines = {"T": program.ctype(dt), "NESTEROV": int(bool(attrs.get("use_nesterov", False))),
                   "UPDATE_SLOTS": int(bool(attrs.get("update_slots", True)))}
        launch = launcher(ctx, "training.cl", kernel, [BUF] * (n_refs + n_other) + [BUF, I32, I32, I32], defines)
        sparse = state.SparseApply(ctx, n_refs, grad_index, idx_index, CLRows(ctx))
        device = ctx.device

        def update(*args):
            others = [a for i, a in enumerate(args) if i != idx_index]
            with sparse.guard:
                idx, targets = sparse.targets(args, host(args[idx_index]))
                inner = num_elements(targets[0].shape[1:])
                if idx.size and inner:
                    table, m = row_groups(device, idx)
                    n = m * inner
                    launch.run(n, *[t.block.buf for t in targets], *[a.block.buf for a in others],
                               table.block.buf, m, inner, n)
            return targets[0]
        return update
    return factory


def _grouped_source(n: int) -> str:
    """OpenCL C of one gradient-descent launch over ``n`` variables: work item i updates
    element i of the variables laid end to end (variable k has ``c<k>`` elements)."""
    params = ", ".join(f"__global T* n{k}, __global const T* v{k}, __global const T* d{k}, const int c{k}"
                       for k in range(n))
    body = "".join(f"    if (i < c{k}) {{ n{k}[i] = v{k}[i] - a * d{k}[i]; return; }}\n    i -= c{k};\n"
                   for k in range(n))
    return (f"__kernel void grouped_gd({params}, __global const T* alpha)\n{{\n"
            f"    int i = get_global_id(0);\n    const T a = alpha[0];\n{body}}}\n")


def _grouped_factory(ctx):
    """_GroupedApplyGradientDescent (passes/update_grouping.py): every variable's update in
    one launch, with ApplyGradientDescent's semantics per variable (fresh buffers stored)."""
    n = ctx.attrs["N"]
    dt = ctx.attrs["T"].np_dtype
    runtime = ctx.device.runtime
    prg = program.build(runtime, f"grouped_gd[{n}]", {"T": program.ctype(dt)}, what=what(ctx),
                        text=_grouped_source(n))
    launch = program.Launcher(runtime, prg, "grouped_gd", [BUF, BUF, BUF, I32] * n + [BUF])
    stores = [ctx.ref_input(i) for i in range(n)]
    guard = StoreUpdate(ctx, stores)
    alpha_name = ctx.op.inputs[n].name
    names = ctx.attrs.get("names") or [ctx.node_name] * n
    device = ctx.device

    def update(alpha, *deltas):
        if alpha.shape != ():
            raise ctx.error(errors.InvalidArgumentError,
                            f"'{alpha_name}' must be a scalar, got a value of shape {alpha.shape}")
        with guard:
            current = [s.read_on(device) for s in stores]
            guard.check_each(current, deltas, names)
            new = [device.empty(c.shape, c.dtype) for c in current]
            args, total = [], 0
            for x, c, d in zip(new, current, deltas):
                size = num_elements(c.shape)
                args += [x.block.buf, c.block.buf, d.block.buf, size]
                total += size
            if total:
                launch.run(total, *args, alpha.block.buf)
            for s, x in zip(stores, new):
                s.value = x
        return None
    return update


def register(reg):
    for op_type in KERNELS:
        reg.register(op_type, OPENCL, factory=_factory(op_type), constraints={"T": FLOAT})
    reg.register(GROUPED_GD, OPENCL, factory=_grouped_factory, constraints={"T": FLOAT})
    for op_type in SPARSE_KERNELS:
        reg.register(op_type, OPENCL, factory=_sparse_factory(op_type), constraints={"T": FLOAT, "Tindices": INDEX},
                     host_memory=("indices",))
