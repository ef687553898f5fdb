"""Fused optimizer updates on the device (kernels/training.cl): ApplyGradientDescent,
ApplyMomentum, ApplyAdagrad, ApplyAdam, ApplyRMSProp.

As on the CPU, an update stores fresh tensors rather than writing into the ones it read,
and holds the locks of the variable and its slots together (in a fixed order) while it
reads and stores them. Hyper-parameters stay on the device: no step waits for the host.
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.runtime.containers import StoreUpdate
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, OPENCL, launcher, num_elements

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


def register(reg):
    for op_type in KERNELS:
        reg.register(op_type, OPENCL, factory=_factory(op_type), constraints={"T": FLOAT})
