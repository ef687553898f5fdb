"""Scheduling of Recv nodes (whitepaper 5.2): start a transfer only shortly before it is needed.

Every Recv is ready when a step starts, so without this a device receives all its inputs
as soon as their producers finish, and a big tensor consumed late holds the destination's
memory the whole time. After partitioning (stage ``post_partition``) this pass estimates,
with the session's cost model, the as-soon-as-possible (ASAP) and as-late-as-possible
(ALAP) start of every node of the whole plan, with each transfer as a node of its own
(cost: ``transfer_time``). For each Recv of a big tensor (``MIN_BYTES`` or more, or of
unknown size) whose ALAP start is later than its ASAP start, it picks the local node on the
destination device that ASAP finishes latest while still finishing, in the ALAP schedule,
no later than the Recv's ALAP start, and makes the Recv wait for it
(``Transfer.wait_for``; the executor adds the edge, ``Partition.to_graph_def`` shows it as
a control input). The value then arrives about when its consumer is ready, and the
executor frees it after its last consumer, so fewer such values are alive at once.

Why no deadlock: every original edge u -> v has ALAP(u) + cost(u) <= ALAP(v), and every
added edge m -> recv has ALAP(m) + cost(m) <= ALAP(recv); costs are positive, so ALAP start
strictly increases along every path and the graph with the new edges has no cycle. A Send
never blocks, so delaying a Recv can only delay its own consumers.

``GraphOptions.enable_recv_scheduling`` (on by default) turns it off; plans with
control-flow frames are left alone (their Recvs are per iteration).
"""

from __future__ import annotations

import bisect

from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS

# Smaller values are cheap to hold; delaying their Recv could only cost latency.
MIN_BYTES = 64 * 1024
_MIN_COST = 1e-9  # every node takes some time: keeps the ALAP order strict


def _executed(op) -> bool:
    """Nodes the executor runs as steps (constants and variables are not steps)."""
    return op.type != "Const" and not op.op_def.outputs_ref


def schedule_recvs(nodes, parts: dict, device_of: dict, feeds, cost_model, kernels) -> int:
    """Set ``wait_for`` on the Recvs of ``parts`` that can start later; returns how many."""
    fed = set(feeds)
    node_set = set(nodes)
    recvs = [(dev, r) for dev, p in parts.items() for r in p.recvs]
    if not recvs:
        return 0
    # The global graph: plan nodes plus one node per transfer.
    transfer_of = {(r.tensor if r.tensor is not None else r.control_op, r.dst): r for _d, r in recvs}
    preds: dict = {}
    cost: dict = {}
    for op in nodes:
        dev = device_of[op]
        cost[op] = max(cost_model.compute_time(op, dev, kernels), _MIN_COST)
        ps = []
        for t in op._inputs:
            if t in fed or t.op not in node_set:
                continue
            r = transfer_of.get((t, dev)) if device_of[t.op] is not dev else None
            ps.append(r if r is not None else t.op)
        for c in op._control_inputs:
            if c not in node_set:
                continue
            r = transfer_of.get((c, dev)) if device_of[c] is not dev else None
            ps.append(r if r is not None else c)
        preds[op] = ps
    for _d, r in recvs:
        src_node = r.tensor.op if r.tensor is not None else r.control_op
        nbytes = cost_model.tensor_bytes(r.tensor) if r.tensor is not None else 0
        cost[r] = max(cost_model.transfer_time(nbytes, r.src, r.dst), _MIN_COST)
        preds[r] = [src_node]
    order = _topological(preds)
    if order is None:
        return 0  # a cycle: the executor will report it
    asap: dict = {}
    for n in order:
        asap[n] = max((asap[p] + cost[p] for p in preds[n]), default=0.0)
    end = max((asap[n] + cost[n] for n in order), default=0.0)
    succ: dict = {n: [] for n in order}
    for n in order:
        for p in preds[n]:
            succ[p].append(n)
    alap: dict = {}
    for n in reversed(order):
        alap[n] = min((alap[s] for s in succ[n]), default=end) - cost[n]

    count = 0
    for p in parts.values():
        local = sorted((op for op in p.nodes if _executed(op)), key=lambda op: asap[op] + cost[op])
        finish = [asap[op] + cost[op] for op in local]
        for r in p.recvs:
            if r.tensor is None:
                continue
            size = cost_model.static_tensor_bytes(r.tensor) if r.tensor.shape.is_fully_defined() else None
            if size is not None and size < MIN_BYTES:
                continue
            latest = alap[r]
            if latest <= asap[r]:
                continue  # on the critical path: start it as soon as possible
            # The local node finishing latest (ASAP) that also finishes, ALAP, before the
            # Recv's ALAP start; one finishing before the Recv could start anyway is no use.
            anchor = None
            for i in range(bisect.bisect_right(finish, latest) - 1, -1, -1):
                if finish[i] <= asap[r]:
                    break
                m = local[i]
                if alap[m] + cost[m] <= latest:
                    anchor = m
                    break
            if anchor is not None:
                r.wait_for.append(anchor)
                count += 1
    return count


def _topological(preds: dict):
    indeg = {n: 0 for n in preds}
    succ: dict = {n: [] for n in preds}
    for n, ps in preds.items():
        for p in ps:
            if p in indeg:
                succ[p].append(n)
                indeg[n] += 1
    ready = [n for n, d in indeg.items() if d == 0]
    out = []
    while ready:
        n = ready.pop()
        out.append(n)
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    return out if len(out) == len(preds) else None


def recv_scheduling_pass(plan) -> None:
    """Registered as ``recv_scheduling`` (stage ``post_partition``)."""
    opts = getattr(plan.config, "graph_options", None)
    if opts is not None and not getattr(opts, "enable_recv_scheduling", True):
        return
    parts = plan.graph_parts
    if len(parts) < 2 or any(op.type in CONTROL_FLOW_OPS for op in plan.nodes):
        return
    schedule_recvs(plan.nodes, parts, plan.device_of, plan.feeds, plan.cost_model, plan.kernels)

