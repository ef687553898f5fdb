"""Variables on every device: Variable, Assign, AssignAdd, AssignSub, IsVariableInitialized.

A ``VariableStore`` (``runtime/containers.py``) holds a tensor of the device whose kernel
last wrote it. Updates never write into a stored tensor: Assign stores the tensor it is
given (tensors are immutable, so no copy), AssignAdd/AssignSub store the result of the
device's own ``Add``/``Sub`` kernel (NumPy's, through the host, on a device without one).
Tensors already handed to consumers or fetched keep their values, and a step that fails
halfway leaves each variable updated or untouched. Updates read the current value with
``VariableStore.read_on`` (a value another device wrote, or a host value, is brought to the
updating device) under the store's lock, held around read-compute-store, so concurrent
updates serialise.

The fused optimizer updates (ApplyGradientDescent, ApplyAdam, ...) do their math in one
device kernel each and stay in the device plugins.
"""

from __future__ import annotations

import numpy as np

from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.kernels import EVERY_DEVICE_DTYPES, dtypes_to_register

_E = errors.InvalidArgumentError
# AssignAdd/AssignSub: the op's T excludes these.
_NOT_NUMBERS = ("bool", "string")


def _variable(ctx):
    # Variable nodes do not run as steps (the executor reads the store at each consumer);
    # this kernel declares that variables can live on the device and serves direct reads.
    return ctx.resources.state_for_op(ctx.op).read


def _assign(ctx):
    store = ctx.ref_input(0)
    validate = ctx.attrs["validate_shape"]

    def assign(value):
        if validate and store.shape.ndims is not None and not store.shape.is_compatible_with(value.shape):
            raise ctx.error(_E, f"cannot assign a value of shape {value.shape} to variable {store.name} "
                                f"of shape {store.shape}")
        with store.lock:
            store.value = value
        return value
    return assign


def _device_binary(ctx, op_type: str, on_host):
    """The device's own kernel for the binary op ``op_type`` (Add, Sub, ...), built for the
    node of ``ctx``, whose inputs and output stand for the op's two inputs and its output:
    same attr ``T``, same shapes. A kernel that takes its inputs in host memory (the CUDA
    plugin's int32 arithmetic) is handed them there. A device with no plain kernel for it
    (a minimal or test device) gets ``on_host`` (a NumPy function) run on host copies, so
    the ops registered for every device type run on every device."""
    reg = plugins.registry()
    device = ctx.device
    kd = reg.kernels.lookup(op_type, device.device_type, ctx.attrs)
    if kd is None or kd.is_async or kd.takes_context:
        if device.host_tensors:
            return on_host
        to_host, to_device = device.to_host, device.to_device

        def through_host(a, b):
            return to_device(np.asarray(on_host(to_host(a), to_host(b))))
        return through_host
    compute = kd.factory(ctx)
    if not kd.host_memory or device.host_tensors:
        return compute
    host_inputs = [arg.name in kd.host_memory for arg in reg.ops.get(op_type).inputs]
    to_host = device.to_host

    def compute_with_host_inputs(*args):
        return compute(*(to_host(a) if h else a for a, h in zip(args, host_inputs)))
    return compute_with_host_inputs


def _update(op_type: str, on_host):
    def factory(ctx):
        store = ctx.ref_input(0)
        device = ctx.device
        read_on = store.read_on
        combine = _device_binary(ctx, op_type, on_host)

        def update(delta):
            with store.lock:
                cur = read_on(device)
                new = combine(cur, delta)
                if new.shape != cur.shape:
                    raise ctx.error(_E, f"update of shape {delta.shape} does not match variable {store.name} "
                                        f"of shape {cur.shape}")
                store.value = new
            return new
        return update
    return factory


def _is_initialized(ctx):
    store = ctx.ref_input(0)
    if ctx.device.host_tensors:
        return lambda: np.array(store.value is not None)
    answers = {v: ctx.device.to_device(np.array(v)) for v in (False, True)}
    return lambda: answers[store.value is not None]


def register_kernels(registry, device_type: str = "*", held=None) -> None:
    """The variable kernels for ``device_type`` and the dtypes ``held`` there (by default
    ``"*"`` and ``EVERY_DEVICE_DTYPES``; see ``tensorweave.kernels``)."""
    names = dtypes_to_register(device_type, EVERY_DEVICE_DTYPES if held is None else held)
    if not names:
        return
    registry.register("Variable", device_type, factory=_variable, constraints={"dtype": names})
    registry.register("Assign", device_type, factory=_assign, constraints={"T": names})
    registry.register("IsVariableInitialized", device_type, factory=_is_initialized, constraints={"dtype": names})
    numbers = [n for n in names if n not in _NOT_NUMBERS]
    if numbers:
        registry.register("AssignAdd", device_type, factory=_update("Add", np.add), constraints={"T": numbers})
        registry.register("AssignSub", device_type, factory=_update("Sub", np.subtract), constraints={"T": numbers})
