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

Loops: a loop variable's shape comes around the loop's back edge (its Merge reads the
NextIteration of the previous iteration), so the shapes are found by iterating to a fixed
point. The first pass assumes each loop Merge has its Enter's shape; after a pass, a Merge
whose NextIteration came out with another shape takes the most specific shape both fit
(e.g. ``[None]`` for a vector that grows) and the pass runs again, from the generic shapes.
Only what holds in every iteration ends up fully defined, so folding a Shape inside a loop
(constant_folding.py) is sound. A shape function that fails on the new shapes leaves the
static shape as it was: the node then runs with run-time shapes, exactly as in the generic
plan.
"""

from __future__ import annotations

from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.passes import plan_graph

# Passes over a plan with loops before giving up (the generic shapes then stay): each pass
# can only make a loop Merge's shape less specific, so a few are enough.
MAX_PASSES = 6


def can_specialize(nodes, feeds) -> bool:
    """Whether shapes fed would tell this plan more than its static shapes (some fed tensor's
    shape is not fully defined)."""
    return bool(feeds) and not all(t._shape.is_fully_defined() for t in feeds)


def specialize_shapes(plan, shapes) -> None:
    """Give ``plan.feeds`` (plan-graph tensors) the fed ``shapes`` and re-infer the static
    shapes of ``plan.nodes`` from them. Raises InvalidArgumentError when a fed shape is
    incompatible with the tensor's static shape (the feed check reports that first)."""
    fed = {}
    for t, shape in zip(plan.feeds, shapes):
        fed[t] = t._shape.merge_with(TensorShape(list(shape)))
    order = plan_graph.topological(plan.nodes)
    merges = [op for op in order if op._op_def.name == "Merge"
              and any(t.op._op_def.name == "NextIteration" for t in op._inputs)]
    stubs, pushes = set(getattr(plan, "stubs", ())), _pushes(order)
    if not merges:
        _infer(order, fed, stubs, set(), pushes, {})
        return
    generic = {t: t._shape for op in order for t in op._outputs}
    assumed: dict = {}  # loop Merge -> its output's shape in the pass (None: its Enter's)
    for _ in range(MAX_PASSES):
        for t, shape in generic.items():
            t._shape = shape
        _infer(order, fed, stubs, set(merges), pushes, assumed)
        changed = False
        for m in merges:
            out = m._outputs[0]
            joined = _join([t._shape for t in m._inputs])
            if joined != out._shape:
                assumed[m] = joined
                changed = True
        if not changed:
            return
    for t, shape in generic.items():  # no fixed point: the generic shapes, as unspecialised
        t._shape = shape
    for t, shape in fed.items():
        t._shape = shape


def _join(shapes):
    """The most specific shape every one of ``shapes`` fits."""
    out = shapes[0]
    for s in shapes[1:]:
        if out.rank is None or s.rank is None or out.rank != s.rank:
            return TensorShape(None)
        out = TensorShape([a if a == b else None for a, b in zip(out.as_list(), s.as_list())])
    return out


# Ops a stack handle passes through on its way from StackV2 to its pushes and pops.
_HANDLE_ROUTES = frozenset({"Enter", "RefEnter", "Identity", "RefIdentity", "Switch", "RefSwitch"})


def _stack_of(t):
    """The StackV2 op a stack handle tensor comes from, or None."""
    for _ in range(64):
        if t.op._op_def.name == "StackV2":
            return t.op
        if t.op._op_def.name not in _HANDLE_ROUTES or not t.op._inputs:
            return None
        t = t.op._inputs[0]
    return None


def _pushes(order) -> dict:
    """StackV2 op -> the values its pushes push (a loop gradient's history)."""
    out: dict = {}
    for op in order:
        if op._op_def.name == "StackPushV2":
            stack = _stack_of(op._inputs[0])
            if stack is not None:
                out.setdefault(stack, []).append(op._inputs[1])
    return out


def _infer(order, fed, stubs, loop_merges, pushes, assumed) -> None:
    """One pass of shape inference over ``order`` from the fed shapes; a loop Merge in
    ``assumed`` gets that shape, one not (yet) in it its Enter's (the first pass's guess).
    A StackPopV2 (a loop gradient reading the forward loop's history) gets the shape of
    what its stack's pushes (``_pushes``) push, which come first."""
    for t, shape in fed.items():
        t._shape = shape
    for op in order:
        name = op._op_def.name
        if op in loop_merges:
            shape = assumed.get(op)
            if shape is None:
                shape = _join([t._shape for t in op._inputs if t.op._op_def.name != "NextIteration"])
            op._outputs[0]._shape = shape
            continue
        if name == "StackPopV2":
            pushed = pushes.get(_stack_of(op._inputs[0]))
            if pushed:
                try:
                    op._outputs[0]._shape = op._outputs[0]._shape.merge_with(_join([t._shape for t in pushed]))
                except Exception:  # noqa: BLE001 - incompatible: the generic shape stays
                    pass
            continue
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
