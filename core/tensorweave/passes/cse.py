"""Common subexpression elimination (whitepaper 5.1): Click-style global value numbering.

Nodes are visited in creation order (topological for data edges). A node's value number is the tuple (op type, attrs,
the value numbers of its inputs, its control inputs (after merging), its requested device,
its outputs' static shapes); the first node with a given number is kept and every later one
is merged into it: its consumers, control dependents, fetches and targets move to the kept
node. Then pruning drops the merged nodes. Runs on the plan graph before placement
(stage ``pre_placement``); ``GraphOptions.enable_cse`` turns it off.

Never merged: stateful ops (random ops, variables, queues, updates: each is its own
state), control-flow primitives (their identity is the frame structure), ops with a
reference input or output, ``_Send``/``_Recv``, placeholders, ops without outputs (they exist
for their side effects or as anchors), and ops with a fed output (a fed tensor is a value
of its own). Constants larger than ``MAX_CONST_BYTES`` are compared by identity only, so
hashing never costs more than the merge saves.
"""

from __future__ import annotations

import weakref

import numpy as np

from tensorweave.framework import dtypes
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS
from tensorweave.passes import plan_graph

NEVER_MERGE = frozenset(CONTROL_FLOW_OPS) | {
    "RefSwitch", "RefMerge", "RefEnter", "RefExit", "RefNextIteration", "_Send", "_Recv",
    "Placeholder", "PlaceholderWithDefault", "Variable", "VariableV2",
}
MAX_CONST_BYTES = 1 << 20


class _Unique:
    """A key part that equals only itself (values we cannot or will not compare)."""

    __slots__ = ()


def _freeze(v):
    """A hashable, type-tagged form of an attr value (0.0 and -0.0, True and 1 differ)."""
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            if v.size > 4096:
                return _Unique()
            return ("nd_obj", v.shape, tuple(v.reshape(-1).tolist()))
        if v.nbytes > MAX_CONST_BYTES:
            return _Unique()
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, bool | np.bool_):
        return ("b", bool(v))
    if isinstance(v, int | np.integer):
        return ("i", int(v))
    if isinstance(v, float | np.floating):
        return ("f", float(v).hex())
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, bytes):
        return ("y", v)
    if isinstance(v, dtypes.DType):
        return ("t", v.name)
    if isinstance(v, TensorShape):
        return ("shape", None if v.dims is None else tuple(v.dims))
    if isinstance(v, list | tuple):
        return ("l", tuple(_freeze(x) for x in v))
    if v is None:
        return None
    return _Unique()


def mergeable(op, fed) -> bool:
    d = op._op_def
    if d.stateful or d.name in NEVER_MERGE or d.outputs_ref or not op._outputs:
        return False
    if any(a.is_ref for a in d.inputs):
        return False
    return not any(t in fed for t in op._outputs)


# The frozen attrs of each user node: plans are rebuilt (new copies) far more often than
# nodes change, and freezing a constant's value means copying its bytes. Attrs are fixed
# when a node is created; its device and static shapes may change later, so they are not
# cached.
_attr_keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _attrs_key(op):
    return tuple(sorted((k, _freeze(v)) for k, v in op._attrs.items()))


def value_numbering(nodes, fed=(), origin=None) -> tuple[dict, dict]:
    """({merged tensor: kept tensor}, {merged op: kept op}) for ``nodes``, visited in the
    given order (creation order is topological for data edges; where it is not — a loop's
    back edge — a node merges less, never wrongly). ``origin`` maps plan nodes to the
    user's nodes, whose frozen attrs are cached."""
    fed = set(fed)
    canon_t: dict = {}
    canon_op: dict = {}
    table: dict = {}
    origin = origin or {}
    for op in nodes:
        if not mergeable(op, fed):
            continue
        try:
            src = origin.get(op)
            if src is None:
                attrs = _attrs_key(op)
            else:
                attrs = _attr_keys.get(src)
                if attrs is None:
                    attrs = _attr_keys[src] = _attrs_key(op)
            ins = op._inputs
            if canon_t:
                ins = tuple([canon_t.get(t, t) for t in ins])
            ctrl = op._control_inputs
            key = (op._op_def.name, attrs, ins, frozenset([canon_op.get(c, c) for c in ctrl]) if ctrl else None,
                   op._device, tuple([t._shape.dims if t._shape.dims is None else tuple(t._shape.dims)
                                      for t in op._outputs]))
            kept = table.get(key)
        except TypeError:  # something unhashable slipped through: keep the node
            continue
        if kept is None:
            table[key] = op
            continue
        canon_op[op] = kept
        for a, b in zip(op._outputs, kept._outputs):
            canon_t[a] = b
    return canon_t, canon_op


def cse_pass(plan) -> None:
    """Registered as ``cse`` (stage ``pre_placement``)."""
    opts = getattr(plan.config, "graph_options", None)
    if opts is not None and not getattr(opts, "enable_cse", True):
        return
    canon_t, canon_op = value_numbering(plan.nodes, plan.feeds, getattr(plan, "origin", None))
    if canon_op:
        plan_graph.replace(plan, canon_t, canon_op)
