"""Partitioning (whitepaper 3.2.2): split a placed plan into one subgraph per device.

Every edge whose producer and consumer are on different devices becomes a Send/Recv pair:
one ``Transfer`` per (tensor, destination device), however many consumers the tensor has
there (Figure 4). A control edge across devices becomes a Send/Recv of an empty token, so
the consumer still waits for the producer. Fed tensors need no transfer: each partition
that consumes one is fed directly.

Partitions reference the user's Operations (nothing is added to the user's graph); the
executor compiles Send/Recv steps from the transfers, and ``Partition.to_graph_def``
writes a partition as a GraphDef with explicit ``_Send``/``_Recv`` nodes for the
distributed runtime.
"""

from __future__ import annotations

import dataclasses

from tensorweave.framework.serialization import node_to_dict


@dataclasses.dataclass(eq=False)
class Transfer:
    """One Send/Recv pair. ``tensor`` is None for a control edge (then ``control_op`` is set)."""

    tensor: object
    src: object        # Device
    dst: object        # Device
    control_op: object = None

    @property
    def key(self) -> str:
        what = self.tensor.name if self.tensor is not None else "^" + self.control_op.name
        return f"{self.src.name};{self.dst.name};{what}"


@dataclasses.dataclass(eq=False)
class Partition:
    device: object
    nodes: list = dataclasses.field(default_factory=list)
    recvs: list = dataclasses.field(default_factory=list)   # Transfers arriving here
    sends: list = dataclasses.field(default_factory=list)   # Transfers leaving from here

    def to_graph_def(self) -> dict:
        """This partition as a GraphDef: its nodes plus ``_Send``/``_Recv`` nodes."""
        recv_name = {}
        out = []
        for r in self.recvs:
            name = f"_recv_{len(recv_name)}"
            recv_name[(r.tensor if r.tensor is not None else r.control_op)] = name
            out.append({"name": name, "op": "_Recv", "input": [], "device": self.device.name,
                        "attr": {"tensor_name": {"s": r.key.rsplit(";", 1)[1]}, "send_device": {"s": r.src.name},
                                 "recv_device": {"s": r.dst.name},
                                 "tensor_type": {"type": (r.tensor.dtype.name if r.tensor is not None else "float32")}}})
        for op in self.nodes:
            d = node_to_dict(op)
            inputs = []
            for t in op.inputs:
                inputs.append(f"{recv_name[t]}:0" if t in recv_name else t.name)
            for c in op.control_inputs:
                inputs.append("^" + (recv_name[c] if c in recv_name else c.name))
            d["input"] = inputs
            d["device"] = self.device.name
            out.append(d)
        for i, s in enumerate(self.sends):
            src = s.tensor.name if s.tensor is not None else None
            out.append({"name": f"_send_{i}", "op": "_Send",
                        "input": [src] if src else ["^" + s.control_op.name], "device": self.device.name,
                        "attr": {"tensor_name": {"s": s.key.rsplit(";", 1)[1]}, "send_device": {"s": s.src.name},
                                 "recv_device": {"s": s.dst.name}}})
        return {"versions": {"producer": 1}, "node": out}


def partition(nodes, placement: dict, feeds) -> dict:
    """device -> Partition, for a plan whose ``nodes`` were placed by ``placement``."""
    fed = set(feeds)
    parts: dict = {}

    def part(dev):
        p = parts.get(dev)
        if p is None:
            p = parts[dev] = Partition(dev)
        return p

    transfers: dict = {}
    for op in nodes:
        dst = placement[op]
        part(dst).nodes.append(op)
        for t in op.inputs:
            if t in fed:
                continue
            src = placement[t.op]
            if src is not dst and (t, dst) not in transfers:
                tr = transfers[(t, dst)] = Transfer(t, src, dst)
                part(src).sends.append(tr)
                part(dst).recvs.append(tr)
        for c in op.control_inputs:
            src = placement.get(c)
            if src is not None and src is not dst and (c, dst) not in transfers:
                tr = transfers[(c, dst)] = Transfer(None, src, dst, control_op=c)
                part(src).sends.append(tr)
                part(dst).recvs.append(tr)
    return parts
