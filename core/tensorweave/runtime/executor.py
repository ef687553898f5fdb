"""The executor: runs one device partition of an execution plan (whitepaper 3.1).

Everything that can be decided when a plan is built is decided here, once: which nodes run,
their kernels, the slot each input is read from, consumers, the schedule, where dead
intermediates are dropped. Per step, the work left is one pass over a flat list of steps.

Two ways to run a compiled partition:

* **sequential** — the pending-count / ready-queue schedule (ties broken by node creation
  order, the whitepaper 4.1 memory heuristic) is computed at plan time, so a step is a tight
  loop over ``(kernel, input slots, output slot)`` tuples. Used when every kernel is
  synchronous and there is no parallelism worth a thread hop.
* **dynamic** — pending counts and a ready queue at run time; cheap nodes run inline,
  expensive ones (by cost estimate) go to the inter-op thread pool, async kernels get a
  ``done`` continuation instead of a blocked thread (5.3).

Variable nodes do not run: a consumer that reads a variable gets a read step placed right
before it, so a read after ``control_dependencies([assign])`` sees the assigned value, as with
TF1 reference variables. Ops with a ``Ref`` input (Assign, ...) get the variable's store
bound at plan time instead of a value.
"""

from __future__ import annotations

import functools
import heapq
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tensorweave.framework import errors
from tensorweave.framework.kernel_registry import KernelContext, KernelDef, call_kernel_factory, passthrough
from tensorweave.framework.op_def import flat_input_is_ref
from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS
from tensorweave.passes import graph_option
from tensorweave.runtime.frames import ROOT, FrameInfo, FrameState
from tensorweave.runtime.rendezvous import make_key
from tensorweave.runtime.step import (
    DEAD,
    K_BINARY,
    K_FREE,
    K_GENERIC,
    K_NULLARY,
    K_UNARY,
    SMALL_BYTES,
    StepContext,
    StepState,
    StepStatsCollector,
    assign_frees,
    enter_loop,
    estimate_flops,
    in_loop,
    leave_loop,
    quiet_floats,
    restore_floats,
    transfer_record,
    wrap_kernel_error,
)

# A node is "expensive" (worth a thread-pool hop) above this estimated flop count: about
# 5 ms of BLAS work. A hop through the pool and back costs tens of microseconds, so smaller
# nodes run faster inline (measured: a 64x128 MLP step was 4.6x slower when its 1-MFLOP
# matmuls went to the pool).
EXPENSIVE_FLOPS = 5e7


class _Node:
    __slots__ = ("op", "fn", "kd", "ins", "outs", "kind", "pre", "consumers", "pending", "transfer",
                 "expensive", "track", "unwrap", "frees",
                 # control-flow facts, set by frames.FrameInfo (read on every activation)
                 "role", "f_out", "f_ctrl", "f_nin", "f_merge")


def _static_nbytes(t) -> int | None:
    if not t.shape.is_fully_defined() or t.dtype.is_string:
        return None
    return t.shape.num_elements() * t.dtype.size


def _reader(store, device):
    """A read of ``store`` for a consumer on ``device`` (``VariableStore.read_on``: a value
    written by a kernel of another device is copied over instead of handing a kernel a
    foreign tensor)."""
    return functools.partial(store.read_on, device)


def _marking_writes(fn, stores, device):
    """Wrap a kernel that updates ``stores``: a value last written by another device is
    moved here first (update kernels read the store themselves), and afterwards the stores
    remember this device."""
    def compute(*args):
        for s in stores:
            src = s.device
            if src is not None and src is not device and src.name != device.name and s.value is not None \
                    and not (src.host_tensors and device.host_tensors):
                s.value = device.copy_from(s.value, src)
                s.device = device
        out = fn(*args)
        for s in stores:
            s.device = device
        return out
    return compute


class _SyntheticOp:
    """Stands in for an Operation for the Send/Recv steps the partitioner adds."""

    __slots__ = ("name", "type", "_id", "inputs", "outputs")

    def __init__(self, name, type_, id_):
        self.name, self.type, self._id = name, type_, id_
        self.inputs, self.outputs = (), ()


_SEND_KD = KernelDef("_Send", "*", None, takes_context=True, source="tensorweave")
_RECV_KD = KernelDef("_Recv", "*", None, is_async=True, source="tensorweave")


def _make_send(key):
    def send(step, value=None):
        step.rendezvous.send(key, value)
    return send


def _make_recv(key, src, dst):
    # The receiving side moves the value onto its device (whitepaper: Recv does the copy).
    same_memory = src.host_tensors and dst.host_tensors

    def recv(step, done):
        def arrived(value, error):
            if error is not None:
                done(None, error)
                return
            try:
                out = value if same_memory or value is None else dst.copy_from(value, src)
            except Exception as e:  # noqa: BLE001 - reported as this node's failure
                done(None, e)
                return
            done(out)
        step.rendezvous.recv_async(key, arrived)
    return recv


class _Compiler:
    """The plan-time steps that turn one device's nodes into a CompiledPartition, in the order
    ``CompiledPartition.__init__`` calls them. Values live in a flat list of slots; every
    node that runs becomes a ``_Node`` with its input and output slots, kernel and consumers.
    """

    def __init__(self, device, kernels, resources, kernel_cache, session):
        self.device, self.kernels, self.resources = device, kernels, resources
        self.kernel_cache, self.session = kernel_cache, session
        self.on_host = device.host_tensors
        self.template: list = []          # initial slot values (constants already in place)
        self.slot_of: dict = {}           # tensor -> slot
        self.fed: dict = {}               # fed tensor -> its slot
        self.host_feed: dict = {}         # fed tensor a kernel wants in host memory -> host slot
        self.executed: list[_Node] = []   # nodes that run, in creation order
        self.node_of_op: dict = {}
        self.const_ops: dict = {}         # Const op -> its (host) value
        self.virtual_ref_ops: set = set()  # Variable ops: they do not run, readers read the store
        self.recv_of: dict = {}           # received tensor (or control op) -> its Recv node
        self.recv_big: set = set()        # slots of received values big enough to free early
        # Slots of variable reads, freed after their last use whatever their size: a read still
        # held would make an update of the variable later in the step copy the variable's
        # tensor instead of writing into it (kernels/state.py, writable()).
        self.var_reads: set = set()
        self.preds: dict = {}             # node -> nodes it waits for
        self.edges: list = []             # (producer, output index or -1, consumer, input position or -1)

    def new_slot(self, value=None) -> int:
        self.template.append(value)
        return len(self.template) - 1

    def allocate_slots(self, nodes, feeds, frame_mode) -> list[int]:
        """Slots for feeds, constants (their value in the template, on the device) and the
        outputs of every node that runs; returns the feed slots."""
        fed, slot_of, device = self.fed, self.slot_of, self.device
        for t in feeds:
            fed[t] = slot_of[t] = self.new_slot()
        for op in nodes:
            if op.op_def.outputs_ref:
                self.virtual_ref_ops.add(op)
                continue
            if op.type == "Const" and not (frame_mode and op.control_inputs):
                # Constants are immutable: their value sits in the slot template, on the device.
                value = self.const_ops[op] = op.get_attr("value")
                for t in op.outputs:
                    if t not in fed:
                        slot_of[t] = self.new_slot(value if self.on_host else device.to_device(value))
                continue
            n = _Node()
            n.op = op
            n.outs = []
            n.transfer = None  # (src, dst, tensor) on the Send/Recv steps added below
            for t in op.outputs:
                if t in fed:
                    n.outs.append(self.new_slot())  # computed but shadowed by the feed
                else:
                    slot_of[t] = self.new_slot()
                    n.outs.append(slot_of[t])
            self.node_of_op[op] = n
            self.executed.append(n)
        return [fed[t] for t in feeds]

    def add_recvs(self, recvs) -> None:
        """A Recv step per incoming Transfer: ready at the start, it completes when the value
        arrives in the step's rendezvous."""
        next_id = -len(recvs) - 1
        for r in recvs:
            n = _Node()
            what = r.name
            n.op = _SyntheticOp(f"_recv[{what} from {r.src.name}]", "_Recv", next_id)
            next_id += 1
            n.kd, n.fn = _RECV_KD, _make_recv(make_key(r.src.name, r.dst.name, what), r.src, r.dst)
            n.transfer = (r.src, r.dst, what)
            n.ins, n.pre, n.outs = [], [], [self.new_slot()]
            n.track = n.expensive = n.unwrap = False
            n.kind = K_GENERIC
            self.recv_of[r.tensor if r.tensor is not None else r.control_op] = n
            self.executed.append(n)
            if r.tensor is not None and (_static_nbytes(r.tensor) or SMALL_BYTES) >= SMALL_BYTES:
                self.recv_big.add(n.outs[0])  # freed after its last consumer, like big outputs

    def connect_inputs(self) -> None:
        """Each node's kernel and input slots: fed values, constants, received values, reads
        of variables (a read step right before the node), host-memory conversions; and the
        dependency edges, data and control."""
        device, fed, recv_of, node_of_op = self.device, self.fed, self.recv_of, self.node_of_op
        preds, edges = self.preds, self.edges
        for n in self.executed:
            preds[n] = set()
        for n in self.executed:
            op = n.op
            if isinstance(op, _SyntheticOp):
                continue
            n.kd = self.kernels.find(op, device.device_type)
            n.ins, n.pre = [], []
            host_in = n.kd.host_inputs(op) if not self.on_host else None
            for i, (t, ref) in enumerate(zip(op.inputs, flat_input_is_ref(op))):
                if ref:
                    continue
                wants_host = host_in is not None and host_in[i]
                if t in fed:
                    if wants_host:
                        if t not in self.host_feed:
                            self.host_feed[t] = self.new_slot()
                        n.ins.append(self.host_feed[t])
                    else:
                        n.ins.append(fed[t])
                    continue
                if wants_host and t.op in self.const_ops:
                    n.ins.append(self.new_slot(self.const_ops[t.op]))
                    continue
                if t in recv_of:
                    src_slot = recv_of[t].outs[0]
                    preds[n].add(recv_of[t])
                    edges.append((recv_of[t], 0, n, i))
                elif t.op in self.virtual_ref_ops:
                    src_slot = self.new_slot()
                    n.pre.append((_reader(self.resources.state_for_op(t.op), device), -1, src_slot))
                    self.var_reads.add(src_slot)
                else:
                    src_slot = self.slot_of[t]
                    if t.op in node_of_op:
                        edges.append((node_of_op[t.op], t.value_index, n, i))
                        if not (t.op.type == "NextIteration" and op.type == "Merge"):  # a loop's back edge
                            preds[n].add(node_of_op[t.op])
                if wants_host:
                    host_slot = self.new_slot()
                    n.pre.append((device.to_host, src_slot, host_slot))
                    src_slot = host_slot
                n.ins.append(src_slot)
            for c in op.control_inputs:
                if c in node_of_op:
                    preds[n].add(node_of_op[c])
                    edges.append((node_of_op[c], -1, n, -1))
                elif c in recv_of:
                    preds[n].add(recv_of[c])
                    edges.append((recv_of[c], -1, n, -1))

    def delay_scheduled_recvs(self, recvs) -> None:
        """Recv scheduling (passes/recv_scheduling.py, whitepaper 5.2): a Recv starts only
        after the local nodes it was told to wait for, so big values arrive when needed."""
        for r in recvs:
            for w in getattr(r, "wait_for", ()):
                if w in self.node_of_op:
                    self.preds[self.recv_of[r.tensor if r.tensor is not None else r.control_op]].add(
                        self.node_of_op[w])

    def add_sends(self, sends) -> None:
        """A Send step per outgoing Transfer, right after the producer (or control op) it carries."""
        for tr in sends:
            n = _Node()
            what = tr.name
            src_op = tr.tensor.op if tr.tensor is not None else tr.control_op
            n.op = _SyntheticOp(f"_send[{what} to {tr.dst.name}]", "_Send", getattr(src_op, "_id", 0) + 0.5)
            n.kd, n.fn = _SEND_KD, _make_send(make_key(tr.src.name, tr.dst.name, what))
            n.transfer = (tr.src, tr.dst, what)
            n.ins, n.pre, n.outs = [], [], []
            n.track = n.expensive = n.unwrap = False
            n.kind = K_GENERIC
            self.preds[n] = set()
            if tr.tensor is not None:
                t = tr.tensor
                if t.op in self.virtual_ref_ops:
                    slot = self.new_slot()
                    n.pre.append((_reader(self.resources.state_for_op(t.op), self.device), -1, slot))
                    n.ins.append(slot)
                    self.var_reads.add(slot)
                else:
                    n.ins.append(self.slot_of[t])
            if src_op in self.node_of_op:
                self.preds[n].add(self.node_of_op[src_op])
                self.edges.append((self.node_of_op[src_op], t.value_index if tr.tensor is not None else -1, n,
                                   0 if tr.tensor is not None else -1))
            self.executed.append(n)

    def construct_kernels(self) -> None:
        """Kernels, constructed once per plan (stateful ones once per session, so e.g. a random
        op's generator state survives plan rebuilds), and each node's step kind."""
        device, resources, cache = self.device, self.resources, self.kernel_cache
        for n in self.executed:
            op = n.op
            if isinstance(op, _SyntheticOp):
                continue
            kd = n.kd
            # By name, not identity: plans run private copies of the user's nodes, rebuilt
            # with every plan, and the kernel (its generator state) must outlive them. And by
            # attrs: another client's graph may hold a node of that name that asks for
            # something else (a worker keeps this cache for every client).
            key = (op.name, device.name, _attrs_key(op))
            if op.op_def.stateful and key in cache:
                n.fn = cache[key]
            else:
                n.fn = call_kernel_factory(kd, KernelContext(op, device, resources, self.session))
                stores = [resources.state_for_op(t.op) for t, ref in zip(op.inputs, flat_input_is_ref(op)) if ref]
                if stores:  # every device, so a CPU write after an accelerator one is seen too
                    n.fn = _marking_writes(n.fn, stores, device)
                if op.op_def.stateful:
                    cache[key] = n.fn
            sizes = [_static_nbytes(t) for t in op.outputs]
            n.track = any(s is None or s >= SMALL_BYTES for s in sizes)
            n.expensive = estimate_flops(op) > EXPENSIVE_FLOPS
            n_out = len(op.outputs)
            # A list output of length one (Split with num_split=1): the kernel may return a
            # 1-tuple, which must not become the tensor's value.
            n.unwrap = n_out == 1 and op.op_def.outputs[0].is_list
            if kd.is_async or kd.takes_context or n_out != 1 or n.track or n.unwrap or len(n.ins) > 2:
                n.kind = K_GENERIC
            else:
                n.kind = len(n.ins)  # K_NULLARY, K_UNARY or K_BINARY: called directly, no wrapper

    def fold_variable_identities(self) -> None:
        """An Identity of a variable (``w/read``, which every Variable has) becomes the read:
        one step instead of a read and a call that returns its input. Its output is then a
        variable's tensor, freed after its last use as the read's was."""
        for n in self.executed:
            if n.kind == K_UNARY and n.fn is passthrough and len(n.pre) == 1 and n.pre[0][1] < 0 \
                    and n.ins == [n.pre[0][2]]:
                n.fn, n.kind, n.ins, n.pre = n.pre[0][0], K_NULLARY, [], []
                self.var_reads.add(n.outs[0])

    def schedule(self) -> list[_Node]:
        """The pending-count / ready-queue order of whitepaper 3.1 (Kahn's algorithm), ready ties
        broken by creation order (4.1's memory heuristic); sets consumers and pending counts."""
        executed, preds = self.executed, self.preds
        succ: dict[_Node, list] = {n: [] for n in executed}
        for n, ps in preds.items():
            for p in ps:
                succ[p].append(n)
        for n in executed:
            n.consumers = sorted(succ[n], key=lambda m: m.op._id)
            n.pending = len(preds[n])
        heap = [(n.op._id, i, n) for i, n in enumerate(executed) if n.pending == 0]
        heapq.heapify(heap)
        remaining = {n: n.pending for n in executed}
        order = []
        while heap:
            _, _, n = heapq.heappop(heap)
            order.append(n)
            for m in n.consumers:
                remaining[m] -= 1
                if remaining[m] == 0:
                    heapq.heappush(heap, (m.op._id, id(m), m))
        if len(order) != len(executed):
            stuck = [n.op.name for n in executed if remaining[n] > 0][:5]
            raise errors.InvalidArgumentError(f"the graph has a cycle; nodes involved include {stuck}")
        return order

    def plan_fetches(self, fetches) -> tuple[list[int], list]:
        """Where each fetch is read from: a fed value, a constant, a computed slot, or a final
        read of a variable (an end read)."""
        slots, end_reads = [], []
        for t in fetches:
            if t in self.fed:
                slots.append(self.fed[t])
            elif t.op in self.virtual_ref_ops:
                slot = self.new_slot()
                end_reads.append((_reader(self.resources.state_for_op(t.op), self.device), slot))
                slots.append(slot)
            else:
                slots.append(self.slot_of[t])
        return slots, end_reads

    def plan_liveness(self, order, fetch_slots) -> tuple[dict, dict]:
        """When big intermediates are dropped: after their last use in the sequential order
        ({position: slots}), and, for dynamic runs (no fixed order), when their last consumer
        finishes (consumers per slot; received values too)."""
        keep = set(fetch_slots)
        last_use: dict[int, int] = {}
        for i, n in enumerate(order):
            for s in n.ins:
                last_use[s] = i
            for _fn, src, _slot in n.pre:  # a host-memory copy made for the node reads it too
                if src >= 0:
                    last_use[src] = i
        # The tensors of variables: their reads, and Identities of them (``w/read``).
        var_tensors = set(self.var_reads)
        for n in order:
            if n.op.type == "Identity" and n.ins and n.ins[0] in var_tensors:
                var_tensors.update(n.outs)
        big_slots = {s for n in order if n.track for s in n.outs} | var_tensors
        used = set(last_use) | {src for n in order for _fn, src, _slot in n.pre if src >= 0}
        frees_after: dict[int, list] = {}
        for s in big_slots - keep:
            if s in last_use:
                frees_after.setdefault(last_use[s], []).append(s)
        # A big output nobody reads (an update's output_ref, run for its effect) is dropped
        # right after it is made, so it does not keep the variable's tensor shared.
        for i, n in enumerate(order):
            for s in n.outs:
                if s in big_slots and s not in keep and s not in used:
                    frees_after.setdefault(i, []).append(s)
        self.freeable = (big_slots | self.recv_big) - keep
        return frees_after, assign_frees(order, self.freeable)

    def encode_steps(self, order, frees_after, end_reads) -> tuple[list, dict, list]:
        """The flat schedule the sequential loop runs: (fn, input slot a, input slot b, step
        kind, output slot, extra) per read, node, free and end read; slot -> node, to name
        the node when a step fails; and for the traced loop, per step, (node, whether the step
        is the node's own kernel call rather than a read before it), or None."""
        steps, slot_node, step_nodes = [], {}, []
        for i, n in enumerate(order):
            for fn, src, slot in n.pre:
                steps.append((fn, src, 0, K_NULLARY if src < 0 else K_UNARY, slot, None))
                step_nodes.append((n, False))
                slot_node[slot] = n
            a = n.ins[0] if n.ins else 0
            b = n.ins[1] if len(n.ins) > 1 else 0
            out = n.outs[0] if n.outs else -1 - i
            slot_node[out] = n
            steps.append((n.fn, a, b, n.kind, out, n if n.kind == K_GENERIC else None))
            step_nodes.append((n, True))
            if i in frees_after:
                steps.append((None, 0, 0, K_FREE, -1, tuple(frees_after[i])))
                step_nodes.append(None)
        for fn, slot in end_reads:
            steps.append((fn, 0, 0, K_NULLARY, slot, None))
            step_nodes.append(None)
        return steps, slot_node, step_nodes

    def frame_info(self, part, recvs, loops) -> FrameInfo:
        """Control-flow facts for runtime/frames.py: which frame and iterations each Recv
        belongs to, which Recvs carry a loop predicate, the edges between nodes."""
        recv_of = self.recv_of
        recv_frames = {recv_of[r.tensor if r.tensor is not None else r.control_op]:
                       (getattr(r, "frame", ROOT), getattr(r, "iterations", "all")) for r in recvs}
        cond_recvs = {recv_of[r.tensor]: r.cond_of for r in recvs if getattr(r, "cond_of", None)}
        return FrameInfo(part, self.edges, loops, recv_frames, cond_recvs, _loop_compilation(self.session),
                         self.freeable)


class CompiledPartition:
    """One device's share of an execution plan, compiled for repeated execution.

    ``recvs``/``sends`` are the partition's Transfers (see passes/partition.py): each recv
    becomes an async step that waits in the step's rendezvous; each send a step right after
    its producer. ``feeds`` are the fed tensors this partition consumes (fed as host values,
    moved to the device here) and ``fetches`` the tensors it returns (brought to the host).
    Compiling is a fixed sequence of plan-time steps (``_Compiler``); what it leaves here is
    what a run reads.
    """

    def __init__(self, nodes, feeds, fetches, device, kernels, resources, kernel_cache,
                 session=None, recvs=(), sends=(), loops=None):
        # Control flow (frames, iterations, dead tensors) runs in runtime/frames.py.
        frame_mode = bool(loops) or any(op.type in CONTROL_FLOW_OPS for op in nodes) or any(
            getattr(tr, "frame", ROOT) != ROOT for tr in (*recvs, *sends))
        self.device = device
        self.allocator = device.allocator

        c = _Compiler(device, kernels, resources, kernel_cache, session)
        self.feed_slots = c.allocate_slots(nodes, feeds, frame_mode)
        c.add_recvs(recvs)
        c.connect_inputs()
        c.delay_scheduled_recvs(recvs)
        c.add_sends(sends)
        c.construct_kernels()
        if not frame_mode:  # (frames and compiled loops keep their own view of Identities)
            c.fold_variable_identities()
        self.nodes = order = c.schedule()
        self.fetch_names = [t.name for t in fetches]
        self.fetch_slots, self.end_reads = c.plan_fetches(fetches)
        frees_after, self.dyn_uses = c.plan_liveness(order, self.fetch_slots)
        self.steps, self._slot_node, self._step_nodes = c.encode_steps(order, frees_after, self.end_reads)

        self.template = c.template
        self.host_feed_slots = [(self.feed_slots[feeds.index(t)], s) for t, s in c.host_feed.items()]
        self._to_device = None if device.host_tensors else device.to_device
        self._to_host = None if device.host_tensors else device.to_host
        exp = [n for n in order if n.expensive]
        self.parallelizable = (len(exp) >= 2 and _room_for_parallel_kernels(device)
                               and _has_independent(exp, c.preds))
        self.has_async = any(n.kd.is_async for n in order)
        self.frame_info = None
        if frame_mode:
            self.frame_info = c.frame_info(self, recvs, loops or {})
            self.has_async = True  # runs through start()/finish(), never the flat schedules

    def _initial_values(self, feed_values) -> list:
        vals = self.template.copy()
        conv = self._to_device
        if conv is None:
            for s, v in zip(self.feed_slots, feed_values):
                vals[s] = v
        else:
            for s, v in zip(self.feed_slots, feed_values):
                vals[s] = v
            for dev_slot, host_slot in self.host_feed_slots:
                vals[host_slot] = vals[dev_slot]
            for s in self.feed_slots:
                vals[s] = conv(vals[s])
        return vals

    def _results(self, vals) -> list:
        out = [vals[s] for s in self.fetch_slots]
        if self._to_host is not None:
            out = [self._to_host(v) for v in out]
        return out

    # ------------------------------------------------------------------------------------
    def describe_failure(self, exc: BaseException, out_slot) -> errors.OpError:
        n = self._slot_node.get(out_slot)
        return wrap_kernel_error(exc, n.op if n else None, self.device)

    def _abort_step(self, step, error):
        if step.rendezvous is not None:
            step.rendezvous.abort(error)

    def run_sequential(self, feed_values, step: StepContext):
        if self._to_device is None:
            vals = self.template.copy()
            for s, v in zip(self.feed_slots, feed_values):
                vals[s] = v
        else:
            vals = self._initial_values(feed_values)
        out = -1
        binary, unary, nullary, free = K_BINARY, K_UNARY, K_NULLARY, K_FREE  # locals: as cheap as literals
        quiet = quiet_floats()
        try:
            for fn, a, b, kind, out, x in self.steps:
                if kind == binary:
                    vals[out] = fn(vals[a], vals[b])
                elif kind == unary:
                    vals[out] = fn(vals[a])
                elif kind == nullary:
                    vals[out] = fn()
                elif kind == free:
                    for s in x:
                        vals[s] = None
                else:
                    self._run_generic(x, vals, step)
        except Exception as e:  # noqa: BLE001 - every failure becomes a tw error naming the node
            err = self.describe_failure(e, out)
            self._abort_step(step, err)
            raise err from (None if isinstance(e, errors.OpError) else e)
        finally:
            restore_floats(quiet)
        if self._to_host is None:
            return [vals[s] for s in self.fetch_slots]
        return self._results(vals)

    def _run_generic(self, n: _Node, vals, step):
        args = [vals[i] for i in n.ins]
        kd = n.kd
        if kd.is_async:
            res = _call_async_blocking(n, step, args)
        elif kd.takes_context:
            res = n.fn(step, *args)
        else:
            res = n.fn(*args)
        self._store(n, res, vals)

    def _store(self, n: _Node, res, vals):
        outs = n.outs
        if len(outs) == 1:
            if n.unwrap and isinstance(res, tuple | list):
                res = res[0]
            vals[outs[0]] = res
            if n.track and getattr(res, "nbytes", 0) >= SMALL_BYTES:
                self.allocator.track(res)
        elif outs:
            if res is None or len(res) != len(outs):
                raise errors.InternalError(
                    f"kernel for {n.op.type} returned {0 if res is None else len(res)} outputs, "
                    f"expected {len(outs)}")
            for s, v in zip(outs, res):
                vals[s] = v
                if n.track and getattr(v, "nbytes", 0) >= SMALL_BYTES:
                    self.allocator.track(v)

    # ------------------------------------------------------------------------------------
    def run_traced(self, feed_values, step: StepContext, stats: StepStatsCollector):
        """Like run_sequential, recording each node into ``stats``: its start (the reads of
        variables before it included) and end, the kernel call, this thread, its outputs and
        the allocator's bytes in use after it. The untraced loop above stays as it is."""
        vals = self._initial_values(feed_values)
        out = -1
        clock = time.perf_counter_ns
        add, tid, dev, alloc = stats.add, stats.thread(), self.device.name, self.allocator
        started = None  # when the first read before the current node began
        quiet = quiet_floats()
        try:
            for (fn, a, b, kind, out, x), owner in zip(self.steps, self._step_nodes):
                if kind == K_FREE:
                    for s in x:
                        vals[s] = None
                    continue
                t0 = clock()
                if kind == K_BINARY:
                    vals[out] = fn(vals[a], vals[b])
                elif kind == K_UNARY:
                    vals[out] = fn(vals[a])
                elif kind == K_NULLARY:
                    vals[out] = fn()
                else:
                    self._run_generic(x, vals, step)
                t1 = clock()
                if owner is None:
                    continue
                n, own = owner
                if not own:
                    if started is None:
                        started = t0
                    continue
                op = n.op
                add(dev, op.name, op.type, t0 if started is None else started, t0, t1, clock(), tid,
                    [vals[s] for s in n.outs], alloc)
                started = None
        except Exception as e:  # noqa: BLE001
            err = self.describe_failure(e, out)
            self._abort_step(step, err)
            raise err from (None if isinstance(e, errors.OpError) else e)
        finally:
            restore_floats(quiet)
        return self._results(vals)

    # ------------------------------------------------------------------------------------
    def run_dynamic(self, feed_values, step: StepContext, pool: ThreadPoolExecutor, timeout: float | None):
        """Pending counts and a ready queue at run time; expensive nodes on the pool."""
        return self.finish(self.start(feed_values, step, pool, timeout), timeout)

    def start(self, feed_values, step: StepContext, pool: ThreadPoolExecutor,
              timeout: float | None = None) -> _DynamicState:
        """Begin a dynamic execution: runs what is ready inline, returns without waiting.
        ``timeout`` bounds loops, which may run inline for as long as they iterate."""
        if self.frame_info is not None:
            state = FrameState(self, self._initial_values(feed_values), step, pool, timeout)
        else:
            state = _DynamicState(self, self._initial_values(feed_values), step, pool)
        state.start()
        return state

    def finish(self, state: _DynamicState, timeout: float | None):
        """Wait for a started execution; its fetched values, or the error that ended it."""
        if not state.done.wait(timeout):
            err = errors.DeadlineExceededError(
                f"step timed out after {timeout:.3f}s on {self.device.name}; still pending: "
                f"{state.pending_names()}")
            state.step.cancel()
            self._abort_step(state.step, err)
            raise err
        if state.error is not None:
            e, op = state.error
            raise wrap_kernel_error(e, op, self.device) from (None if isinstance(e, errors.OpError) else e)
        if state.step.cancelled:  # nodes were skipped: there are no results to return
            raise errors.CancelledError(f"the step was cancelled on {self.device.name} (the session was closed)")
        vals = state.vals
        try:
            for fn, slot in self.end_reads:
                vals[slot] = fn()
        except Exception as e:  # noqa: BLE001
            raise wrap_kernel_error(e, None, self.device) from e
        if self.frame_info is not None:
            self._check_fetches_live(vals)
        return self._results(vals)

    def _check_fetches_live(self, vals):
        for name, s in zip(self.fetch_names, self.fetch_slots):
            if vals[s] is DEAD:
                raise errors.InvalidArgumentError(
                    f"fetched tensor '{name}' is dead on {self.device.name}: it was computed on a "
                    "branch of a tw.cond that was not taken (fetch the cond's output instead)")
            if vals[s] is None:
                raise errors.InternalError(
                    f"fetched tensor '{name}' was never computed on {self.device.name}: its producer "
                    "never became ready (a malformed control-flow graph?)")


class _DynamicState(StepState):
    """Run-time state of one dynamic execution: pending counts and outstanding work.

    Every node is finished exactly once. After an error the remaining nodes are still
    finished (skipped, not run), so the outstanding count always reaches zero and a failed
    step can never hang waiting for nodes that will not run.
    """

    def __init__(self, part: CompiledPartition, vals, step, pool):
        super().__init__(part, vals, step, pool, threading.Lock())
        self.pending = {n: n.pending for n in part.nodes}
        self.uses = dict(part.dyn_uses)  # consumers left per freeable slot
        self.outstanding = len(part.nodes)
        if self.outstanding == 0:
            self.done.set()

    def pending_names(self):
        with self.lock:
            return [n.op.name for n, c in self.pending.items() if c >= 0][:5]

    def start(self):
        self._dispatch([n for n in self.part.nodes if n.pending == 0], [])

    def _dispatch(self, ready, queue):
        for n in ready:
            if n.expensive and self.part.parallelizable and self.error is None:
                self.pool.submit(self._run_loop, [n])
            else:
                queue.append(n)
        if queue and not getattr(in_loop, "active", False):
            self._run_loop(queue)

    def _run_loop(self, queue):
        outer = enter_loop(self, queue)
        traced = self.stats is not None
        quiet = quiet_floats()  # once per loop, not per kernel
        try:
            while queue:
                n = queue.pop(0)
                if self.error is not None or self.step.cancelled:
                    self._dispatch(self._finish(n), queue)
                    continue
                try:
                    if traced:
                        if self._run_traced(n):
                            continue  # async: its continuation finishes it
                    else:
                        vals = self.vals
                        for fn, src, slot in n.pre:
                            vals[slot] = fn() if src < 0 else fn(vals[src])
                        args = [vals[i] for i in n.ins]
                        if n.kd.is_async:
                            n.fn(self.step, self._make_done(n), *args)
                            continue
                        res = n.fn(self.step, *args) if n.kd.takes_context else n.fn(*args)
                        self.part._store(n, res, vals)
                except Exception as e:  # noqa: BLE001 - reported once the step drains
                    self._fail(e, n)
                self._dispatch(self._finish(n), queue)
        finally:
            restore_floats(quiet)
            leave_loop(outer)

    def _run_traced(self, n) -> bool:
        """The loop's work for ``n``, recorded into the step's stats; True when ``n`` is
        async (its continuation finishes and records it, see ``_make_done``)."""
        clock = time.perf_counter_ns
        t0 = clock()
        vals = self.vals
        for fn, src, slot in n.pre:
            vals[slot] = fn() if src < 0 else fn(vals[src])
        args = [vals[i] for i in n.ins]
        if n.kd.is_async:
            n.fn(self.step, self._make_done(n, t0), *args)
            return True
        t1 = clock()
        res = n.fn(self.step, *args) if n.kd.takes_context else n.fn(*args)  # (_run_loop's quiet floats)
        t2 = clock()
        part = self.part
        part._store(n, res, vals)
        stats, op = self.stats, n.op
        transfer = None if n.transfer is None else transfer_record(n.transfer, self.step, args[0] if args else None)
        stats.add(part.device.name, op.name, op.type, t0, t1, t2, clock(), stats.thread(),
                  [vals[s] for s in n.outs], part.allocator, transfer)
        return False

    def _make_done(self, n, t0=None):
        called = threading.Lock()
        stats = self.stats
        if stats is not None:  # traced: when and by which thread the node was started
            tid = stats.thread()
            t1 = time.perf_counter_ns()

        def done(outputs=None, error=None):
            if not called.acquire(blocking=False):
                return  # a second call of the continuation is ignored
            if error is not None:
                self._fail(error, n)
            else:
                try:
                    self.part._store(n, outputs, self.vals)
                except Exception as e:  # noqa: BLE001
                    self._fail(e, n)
                if stats is not None:
                    t2 = time.perf_counter_ns()
                    values = [self.vals[s] for s in n.outs]
                    op = n.op
                    transfer = None if n.transfer is None else transfer_record(
                        n.transfer, self.step, values[0] if values else None)
                    stats.add(self.part.device.name, op.name, op.type, t1 if t0 is None else t0, t1, t2,
                              time.perf_counter_ns(), tid, values, self.part.allocator, transfer)
            ready = self._finish(n)
            if ready:
                if getattr(in_loop, "state", None) is self:
                    # Completed during the kernel call, in our own loop (a dequeue that found
                    # an element): go on in this thread instead of a pool hop.
                    self._dispatch(ready, in_loop.queue)
                elif getattr(in_loop, "active", False):
                    # Called from inside an executor loop (ours, or a sender's in another
                    # partition): hand the work to the pool rather than recursing.
                    self.pool.submit(self._run_loop, ready)
                else:
                    self._run_loop(ready)
        return done

    def _finish(self, n):
        ready = []
        with self.lock:
            self.pending[n] = -1
            for m in n.consumers:
                self.pending[m] -= 1
                if self.pending[m] == 0:
                    ready.append(m)
            for s in n.frees:
                left = self.uses[s] - 1
                self.uses[s] = left
                if left == 0:
                    self.vals[s] = None
            self.outstanding -= 1
            if self.outstanding == 0:
                self.done.set()
        return ready


def _loop_compilation(session) -> bool:
    """Whether loops on one device are compiled (runtime/loops.py); workers, which have no
    session config, compile."""
    return graph_option(getattr(session, "_config", None), "enable_loop_compilation", "TENSORWEAVE_LOOP_COMPILATION")


def _room_for_parallel_kernels(device) -> bool:
    """Whether two expensive kernels of ``device`` can run side by side without fighting
    for cores: each call may use ``device.intra_op_threads`` threads (the CPU's BLAS pool),
    so two at once need twice that many cores. Otherwise running them one after the other,
    each with every core, is faster (measured: the autoencoder step of benchmarks/ was
    several times slower with two 2-thread BLAS calls at once on 2 cores)."""
    return (os.cpu_count() or 1) >= 2 * max(1, getattr(device, "intra_op_threads", 1) or 1)


def _has_independent(exp_nodes, preds) -> bool:
    """True when two expensive nodes exist neither of which depends on the other."""
    index = {n: i for i, n in enumerate(exp_nodes)}
    anc: dict = {}

    def ancestors(n):
        if n in anc:
            return anc[n]
        anc[n] = 0
        mask = 0
        stack = list(preds[n])
        seen = set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if p in index:
                mask |= 1 << index[p]
            stack.extend(preds[p])
        anc[n] = mask
        return mask

    masks = [ancestors(n) for n in exp_nodes]
    full = (1 << len(exp_nodes)) - 1
    for i, m in enumerate(masks):
        related = m
        for j, mj in enumerate(masks):
            if mj >> i & 1:
                related |= 1 << j
        if (related | 1 << i) != full:
            return True
    return False


def _attrs_key(op) -> tuple:
    """The declared attrs of ``op`` as a cache key (functions left out: a plan's copy of a
    node may hold another function object for the same function)."""
    defs = op.op_def.attrs
    return tuple(sorted((k, repr(v)) for k, v in op._attrs.items()
                        if k in defs and "func" not in defs[k].type and defs[k].type != "tensor"))


def _call_async_blocking(n, step, args):
    """Run an async kernel from the sequential path by waiting for its continuation."""
    ev = threading.Event()
    box = {}

    def done(outputs=None, error=None):
        box["out"], box["err"] = outputs, error
        ev.set()

    n.fn(step, done, *args)
    ev.wait()
    if box["err"] is not None:
        raise box["err"]
    return box["out"]
