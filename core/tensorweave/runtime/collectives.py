"""Collective operations (TensorFlow's ``CollectiveReduce``, ``CollectiveGather``,
``CollectiveBcastSend``/``CollectiveBcastRecv``): the algorithms and one process's
collective rendezvous.

A *group* is a set of devices (its *members*) named by ``group_key`` and of ``group_size``
devices; an *instance* (``instance_key``) is one collective op that every member runs, once
per step. Members find each other through the group's **leader**, which keeps a
``GroupTable``: each member joins with (group_key, group_size, its device) and is answered,
once all ``group_size`` members have joined, with the ordered member list (sorted by job,
replica, task, device type and index: a member's *rank* is its place in it). A member
remembers the answer, so later executions need no leader. Every execution of an instance
on a member gets the next number of that member's **execution counter** for (group_key,
instance_key); as every member runs the same instances in the same order, the numbers agree,
so the values of independent steps — even of different clients, in between-graph
replication — meet. A value between members is keyed by (destination device, group_key,
instance_key, execution, round).

The algorithms (all members of one execution agree on them by construction):

* **all-reduce** (``CollectiveReduce``): a ring. The flattened tensor is cut in ``n``
  nearly equal chunks; in ``n - 1`` rounds of *reduce-scatter* rank ``r`` sends chunk
  ``r - s`` to rank ``r + 1`` and merges chunk ``r - s - 1`` from rank ``r - 1`` into its
  own, after which it holds the fully merged chunk ``r + 1``; in ``n - 1`` rounds of
  *all-gather* the merged chunks travel once around the ring. Each member sends and
  receives ``2 (n - 1) / n`` times the tensor, whatever ``n``, and ends with the same bytes
  as every other member (each chunk is merged on one member and copied to the rest), so
  replicas updated from it stay bit for bit identical. ``final_op='Div'`` then divides by
  ``n`` (the mean; truncating toward zero for integers, as TensorFlow's ``Div``).
* **all-gather** (``CollectiveGather``): the same ring carries each member's whole tensor
  around in ``n - 1`` rounds; the result is the members' tensors concatenated along axis 0
  in rank order.
* **broadcast** (``CollectiveBcastSend``/``Recv``): the sending member sends its tensor to
  every other member directly.

Every value carries its sender's *signature* (op, dtype, shape, merge and final op): a
member whose tensor disagrees with another's fails with ``InvalidArgumentError`` naming both,
and sends that error to every other member, so the whole group fails at once instead of
waiting. The same happens when a member's step is cancelled, aborted (``AbortStep``) or times
out, or a send fails. No wait is unbounded: an execution gives up after its op's
``timeout_seconds`` (``DEFAULT_TIMEOUT`` when 0) with ``DeadlineExceededError`` naming the
group, the instance and what it was waiting for (the members that never joined, or the
member whose value did not come).

``CollectiveExecutor`` is one process's share: the execution counters, the members' group
answers, a bounded table of values that arrived before their execution started here, the
leader's ``GroupTable`` and the algorithms. Used as it is, every member is in this process (a
local Session with several devices). The distributed runtime subclasses it
(``distributed/collective.py``): a member on another task is reached over the cluster's
transport and the leader is a task. Kernels (``kernels/collective.py``) find the executor of
their step with ``executor_for(step)``: the step's rendezvous may carry one
(``collective_executor``, a worker's), else the process's local one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec

# How long an execution waits, at most, when its op sets no timeout (a step's own timeout or
# an abort normally ends the wait much earlier).
DEFAULT_TIMEOUT = 600.0
MAX_GROUP_SIZE = 4096

REDUCE, GATHER, BCAST_SEND, BCAST_RECV = ("CollectiveReduce", "CollectiveGather", "CollectiveBcastSend",
                                          "CollectiveBcastRecv")
OPS = (REDUCE, GATHER, BCAST_SEND, BCAST_RECV)
MERGE_OPS = {"Add": np.add, "Mul": np.multiply, "Min": np.minimum, "Max": np.maximum}
FINAL_OPS = ("Id", "Div")
DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32", "float64", "int32", "int64"))


@dataclasses.dataclass
class CollectiveLimits:
    """What one process keeps for collectives, at most (a peer cannot grow it without bound)."""

    max_pending: int = 4096            # executions not started here that values (or errors) came for
    max_pending_bytes: int = 1 << 30   # the bytes of those values
    pending_idle_seconds: float = 600.0  # a pending value this old gives way when the table is full
    max_groups: int = 1024             # groups in the leader's table
    max_threads: int = 256             # executions in progress at once in this process


@dataclasses.dataclass(frozen=True)
class Instance:
    """What one collective node asks for (its attrs)."""

    op: str
    group_size: int
    group_key: int
    instance_key: int
    merge_op: str = "Add"
    final_op: str = "Id"
    shape: tuple | None = None      # CollectiveBcastRecv: the shape it receives
    dtype: np.dtype | None = None   # CollectiveBcastRecv: the dtype it receives
    timeout: float = 0.0            # seconds; 0: DEFAULT_TIMEOUT

    def __post_init__(self):
        if self.op not in OPS:
            raise errors.InvalidArgumentError(f"unknown collective op {self.op!r}; one of {list(OPS)}")
        for name in ("group_size", "group_key", "instance_key"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise errors.InvalidArgumentError(f"{self.op}: {name} must be an int, got {v!r}")
        if not 1 <= self.group_size <= MAX_GROUP_SIZE:
            raise errors.InvalidArgumentError(
                f"{self.op}: group_size must be in [1, {MAX_GROUP_SIZE}], got {self.group_size}")
        if self.merge_op not in MERGE_OPS:
            raise errors.InvalidArgumentError(
                f"{self.op}: merge_op must be one of {sorted(MERGE_OPS)}, got {self.merge_op!r}")
        if self.final_op not in FINAL_OPS:
            raise errors.InvalidArgumentError(f"{self.op}: final_op must be one of {list(FINAL_OPS)}, "
                                              f"got {self.final_op!r}")
        if not (self.timeout >= 0):
            raise errors.InvalidArgumentError(f"{self.op}: timeout_seconds must be >= 0, got {self.timeout!r}")

    def describe(self) -> str:
        return f"{self.op} (group_key={self.group_key}, instance_key={self.instance_key})"


def device_order(name: str):
    """The sort key of a member: job, replica, task, device type, index (its rank order)."""
    s = DeviceSpec.from_string(name)
    return (s.job or "", s.replica or 0, s.task or 0, s.device_type or "", s.device_index or 0, name)


def check_member(name, what: str = "device") -> str:
    """``name`` if it is a full device name (job, replica, task, type and index), else
    InvalidArgumentError."""
    if not isinstance(name, str) or not name or len(name) > 512:
        raise errors.InvalidArgumentError(f"collective member: {what} must be a device name, got {_short(name)}")
    s = DeviceSpec.from_string(name)
    if None in (s.job, s.replica, s.task, s.device_type, s.device_index):
        raise errors.InvalidArgumentError(
            f"collective member: {what} {name!r} is not a full device name "
            "(/job:J/replica:R/task:T/device:TYPE:I)")
    return name


def _short(v, n: int = 120) -> str:
    text = repr(v)
    return text if len(text) <= n else text[:n - 3] + "..."


# ----------------------------------------------------------------------------------------
# The leader's table


class _Group:
    __slots__ = ("size", "members", "devices", "waiters", "last_used", "error")

    def __init__(self, size: int):
        self.size = size
        self.members: set = set()
        self.devices: list | None = None  # the ordered members, once all have joined
        self.waiters: list = []           # callbacks of members waiting for the rest
        self.last_used = time.monotonic()
        self.error = None                 # why it can never complete (members disagree on its size)


class GroupTable:
    """A group leader's table: members join, and each learns the ordered member list once
    ``group_size`` of them have (``join``'s callback). Bounded: ``max_groups`` groups; a
    group nobody waits on gives way to a new one (least recently used first), else
    ``ResourceExhaustedError``.

    A group whose members disagree on its size can never complete: every member waiting
    fails at once, and so does every member that joins in the next ``FAILED_GROUP_SECONDS``
    (those still on their way), after which the group_key is free again."""

    FAILED_GROUP_SECONDS = 30.0

    def __init__(self, max_groups: int = 1024, name: str = "this process"):
        self._lock = threading.Lock()
        self._groups: dict[int, _Group] = {}
        self.max_groups = max_groups
        self.name = name

    def join(self, group_key: int, group_size: int, device: str, callback) -> None:
        """``device`` joins group ``group_key`` of ``group_size``; ``callback(devices, error)``
        is called once (maybe at once, in this thread) with the ordered members, or with the
        error that ended the group (members disagreeing on its size, a member too many), unless
        ``withdraw``n first."""
        check_member(device)
        calls, failed = [], None
        with self._lock:
            g = self._groups.get(group_key)
            now = time.monotonic()
            if g is not None and g.error is not None and now - g.last_used >= self.FAILED_GROUP_SECONDS:
                del self._groups[group_key]
                g = None
            if g is None:
                self._make_room(group_key)
                g = self._groups[group_key] = _Group(group_size)
            if g.error is not None:
                failed = g.error
            elif g.size != group_size:
                failed = errors.InvalidArgumentError(
                    f"collective group_key={group_key}: members disagree on group_size: "
                    f"{sorted(g.members, key=device_order)} joined with group_size={g.size}, "
                    f"{device} with group_size={group_size}")
                if g.devices is None:  # it can never complete: everyone waiting learns why
                    calls = [(cb, None) for cb in g.waiters]
                    g.waiters, g.error, g.last_used = [], failed, now
            elif device in g.members:
                g.last_used = now
                if g.devices is None:
                    g.waiters.append(callback)
                else:
                    calls = [(callback, g.devices)]
            elif g.devices is not None:
                failed = errors.InvalidArgumentError(
                    f"collective group_key={group_key} is complete with {g.size} members {g.devices}; "
                    f"{device} is not one of them")
            else:
                g.last_used = now
                g.members.add(device)
                g.waiters.append(callback)
                if len(g.members) == g.size:
                    g.devices = sorted(g.members, key=device_order)
                    calls = [(cb, g.devices) for cb in g.waiters]
                    g.waiters = []
        if failed is not None:
            for cb, _ in calls:
                cb(None, failed)
            callback(None, failed)
            return
        for cb, devices in calls:
            cb(list(devices), None)

    def withdraw(self, group_key: int, callback) -> None:
        """``callback`` no longer waits (its member stays joined)."""
        with self._lock:
            g = self._groups.get(group_key)
            if g is not None and callback in g.waiters:
                g.waiters.remove(callback)

    def arrived(self, group_key: int) -> list:
        """The members of ``group_key`` that have joined, in rank order."""
        with self._lock:
            g = self._groups.get(group_key)
            return sorted(g.members, key=device_order) if g is not None else []

    def _make_room(self, group_key) -> None:
        if len(self._groups) < self.max_groups:
            return
        idle = sorted((g.last_used, k) for k, g in self._groups.items() if not g.waiters)
        if not idle:
            raise errors.ResourceExhaustedError(
                f"collective group_key={group_key}: the group leader {self.name} holds {len(self._groups)} "
                f"groups with members waiting, the most it keeps (CollectiveLimits.max_groups)")
        del self._groups[idle[0][1]]


# ----------------------------------------------------------------------------------------
# One process's executions


class _Slot:
    """What one execution on one member receives: values by round, its group's members, the
    first error. Made by the execution, or earlier by a value that arrived first."""

    __slots__ = ("cond", "chunks", "consumed", "error", "peer_error", "active", "touched", "nbytes", "group",
                 "sends")

    def __init__(self, lock):
        self.cond = threading.Condition(lock)
        self.chunks: dict = {}       # round -> (src, signature, value)
        self.consumed: set = set()   # rounds taken
        self.error = None            # the first error of this execution
        self.peer_error = False      # the error came from another member (not sent on)
        self.active = False          # its execution has started here
        self.touched = time.monotonic()
        self.nbytes = 0              # of its values, while its execution has not started
        self.group = None            # the ordered members, once known
        self.sends = 0               # sends not answered yet


class _Execution:
    __slots__ = ("inst", "device", "value", "done", "exec_id", "key", "slot", "deadline", "timeout", "signature",
                 "devices", "unwatch", "waiting_for_group", "finished")

    def __init__(self, inst, device, value, done, exec_id, slot):
        self.inst, self.device, self.value, self.done, self.exec_id = inst, device, value, done, exec_id
        self.key = (device, inst.group_key, inst.instance_key, exec_id)
        self.slot = slot
        self.timeout = inst.timeout or DEFAULT_TIMEOUT
        self.deadline = time.monotonic() + self.timeout
        self.signature = None
        self.devices = None
        self.unwatch = None
        self.waiting_for_group = False
        self.finished = False

    def where(self) -> str:
        # The kernel's error already names the node, op and device.
        return f"collective group_key={self.inst.group_key}, instance_key={self.inst.instance_key} (execution " \
               f"{self.exec_id})"

    def error(self, cls, message: str) -> errors.OpError:
        return cls(f"{self.where()}: {message}")


def _describe_signature(sig) -> str:
    if not isinstance(sig, dict):
        return _short(sig)
    text = f"{sig.get('op')} of {sig.get('dtype')}{list(sig.get('shape') or [])}"
    if sig.get("op") == REDUCE:
        text += f" merge_op={sig.get('merge_op')} final_op={sig.get('final_op')}"
    return _short(text, 200)


class CollectiveExecutor:
    """One process's collectives (see the module docstring). Every member is in this process
    unless a subclass says otherwise (``is_local``, ``send``, ``resolve_group``)."""

    def __init__(self, name: str = "this process", limits: CollectiveLimits | None = None):
        self.name = name
        self.limits = limits or CollectiveLimits()
        self._lock = threading.Lock()
        self._slots: dict[tuple, _Slot] = {}
        self._counters: dict[tuple, int] = {}    # (device, group_key, instance_key) -> executions started
        self._groups: dict[tuple, list] = {}     # (group_key, device) -> ordered members
        self._resolving: dict[tuple, list] = {}  # (group_key, device) -> executions waiting for it
        self._withdraw: dict[tuple, object] = {}  # (group_key, device) -> ends a resolution nobody waits for
        self._pending = 0                        # slots whose execution has not started ...
        self._pending_bytes = 0                  # ... and the bytes of their values
        self.leader_table = GroupTable(self.limits.max_groups, name)
        self._pool = ThreadPoolExecutor(self.limits.max_threads, thread_name_prefix="tw-collective")
        self._closed = False

    # --- what a subclass with members in other processes changes ------------------------
    def is_local(self, device: str) -> bool:
        return True

    def send(self, ex: _Execution, dst: str, header: dict, value):
        """Deliver ``value`` (None with an error header) to member ``dst``: None when done, or a
        Future whose failure fails ``ex``. Must not keep ``value`` after returning."""
        self.put(header, None if value is None else np.array(value, copy=True))
        return None

    def resolve_group(self, group_key: int, group_size: int, device: str, deadline: float) -> None:
        """Find the members of ``group_key`` for ``device`` and call ``group_resolved`` with
        them (or with the error that ended the group); ``deadline`` (``time.monotonic()``) is
        that of the execution asking. Here this process is the leader."""
        def on_done(devices, error):
            self.group_resolved(group_key, device, devices, error)
        with self._lock:
            self._withdraw[(group_key, device)] = lambda: self.leader_table.withdraw(group_key, on_done)
        self.leader_table.join(group_key, group_size, device, on_done)

    def arrived(self, group_key: int, device: str) -> list:
        """The members known to have joined ``group_key`` (for a timeout's message)."""
        return self.leader_table.arrived(group_key)

    # --- entry point of the kernels -------------------------------------------------------
    def start(self, step, inst: Instance, device: str, value, done) -> None:
        """Run one execution of ``inst`` on member ``device`` with input ``value`` (None for a
        broadcast receive); ``done(output)`` or ``done(None, error)`` later, from any thread."""
        key3 = (device, inst.group_key, inst.instance_key)
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                exec_id = self._counters.get(key3, 0)
                self._counters[key3] = exec_id + 1
                slot = self._slots.get((*key3, exec_id))
                if slot is None:
                    slot = self._slots[(*key3, exec_id)] = _Slot(self._lock)
                else:
                    self._pending -= 1
                    self._pending_bytes -= slot.nbytes
                slot.active = True
        if closed:
            done(None, errors.CancelledError(f"{inst.describe()} on {device}: {self.name} is shutting down"))
            return
        ex = _Execution(inst, device, value, done, exec_id, slot)
        self._watch(ex, step)
        try:
            self._pool.submit(self._run, ex)
        except RuntimeError:  # the pool was shut down meanwhile
            self._finish(ex, None, ex.error(errors.CancelledError, f"{self.name} is shutting down"))

    def _watch(self, ex: _Execution, step) -> None:
        """An abort or cancellation of the step ends the execution's waits at once."""
        if step is None:
            return

        def cancelled():
            self.fail(ex, ex.error(errors.CancelledError, "the step was cancelled (it timed out, failed "
                                   "elsewhere or its session closed)"))
        on_cancel = getattr(step, "on_cancel", None)
        if on_cancel is not None and not on_cancel(cancelled):
            cancelled()
        rv = getattr(step, "rendezvous", None)
        if rv is not None and hasattr(rv, "watch"):
            def aborted(_value, error):
                message = getattr(error, "message", str(error))
                cls = type(error) if isinstance(error, errors.OpError) else errors.AbortedError
                self.fail(ex, ex.error(cls, f"the step was aborted: {message}"))
            if rv.watch(aborted):
                ex.unwatch = lambda: rv.unwatch(aborted)
            else:
                aborted(None, rv.error)

    def fail(self, ex: _Execution, error: errors.OpError, from_peer: bool = False) -> None:
        """End ``ex``'s waits with ``error`` (the first error wins)."""
        with self._lock:
            slot = ex.slot
            if slot.error is None and not ex.finished:
                slot.error, slot.peer_error = error, from_peer
                slot.cond.notify_all()

    # --- one execution ----------------------------------------------------------------------
    def _run(self, ex: _Execution) -> None:
        result, error, from_peer = None, None, False
        try:
            ex.signature = _signature(ex)
            devices = self._members(ex)
            ex.devices = devices
            rank = devices.index(ex.device)
            if ex.inst.op == REDUCE:
                result = self._all_reduce(ex, devices, rank)
            elif ex.inst.op == GATHER:
                result = self._all_gather(ex, devices, rank)
            else:
                result = self._broadcast(ex, devices, rank)
            self._wait(ex, lambda s: True if s.sends == 0 else None, lambda: "its sends to be answered")
        except errors.OpError as e:
            from_peer = e is ex.slot.error and ex.slot.peer_error
            error = e if e.message.startswith(ex.where()) else ex.error(type(e), e.message)
        except Exception as e:  # noqa: BLE001 - a bug here must still end the step
            error = ex.error(errors.InternalError, f"{type(e).__name__}: {e}")
        self._finish(ex, result, error, from_peer)

    def _finish(self, ex: _Execution, result, error, from_peer: bool = False) -> None:
        with self._lock:
            ex.finished = True
            self._slots.pop(ex.key, None)
            if ex.waiting_for_group:
                self._stop_waiting_for_group(ex)
        if ex.unwatch is not None:
            ex.unwatch()
        if error is not None and not from_peer and ex.devices:
            self._send_error(ex, error)
        if error is not None:
            ex.done(None, error)
        else:
            ex.done(result)

    def _send_error(self, ex: _Execution, error: errors.OpError) -> None:
        """Tell every other member that this execution failed (best effort: a member that
        cannot be told fails by its own timeout)."""
        for dst in ex.devices:
            if dst == ex.device:
                continue
            header = self._header(ex, dst, -1)
            message = error.message.removeprefix(ex.where() + ": ")
            header["error"] = {"code": int(error.error_code), "message": message[:4000]}
            try:
                self.send(ex, dst, header, None)
            except Exception:  # noqa: BLE001, S112 - best effort
                continue

    def _wait(self, ex: _Execution, ready, what):
        """Block until ``ready(slot)`` is not None (returned), an error of the execution
        (raised), or its deadline (DeadlineExceededError saying ``what()`` it waited for)."""
        slot = ex.slot
        with self._lock:
            while True:
                v = ready(slot)
                if v is not None:
                    return v
                if slot.error is not None:
                    raise slot.error
                remaining = ex.deadline - time.monotonic()
                if remaining <= 0:
                    break
                slot.cond.wait(remaining)
        raise ex.error(errors.DeadlineExceededError, f"timed out after {ex.timeout:g} s waiting for {what()}")

    # --- the group --------------------------------------------------------------------------
    def _members(self, ex: _Execution) -> list:
        inst = ex.inst
        if inst.group_size == 1:
            return [ex.device]
        key = (inst.group_key, ex.device)
        start = False
        with self._lock:
            devices = self._groups.get(key)
            if devices is None:
                waiting = self._resolving.get(key)
                if waiting is None:
                    waiting = self._resolving[key] = []
                    start = True
                waiting.append(ex)
                ex.waiting_for_group = True
        if devices is None:
            if start:
                self.resolve_group(inst.group_key, inst.group_size, ex.device, ex.deadline)

            def what():
                got = self.arrived(inst.group_key, ex.device)
                return (f"the other members of the group to join: {len(got)} of {inst.group_size} have "
                        f"({got})")
            devices = self._wait(ex, lambda s: s.group, what)
        if len(devices) != inst.group_size:
            raise ex.error(errors.InvalidArgumentError,
                           f"group_key={inst.group_key} has {len(devices)} members {devices}; this op says "
                           f"group_size={inst.group_size}")
        return devices

    def group_resolved(self, group_key: int, device: str, devices, error) -> None:
        """The answer to ``resolve_group``: every execution waiting for it learns it."""
        if devices is not None:
            try:
                devices = [check_member(d, "member") for d in devices]
                if device not in devices or len(set(devices)) != len(devices):
                    raise errors.InvalidArgumentError(
                        f"collective group_key={group_key}: the leader answered members {_short(devices)}, "
                        f"which do not hold {device} exactly once")
            except errors.OpError as e:
                devices, error = None, e
        with self._lock:
            waiting = self._resolving.pop((group_key, device), [])
            self._withdraw.pop((group_key, device), None)
            if devices is not None:
                self._groups[(group_key, device)] = devices
            for ex in waiting:
                ex.waiting_for_group = False
                if ex.finished:
                    continue
                if devices is not None:
                    ex.slot.group = devices
                elif ex.slot.error is None:
                    ex.slot.error = error
                ex.slot.cond.notify_all()

    def still_resolving(self, group_key: int, device: str) -> float | None:
        """The earliest deadline (``time.monotonic()``) of the executions that still wait for
        the members of ``group_key``, None when none does (a remote resolution polls the leader
        only while one does, and asks it to answer before that deadline)."""
        with self._lock:
            waiting = self._resolving.get((group_key, device))
            return min(ex.deadline for ex in waiting) if waiting else None

    def _stop_waiting_for_group(self, ex: _Execution) -> None:
        """``ex`` gave up (lock held): when no execution waits any more, the resolution ends."""
        key = (ex.inst.group_key, ex.device)
        waiting = self._resolving.get(key)
        if waiting is not None and ex in waiting:
            waiting.remove(ex)
            if not waiting:
                del self._resolving[key]
                withdraw = self._withdraw.pop(key, None)
                if withdraw is not None:
                    withdraw()  # the table's lock is only ever taken inside ours, never around it
        ex.waiting_for_group = False

    # --- values between members -------------------------------------------------------------
    def _header(self, ex: _Execution, dst: str, rnd: int) -> dict:
        return {"group_key": ex.inst.group_key, "instance_key": ex.inst.instance_key, "exec": ex.exec_id,
                "round": rnd, "src": ex.device, "dst": dst}

    def _send(self, ex: _Execution, dst: str, rnd: int, value) -> None:
        header = self._header(ex, dst, rnd)
        header["signature"] = ex.signature
        future = self.send(ex, dst, header, value)
        if future is None:
            return
        with self._lock:
            ex.slot.sends += 1

        def answered(f):
            err = f.exception()
            with self._lock:
                ex.slot.sends -= 1
                if err is not None and ex.slot.error is None and not ex.finished:
                    msg = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
                    cls = type(err) if isinstance(err, errors.OpError) else errors.UnavailableError
                    ex.slot.error = ex.error(cls, f"sending round {rnd} to {dst} failed: {msg}")
                ex.slot.cond.notify_all()
        future.add_done_callback(answered)

    def _recv(self, ex: _Execution, rnd: int, src: str, shape: tuple, dtype: np.dtype):
        """The value of round ``rnd`` from member ``src`` (checked against this member's
        signature, and to be of ``shape`` and ``dtype``)."""
        def ready(slot):
            got = slot.chunks.pop(rnd, None)
            if got is not None:
                slot.consumed.add(rnd)
            return got
        sender, signature, value = self._wait(ex, ready, lambda: f"round {rnd} of the values from {src}")
        if signature != ex.signature:
            raise ex.error(errors.InvalidArgumentError,
                           f"members disagree: {sender} has {_describe_signature(signature)}, {ex.device} has "
                           f"{_describe_signature(ex.signature)}")
        if sender != src:
            raise ex.error(errors.InvalidArgumentError, f"round {rnd} came from {sender}, expected it from {src}")
        if value.dtype != dtype or value.shape != tuple(shape):
            raise ex.error(errors.InvalidArgumentError,
                           f"round {rnd} from {src} holds {value.dtype}{list(value.shape)}, expected "
                           f"{dtype}{list(shape)}")
        return value

    def put(self, header: dict, value) -> None:
        """A value (or, with ``header["error"]``, a member's failure) for the execution the
        header names, from another member. Kept until that execution takes it when it has not
        started here yet (bounded by ``limits``); dropped when it has ended."""
        key = (header["dst"], header["group_key"], header["instance_key"], header["exec"])
        nbytes = 0 if value is None else int(value.nbytes)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                if self._closed or key[3] < self._counters.get(key[:3], 0):
                    return  # that execution has ended here: a late value of a failed one
                self._make_room(key, 1, nbytes)
                slot = self._slots[key] = _Slot(self._lock)
                self._pending += 1
            elif not slot.active:
                self._make_room(key, 0, nbytes)
            slot.touched = time.monotonic()
            error = header.get("error")
            src = header["src"]
            if error is not None:
                if slot.error is None:
                    cls = errors.exception_type_from_error_code(error["code"])
                    slot.error = cls(f"member {src} failed: {error['message']}")
                    slot.peer_error = True
            else:
                rnd = header["round"]
                if rnd in slot.chunks or rnd in slot.consumed:
                    if slot.error is None:
                        first = slot.chunks[rnd][0] if rnd in slot.chunks else "another member"
                        slot.error = errors.InvalidArgumentError(
                            f"round {rnd} was sent twice (by {first} and by {src}): does more than one member "
                            "send the broadcast?")
                else:
                    slot.chunks[rnd] = (src, header.get("signature"), value)
                    if not slot.active:
                        slot.nbytes += nbytes
                        self._pending_bytes += nbytes
            slot.cond.notify_all()

    def _make_room(self, key, slots: int, nbytes: int) -> None:
        """Room for ``slots`` (0 or 1) more pending executions and ``nbytes`` more of their
        values (lock held): pending ones untouched for ``limits.pending_idle_seconds`` give
        way, else ResourceExhaustedError. (Values for an execution in progress are not
        counted: each is one of its rounds, taken soon.)"""
        lim = self.limits

        def full():
            return (self._pending + slots > lim.max_pending
                    or self._pending_bytes + nbytes > lim.max_pending_bytes)
        if not full():
            return
        now = time.monotonic()
        for k, s in list(self._slots.items()):
            if not s.active and now - s.touched >= lim.pending_idle_seconds:
                del self._slots[k]
                self._pending -= 1
                self._pending_bytes -= s.nbytes
        if full():
            raise errors.ResourceExhaustedError(
                f"collective value for {key[0]} (group_key={key[1]}, instance_key={key[2]}, execution {key[3]}): "
                f"{self.name} holds {self._pending} values for executions that have not started here "
                f"({self._pending_bytes} bytes), the most it keeps (CollectiveLimits.max_pending={lim.max_pending}, "
                f"max_pending_bytes={lim.max_pending_bytes})")

    # --- the algorithms -----------------------------------------------------------------------
    def _all_reduce(self, ex: _Execution, devices: list, rank: int):
        inst, value = ex.inst, ex.value
        n = len(devices)
        flat = np.array(value, copy=True).reshape(-1)
        if n > 1:
            merge = MERGE_OPS[inst.merge_op]
            bounds = [flat.size * i // n for i in range(n + 1)]
            chunks = [flat[bounds[i]:bounds[i + 1]] for i in range(n)]
            succ, pred = devices[(rank + 1) % n], devices[(rank - 1) % n]
            for s in range(n - 1):  # reduce-scatter
                self._send(ex, succ, s, chunks[(rank - s) % n])
                c = chunks[(rank - s - 1) % n]
                merge(c, self._recv(ex, s, pred, c.shape, c.dtype), out=c)
            for s in range(n - 1):  # all-gather of the merged chunks
                self._send(ex, succ, n - 1 + s, chunks[(rank + 1 - s) % n])
                c = chunks[(rank - s) % n]
                c[...] = self._recv(ex, n - 1 + s, pred, c.shape, c.dtype)
        if inst.final_op == "Div" and n > 1:
            if flat.dtype.kind == "f":
                np.divide(flat, flat.dtype.type(n), out=flat)
            else:  # truncating toward zero, as TensorFlow's integer Div
                q = np.abs(flat) // n
                flat[...] = np.where(flat < 0, -q, q)
        return flat.reshape(np.shape(value))

    def _all_gather(self, ex: _Execution, devices: list, rank: int):
        value = np.asarray(ex.value)
        if value.ndim == 0:
            raise ex.error(errors.InvalidArgumentError, "all_gather needs a tensor of rank >= 1, got a scalar")
        n = len(devices)
        out = np.empty((n * value.shape[0], *value.shape[1:]), value.dtype)
        blocks = [out[i * value.shape[0]:(i + 1) * value.shape[0]] for i in range(n)]
        blocks[rank][...] = value
        succ, pred = devices[(rank + 1) % n], devices[(rank - 1) % n]
        for s in range(n - 1):
            self._send(ex, succ, s, blocks[(rank - s) % n])
            b = blocks[(rank - s - 1) % n]
            b[...] = self._recv(ex, s, pred, b.shape, b.dtype)
        return out

    def _broadcast(self, ex: _Execution, devices: list, rank: int):
        if ex.inst.op == BCAST_SEND:
            value = np.asarray(ex.value)
            for dst in devices:
                if dst != ex.device:
                    self._send(ex, dst, 0, value)
            return value
        shape, dtype = tuple(ex.inst.shape), np.dtype(ex.inst.dtype)

        def ready(slot):
            got = slot.chunks.pop(0, None)
            if got is not None:
                slot.consumed.add(0)
            return got
        sender, signature, value = self._wait(
            ex, ready, lambda: f"the broadcast from another member of {devices} (none sent it)")
        if signature != ex.signature:
            raise ex.error(errors.InvalidArgumentError,
                           f"members disagree: {sender} sends {_describe_signature(signature)}, {ex.device} "
                           f"receives {_describe_signature(ex.signature)}")
        if sender not in devices:
            raise ex.error(errors.InvalidArgumentError, f"the broadcast came from {sender}, not a member {devices}")
        if value.dtype != dtype or value.shape != shape:
            raise ex.error(errors.InvalidArgumentError, f"the broadcast from {sender} holds "
                           f"{value.dtype}{list(value.shape)}, expected {dtype}{list(shape)}")
        return np.array(value, copy=True)

    # ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Fail every execution in progress with CancelledError; no new one starts."""
        with self._lock:
            self._closed = True
            slots = list(self._slots.values())
            for s in slots:
                if s.error is None:
                    s.error = errors.CancelledError(f"collective execution: {self.name} is shutting down")
                s.cond.notify_all()
        self._pool.shutdown(wait=False)


def _signature(ex: _Execution) -> dict:
    inst = ex.inst
    if inst.op == BCAST_RECV:
        dtype, shape = np.dtype(inst.dtype), list(inst.shape)
    else:
        value = np.asarray(ex.value)
        dtype, shape = value.dtype, list(value.shape)
        if inst.op == BCAST_SEND and inst.shape is not None and tuple(inst.shape) != value.shape:
            raise ex.error(errors.InvalidArgumentError,
                           f"the tensor to broadcast has shape {shape}, the op declares {list(inst.shape)}")
    if dtype not in DTYPES:
        raise ex.error(errors.InvalidArgumentError, f"dtype {dtype} is not one of {sorted(str(d) for d in DTYPES)}")
    sig = {"op": "CollectiveBcast" if inst.op in (BCAST_SEND, BCAST_RECV) else inst.op, "dtype": dtype.name,
           "shape": [int(d) for d in shape]}
    if inst.op == REDUCE:
        sig["merge_op"], sig["final_op"] = inst.merge_op, inst.final_op
    return sig


# ----------------------------------------------------------------------------------------
# Which executor a step uses

_local: CollectiveExecutor | None = None
_local_lock = threading.Lock()


def local_executor() -> CollectiveExecutor:
    """The process's executor for members that are all in this process (local Sessions)."""
    global _local
    with _local_lock:
        if _local is None:
            _local = CollectiveExecutor("this process")
        return _local


def executor_for(step) -> CollectiveExecutor:
    """The executor of ``step``: its rendezvous's (a worker's: members on other tasks are
    reached over the cluster's transport), else this process's local one."""
    ex = getattr(getattr(step, "rendezvous", None), "collective_executor", None)
    return ex if ex is not None else local_executor()
