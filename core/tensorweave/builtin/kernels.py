"""Built-in plugin: the kernels the core owns (``tensorweave.kernels``) — the same on every
device, or host-side resources."""

from __future__ import annotations

from tensorweave.kernels import control_flow
from tensorweave.ops import accumulator_ops
from tensorweave.plugins import hookimpl


@hookimpl
def tensorweave_register_kernels(registry):
    control_flow.register_kernels(registry)
    # Gradient accumulators are host data structures, like queues: CPU kernels on every task.
    accumulator_ops.register_kernels(registry)
