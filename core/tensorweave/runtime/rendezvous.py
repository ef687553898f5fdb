"""The rendezvous where Send and Recv meet (whitepaper 3.2.2, 5.3).

One ``LocalRendezvous`` serves one step in one process. A key names the transfer:
(source device, destination device, tensor name, frame and iteration); the step is the
rendezvous itself. ``send`` never blocks. ``recv_async`` never blocks either: it calls its
callback with the value as soon as it has been sent (possibly right away, in the caller's
thread, or later in the sender's). ``abort`` fails every waiting and future receive with the
error, so a step in which one partition failed can never leave another one waiting.
"""

from __future__ import annotations

import threading

from tensorweave.framework import errors


def make_key(src_device: str, dst_device: str, tensor_name: str, frame_iter=(0, 0)) -> str:
    return f"{src_device};{dst_device};{tensor_name};{frame_iter[0]}:{frame_iter[1]}"


class LocalRendezvous:
    def __init__(self):
        self._lock = threading.Lock()
        self._values: dict = {}
        self._waiters: dict = {}
        self.error: BaseException | None = None

    def send(self, key: str, value) -> None:
        with self._lock:
            if self.error is not None:
                raise _aborted(self.error)
            waiter = self._waiters.pop(key, None)
            if waiter is None:
                if key in self._values:
                    raise errors.InternalError(f"rendezvous: {key} was sent twice in one step")
                self._values[key] = value
                return
        waiter(value, None)

    def recv_async(self, key: str, callback) -> None:
        """``callback(value, error)`` is called exactly once."""
        with self._lock:
            if self.error is None:
                if key in self._values:
                    value = self._values.pop(key)
                else:
                    if key in self._waiters:
                        raise errors.InternalError(f"rendezvous: {key} is received twice in one step")
                    self._waiters[key] = callback
                    return
        if self.error is not None:
            callback(None, _aborted(self.error))
        else:
            callback(value, None)

    def abort(self, error: BaseException) -> None:
        """Fail all pending and future receives of this step with ``error`` (first one wins)."""
        with self._lock:
            if self.error is None:
                self.error = error
            waiters = list(self._waiters.values())
            self._waiters.clear()
            self._values.clear()
        for w in waiters:
            w(None, _aborted(self.error))


def _aborted(cause: BaseException) -> errors.OpError:
    return errors.AbortedError(f"step aborted because another part of it failed: {cause}")
