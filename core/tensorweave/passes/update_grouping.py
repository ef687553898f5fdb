"""Update grouping: the ApplyGradientDescent nodes of a step that update distinct variables on
one device with the same learning rate become one ``_GroupedApplyGradientDescent`` node, so
the device runs one update kernel per step instead of one per variable (an accelerator's
launches are what a small model's step costs; PyTorch's "foreach" optimizers do the same).

Runs on the plan graph after placement (stage ``post_placement``, after element-wise
fusion), for devices whose type has a kernel for the grouped op (a device plugin registers
one when one launch over several variables is cheaper for it than several launches).
``GraphOptions.enable_update_grouping`` turns it off; ``TENSORWEAVE_UPDATE_GROUPING=0``/``1``
overrides the config.

**Which nodes.** An ApplyGradientDescent node is a candidate when its variable input comes
straight from a variable node, it has no control inputs, its output is neither fetched nor
read by any node (the optimizer's updates are only waited for, through control edges) and its
device has the kernel. Candidates group by (device, control-flow frame, ``alpha`` tensor,
dtype, ``use_locking``); a variable appears once in a group; a candidate that depends on
another candidate of its group (through any data or control path) stays alone, so the
grouped node adds no cycle. Groups of two or more become one node (at most ``MAX_GROUP``
variables each) that takes the members' control dependents; the members leave the plan.

**Semantics.** Each variable gets exactly the value its own update would have given: the
grouped kernel applies ``var -= alpha * delta`` per variable, holding every member's lock
(in the fixed order of ``StoreUpdate``), as the members would each have held their own.
"""

from __future__ import annotations

from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS
from tensorweave.ops.training_ops import GROUPED_GD
from tensorweave.passes import graph_option, plan_graph
from tensorweave.passes.partition import control_flow_frames

ENV_SWITCH = "TENSORWEAVE_UPDATE_GROUPING"
# Variables per grouped node: a kernel takes three buffers per variable, and OpenCL devices
# need only accept 1 KiB of kernel arguments.
MAX_GROUP = 16
_VARIABLE_OPS = frozenset({"Variable", "VariableV2"})


def enabled(config) -> bool:
    return graph_option(config, "enable_update_grouping", ENV_SWITCH)


def update_grouping_pass(plan) -> None:
    """Registered as ``update_grouping`` (stage ``post_placement``)."""
    if not enabled(plan.config):
        return
    groups = _candidates(plan)
    if not groups:
        return
    readers = plan_graph.readers(plan.nodes)
    made = 0
    for (dev, *_), members in groups.items():
        members = _independent(members, readers)
        for i in range(0, len(members), MAX_GROUP):
            chunk = members[i:i + MAX_GROUP]
            if len(chunk) > 1:
                _group(plan, dev, chunk)
                made += 1
    if made:
        plan_graph.reprune(plan)


def _candidates(plan) -> dict:
    """(device, frame, alpha, dtype, use_locking) -> candidate nodes, in plan order."""
    applies = [op for op in plan.nodes if op._op_def.name == "ApplyGradientDescent"]
    if len(applies) < 2:
        return {}
    read = {t for op in plan.nodes for t in op._inputs}
    read.update(plan.fetches)
    frame_of = {}
    if any(op._op_def.name in CONTROL_FLOW_OPS for op in plan.nodes):
        frame_of, _ = control_flow_frames(plan.nodes, plan.feeds)
    has_kernel: dict = {}
    groups: dict = {}
    seen_vars: dict = {}
    for op in applies:
        var, alpha, _ = op._inputs
        dev = plan.device_of.get(op)
        if (dev is None or op._control_inputs or op._outputs[0] in read
                or var.op.type not in _VARIABLE_OPS):
            continue
        dtype, locking = op._attrs["T"], op._attrs.get("use_locking", False)
        key = (dev.device_type, dtype)
        if key not in has_kernel:
            has_kernel[key] = plan.kernels.lookup(GROUPED_GD, dev.device_type, {"T": dtype}) is not None
        if not has_kernel[key]:
            continue
        gkey = (dev, frame_of.get(op, ""), alpha, dtype, locking)
        if var.op in seen_vars.setdefault(gkey, set()):
            continue  # the same variable twice: its updates stay apart, in their order
        seen_vars[gkey].add(var.op)
        groups.setdefault(gkey, []).append(op)
    return {k: v for k, v in groups.items() if len(v) > 1}


def _independent(members, readers) -> list:
    """The members that no member reaches through data or control edges."""
    def after(op):
        return [r for t in op._outputs for r in readers.get(t, ())] + readers.get(op, [])

    reached, stack = set(), [c for m in members for c in after(m)]
    while stack:
        op = stack.pop()
        if op in reached:
            continue
        reached.add(op)
        stack.extend(after(op))
    return [m for m in members if m not in reached]


def _group(plan, dev, members) -> None:
    first = members[0]
    alpha = first._inputs[1]
    attrs = {"T": first._attrs["T"], "N": len(members), "use_locking": first._attrs.get("use_locking", False),
             "names": [m.name for m in members]}  # errors name the user's update node
    node = plan_graph.add_node(plan, GROUPED_GD, [[m._inputs[0] for m in members], alpha,
                                                  [m._inputs[2] for m in members]],
                               attrs, name=f"{first.name}/grouped", device=first._device,
                               order=max(m._id for m in members))
    plan.device_of[node] = dev
    removed = set(members)
    plan.nodes = [op for op in plan.nodes if op not in removed]
    plan_graph.replace(plan, ops={m: node for m in members})
