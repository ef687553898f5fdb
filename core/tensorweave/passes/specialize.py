"""Shape specialisation: a plan's copy of the graph with the shapes actually fed.

Programs written the TF1 way feed ``tf.placeholder(tf.float32, [None, 64])``: every shape
downstream of the batch dimension is unknown when the graph is built, so the plan has to
compute shapes at run time (the gradients' Shape -> BroadcastGradientArgs -> Sum/Reshape
chains) and cannot tell a 1-MFLOP matmul from a 1-GFLOP one, which sends every matmul
through the thread pool. ``specialize_shapes`` gives the plan graph's fed tensors the shapes
of the values fed and propagates them through every node's shape function in topological
order, right after the plan graph is copied; constant folding then turns the now-known
Shape/Size/Rank and everything computed from them into constants, and the executor sees
real sizes. ``Plan.specialized_for`` (client/plan.py) keeps a few such plans per generic
plan, chosen by the shapes of the values fed.

Plans with control-flow frames are not specialised (a loop's shapes come around its back
edge; left for later). A shape function that fails on the new shapes leaves the static shape
as it was: the node then runs with run-time shapes, exactly as in the generic plan.
"""

from __future__ import annotations

from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS
from tensorweave.passes import plan_graph


def can_specialize(nodes, feeds) -> bool:
    """Whether shapes fed would tell this plan more than its static shapes (some fed tensor's
    shape is not fully defined) and the plan can be specialised (no control flow)."""
    if not feeds or all(t._shape.is_fully_defined() for t in feeds):
        return False
    return not any(op._op_def.name in CONTROL_FLOW_OPS for op in nodes)


def specialize_shapes(plan, shapes) -> None:
    """Give ``plan.feeds`` (plan-graph tensors) the fed ``shapes`` and re-infer the static
    shapes of ``plan.nodes`` from them. Raises InvalidArgumentError when a fed shape is
    incompatible with the tensor's static shape (the feed check reports that first)."""
    fed = {}
    for t, shape in zip(plan.feeds, shapes):
        t._shape = fed[t] = t._shape.merge_with(TensorShape(list(shape)))
    stubs = set(getattr(plan, "stubs", ()))
    for op in plan_graph.topological(plan.nodes):
        fn = op._op_def.shape_fn
        if fn is None or op in stubs or all(t in fed for t in op._outputs):
            continue
        try:
            inferred = fn(op)
        except Exception:  # noqa: BLE001 - keep the static shapes; the run checks shapes anyway
            continue
        if isinstance(inferred, TensorShape) or inferred is None:
            inferred = [inferred]
        for t, s in zip(op._outputs, inferred):
            if s is None or t in fed:
                continue
            try:
                t._shape = t._shape.merge_with(as_shape(s))
            except Exception:  # noqa: BLE001 - incompatible: the generic shape stays
                continue
