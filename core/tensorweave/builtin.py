"""The core's own plugin: registers the built-in ops, graph passes and placer.

It goes through exactly the hooks a third-party plugin uses (like pytest's built-in
plugins), so the core has no private back door into the registries.
"""

from __future__ import annotations

import importlib

from tensorweave.plugins import hookimpl


@hookimpl
def tensorweave_register_ops(registry):
    from tensorweave import ops

    for family in ops.FAMILIES:
        importlib.import_module(f"tensorweave.ops.{family}").register_ops(registry)
    for module in ops.GRADIENTS:
        mod = importlib.import_module(f"tensorweave.ops.{module}")
        mod.register_ops(registry)
        mod.register_gradients(registry)


@hookimpl
def tensorweave_register_kernels(registry):
    # The control-flow primitives are interpreted by the executor (runtime/frames.py): they
    # only route device handles, so every device type runs them ("*"). The compute functions
    # below are never called; they exist so placement sees the ops as runnable anywhere.
    from tensorweave.ops.control_ops import CONTROL_FLOW_OPS

    def _interpreted(ctx):
        def compute(*args):
            raise AssertionError(f"{ctx.op_type} is interpreted by the executor")
        return compute

    for op in sorted(CONTROL_FLOW_OPS):
        registry.register(op, "*", factory=_interpreted, host_memory=("pred",) if op == "Switch" else ())


@hookimpl
def tensorweave_register_passes(registry):
    from tensorweave.passes.prune import prune_pass

    registry.register("prune", prune_pass, order=0)


@hookimpl
def tensorweave_register_placers(registry):
    from tensorweave.passes.placement import DefaultPlacer

    registry.register("default", DefaultPlacer())
