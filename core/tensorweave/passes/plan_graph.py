"""The plan graph: a private, rewritable copy of the nodes one execution plan needs.

After pruning, ``build`` copies the needed part of the user's graph into a fresh ``Graph``
(same names, attrs, device requests, colocation attrs, control inputs, static shapes and
creation order) and maps the plan's feeds, fetches and targets onto the copies. Graph passes
rewrite the copy; the user's graph is never modified. Copies keep their original node's
``_id`` (creation order), which the placer and the executor use to break ties, so a plan
that no pass rewrote runs exactly as before.

A fed tensor whose producer is not needed otherwise gets a *stub*: a node of the same name
and type with no inputs, never executed (fed tensors are slots, as before), that only gives
the tensor a producer in the plan graph.

Helpers for passes: ``topological`` (a total order honouring data and control edges),
``replace`` (reroute uses of tensors/ops, recording which user-visible names were merged
into which), ``set_input`` (one consumer's input), ``add_node`` (a new node, created
through ``apply_op`` so attrs and shapes are checked) and ``reprune`` (drop nodes that no
fetch or target needs any more).
"""

from __future__ import annotations

import heapq
import itertools

from tensorweave.framework.graph import Graph, Operation, Tensor, apply_op
from tensorweave.passes.prune import prune

# Pass stages, in the order a plan build runs them (see docs/plugins.md).
STAGES = ("prune", "pre_placement", "post_placement", "post_partition")


def _copy_op(pg: Graph, op: Operation, inputs) -> Operation:
    # Built field by field (no shape function, no attr checks): the original was checked
    # when the user built it, and a 2000-node plan copies in a few milliseconds this way.
    new = Operation.__new__(Operation)
    new._graph = pg
    new._name = op._name
    new._op_def = op._op_def
    new._inputs = tuple(inputs)
    new._control_inputs = []
    new._attrs = dict(op._attrs)
    new._device = op._device
    new._id = op._id
    for name in _OP_EXTRA:  # fields other engineers add to Operation come along too
        v = getattr(op, name, _MISSING)
        if v is not _MISSING:
            setattr(new, name, v)
    outs = []
    for t in op._outputs:
        c = Tensor.__new__(Tensor)
        c._op, c._value_index, c._dtype, c._shape, c._name = new, t._value_index, t._dtype, t._shape, t._name
        for name in _TENSOR_EXTRA:
            v = getattr(t, name, _MISSING)
            if v is not _MISSING:
                setattr(c, name, v)
        outs.append(c)
    new._outputs = outs
    pg._nodes.append(new)
    pg._by_name[new._name] = new
    return new


_MISSING = object()
_OP_EXTRA = tuple(s for s in Operation.__slots__ if s not in {
    "_graph", "_name", "_op_def", "_inputs", "_control_inputs", "_attrs", "_outputs", "_device", "_id",
    "__weakref__"})
_TENSOR_EXTRA = tuple(s for s in Tensor.__slots__ if s not in {
    "_op", "_value_index", "_dtype", "_shape", "_name", "__weakref__"})


def build(plan) -> None:
    """Copy ``plan.nodes`` (user operations) into ``plan.graph``; remap feeds/fetches/targets.

    Sets ``plan.graph``, ``plan.origin`` ({plan op: user op}) and ``plan.stubs``.
    """
    user_graph = plan.source_graph
    pg = Graph()
    pg.seed = user_graph.seed
    pg.source_graph = user_graph
    # New nodes a pass adds get names no user node has.
    pg._names_in_use = dict(user_graph._names_in_use)
    tmap: dict = {}
    omap: dict = {}
    stubs = []

    def stub_op(op):
        s = omap.get(op)
        if s is None:
            s = omap[op] = _copy_op(pg, op, ())
            stubs.append(s)
            for a, b in zip(op._outputs, s._outputs):
                tmap[a] = b
        return s

    def stub_for(t):
        stub_op(t.op)
        return tmap[t]

    nodes = plan.nodes
    for op in nodes:
        new = omap[op] = _copy_op(pg, op, ())
        for a, b in zip(op._outputs, new._outputs):
            tmap[a] = b
    # Inputs second: a loop's Merge takes its NextIteration input from a later node.
    for op in nodes:
        new = omap[op]
        if op._inputs:
            new._inputs = tuple(tmap[t] if t in tmap else stub_for(t) for t in op._inputs)
        if op._control_inputs:
            new._control_inputs = [omap[c] if c in omap else stub_op(c) for c in op._control_inputs]
    pg._version = 1
    plan.graph = pg
    plan.origin = {v: k for k, v in omap.items()}
    plan.stubs = stubs
    plan.nodes = [omap[op] for op in nodes]
    plan.feeds = [tmap[t] if t in tmap else stub_for(t) for t in plan.feeds]
    plan.fetches = [tmap[t] if t in tmap else stub_for(t) for t in plan.fetches]
    plan.targets = [omap[op] if op in omap else stub_op(op) for op in plan.targets]


def topological(nodes) -> list:
    """``nodes`` in an order where every data and control input among them comes first;
    ties by creation order."""
    node_set = set(nodes)
    indeg = {}
    succ: dict = {op: [] for op in nodes}
    for op in nodes:
        ps = {t.op for t in op._inputs if t.op in node_set}
        ps.update(c for c in op._control_inputs if c in node_set)
        ps.discard(op)
        indeg[op] = len(ps)
        for p in ps:
            succ[p].append(op)
    counter = itertools.count()
    heap = [(op._id, next(counter), op) for op in nodes if indeg[op] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, _, op = heapq.heappop(heap)
        out.append(op)
        for m in succ[op]:
            indeg[m] -= 1
            if indeg[m] == 0:
                heapq.heappush(heap, (m._id, next(counter), m))
    if len(out) != len(nodes):
        # A cycle (a loop's back edge): the rest in creation order. Passes only ever merge
        # or fold less for it, never wrongly.
        seen = set(out)
        out.extend(sorted((op for op in nodes if op not in seen), key=lambda o: o._id))
    return out


def replace(plan, tensors: dict | None = None, ops: dict | None = None) -> None:
    """Reroute every use of ``tensors`` keys to their values and every control dependency on
    ``ops`` keys to their values, in ``plan.nodes``, the fetches and the targets. The old
    nodes stay in the graph until ``reprune`` drops them; their names are remembered in
    ``plan.aliases`` so placement reports still name them."""
    tensors = tensors or {}
    ops = ops or {}
    if not tensors and not ops:
        return
    for op in plan.nodes:
        if tensors and any(t in tensors for t in op._inputs):
            op._inputs = tuple(tensors.get(t, t) for t in op._inputs)
        if ops and op._control_inputs:
            new = []
            for c in op._control_inputs:
                c = ops.get(c, c)
                if c not in new and c is not op:
                    new.append(c)
            op._control_inputs = new
    plan.fetches = [tensors.get(t, t) for t in plan.fetches]
    plan.targets = [ops.get(o, o) for o in plan.targets]
    for old, new in ops.items():
        plan.aliases[old.name] = new.name
    for old, new in tensors.items():
        plan.aliases.setdefault(old.op.name, new.op.name)
    plan.graph._version += 1


def set_input(op: Operation, index: int, tensor: Tensor) -> None:
    """Make input ``index`` of plan node ``op`` read ``tensor``."""
    ins = list(op._inputs)
    ins[index] = tensor
    op._inputs = tuple(ins)
    op._graph._version += 1


def add_node(plan, op_type: str, inputs=(), attrs=None, name: str | None = None,
             device: str = "", order: float | None = None):
    """Add a node to the plan graph (checked like any node) and to ``plan.nodes``; returns
    its Operation. A node added after placement must also be given a device in
    ``plan.device_of``.

    ``order`` is its place in creation order (the tie-breaker of the schedule), e.g. just
    after the node it derives from (``producer._id + 0.5``); default: after every node."""
    pg = plan.graph
    with pg.as_default(), pg.name_scope(None), pg.control_dependencies(None), pg.device(device or None):
        out = apply_op(op_type, list(inputs), attrs or {}, name=name, graph=pg)
    op = out if isinstance(out, Operation) else (out[0].op if isinstance(out, tuple) else out.op)
    if order is None:
        order = max((n._id for n in plan.nodes), default=0) + 1
    op._id = order
    plan.nodes.append(op)
    return op


def readers(nodes) -> dict:
    """Who reads what among ``nodes``: tensor -> the nodes that take it as an input, and
    op -> the nodes that have it as a control input."""
    out: dict = {}
    for op in nodes:
        for t in op._inputs:
            out.setdefault(t, []).append(op)
        for c in op._control_inputs:
            out.setdefault(c, []).append(op)
    return out


def reprune(plan) -> None:
    """Keep only the plan nodes the fetches and targets still need (after rewrites)."""
    plan.nodes = prune(plan.fetches, plan.targets, plan.feeds)
