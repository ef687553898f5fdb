"""The rendezvous where Send and Recv meet (whitepaper 3.2.2, 5.3).

One ``LocalRendezvous`` serves one step in one process: a Session's multi-device step, or a
worker's share of a distributed step (``distributed/worker.py`` subclasses it to pull values
whose producer is on another task). A key names the transfer: (source device, destination
device, tensor name, frame and iteration); the step is the rendezvous itself.

``send`` never blocks. ``recv_async`` never blocks either: it calls its callback with the
value as soon as it has been sent (possibly right away, in the caller's thread, or later in
the sender's). ``recv`` waits, with a timeout, for a thread that must answer (a worker
serving another task's RecvTensor). ``abort`` fails every waiting and future receive — and
any other wait registered with ``watch`` — with the error, so a step in which one part failed
can never leave another one waiting.
"""

from __future__ import annotations

import threading

from tensorweave.framework import errors


def make_key(src_device: str, dst_device: str, tensor_name: str, frame_iter=(0, 0)) -> str:
    return f"{src_device};{dst_device};{tensor_name};{frame_iter[0]}:{frame_iter[1]}"


class LocalRendezvous:
    def __init__(self, step_id: int = 0):
        self.step_id = step_id
        self._lock = threading.Lock()
        self._values: dict = {}
        self._waiters: dict = {}   # key -> [callback(value, error)]
        self._watched: set = set()  # other waits that an abort must end (pulls from other tasks)
        self.error: BaseException | None = None

    def transport(self, src_device: str, dst_device: str) -> str:
        """How a value moves from ``src_device`` to ``dst_device`` in this step, as traced
        steps report it: "local" here, both ends in this process (a subclass that pulls from
        other tasks names its transport)."""
        return "local"

    def send(self, key: str, value) -> None:
        with self._lock:
            if self.error is not None:
                raise aborted(self.error)
            waiters = self._waiters.pop(key, None)
            if waiters is None:
                if key in self._values:
                    raise errors.InternalError(f"rendezvous: {key} was sent twice in step {self.step_id}")
                self._values[key] = value
                return
        for cb in waiters:
            cb(value, None)

    def recv_async(self, key: str, callback) -> None:
        """``callback(value, error)`` is called exactly once."""
        with self._lock:
            if self.error is None:
                if key in self._values:
                    value = self._values.pop(key)
                else:
                    self._waiters.setdefault(key, []).append(callback)
                    return
        if self.error is not None:
            callback(None, aborted(self.error))
        else:
            callback(value, None)

    def recv(self, key: str, timeout: float):
        """Block until ``key`` is sent (or the step aborts); DeadlineExceeded after ``timeout``."""
        box = {}
        ev = threading.Event()

        def got(value, error):
            box["v"], box["e"] = value, error
            ev.set()

        LocalRendezvous.recv_async(self, key, got)  # this process's table, whatever a subclass routes
        if not ev.wait(timeout):
            with self._lock:
                lst = self._waiters.get(key, [])
                if got in lst:
                    lst.remove(got)
            raise errors.DeadlineExceededError(
                f"rendezvous: {key} was not produced within {timeout:.0f}s in step {self.step_id}")
        if box["e"] is not None:
            raise box["e"]
        return box["v"]

    def watch(self, callback) -> bool:
        """Fail ``callback`` too when the step aborts; False (not registered) when it already has."""
        with self._lock:
            if self.error is not None:
                return False
            self._watched.add(callback)
            return True

    def unwatch(self, callback) -> None:
        with self._lock:
            self._watched.discard(callback)

    def abort(self, error: BaseException) -> None:
        """Fail all pending and future receives of this step with ``error`` (first one wins)."""
        with self._lock:
            if self.error is None:
                self.error = error
            waiters = [cb for lst in self._waiters.values() for cb in lst]
            waiters += self._watched
            self._watched = set()
            self._waiters.clear()
            self._values.clear()
        for cb in waiters:
            cb(None, aborted(self.error))


def aborted(cause: BaseException) -> errors.OpError:
    """What a receive in an aborted step raises: a cancellation or a lost peer as itself,
    anything else as AbortedError naming it."""
    if isinstance(cause, errors.AbortedError | errors.CancelledError | errors.UnavailableError):
        return type(cause)(cause.message)
    return errors.AbortedError(f"step aborted because another part of it failed: {cause}")
