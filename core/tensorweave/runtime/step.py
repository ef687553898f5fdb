"""One step of execution: what both executors (flat plans in ``executor.py``, plans with
control flow in ``frames.py``) and the kernels they run share.

- ``StepContext``: per-run information handed to kernels (the step's rendezvous, options,
  cancellation, per-step resources such as loop-gradient stacks, tracing).
- ``StepStatsCollector``: what a traced step records as it runs (raw tuples, cheap), turned
  into ``runtime.config.StepStats`` once the step is over.
- ``DEAD``: the value of a tensor on an untaken branch (whitepaper 4.4); it also travels
  between devices and tasks (``distributed/wire.py`` encodes it).
- ``wrap_kernel_error``: whatever a kernel raised, as a ``tw.errors`` class naming the node,
  op and device.
- ``StepState``: the run-time state of one execution of a compiled partition — done event,
  first error, failure handling that cancels the step and aborts its rendezvous.
- ``enter_loop``/``leave_loop``: which executor loop the current thread runs, so an async
  completion joins that loop's queue instead of recursing into another one.
- ``estimate_flops``: a node's cost as both executors' scheduling decisions read it.
- ``quiet_floats``/``restore_floats``: NumPy's floating-point warnings off around a run of
  kernels (TF's kernels never warn about an inf or a NaN they make).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.config import (
    AllocatorMemoryUsed,
    DeviceStepStats,
    NodeExecStats,
    NodeOutput,
    StepStats,
    TransferStats,
)
from tensorweave.runtime.rendezvous import make_key

# np.errstate builds its settings object on every entry (about 1.5 us, a step's worth of
# small-kernel overhead); NumPy 2 keeps the settings in a context variable, so the "ignore"
# settings are built once and set and reset directly. Without that private variable (another
# NumPy), np.errstate itself.
try:
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _IGNORE_ALL = _make_extobj(all="ignore")

    def quiet_floats():
        """Enter NumPy's all-"ignore" error state in this thread; returns the token for
        ``restore_floats`` (call it in a ``finally``)."""
        return _extobj_contextvar.set(_IGNORE_ALL)

    def restore_floats(token) -> None:
        _extobj_contextvar.reset(token)
except ImportError:  # pragma: no cover - NumPy without the context variable
    def quiet_floats():
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def restore_floats(token) -> None:
        token.__exit__(None, None, None)


# Ops whose cost is their multiply-adds (estimate_flops), fused forms included.
PRODUCTS = ("MatMul", "_FusedMatMul", "BatchMatMul", "Conv2D", "_FusedConv2D", "MatrixInverse", "MatrixDeterminant")


def estimate_flops(op) -> float:
    """A node's cost for scheduling decisions: 2 * m * n * k for products and convolutions
    (fused ones included; unknown shapes: infinite), else its input and output elements."""
    shapes = [t.shape for t in op.inputs]
    if op.type in PRODUCTS:
        if all(s.is_fully_defined() for s in shapes) and op.outputs and op.outputs[0].shape.is_fully_defined():
            if op.type in ("Conv2D", "_FusedConv2D"):  # each output element: kh * kw * in_channels multiply-adds
                f = shapes[1].as_list()
                k = f[0] * f[1] * f[2]
            else:
                k = shapes[0].as_list()[-1] if shapes[0].ndims else 1
            return 2.0 * op.outputs[0].shape.num_elements() * k
        return float("inf")
    n = 0
    for t in list(op.inputs) + list(op.outputs):
        e = t.shape.num_elements()
        n += e if e is not None else 1e6
    return float(n)


# Step kinds of the flat schedule. NULLARY/UNARY/BINARY steps call their kernel directly with
# 0, 1 or 2 input slots (their value is the number of inputs); GENERIC steps go through
# _run_generic (async, context, several outputs, allocator tracking); FREE drops dead slots.
K_NULLARY, K_UNARY, K_BINARY, K_GENERIC, K_FREE = 0, 1, 2, 3, 4

# Outputs smaller than this are neither tracked by the allocator nor dropped early: the
# CPU allocator's accounting (a weak reference per array, about 1 us) would cost more than
# computing them. Decided at plan time from static shapes, else per output at run time.
SMALL_BYTES = 64 * 1024


def assign_frees(nodes, freeable) -> dict:
    """Set each node's ``frees``: the ``freeable`` slots it reads (its inputs, host copies'
    sources), or writes and nobody reads; return how many nodes free each slot (a slot is
    dead once that many have finished). For the flat executor's dynamic runs and for the
    root iteration of a step with control flow (frames.py)."""
    used = {s for n in nodes for s in n.ins} | {src for n in nodes for _fn, src, _slot in n.pre if src >= 0}
    uses: dict = {}
    for n in nodes:
        n.frees = tuple(s for s in {*n.ins, *(src for _fn, src, _slot in n.pre if src >= 0),
                                    *(s for s in n.outs if s not in used)} if s in freeable)
        for s in n.frees:
            uses[s] = uses.get(s, 0) + 1
    return uses


class StepContext:
    """Per-run information handed to kernels that ask for it (``takes_context``/async)."""

    __slots__ = ("step_id", "rendezvous", "options", "cancelled", "session", "stats", "_cancel_cbs",
                 "step_resources")

    def __init__(self, step_id=0, rendezvous=None, options=None, session=None, stats=None):
        self.step_id = step_id
        self.rendezvous = rendezvous
        self.options = options
        self.cancelled = False
        self.session = session
        self.stats = stats  # a StepStatsCollector when the run is traced, else None
        self._cancel_cbs = None
        # Resources that live for one step (the stacks of while-loop gradients), shared by
        # every partition of the step in this process; dropped with the StepContext.
        self.step_resources = {}

    def on_cancel(self, fn) -> bool:
        """Call ``fn()`` when the step is cancelled (timeout, or another node failed), so an
        async kernel parked outside the executor (a blocked queue dequeue) gives its wait
        back. False, without registering, when the step is already cancelled."""
        with _cancel_lock:
            if self.cancelled:
                return False
            if self._cancel_cbs is None:
                self._cancel_cbs = []
            self._cancel_cbs.append(fn)
            return True

    def cancel(self) -> None:
        """Mark the step cancelled and run the ``on_cancel`` callbacks (once each)."""
        with _cancel_lock:
            self.cancelled = True
            cbs, self._cancel_cbs = self._cancel_cbs, None
        for fn in cbs or ():
            fn()


_cancel_lock = threading.Lock()  # guards StepContext cancellation state (rarely contended)


class _Dead:
    """The value of a dead tensor (one instance)."""

    __slots__ = ()

    def __repr__(self):
        return "DEAD"


DEAD = _Dead()


def nbytes_of(v) -> int:
    """Size of a host or device tensor (device handles expose shape and dtype); 0 for a dead
    value or a control token."""
    n = getattr(v, "nbytes", None)
    if n is not None:
        return int(n)
    shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
    if shape is None or dtype is None:
        return 0
    try:
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    except TypeError:
        return 0


_dtype_names: dict = {}  # dtype object -> its name (numpy's .name is slow to compute)


class StepStatsCollector:
    """One traced step's records in one process (every partition, every thread).

    The executors call ``add`` once per node with ``time.perf_counter_ns`` readings; that is
    all the traced path does per node (a tuple and an append, no objects built), so a traced
    step stays within 2x an untraced one. ``step_stats()`` builds the ``StepStats`` when the
    step is over, moving the readings onto the wall clock through one (``time_ns``,
    ``perf_counter_ns``) pair taken when the collector was made: monotonic within the step,
    and on the same clock as the process's other wall-clock readings (the master compares
    them with its own to estimate a task's clock offset).
    """

    __slots__ = ("records", "thread_names", "wall0", "pc0")

    def __init__(self):
        self.records: list = []
        self.thread_names: dict = {}
        self.pc0 = time.perf_counter_ns()
        self.wall0 = time.time_ns()

    def thread(self) -> int:
        """The calling thread's native id (its name is remembered for the timeline)."""
        tid = threading.get_native_id()
        if tid not in self.thread_names:
            self.thread_names[tid] = threading.current_thread().name
        return tid

    def add(self, device: str, node: str, op: str, all_start: int, op_start: int, op_end: int, all_end: int,
            tid: int, values, allocator=None, transfer=None, frame: str = "", iteration: int = 0) -> None:
        """Record one node: perf_counter_ns readings, the thread, its output values (sized
        now; not kept), the allocator to read memory from, and for a Send/Recv the tuple
        (key, tensor, src device, dst device, transport, bytes)."""
        outs = []
        for v in values:
            nb = getattr(v, "nbytes", None)  # a host array: no call into nbytes_of
            outs.append((nb if type(nb) is int else nbytes_of(v), getattr(v, "dtype", None), getattr(v, "shape", None)))
        mem = None if allocator is None else (allocator, allocator.bytes_in_use, allocator.peak_bytes_in_use)
        self.records.append((device, node, op, all_start, op_start, op_end, all_end, tid, outs, mem,
                             transfer, frame, iteration))

    def step_stats(self) -> StepStats:
        """The step's ``StepStats`` (devices in the order they first recorded something)."""
        base = self.wall0 - self.pc0
        by_device: dict = {}
        names = _dtype_names
        node_cls, out_cls, mem_cls = NodeExecStats, NodeOutput, AllocatorMemoryUsed
        for dev, node, op, a0, o0, o1, a1, tid, outs, mem, tr, frame, it in self.records:
            entry = by_device.get(dev)
            if entry is None:
                entry = by_device[dev] = (DeviceStepStats(dev), set())
            entry[1].add(tid)
            output = []
            slot = 0
            for nb, dt, sh in outs:
                name = names.get(dt)
                if name is None:
                    name = names[dt] = "" if dt is None else str(getattr(dt, "name", dt))
                output.append(out_cls(slot, nb, name, None if sh is None else list(sh)))
                slot += 1
            entry[0].node_stats.append(node_cls(
                node, op, dev, base + a0, o0 - a0, o1 - a0, a1 - a0, tid, output,
                [] if mem is None else [mem_cls(mem[0].name, mem[1], mem[2])],
                None if tr is None else TransferStats(tr[0], tr[1], tr[5], tr[2], tr[3], tr[4]), frame, it))
        thread_names = self.thread_names
        out = []
        for ds, tids in by_device.values():
            ds.thread_names = {t: thread_names.get(t, "") for t in sorted(tids)}
            out.append(ds)
        return StepStats(out)

    def cost_records(self) -> list:
        """The computing nodes' timings as the cost model reads them ({"node", "op",
        "device", "start", "end", "output_bytes"}, seconds); transfers are left out."""
        out = []
        for dev, node, op, _, o0, o1, _, _, outs, _, tr, _, _ in self.records:
            if tr is None:
                nb = outs[0][0] if len(outs) == 1 else sum(o[0] for o in outs)
                out.append({"node": node, "op": op, "device": dev, "start": o0 / 1e9, "end": o1 / 1e9,
                            "output_bytes": nb})
        return out


def transfer_record(transfer, step, value, frame_iter=(0, 0)) -> tuple:
    """A traced Send's or Recv's transfer, as ``StepStatsCollector.add`` takes it: (rendezvous
    key, tensor, source device, destination device, transport, bytes). ``transfer`` is the
    executor node's (src device, dst device, tensor name)."""
    src, dst, what = transfer
    return (make_key(src.name, dst.name, what, frame_iter), what, src.name, dst.name,
            step.rendezvous.transport(src.name, dst.name), nbytes_of(value))


def wrap_kernel_error(exc: BaseException, op, device) -> errors.OpError:
    """Turn whatever a kernel raised into a tw error that names the node, op and device."""
    where = f"{op.type} node '{op.name}' on {device.name}" if op is not None else f"a node on {device.name}"
    if isinstance(exc, errors.OpError):
        if op is not None and exc.node_def is None:
            exc.node_def = op.name
            exc.op = op
            if f"node '{op.name}'" not in exc.message:
                exc.message = f"{where}: {exc.message}"
                exc.args = (exc.message,)
        return exc
    if isinstance(exc, MemoryError):
        return errors.ResourceExhaustedError(f"{where}: out of memory: {exc}", node_def=getattr(op, "name", None), op=op)
    if isinstance(exc, (ValueError, IndexError, TypeError, np.linalg.LinAlgError, KeyError, ZeroDivisionError)):
        return errors.InvalidArgumentError(f"{where}: {type(exc).__name__}: {exc}", node_def=getattr(op, "name", None), op=op)
    return errors.InternalError(f"{where}: {type(exc).__name__}: {exc}", node_def=getattr(op, "name", None), op=op)


class StepState:
    """Run-time state of one execution of a compiled partition (both executors).

    ``done`` is set when every node has finished (run or skipped); ``error`` holds the first
    failure as (exception, op). After a failure the step is cancelled, so the remaining nodes
    finish without running and ``done`` is always reached: a failed step never hangs.
    """

    def __init__(self, part, vals, step: StepContext, pool, lock):
        self.part = part
        self.vals = vals
        self.step = step
        self.pool = pool
        self.lock = lock
        self.done = threading.Event()
        self.error = None
        self.stats = step.stats  # the step's StepStatsCollector when tracing, else None

    def _fail(self, e, n):
        with self.lock:
            first = self.error is None
            if first:
                self.error = (e, n.op)
        self.step.cancel()
        if first and self.step.rendezvous is not None and not isinstance(e, errors.AbortedError):
            self.step.rendezvous.abort(wrap_kernel_error(e, n.op, self.part.device))


# Which executor loop this thread is running: an async completion that arrives inside its own
# state's loop joins that loop's queue; inside another one's, it goes to the pool instead of
# recursing.
in_loop = threading.local()


def enter_loop(state, queue):
    """Mark this thread as running ``state``'s loop over ``queue``; returns what to restore."""
    outer = (getattr(in_loop, "active", False), getattr(in_loop, "state", None), getattr(in_loop, "queue", None))
    in_loop.active, in_loop.state, in_loop.queue = True, state, queue
    return outer


def leave_loop(outer) -> None:
    in_loop.active, in_loop.state, in_loop.queue = outer
