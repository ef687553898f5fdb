"""Partitioning (whitepaper 3.2.2): split a placed plan into one subgraph per device.

Every edge whose producer and consumer are on different devices becomes a Send/Recv pair:
one ``Transfer`` per (tensor, destination device), however many consumers the tensor has
there (Figure 4). A control edge across devices becomes a Send/Recv of an empty token, so
the consumer still waits for the producer. Fed tensors need no transfer: each partition
that consumes one is fed directly.

Partitions reference the user's Operations (nothing is added to the user's graph); the
executor compiles Send/Recv steps from the transfers, and ``Partition.to_graph_def``
writes a partition as a GraphDef with explicit ``_Send``/``_Recv`` nodes for the
distributed runtime (their definitions and attrs: ``ops/transfer_ops.py``; a worker rebuilds
each ``Transfer`` from them with ``Transfer.from_attrs``).
"""

from __future__ import annotations

import dataclasses

from tensorweave.framework import dtypes, errors
from tensorweave.framework.serialization import GRAPH_DEF_VERSION, node_to_dict
from tensorweave.ops import transfer_ops


@dataclasses.dataclass(eq=False)
class Transfer:
    """One Send/Recv pair. ``tensor`` is None for a control edge (then ``control_op`` is set)."""

    tensor: object
    src: object        # Device
    dst: object        # Device
    control_op: object = None
    frame: str = ""    # the control-flow frame of the value ("" = root): keys carry frame and iteration
    cond_of: str | None = None  # set when this carries the predicate of loop frame ``cond_of``
    # Which iterations of ``frame`` carry a value: "all"; "first" for a (non-constant) Enter's
    # output, which exists in iteration 0 only; "later" for a NextIteration's (iterations 1+).
    iterations: str = "all"
    # Local nodes of the destination the Recv must wait for (set by recv scheduling).
    wait_for: list = dataclasses.field(default_factory=list)
    # The name both sides key the value by, when it differs from the tensor's own name (a
    # worker's copy of a partition names its Recv nodes differently).
    key_name: str | None = None

    @property
    def name(self) -> str:
        """What the rendezvous key calls the value: the tensor's name, or ^op for a control edge."""
        if self.key_name is not None:
            return self.key_name
        return self.tensor.name if self.tensor is not None else "^" + self.control_op.name

    @property
    def key(self) -> str:
        return f"{self.src.name};{self.dst.name};{self.name}"

    def attrs(self) -> transfer_ops.TransferAttrs:
        """What this transfer's ``_Send``/``_Recv`` nodes say: enough for a worker to rebuild it."""
        return transfer_ops.TransferAttrs(
            tensor_name=self.name, send_device=self.src.name, recv_device=self.dst.name,
            tensor_type=self.tensor.dtype if self.tensor is not None else dtypes.float32,
            control=self.tensor is None, frame_name=self.frame, iterations=self.iterations,
            loop_cond_of=self.cond_of or "")

    @classmethod
    def from_attrs(cls, a: transfer_ops.TransferAttrs, tensor, src, dst, control_op=None) -> Transfer:
        """The transfer a worker rebuilds from a ``_Send``/``_Recv`` node's attrs ``a``."""
        return cls(tensor, src, dst, control_op, frame=a.frame_name, cond_of=a.loop_cond_of or None,
                   iterations=a.iterations, key_name=a.tensor_name)


@dataclasses.dataclass
class LoopSpec:
    """A loop frame with nodes on several devices: each of those partitions drives it."""

    parent: str
    parallel_iterations: int = 10


@dataclasses.dataclass(eq=False)
class Partition:
    device: object
    nodes: list = dataclasses.field(default_factory=list)
    recvs: list = dataclasses.field(default_factory=list)   # Transfers arriving here
    sends: list = dataclasses.field(default_factory=list)   # Transfers leaving from here
    loops: dict = dataclasses.field(default_factory=dict)   # frame name -> LoopSpec (driven here)

    def to_graph_def(self, arrays: bool = False) -> dict:
        """This partition as a GraphDef: its nodes plus ``_Send``/``_Recv`` nodes (``arrays``:
        tensor values as ndarrays, the in-memory form the wire sends as frames)."""
        recv_name = {}
        out = []
        for r in self.recvs:
            name = f"_recv_{len(recv_name)}"
            recv_name[(r.tensor if r.tensor is not None else r.control_op)] = name
            out.append({"name": name, "op": transfer_ops.RECV, "input": ["^" + w.name for w in r.wait_for],
                        "device": self.device.name, "attr": transfer_ops.encode_attrs(r.attrs())})
        for op in self.nodes:
            d = node_to_dict(op, arrays)
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
            out.append({"name": f"_send_{i}", "op": transfer_ops.SEND,
                        "input": [src] if src else ["^" + s.control_op.name], "device": self.device.name,
                        "attr": transfer_ops.encode_attrs(s.attrs())})
        return {"versions": {"producer": GRAPH_DEF_VERSION}, "node": out}


def control_flow_frames(nodes, feeds=()) -> tuple[dict, dict]:
    """(op -> frame name, frame name -> parent frame name) for a plan ("" is the root frame).

    An op is in the frame of its inputs' producers, except that Enter's output is in the
    frame it names and Exit's output is in the parent of Exit's frame.
    """
    fed = set(feeds)
    in_plan = set(nodes)
    consumers: dict = {op: [] for op in nodes}
    has_input = set()
    for op in nodes:
        for t in op.inputs:
            if t not in fed and t.op in in_plan:
                consumers[t.op].append(op)
                has_input.add(op)
        for c in op.control_inputs:
            if c in in_plan:
                consumers[c].append(op)
                has_input.add(op)
    frame_of = {op: "" for op in nodes if op not in has_input}
    parent_of: dict = {}
    queue = list(frame_of)
    while queue:
        op = queue.pop()
        f = frame_of[op]
        if op.type == "Enter":
            out = op.get_attr("frame_name")
            parent_of.setdefault(out, f)
        elif op.type == "Exit":
            out = parent_of.get(f, "")
        else:
            out = f
        for c in consumers[op]:
            if c not in frame_of:
                frame_of[c] = out
                queue.append(c)
    for op in nodes:
        frame_of.setdefault(op, "")
    return frame_of, parent_of


def partition(nodes, placement: dict, feeds) -> dict:
    """device -> Partition, for a plan whose ``nodes`` were placed by ``placement``."""
    fed = set(feeds)
    parts: dict = {}

    def part(dev):
        p = parts.get(dev)
        if p is None:
            p = parts[dev] = Partition(dev)
        return p

    has_loops = any(op.type == "Enter" for op in nodes)
    frame_of, parent_of = control_flow_frames(nodes, feeds) if has_loops else ({}, {})
    transfers: dict = {}

    def transfer(tensor, src, dst, control_op=None):
        key = (tensor if tensor is not None else control_op, dst)
        tr = transfers.get(key)
        if tr is None:
            what = tensor.op if tensor is not None else control_op
            tr = transfers[key] = Transfer(tensor, src, dst, control_op, _output_frame(what, frame_of, parent_of))
            if what.type == "NextIteration":
                tr.iterations = "later"
            elif what.type == "Enter" and not what.get_attr("is_constant"):
                tr.iterations = "first"
            part(src).sends.append(tr)
            part(dst).recvs.append(tr)
        return tr

    for op in nodes:
        dst = placement[op]
        part(dst).nodes.append(op)
        for t in op.inputs:
            if t in fed:
                continue
            src = placement[t.op]
            if src is not dst:
                transfer(t, src, dst)
        for c in op.control_inputs:
            src = placement.get(c)
            if src is not None and src is not dst:
                transfer(None, src, dst, control_op=c)
    if has_loops:
        _add_loop_control(nodes, placement, frame_of, parent_of, part, transfer)
    return parts


def _add_loop_control(nodes, placement, frame_of, parent_of, part, transfer):
    """Loops whose nodes sit on several devices: every partition with nodes of such a frame
    (or of a frame nested in it) drives the frame itself, from the loop predicate, which the
    LoopCond's partition sends to each of them every iteration (see runtime/frames.py)."""
    devices_of: dict = {}
    loop_cond: dict = {}
    par: dict = {}
    for op in nodes:
        f = frame_of[op]
        if f:
            devices_of.setdefault(f, set()).add(placement[op])
        if op.type == "LoopCond":
            loop_cond[f] = op
        elif op.type == "Enter":
            # An Enter's outputs live in the child frame: a loop invariant sent from its device
            # must be sent again in every iteration, so that device drives the frame too.
            child = op.get_attr("frame_name")
            par[child] = max(1, int(op.get_attr("parallel_iterations")))
            devices_of.setdefault(child, set()).add(placement[op])
    # A frame is present wherever a frame nested in it is.
    for f in sorted(devices_of, key=lambda name: -_depth(name, parent_of)):
        parent = parent_of.get(f, "")
        if parent:
            devices_of.setdefault(parent, set()).update(devices_of[f])
    for f, devs in devices_of.items():
        if len(devs) < 2:
            continue
        cond = loop_cond.get(f)
        if cond is None:
            raise errors.InvalidArgumentError(
                f"control-flow frame '{f}' spans devices {sorted(d.name for d in devs)} but has no "
                "LoopCond node in this plan")
        src = placement[cond]
        for dev in devs:
            part(dev).loops[f] = LoopSpec(parent_of.get(f, ""), par.get(f, 10))
            if dev is not src:
                transfer(cond.outputs[0], src, dev).cond_of = f


def _output_frame(op, frame_of, parent_of) -> str:
    """The frame ``op``'s outputs live in (Enter: its child frame; Exit: the parent frame)."""
    f = frame_of.get(op, "")
    if op.type == "Enter":
        return op.get_attr("frame_name")
    if op.type == "Exit":
        return parent_of.get(f, "")
    return f


def _depth(frame, parent_of) -> int:
    d = 0
    while frame:
        frame = parent_of.get(frame, "")
        d += 1
    return d
