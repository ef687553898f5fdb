"""Mutexes (TF's ``MutexV2``/``MutexLock``/``ConsumeMutexLock``, the state under
``tw.CriticalSection``): a resource in the session's containers that one step at a time holds.

A step that finds the mutex held parks its continuation in the mutex's FIFO of waiters and
holds no thread (``lock_async``, like a blocked queue dequeue); the release hands the mutex to
the next waiter. A hold ends at the first of: the ``ConsumeMutexLock`` node (the normal end
of a critical section), the step being cancelled (a failed node, a timeout, a closed
session), or the step's ``StepContext`` being dropped — a step that ran the lock but not the
release (it fetched something inside the critical section directly) — like TF, where the
lock is released when the lock tensor is destroyed. A step that asks again for a mutex it
holds is refused at once (it would wait for itself forever).
"""

from __future__ import annotations

import collections
import itertools
import threading

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime import handles


class _Hold:
    """One step's hold of a mutex; released at most once, also when dropped with its step.
    Only the step refers to it (the mutex keeps its ``token``), so it dies with the step."""

    __slots__ = ("mutex", "step_id", "released", "token")
    _tokens = itertools.count(1)

    def __init__(self, mutex, step_id):
        self.mutex, self.step_id, self.released = mutex, step_id, False
        self.token = next(self._tokens)

    def release(self) -> None:
        self.mutex.release(self)

    def __del__(self):  # the step ended without its release node: free the mutex for others
        if not self.released:
            self.mutex.release(self)


class Mutex:
    kind = "mutex"

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self._holder: tuple | None = None  # (token, step id) of the hold, not the _Hold itself
        self._waiters: collections.deque = collections.deque()  # (step, done)

    @property
    def waiting(self) -> int:
        """How many steps wait for the mutex now."""
        with self._lock:
            return len(self._waiters)

    @property
    def held(self) -> bool:
        with self._lock:
            return self._holder is not None

    def lock_async(self, step, done) -> None:
        """Hold the mutex for ``step``: ``done(token)`` once it is held (now, or when the
        holder releases it), ``done(None, error)`` if the step is cancelled while waiting."""
        key = _key(self)
        with self._lock:
            holder = self._holder
            if holder is not None and holder[1] == step.step_id:
                err = errors.InvalidArgumentError(
                    f"mutex {self.name!r}: step {step.step_id} already holds it and asks for it again "
                    "(a critical section executed inside itself would wait for itself forever)")
            elif holder is None:
                err = None
                hold = _Hold(self, step.step_id)
                self._holder = (hold.token, hold.step_id)
            else:
                entry = (step, done)
                self._waiters.append(entry)
                err = hold = None
        if err is not None:
            done(None, err)
            return
        if hold is None:
            def cancelled():
                with self._lock:
                    try:
                        self._waiters.remove(entry)
                    except ValueError:  # already handed the mutex (then cancel releases it)
                        return
                done(None, errors.CancelledError(f"mutex {self.name!r}: the step was cancelled while waiting"))
            step.on_cancel(cancelled)
            return
        self._grant(step, hold, key, done)

    def _grant(self, step, hold, key, done) -> None:
        step.step_resources.setdefault(key, []).append(hold)
        if not step.on_cancel(hold.release):  # cancelled already: give it straight back
            hold.release()
            done(None, errors.CancelledError(f"mutex {self.name!r}: the step was cancelled"))
            return
        done(np.array(f"{self.name}@{step.step_id}".encode(), dtype=object))

    def release(self, hold: _Hold) -> None:
        """End ``hold`` (once; later calls do nothing) and hand the mutex to the next waiter."""
        with self._lock:
            if hold.released or self._holder is None or self._holder[0] != hold.token:
                hold.released = True
                return
            hold.released = True
            self._holder = None
            nxt = self._waiters.popleft() if self._waiters else None
            if nxt is not None:
                step, done = nxt
                new = _Hold(self, step.step_id)
                self._holder = (new.token, new.step_id)
        if nxt is not None:
            self._grant(step, new, _key(self), done)

    def release_step(self, step) -> None:
        """The ``ConsumeMutexLock`` node: end ``step``'s hold of this mutex."""
        holds = step.step_resources.get(_key(self)) or []
        for hold in holds:
            hold.release()
        holds.clear()


def _key(mutex) -> tuple:
    return ("mutex", id(mutex))


def make_handle(container: str, name: str) -> np.ndarray:
    return handles.make_handle(container, name, "mutex")


def lookup(resources, handle) -> Mutex:
    return handles.lookup(resources, handle, Mutex, "mutex")


def lookup_or_create(resources, container: str, name: str) -> Mutex:
    m = resources.manager_for(container).lookup_or_create(container, name, lambda: Mutex(name))
    if not isinstance(m, Mutex):
        raise errors.InvalidArgumentError(f"resource {name!r} in container {container!r} is not a mutex")
    return m
