"""Pruning (whitepaper 4.2): keep only the nodes the fetches and targets need.

Fed tensors cut the graph: the producer of a fed tensor runs only if some other output of it
is needed. A needed Placeholder that is not fed is an error raised here, before anything runs.
"""

from __future__ import annotations

from tensorweave.framework import errors


def prune(fetch_tensors, target_ops, feed_tensors) -> list:
    """The needed operations, in creation order."""
    fed = set(feed_tensors)
    needed = set()
    stack = [t.op for t in fetch_tensors if t not in fed] + list(target_ops)
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        for t in op.inputs:
            if t not in fed and t.op not in needed:
                stack.append(t.op)
        for c in op.control_inputs:
            if c not in needed:
                stack.append(c)
    for op in needed:
        if op.type == "Placeholder":
            t = op.outputs[0]
            raise errors.InvalidArgumentError(
                f"you must feed a value for placeholder tensor '{t.name}' with dtype "
                f"{t.dtype.name} and shape {t.shape}", node_def=op.name, op=op)
    return sorted(needed, key=lambda o: o._id)


def prune_pass(plan) -> None:
    """Registered as the first graph pass: fills ``plan.nodes``."""
    plan.nodes = prune(plan.fetches, plan.targets, plan.feeds)
