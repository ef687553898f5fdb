"""Device placement: choose a device for every node of a plan (whitepaper 3.2.1).

This placer handles feasibility: a node may go only to devices that match its ``tw.device``
constraint and have a kernel for it; nodes that reference a variable (Assign, ...) go where
the variable is. Among feasible devices it prefers the order the devices were created in
(CPU first). Cost-based greedy placement across many devices builds on this.
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.runtime.executor import flat_input_is_ref


class _UnionFind:
    def __init__(self):
        self.parent = {}

    def find(self, x):
        p = self.parent.setdefault(x, x)
        if p is not x:
            p = self.parent[x] = self.find(p)
        return p

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def colocation_groups(nodes) -> _UnionFind:
    """Nodes that must share a device: a variable and every op that takes it by reference."""
    uf = _UnionFind()
    for op in nodes:
        uf.find(op)
        for t, ref in zip(op.inputs, flat_input_is_ref(op)):
            if ref:
                uf.union(t.op, op)
    return uf


def feasible_devices(op, devices, kernels, allow_soft_placement=False):
    spec = DeviceSpec.from_string(op.device)
    ok_kernel = [d for d in devices if kernels.lookup(op.type, d.device_type, op._attrs) is not None]
    matching = [d for d in ok_kernel if spec.matches(d.spec)]
    if matching or not allow_soft_placement:
        return matching, spec, ok_kernel
    return ok_kernel, spec, ok_kernel


def place(nodes, devices, kernels, config=None) -> dict:
    """Map each node to a Device; InvalidArgumentError when a constraint cannot be met."""
    soft = bool(getattr(config, "allow_soft_placement", False))
    uf = colocation_groups(nodes)
    groups: dict = {}
    for op in nodes:
        groups.setdefault(uf.find(op), []).append(op)
    placement = {}
    for members in groups.values():
        candidates = None
        for op in members:
            feas, spec, with_kernel = feasible_devices(op, devices, kernels, soft)
            if not feas:
                existing = [d for d in devices if spec.matches(d.spec)]
                if not existing:
                    raise errors.InvalidArgumentError(
                        f"cannot assign a device for {op.type} node '{op.name}': its device "
                        f"specification '{op.device}' matches no device; available: "
                        f"{[d.name for d in devices]}", node_def=op.name, op=op)
                kernels.find(op, existing[0].device_type)  # raises NotFound naming what exists
                raise errors.InvalidArgumentError(
                    f"cannot assign a device for {op.type} node '{op.name}': no kernel on {[d.name for d in existing]}",
                    node_def=op.name, op=op)
            candidates = feas if candidates is None else [d for d in candidates if d in feas]
            if not candidates:
                names = [f"'{m.name}' ({m.device or 'any device'})" for m in members]
                raise errors.InvalidArgumentError(
                    f"cannot colocate nodes {', '.join(names)}: they must share a device (a variable "
                    "and the ops that update it), but no device satisfies all their constraints",
                    node_def=op.name, op=op)
        for op in members:
            placement[op] = candidates[0]
    return placement


class DefaultPlacer:
    """The registered ``default`` placer."""

    name = "default"

    def place(self, nodes, devices, kernels, config=None, cost_model=None) -> dict:
        return place(nodes, devices, kernels, config)
