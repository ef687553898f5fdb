"""One step of execution: what both executors (flat plans in ``executor.py``, plans with
control flow in ``frames.py``) and the kernels they run share.

- ``StepContext``: per-run information handed to kernels (the step's rendezvous, options,
  cancellation, per-step resources such as loop-gradient stacks, tracing).
- ``DEAD``: the value of a tensor on an untaken branch (whitepaper 4.4); it also travels
  between devices and tasks (``distributed/wire.py`` encodes it).
- ``wrap_kernel_error``: whatever a kernel raised, as a ``tw.errors`` class naming the node,
  op and device.
- ``StepState``: the run-time state of one execution of a compiled partition — done event,
  first error, failure handling that cancels the step and aborts its rendezvous.
- ``enter_loop``/``leave_loop``: which executor loop the current thread runs, so an async
  completion joins that loop's queue instead of recursing into another one.
"""

from __future__ import annotations

import threading

import numpy as np

from tensorweave.framework import errors


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
        self.stats = stats  # per-node timings are appended here when the run is traced
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
        self.stats = step.stats  # a list to append per-node timings to, when tracing

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
