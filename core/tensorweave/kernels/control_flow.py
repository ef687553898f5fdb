"""The control-flow primitives on every device type.

Switch, Merge, Enter, Exit, NextIteration, LoopCond and ControlTrigger are interpreted by the
executor (``runtime/frames.py``): they only route device handles, so every device runs them.
They are registered for ``"*"`` so placement sees them as runnable anywhere; the compute
functions are never called.
"""

from __future__ import annotations

from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS


def _interpreted(ctx):
    def compute(*args):
        raise AssertionError(f"{ctx.op_type} is interpreted by the executor")
    return compute


def register_kernels(registry) -> None:
    for op in sorted(CONTROL_FLOW_OPS):
        registry.register(op, "*", factory=_interpreted, host_memory=("pred",) if op == "Switch" else ())
