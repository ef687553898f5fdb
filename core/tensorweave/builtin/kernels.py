"""Built-in plugin: the kernels the core owns (``tensorweave.kernels``) — the same on every
device, or host-side resources."""

from __future__ import annotations

from tensorweave.framework import dtypes
from tensorweave.kernels import (
    accumulators,
    collective,
    control_flow,
    data_flow,
    datasets,
    mutex,
    readers,
    shapes,
    stacks,
    state,
    summary,
    tensor_arrays,
)
from tensorweave.plugins import hookimpl


@hookimpl
def tensorweave_register_kernels(registry):
    # The same on every device type ("*"): control flow, variables, shape-only kernels.
    for module in (control_flow, state, shapes):
        module.register_kernels(registry)
    # TensorArrays (per-step resources holding device tensors): every device type, and the
    # CPU's other dtypes.
    tensor_arrays.register_kernels(registry)
    tensor_arrays.register_kernels(registry, "CPU", dtypes.ALL_DTYPES)
    # Host-side resources (queues, datasets and iterators, mutexes, readers, per-step stacks, gradient accumulators) and host
    # logic (summaries: protobufs, PNG, WAV): what the CPU device of every task runs,
    # whatever device plugins are installed.
    for module in (data_flow, datasets, mutex, readers, stacks, accumulators, summary):
        module.register_kernels(registry)
    # Collectives: host logic that meets the group's other members (runtime/collectives.py).
    collective.register_kernels(registry)
