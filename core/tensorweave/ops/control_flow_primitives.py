"""The control-flow primitives (whitepaper 4.4) and NoOp: op definitions only.

The primitives — Switch, Merge, Enter, Exit, NextIteration, LoopCond, ControlTrigger — are
interpreted by the executor itself (they route values between frames and iterations and
propagate deadness, see runtime/frames.py), so they need no device kernel: the core registers
them for every device type ("*", ``tensorweave/kernels/control_flow.py``). The user API built
on them — ``tw.cond``, ``tw.while_loop``, ``tw.case``, ``tw.group``, ``tw.tuple`` — is in
``ops/control_flow_ops.py``.
"""

from __future__ import annotations

from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import shape_fns


def _merge_shape(op):
    """The most specific shape every input is compatible with (unknown where they differ)."""
    shapes = [t.shape for t in op.inputs]
    out = shapes[0]
    for s in shapes[1:]:
        if out.ndims is None or s.ndims is None or out.ndims != s.ndims:
            out = TensorShape(None)
            break
        out = TensorShape([a if a == b else None for a, b in zip(out.as_list(), s.as_list())])
    return [out, TensorShape([])]


def register_ops(reg):
    reg.op("NoOp", doc="Does nothing; used as a target that depends on other ops.")
    reg.op("ControlTrigger", doc="Does nothing; a control-flow anchor that runs even in dead branches.")
    reg.op("Switch", inputs=["data: T", "pred: bool"], outputs=["output_false: T", "output_true: T"],
           attrs=["T: type"], shape_fn=lambda op: [op.inputs[0].shape, op.inputs[0].shape],
           doc="Forwards `data` to output_true if `pred`, else to output_false; the other output is dead.")
    reg.op("Merge", inputs=["inputs: N * T"], outputs=["output: T", "value_index: int32"],
           attrs=["T: type", "N: int >= 1"], shape_fn=_merge_shape,
           doc="Forwards the first live input (and its index); dead only when every input is dead.")
    reg.op("Enter", inputs=["data: T"], outputs=["output: T"],
           attrs=["T: type", "frame_name: string", "is_constant: bool = false", "parallel_iterations: int = 10"],
           shape_fn=shape_fns.unchanged,
           doc="Makes `data` available in the child frame `frame_name` (every iteration if is_constant).")
    reg.op("Exit", inputs=["data: T"], outputs=["output: T"], attrs=["T: type"], shape_fn=shape_fns.unchanged,
           doc="Makes a value of a loop frame available in the parent frame.")
    reg.op("NextIteration", inputs=["data: T"], outputs=["output: T"], attrs=["T: type"],
           shape_fn=shape_fns.unchanged, doc="Makes a value available in the next iteration of its frame.")
    reg.op("LoopCond", inputs=["input: bool"], outputs=["output: bool"], shape_fn=shape_fns.unchanged,
           doc="The loop predicate of a frame; its value decides whether another iteration runs.")


CONTROL_FLOW_OPS = frozenset({"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "ControlTrigger"})
