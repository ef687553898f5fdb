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
    from tensorweave.passes import compression

    compression.register_ops(registry)  # the conversions the compression pass inserts


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
    # Gradient accumulators are host data structures, like queues: CPU kernels on every task.
    from tensorweave.ops import accumulator_ops

    accumulator_ops.register_kernels(registry)


@hookimpl
def tensorweave_register_passes(registry):
    from tensorweave.passes.compression import compression_pass
    from tensorweave.passes.constant_folding import constant_folding_pass
    from tensorweave.passes.cse import cse_pass
    from tensorweave.passes.prune import prune_pass
    from tensorweave.passes.recv_scheduling import recv_scheduling_pass

    registry.register("prune", prune_pass, order=0, stage="prune")
    # CSE first, so constants merged by it fold once; folding may expose more duplicates,
    # but one round catches the common cases (gradient graphs repeat shapes and constants).
    registry.register("cse", cse_pass, order=10, stage="pre_placement")
    registry.register("constant_folding", constant_folding_pass, order=20, stage="pre_placement")
    registry.register("bfloat16_sendrecv", compression_pass, order=10, stage="post_placement")
    registry.register("recv_scheduling", recv_scheduling_pass, order=10, stage="post_partition")


@hookimpl
def tensorweave_register_transports(registry):
    from tensorweave.distributed.transport import InProcTransport

    registry.register("inproc", InProcTransport)


@hookimpl
def tensorweave_register_placers(registry):
    from tensorweave.passes.placement import DefaultPlacer

    registry.register("default", DefaultPlacer())
