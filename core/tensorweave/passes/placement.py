"""Device placement: choose a device for every node of a plan (whitepaper 3.2.1, 4.3).

1. **Feasible devices** per node: devices that match its ``tw.device`` constraint (partial
   specs such as ``/device:OPENCL:*`` or ``/job:worker/task:17``) and have a kernel for it;
   with ``allow_soft_placement`` a constraint nothing satisfies falls back to the devices
   of the job/replica/task it names (any device type: a program written for
   ``/gpu:0`` runs where there is none), else to any device with a kernel.
2. **Colocation**: a variable and every op that takes it by reference (a queue, stack,
   tensor array or other resource and every op that uses its handle, also through the
   Enter/Switch/Merge/Identity that carry it into a loop or cond), and ops created under ``tw.colocate_with``
   (attr ``_class: ["loc:@name"]``), are joined by union-find. A group may go only where
   its anchors (the variables, resources and ``colocate_with`` members) all may and where
   every op taking a member by reference has a kernel. Such an op's own device request
   narrows the group where the group can follow it, and is otherwise ignored: the op runs
   on its variable's device, as TensorFlow's placer decides (the ref/resource edge wins over
   ``tw.device`` scopes and ``replica_device_setter``), logged on ``tensorweave.placement``
   (INFO with ``log_device_placement``, else DEBUG). With ``allow_soft_placement`` a
   ``colocate_with`` member whose device type or index conflicts keeps only its job, replica
   and task (TensorFlow merges device names the same way); different tasks still conflict.
3. **Greedy simulated execution**: nodes are visited in topological order (among ready
   nodes, the one whose inputs are ready earliest first). A node, or a whole colocation
   group when its first member is reached, goes to the feasible device where it would
   finish soonest: the device's simulated availability, its inputs' arrival times including
   transfers (``cost_model.transfer_time``), and its compute time there
   (``cost_model.compute_time``: measured, kernel-supplied or static). Devices whose
   memory limit the live estimated bytes would exceed are skipped (unless every feasible
   device would: the estimate is only an estimate, and the allocator has the last word).

Ties go to the device listed first (the CPU), so a plan whose nodes cost the same
everywhere stays where it used to be. When every group has one feasible device, or there is
one device, the simulation is skipped. Constraints that cannot be met raise
``InvalidArgumentError`` naming the nodes and their constraints.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging

from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.op_def import flat_input_is_ref
from tensorweave.passes.cost_model import CostModel

# The logger log_device_placement writes to (client/plan.py logs each node's device there).
log = logging.getLogger("tensorweave.placement")


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


def colocation_classes(op) -> list[str]:
    """The explicit colocation groups of ``op`` (``tw.colocate_with``), as ``loc:@name``."""
    return [c for c in (op._attrs.get("_class") or ()) if isinstance(c, str) and c.startswith("loc:@")]


def _is_resource_handle(t) -> bool:
    """A handle to state kept by a process (a queue, reader, stack or accumulator: the
    string output ``handle``/``reader_handle`` of a stateful op). Ops using it must run where
    the state lives, like ops taking a variable by reference."""
    op_def = t.op.op_def
    if not op_def.stateful or not op_def.outputs or t.value_index >= len(op_def.outputs):
        return False
    return op_def.outputs[t.value_index].name.endswith("handle")


# Ops that pass a value through unchanged (control flow plumbing and Identity): a handle
# that enters a loop or a cond branch through them is still the handle of the same state, as
# TF's placer follows resource edges through them. Value: the inputs that are forwarded.
_FORWARDING = {"Enter": (0,), "RefEnter": (0,), "Exit": (0,), "RefExit": (0,), "NextIteration": (0,),
               "RefNextIteration": (0,), "Switch": (0,), "RefSwitch": (0,), "Identity": (0,),
               "RefIdentity": (0,), "Merge": None, "RefMerge": None}


def _handle_source(t, memo):
    """The stateful op whose handle ``t`` is — directly, or passed on through Enter, Switch,
    Merge, Identity, ... (a stack's handle entering a loop body) — or None."""
    key = (t.op, t.value_index)
    if key in memo:
        return memo[key]
    src, todo, seen = None, [t], {key}
    while todo and src is None:  # iterative: forwarding chains may be long, and loops cycle
        x = todo.pop()
        known = memo.get((x.op, x.value_index), False)
        if known is not False:
            src = known
        elif _is_resource_handle(x):
            src = x.op
        else:
            which = _FORWARDING.get(x.op.type, ())
            ins = x.op.inputs if which is None else [x.op.inputs[i] for i in which if i < len(x.op.inputs)]
            for y in ins:
                k = (y.op, y.value_index)
                if k not in seen:
                    seen.add(k)
                    todo.append(y)
    memo[key] = src
    return src


def colocation_groups(nodes) -> _UnionFind:
    """Nodes that must share a device: a variable and every op that takes it by reference,
    a queue/reader/stack/tensor array/accumulator and every op that uses its handle (also
    where the handle reaches it through Enter, Switch, Merge or Identity, as in a loop body,
    and those forwarding ops too), and ops colocated with ``tw.colocate_with`` (with the
    named node, when it is among ``nodes``, and with each other in any case)."""
    return _colocation(nodes)[0]


def _colocation(nodes):
    """(the union-find of ``colocation_groups``, op -> (the op whose variable or resource it
    takes by its first ref or handle input, "variable" or "resource"))."""
    uf = _UnionFind()
    follows: dict = {}
    by_name = {op.name: op for op in nodes}
    memo: dict = {}
    for op in nodes:
        uf.find(op)
        for t, ref in zip(op.inputs, flat_input_is_ref(op)):
            src = None if ref else _handle_source(t, memo)
            if ref or src is not None:
                uf.union(t.op, op)
                if t.op is not op:
                    follows.setdefault(op, (t.op if ref else src, "variable" if ref else "resource"))
        for c in colocation_classes(op):
            target = by_name.get(c[len("loc:@"):])
            uf.union(target if target is not None else c, op)
    return uf, follows


def feasible_devices(op, devices, kernels, allow_soft_placement=False):
    spec = DeviceSpec.from_string(op.device)
    ok_kernel = [d for d in devices if kernels.lookup(op.type, d.device_type, op._attrs) is not None]
    matching = [d for d in ok_kernel if spec.matches(d.spec)]
    if matching or not allow_soft_placement:
        return matching, spec, ok_kernel
    # Soft placement, as TF: keep the job, replica and task asked for and let the device
    # type and index go ('/job:worker/task:1/device:GPU:0' -> a device of that task); only
    # if that task has no device with a kernel either, any device that has one.
    same_task = DeviceSpec(spec.job, spec.replica, spec.task)
    nearby = [d for d in ok_kernel if same_task.matches(d.spec)]
    return (nearby or ok_kernel), spec, ok_kernel


def _cannot_colocate(op, members, why=""):
    names = [f"'{m.name}' ({m.type}, {m.device or 'any device'})" for m in members]
    return errors.InvalidArgumentError(
        f"cannot colocate nodes {', '.join(names)}: they must share a device (a variable "
        "and the ops that update it, or ops under tw.colocate_with), but no device "
        f"satisfies all their constraints and has kernels for all of them{why}",
        node_def=op.name, op=op)


def _infeasible(op, devices, spec, with_kernel, kernels):
    existing = [d for d in devices if spec.matches(d.spec)]
    if not existing:
        return errors.InvalidArgumentError(
            f"cannot assign a device for {op.type} node '{op.name}': its device "
            f"specification '{op.device}' matches no device; available: "
            f"{[d.name for d in devices]} (set allow_soft_placement=True in the Session's "
            "ConfigProto to place such nodes on an available device)", node_def=op.name, op=op)
    if with_kernel:
        return errors.InvalidArgumentError(
            f"cannot assign a device for {op.type} node '{op.name}': its device specification "
            f"'{op.device}' allows only {[d.name for d in existing]}, which have no kernel for "
            f"{op.type}; devices with one: {[d.name for d in with_kernel]} (set "
            "allow_soft_placement=True to let it go there)", node_def=op.name, op=op)
    kernels.find(op, existing[0].device_type)  # raises NotFound naming what exists
    return errors.InvalidArgumentError(
        f"cannot assign a device for {op.type} node '{op.name}': no kernel on {[d.name for d in existing]}",
        node_def=op.name, op=op)


@dataclasses.dataclass
class Override:
    """A device request placement ignored: ``op`` takes ``source``'s variable or resource
    by reference and runs where ``source`` is (``soft``: False), or ``allow_soft_placement``
    let ``op`` leave a device it asked for to join ``source``'s group (``soft``: True: a
    ``tw.colocate_with`` member's device type/index, or a request that matches no device)."""

    op: object
    source: object
    soft: bool = False
    what: str = "variable"  # or "resource" (a queue, reader, ... handle)


def _groups_and_candidates(nodes, devices, kernels, soft):
    """(op -> group root, root -> members, root -> feasible devices in device order,
    [Override]).

    A group's devices are those every *anchor* allows: a variable, a queue or other
    resource, a ``tw.colocate_with`` member (with ``allow_soft_placement``, a member whose
    device type/index conflicts keeps only its job/replica/task, as TF merges device
    names). An op that takes a group member by reference (Assign, IsVariableInitialized, an
    optimizer's Apply*, a Saver's restore assign) or uses its resource handle then needs a
    kernel there, and its own device request narrows the group only where the group can
    follow it; a request that conflicts is ignored and the op runs on the variable's device
    (TF's placer overrides it the same way: the ref/resource edge wins over the enclosing
    device scope, as ``replica_device_setter`` and ``with tw.device(...)`` produce)."""
    uf, follows = _colocation(nodes)
    groups: dict = {}
    for op in nodes:
        groups.setdefault(uf.find(op), []).append(op)
    candidates_of = {}
    overrides: list[Override] = []
    for root, members in groups.items():
        candidates = None
        anchors = [m for m in members if m not in follows]
        followers = [m for m in members if m in follows]
        if not anchors:  # what they take by reference is not in the plan: nothing to follow
            anchors, followers = members, []
        for op in anchors:
            feas, spec, with_kernel = feasible_devices(op, devices, kernels, soft)
            if not feas:
                raise _infeasible(op, devices, spec, with_kernel, kernels)
            narrowed = feas if candidates is None else [d for d in candidates if d in feas]
            if not narrowed and soft:
                same_task = DeviceSpec(spec.job, spec.replica, spec.task)
                narrowed = [d for d in candidates if d in with_kernel and same_task.matches(d.spec)]
                if narrowed:
                    overrides.append(Override(op, anchors[0], soft=True))
            if not narrowed:
                raise _cannot_colocate(op, members)
            candidates = narrowed
        # Kernels are hard constraints for every follower; their device requests are not.
        for op in followers:
            with_kernel = [d for d in candidates if kernels.lookup(op.type, d.device_type, op._attrs) is not None]
            if not with_kernel:
                raise _cannot_colocate(op, members, f" ({op.type} node '{op.name}' has no kernel on "
                                                    f"{[d.name for d in candidates]})")
            candidates = with_kernel
        for op in followers:
            spec = DeviceSpec.from_string(op.device)
            narrowed = [d for d in candidates if spec.matches(d.spec)]
            if narrowed:
                candidates = narrowed
                continue
            source, what = follows[op]
            if not any(spec.matches(d.spec) for d in devices):
                # A request no device could meet is a mistake of its own, not a conflict with
                # the variable: an error as for any op, unless soft placement lets it go.
                if not soft:
                    raise _infeasible(op, devices, spec, [], kernels)
                overrides.append(Override(op, source, soft=True, what=what))
            else:
                overrides.append(Override(op, source, what=what))
        candidates_of[root] = candidates
    group_of = {op: uf.find(op) for op in nodes}
    return group_of, groups, candidates_of, overrides


@dataclasses.dataclass
class Simulation:
    """What the simulated execution decided: device, start and finish per node."""

    placement: dict                                        # op -> Device
    start: dict = dataclasses.field(default_factory=dict)  # op -> simulated start (s)
    finish: dict = dataclasses.field(default_factory=dict)  # op -> simulated finish (s)
    peak_bytes: dict = dataclasses.field(default_factory=dict)  # device name -> peak live bytes
    overrides: list = dataclasses.field(default_factory=list)  # [Override]: device requests ignored

    @property
    def makespan(self) -> float:
        return max(self.finish.values(), default=0.0)


def _memory_limit(device):
    lim = getattr(device, "memory_limit", None)
    if lim is None:
        lim = getattr(getattr(device, "allocator", None), "memory_limit", None)
    return lim


def simulate(nodes, devices, kernels, config=None, cost_model=None, feeds=None) -> Simulation:
    """Place ``nodes`` on ``devices`` by greedy simulated execution (see the module doc)."""
    soft = bool(getattr(config, "allow_soft_placement", False))
    group_of, groups, candidates_of, overrides = _groups_and_candidates(nodes, devices, kernels, soft)
    if len(devices) <= 1 or all(len(c) == 1 for c in candidates_of.values()):
        sim = Simulation({op: candidates_of[group_of[op]][0] for op in nodes})
    else:
        sim = _Simulator(nodes, devices, kernels, cost_model or CostModel(), feeds,
                         group_of, groups, candidates_of).run()
    sim.overrides = overrides
    _log_overrides(overrides, sim.placement, bool(getattr(config, "log_device_placement", False)))
    return sim


def _log_overrides(overrides, placement, log_device_placement):
    """Say which device requests were ignored, on the placement logger: at INFO with
    ``log_device_placement`` (as TF's placer does), else at DEBUG."""
    level = logging.INFO if log_device_placement else logging.DEBUG
    if not overrides or not log.isEnabledFor(level):
        return
    for o in overrides:
        op, src = o.op, o.source
        where = placement[op].name if op in placement else "?"
        if o.soft:
            log.log(level, "Ignoring device specification %s for %s node '%s': it must share a device with "
                    "'%s' and allow_soft_placement is set; placed on %s", op.device, op.type, op.name,
                    src.name, where)
        else:
            log.log(level, "Ignoring device specification %s for %s node '%s' because its input from '%s' "
                    "is a %s connection: moved to the %s's device %s", op.device, op.type, op.name, src.name,
                    "reference" if o.what == "variable" else "resource", o.what, where)


class _Simulator:
    def __init__(self, nodes, devices, kernels, cm, feeds, group_of, groups, candidates_of):
        self.nodes, self.devices, self.kernels, self.cm = nodes, devices, kernels, cm
        self.fed = set(feeds or ())
        self.group_of, self.groups, self.candidates_of = group_of, groups, candidates_of
        self.node_set = set(nodes)
        # Fed values and inputs from outside the plan come from the client, in host memory.
        self.host = next((d for d in devices if getattr(d, "host_tensors", False) or d.device_type == "CPU"), None)
        self.where: dict = {}
        self.start: dict = {}
        self.finish: dict = {}
        self.group_device: dict = {}
        self.avail = {d: 0.0 for d in devices}
        self.arrival: dict = {}                   # (tensor, device) -> time it is there
        self.live = {d: 0 for d in devices}        # estimated bytes alive now
        self.peak = {d: 0 for d in devices}
        self.limit = {d: _memory_limit(d) for d in devices}
        self.holders: dict = {}                   # tensor -> [(device, bytes)] to free later
        self._time_cache: dict = {}
        # Generators (Const and other free nodes without inputs) wait for their first
        # consumer and go where it goes (TensorFlow's placer does the same), instead of
        # landing wherever happened to be idle when they were visited.
        self.deferred: set = set()
        # Consumers left per tensor, to free its buffers (and copies) after the last one.
        self.uses: dict = {}
        for op in nodes:
            for t in op.inputs:
                if t.op in self.node_set and t not in self.fed:
                    self.uses[t] = self.uses.get(t, 0) + 1

    # -- estimates ---------------------------------------------------------------------------
    def compute(self, op, d) -> float:
        key = (op, d)
        v = self._time_cache.get(key)
        if v is None:
            v = self._time_cache[key] = self.cm.compute_time(op, d, self.kernels)
        return v

    def source(self, t):
        """(device the tensor is on, time it is ready there) for an input tensor ``t``."""
        if t in self.fed or t.op not in self.node_set:
            return self.host, 0.0
        if t.op in self.deferred:
            return None, 0.0
        return self.where[t.op], self.finish[t.op]

    def input_cost(self, op, d):
        """(time all of ``op``'s inputs are on ``d``, [(tensor, arrival, bytes)] new copies)."""
        ready = 0.0
        new = []
        for t in op.inputs:
            src, at = self.source(t)
            if t.op in self.deferred:
                g = self.candidates_of[self.group_of[t.op]]
                at = self.compute(t.op, d if d in g else g[0])
                if d not in g:
                    at += self.cm.transfer_time(self.cm.tensor_bytes(t), g[0], d)
            elif src is not None and src is not d:
                known = self.arrival.get((t, d))
                if known is None:
                    nbytes = self.cm.tensor_bytes(t)
                    known = at + self.cm.transfer_time(nbytes, src, d)
                    new.append((t, known, nbytes))
                at = known
            ready = max(ready, at)
        for c in op.control_inputs:
            if c in self.finish:
                src = self.where[c]
                ready = max(ready, self.finish[c] + (self.cm.transfer_time(0, src, d) if src is not d else 0.0))
        return ready, new

    def evaluate(self, op, d):
        ready, new = self.input_cost(op, d)
        start = max(ready, self.avail[d])
        return start, start + self.compute(op, d), new

    # -- choosing ----------------------------------------------------------------------------
    def choose(self, op):
        root = self.group_of[op]
        members = self.groups[root]
        cands = self.candidates_of[root]
        if len(cands) == 1:
            return cands[0]
        others = [m for m in members if m is not op]
        fits, best, best_score = [], None, None
        for d in cands:
            _start, fin, new = self.evaluate(op, d)
            score = fin
            # The rest of the group will run there too: its compute and the inputs it
            # already knows it must fetch count against this device.
            for m in others:
                score += self.compute(m, d)
                for t in m.inputs:
                    if t.op in self.where or t in self.fed or t.op not in self.node_set:
                        src, _at = self.source(t)
                        if src is not None and src is not d:
                            score += self.cm.transfer_time(self.cm.tensor_bytes(t), src, d)
            need = sum(self.cm.memory_bytes(m) for m in members) + sum(b for _t, _a, b in new)
            need += sum(self.cm.memory_bytes(t.op) for t in op.inputs
                        if t.op in self.deferred and d in self.candidates_of[self.group_of[t.op]])
            lim = self.limit[d]
            ok = lim is None or self.live[d] + need <= lim
            fits.append((d, score, ok))
        usable = [f for f in fits if f[2]] or fits
        for d, score, _ok in usable:
            if best_score is None or score < best_score:
                best, best_score = d, score
        return best

    def deferrable(self, op) -> bool:
        root = self.group_of[op]
        return (len(self.candidates_of[root]) > 1 and len(self.groups[root]) == 1 and not op.inputs
                and not any(c in self.node_set for c in op.control_inputs) and self.cm.flops(op) == 0)

    def commit(self, op, d):
        for t in op.inputs:
            p = t.op
            if p in self.deferred:
                self.deferred.discard(p)
                self.commit(p, d if d in self.candidates_of[self.group_of[p]] else self.choose(p))
        start, fin, new = self.evaluate(op, d)
        for t, at, nbytes in new:
            self.arrival[(t, d)] = at
            self._alloc(d, nbytes, t)
        self.where[op] = d
        self.start[op] = start
        self.finish[op] = fin
        self.avail[d] = fin
        root = self.group_of[op]
        if root not in self.group_device:
            self.group_device[root] = d
        mem = self.cm.memory_bytes(op)
        if mem:
            persistent = self.cm.is_persistent(op) or not op.outputs
            for t in op.outputs:
                # Outputs nobody in the plan consumes are probably fetched: kept to the end.
                keep = persistent or self.uses.get(t, 0) == 0
                share = mem if len(op.outputs) == 1 else self.cm.tensor_bytes(t)
                self._alloc(d, share, None if keep else t)
        for t in op.inputs:
            n = self.uses.get(t)
            if n is None:
                continue
            if n <= 1:
                del self.uses[t]
                for dev, nbytes in self.holders.pop(t, ()):
                    self.live[dev] -= nbytes
            else:
                self.uses[t] = n - 1

    def _alloc(self, d, nbytes, tensor):
        self.live[d] += nbytes
        if self.live[d] > self.peak[d]:
            self.peak[d] = self.live[d]
        if tensor is not None:
            self.holders.setdefault(tensor, []).append((d, nbytes))

    # -- the traversal -----------------------------------------------------------------------
    def run(self) -> Simulation:
        preds = {}
        succ = {op: [] for op in self.nodes}
        for op in self.nodes:
            ps = {t.op for t in op.inputs if t.op in self.node_set and t not in self.fed}
            ps.update(c for c in op.control_inputs if c in self.node_set)
            ps.discard(op)
            preds[op] = len(ps)
            for p in ps:
                succ[p].append(op)
        heap = [(0.0, op._id, i, op) for i, op in enumerate(self.nodes) if preds[op] == 0]
        heapq.heapify(heap)
        while heap:
            _, _, _, op = heapq.heappop(heap)
            root = self.group_of[op]
            d = self.group_device.get(root)
            if d is None and self.deferrable(op):
                self.deferred.add(op)
            else:
                self.commit(op, d if d is not None else self.choose(op))
            for m in succ[op]:
                preds[m] -= 1
                if preds[m] == 0:
                    ready = max((self.finish.get(p, 0.0) for p in _pred_ops(m, self.node_set, self.fed)),
                                default=0.0)
                    heapq.heappush(heap, (ready, m._id, len(self.where), m))
        # Generators nobody consumed (fetched directly): wherever they finish soonest.
        for op in sorted(self.deferred, key=lambda o: o._id):
            self.deferred.discard(op)
            self.commit(op, self.choose(op))
        # A cycle leaves nodes unvisited: put them somewhere feasible and let the executor
        # report the cycle with its own message.
        for op in self.nodes:
            if op not in self.where:
                root = self.group_of[op]
                self.where[op] = self.group_device.setdefault(root, self.candidates_of[root][0])
        placement = {op: self.where[op] for op in self.nodes}
        return Simulation(placement, self.start, self.finish, {d.name: p for d, p in self.peak.items()})


def _pred_ops(op, node_set, fed):
    for t in op.inputs:
        if t.op in node_set and t not in fed:
            yield t.op
    for c in op.control_inputs:
        if c in node_set:
            yield c


def place(nodes, devices, kernels, config=None, cost_model=None, feeds=None) -> dict:
    """Map each node to a Device; InvalidArgumentError when a constraint cannot be met."""
    return simulate(nodes, devices, kernels, config, cost_model, feeds).placement


class DefaultPlacer:
    """The registered ``default`` placer: the whitepaper's greedy simulated placement."""

    name = "default"

    def place(self, nodes, devices, kernels, config=None, cost_model=None, feeds=None) -> dict:
        return place(nodes, devices, kernels, config, cost_model, feeds)
