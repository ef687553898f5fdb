"""Queues (whitepaper 4.6): the host-side data structure behind the FIFOQueueV2 and
RandomShuffleQueueV2 ops, and how kernels find one from a handle.

A queue lives in a Session's resource containers (``runtime/containers.py``): the default
container ("") belongs to the Session, named containers are process-wide. The queue op
outputs a *handle*: a scalar string tensor ``b"<container>:<name>"`` (plain data, so a
graph with queues can be shipped to another process; the receiving worker resolves the
handle in its own resources). Any kernel holding a handle value finds the queue with::

    q = queues.lookup(ctx.resources, handle)      # ctx: the kernel factory's KernelContext

Waiting never holds a thread. Enqueue and dequeue take a ``done`` continuation (the
executor's async-kernel convention, see ``framework/kernel_registry.py``)::

    def read(step, done, reader_handle, queue_handle):          # an is_async kernel
        q = queues.lookup(resources, queue_handle)
        def got(components, error=None):
            if error is not None:          # OutOfRangeError: closed and empty;
                done(None, error)          # CancelledError: the step was cancelled
                return
            filename = components[0]       # a tuple with one ndarray per component
            ...
            done((key, value))
        q.dequeue_async(step, got)

``done``/``got`` is called exactly once, possibly right away in the calling thread,
possibly later in the thread of whoever enqueues or closes. An attempt that cannot finish
now is *parked* in the queue and registers ``step.on_cancel`` (``StepContext``): when the
step is cancelled (a ``RunOptions.timeout_in_ms`` deadline, or another node failed) the
attempt is removed and whatever it had already taken is put back at the front, so no
element is ever lost to a cancelled step.

Semantics follow TensorFlow 1.x: attempts are served in arrival order; an enqueue into a
closed queue fails with ``CancelledError``; ``close(cancel_pending_enqueues=True)`` also
fails the enqueues still waiting for room; once closed, a dequeue that can no longer get
its elements fails with ``OutOfRangeError`` (``dequeue_up_to`` returns what there is, if
anything) and elements a failed ``dequeue_many`` had taken are put back. A
``RandomShuffleQueue`` hands out a uniformly random element, and only while it holds more
than ``min_after_dequeue`` elements (any element once closed); its generator is seeded
from the op's (seed, seed2), so a new Session replays the same order.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.runtime import handles

__all__ = ["Queue", "FIFOQueue", "RandomShuffleQueue", "make_handle", "parse_handle", "lookup",
           "lookup_or_create"]


# ----------------------------------------------------------------------------------------
# handles
def make_handle(container: str, name: str) -> np.ndarray:
    """The handle value (a 0-d object array holding bytes) of queue ``name`` in ``container``."""
    return handles.make_handle(container, name, "queue")


def parse_handle(handle) -> tuple[str, str]:
    """(container, name) of a handle value (bytes, str or a 0-d array of either)."""
    return handles.parse_handle(handle, "queue")


def lookup(resources, handle) -> Queue:
    """The queue a handle value names, in ``resources`` (a ``SessionResources``)."""
    return handles.lookup(resources, handle, Queue, "queue")


def lookup_or_create(resources, container: str, name: str, create) -> Queue:
    """The queue ``name`` in ``container``, made by ``create()`` if absent. An existing queue
    must have the same kind, component types, shapes and capacity (shared_name reuse)."""
    q = resources.manager_for(container).lookup_or_create(container, name, create)
    if not isinstance(q, Queue):
        raise errors.InvalidArgumentError(f"resource {name!r} in container {container!r} is not a queue")
    return q


# ----------------------------------------------------------------------------------------
class _Attempt:
    """One parked enqueue or dequeue."""

    __slots__ = ("items", "n", "allow_smaller", "collected", "done", "step")

    def __init__(self, done, step, items=None, n=0, allow_smaller=False):
        self.done = done
        self.step = step
        self.items = items          # enqueue: deque of element tuples still to put
        self.n = n                  # dequeue: elements wanted (-1: a single dequeue)
        self.allow_smaller = allow_smaller
        self.collected = []         # dequeue: elements taken so far


class Queue:
    """Base of the queue kinds. Thread-safe; every method returns without waiting.

    ``dtypes``: one DType per component; ``shapes``: one TensorShape per component, or []
    when unspecified (then ``dequeue_many`` is not available, as in TensorFlow);
    ``capacity``: -1 for unbounded.
    """

    kind = "queue"

    def __init__(self, name: str, component_dtypes, shapes=(), capacity: int = -1):
        self.name = name
        self.dtypes = [dtypes_mod.as_dtype(d) for d in component_dtypes]
        self.shapes = [TensorShape(s) for s in shapes]
        if not self.dtypes:
            raise errors.InvalidArgumentError(f"queue '{name}' needs at least one component type")
        if self.shapes and len(self.shapes) != len(self.dtypes):
            raise errors.InvalidArgumentError(
                f"queue '{name}': {len(self.shapes)} shapes for {len(self.dtypes)} component types")
        self.capacity = int(capacity) if capacity is not None and capacity >= 0 else -1
        self._lock = threading.Lock()
        self._closed = False
        self._enqueuers: collections.deque[_Attempt] = collections.deque()
        self._dequeuers: collections.deque[_Attempt] = collections.deque()

    # -- state -----------------------------------------------------------------------------
    def size(self) -> int:
        with self._lock:
            return self._len()

    @property
    def closed(self) -> bool:
        return self._closed

    def waiting(self) -> tuple[int, int]:
        """(parked enqueues, parked dequeues): attempts waiting for room or elements."""
        with self._lock:
            return len(self._enqueuers), len(self._dequeuers)

    def describe(self) -> str:
        return f"{self.kind} '{self.name}'"

    def same_spec(self, other: Queue) -> bool:
        return (type(self) is type(other) and self.dtypes == other.dtypes
                and [s.as_tuple() for s in self.shapes] == [s.as_tuple() for s in other.shapes]
                and self.capacity == other.capacity)

    # -- checking components -----------------------------------------------------------------
    def check_components(self, components, many: bool) -> list[tuple]:
        """The element tuples in ``components`` (one array per component; a batch along axis
        0 when ``many``), copied; InvalidArgumentError naming the queue and component."""
        if len(components) != len(self.dtypes):
            raise errors.InvalidArgumentError(
                f"{self.describe()} has {len(self.dtypes)} components, got {len(components)} values")
        arrays, n = [], None
        for i, (v, dt) in enumerate(zip(components, self.dtypes)):
            a = np.asarray(v)
            if dt.is_string:
                if a.dtype != object and a.dtype.kind not in "SU":
                    raise self._component_error(i, f"dtype {a.dtype}", f"dtype {dt.name}")
                a = dtypes_mod.to_numpy(a, dt)
            elif a.dtype != dt.np_dtype:
                raise self._component_error(i, f"dtype {a.dtype}", f"dtype {dt.name}")
            else:
                a = a.copy()  # the queue keeps elements; the caller's buffer may change later
            shape = a.shape
            if many:
                if a.ndim == 0:
                    raise self._component_error(i, "a scalar", "a batch (rank >= 1) for enqueue_many")
                if n is None:
                    n = shape[0]
                elif shape[0] != n:
                    raise self._component_error(i, f"batch size {shape[0]}",
                                                f"batch size {n} (that of component 0)")
                shape = shape[1:]
            if self.shapes and not self.shapes[i].is_compatible_with(shape):
                raise self._component_error(i, f"shape {tuple(shape)}", f"shape {self.shapes[i]}")
            arrays.append(a)
        if not many:
            return [tuple(arrays)]
        return [tuple(a[j, ...] for a in arrays) for j in range(n)]

    def _component_error(self, i, got, want):
        return errors.InvalidArgumentError(
            f"{self.describe()}: component {i} of the enqueued value has {got}, but the queue "
            f"expects {want}")

    # -- async API (kernels) ---------------------------------------------------------------
    def enqueue_async(self, step, components, done, many: bool = False) -> None:
        """Put one element (or, with ``many``, a batch split along axis 0), waiting for room.
        ``done(None)`` once all are in, or ``done(None, error)``."""
        try:
            items = self.check_components(components, many)
        except errors.OpError as e:
            done(None, e)
            return
        self._submit(_Attempt(done, step, items=collections.deque(items)), self._enqueuers)

    def dequeue_async(self, step, done) -> None:
        """Take one element: ``done(tuple_of_arrays)``, or ``done(None, error)``."""
        self._submit(_Attempt(done, step, n=-1), self._dequeuers)

    def dequeue_many_async(self, step, n: int, done, allow_smaller: bool = False) -> None:
        """Take ``n`` elements, stacked per component along a new axis 0: ``done(tuple)``.
        ``allow_smaller`` (dequeue_up_to): once closed, fewer (but at least one) will do."""
        what = "dequeue_up_to" if allow_smaller else "dequeue_many"
        if n < 0:
            done(None, errors.InvalidArgumentError(f"{self.describe()}: {what} needs n >= 0, got {n}"))
            return
        if not self.shapes or not all(s.is_fully_defined() for s in self.shapes):
            done(None, errors.InvalidArgumentError(
                f"{self.describe()}: {what} requires the queue's components to have fully defined "
                f"shapes; its shapes are {[str(s) for s in self.shapes] or 'unspecified'} (pass shapes= "
                "when creating the queue)"))
            return
        if n == 0:
            done(tuple(np.empty((0,) + s.as_tuple(), dtype=d.np_dtype) for s, d in zip(self.shapes, self.dtypes)))
            return
        self._submit(_Attempt(done, step, n=n, allow_smaller=allow_smaller), self._dequeuers)

    def close(self, cancel_pending_enqueues: bool = False) -> None:
        """No more enqueues. Waiting dequeues that cannot be satisfied fail (OutOfRangeError);
        with ``cancel_pending_enqueues`` the enqueues waiting for room fail (CancelledError)."""
        out = []
        with self._lock:
            self._closed = True
            if cancel_pending_enqueues:
                while self._enqueuers:
                    a = self._enqueuers.popleft()
                    out.append((a.done, None, errors.CancelledError(
                        f"{self.describe()} was closed with cancel_pending_enqueues; "
                        f"{len(a.items)} element(s) of this enqueue were not added")))
            self._flush(out)
        _call(out)

    def reset(self) -> None:
        """Drop all elements and reopen; waiting attempts fail (CancelledError). Called when
        the queue's container is reset or its Session closes."""
        out = []
        with self._lock:
            err = f"{self.describe()} was reset (its session closed or its container was reset)"
            for a in list(self._enqueuers) + list(self._dequeuers):
                out.append((a.done, None, errors.CancelledError(err)))
            self._enqueuers.clear()
            self._dequeuers.clear()
            self._clear()
            self._closed = False
        _call(out)

    # -- engine ----------------------------------------------------------------------------
    def _submit(self, a: _Attempt, waiters) -> None:
        out = []
        with self._lock:
            if waiters is self._enqueuers and self._closed:
                out.append((a.done, None, errors.CancelledError(f"{self.describe()} is closed; cannot enqueue")))
                parked = False
            else:
                waiters.append(a)
                self._flush(out)
                parked = a in waiters
        _call(out)
        # Still waiting: give the wait back if the step is cancelled. Registered outside the
        # queue lock (a cancel runs its callbacks, which take this lock, in its own thread);
        # if the attempt finishes meanwhile, the late cancel finds nothing to remove.
        if parked and a.step is not None and not a.step.on_cancel(lambda: self._cancel(a)):
            self._cancel(a)  # the step was cancelled already

    def _cancel(self, a: _Attempt) -> None:
        out = []
        with self._lock:
            if not self._remove(a):
                return  # already finished
            out.append((a.done, None, errors.CancelledError(
                f"{self.describe()}: {'enqueue' if a.items is not None else 'dequeue'} cancelled "
                "because its step was cancelled (timeout, or another node failed)")))
            self._flush(out)
        _call(out)

    def _remove(self, a: _Attempt) -> bool:
        """Take ``a`` out of the waiters, putting back what it had taken (lock held)."""
        waiters = self._enqueuers if a.items is not None else self._dequeuers
        try:
            waiters.remove(a)
        except ValueError:
            return False
        if a.collected:
            self._restore(a.collected)
            a.collected = []
        return True

    def _flush(self, out: list) -> None:
        """Serve waiting attempts in arrival order until none can progress (lock held).
        Appends (done, value, error) to ``out``; the caller calls them after unlocking."""
        progress = True
        while progress:
            progress = False
            cap = self.capacity
            while self._enqueuers:
                a = self._enqueuers[0]
                if a.step is not None and a.step.cancelled:
                    # Its step already failed or timed out: do not add elements behind its back.
                    self._enqueuers.popleft()
                    out.append((a.done, None, errors.CancelledError(f"{self.describe()}: enqueue cancelled")))
                    continue
                while a.items and (cap < 0 or self._len() < cap):
                    self._put(a.items.popleft())
                    progress = True
                if a.items:
                    break
                self._enqueuers.popleft()
                out.append((a.done, None, None))
            while self._dequeuers:
                a = self._dequeuers[0]
                if a.step is not None and a.step.cancelled:
                    # Its step is going away: never hand it elements (they would be lost).
                    self._remove(a)
                    out.append((a.done, None, errors.CancelledError(f"{self.describe()}: dequeue cancelled")))
                    progress = True
                    continue
                want = 1 if a.n < 0 else a.n
                while len(a.collected) < want and self._can_take():
                    a.collected.append(self._take())
                    progress = True
                if len(a.collected) == want:
                    self._dequeuers.popleft()
                    out.append((a.done, self._result(a), None))
                    continue
                if not self._closed:
                    break
                # Closed, and nothing more can arrive for it.
                self._dequeuers.popleft()
                if a.allow_smaller and a.collected:
                    out.append((a.done, self._result(a), None))
                    continue
                if a.collected:
                    self._restore(a.collected)
                    a.collected = []
                    progress = True
                need = "1 element" if a.n < 0 else f"{a.n} elements"
                out.append((a.done, None, errors.OutOfRangeError(
                    f"{self.describe()} is closed and has insufficient elements (requested {need}, "
                    f"current size {self._len()})")))

    def _result(self, a: _Attempt):
        if a.n < 0:
            return a.collected[0]
        els = a.collected
        return tuple(np.stack([e[k] for e in els]) for k in range(len(self.dtypes)))

    # -- storage (subclasses; lock held) ------------------------------------------------
    def _len(self) -> int:
        raise NotImplementedError

    def _can_take(self) -> bool:
        raise NotImplementedError

    def _put(self, element) -> None:
        raise NotImplementedError

    def _take(self):
        raise NotImplementedError

    def _restore(self, elements) -> None:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError


def _call(out) -> None:
    for done, value, err in out:
        if err is not None:
            done(None, err)
        else:
            done(value)


class FIFOQueue(Queue):
    """Elements come out in the order they went in."""

    kind = "FIFOQueue"

    def __init__(self, name, component_dtypes, shapes=(), capacity=-1):
        super().__init__(name, component_dtypes, shapes, capacity)
        self._items: collections.deque = collections.deque()

    def _len(self):
        return len(self._items)

    def _can_take(self):
        return bool(self._items)

    def _put(self, element):
        self._items.append(element)

    def _take(self):
        return self._items.popleft()

    def _restore(self, elements):
        self._items.extendleft(reversed(elements))  # back at the front, in their order

    def _clear(self):
        self._items.clear()


class RandomShuffleQueue(Queue):
    """Elements come out in a random order; at least ``min_after_dequeue`` stay (until closed)."""

    kind = "RandomShuffleQueue"

    def __init__(self, name, component_dtypes, shapes=(), capacity=-1, min_after_dequeue=0, seed=0, seed2=0):
        super().__init__(name, component_dtypes, shapes, capacity)
        self.min_after_dequeue = int(min_after_dequeue)
        if self.capacity >= 0 and self.min_after_dequeue >= self.capacity:
            raise errors.InvalidArgumentError(
                f"{self.describe()}: min_after_dequeue ({self.min_after_dequeue}) must be less than "
                f"capacity ({self.capacity})")
        self._seeds = (int(seed), int(seed2))
        self._rng = _generator(*self._seeds)
        self._items: list = []

    def same_spec(self, other):
        return super().same_spec(other) and self.min_after_dequeue == other.min_after_dequeue

    def _len(self):
        return len(self._items)

    def _can_take(self):
        return len(self._items) > (0 if self._closed else self.min_after_dequeue)

    def _put(self, element):
        self._items.append(element)

    def _take(self):
        items = self._items
        i = int(self._rng.integers(len(items)))
        items[i], items[-1] = items[-1], items[i]
        return items.pop()

    def _restore(self, elements):
        self._items.extend(elements)

    def _clear(self):
        self._items.clear()
        self._rng = _generator(*self._seeds)


def _generator(seed, seed2):
    if seed == 0 and seed2 == 0:  # the random ops' convention: nondeterministic
        return np.random.default_rng()
    mask = (1 << 64) - 1
    return np.random.Generator(np.random.PCG64([seed & mask, seed2 & mask]))
