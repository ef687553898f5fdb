"""``tw.train.Coordinator``: lets a set of threads stop together (TF1 semantics).

Any thread may ``request_stop`` (optionally with the exception that made it stop); every
thread polls ``should_stop``; the main thread ``join``\\ s them and gets the first
exception re-raised. ``OutOfRangeError`` (input exhausted) counts as a clean stop.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

from tensorweave.framework import errors


class Coordinator:
    """A coordinator for threads (``tf.train.Coordinator``)."""

    def __init__(self, clean_stop_exception_types=None):
        if clean_stop_exception_types is None:
            clean_stop_exception_types = (errors.OutOfRangeError,)
        self._clean_stop_exception_types = tuple(clean_stop_exception_types)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._exc_info_to_raise = None
        self._joined = False
        self._registered_threads: set[threading.Thread] = set()

    def _filter_exception(self, ex):
        """exc_info of ``ex`` (an exception or an exc_info tuple), None for a clean stop."""
        if isinstance(ex, tuple):
            ex2 = ex[1]
        else:
            ex2 = ex
            ex = (type(ex2), ex2, ex2.__traceback__)
        if isinstance(ex2, self._clean_stop_exception_types):
            return None
        return ex

    def request_stop(self, ex=None) -> None:
        """Ask all threads to stop. The first non-clean exception given is re-raised by
        ``join``; later ones are ignored (they are usually consequences of the first)."""
        with self._lock:
            ex = self._filter_exception(ex) if ex is not None else None
            if self._joined:
                if ex is not None:
                    raise ex[1].with_traceback(ex[2])
                return
            if not self._stop_event.is_set():
                if ex is not None and self._exc_info_to_raise is None:
                    if not isinstance(ex[1], BaseException):
                        raise TypeError(f"request_stop expects an exception or exc_info tuple, got {ex!r}")
                    self._exc_info_to_raise = ex
                self._stop_event.set()

    def clear_stop(self) -> None:
        """Clear the stop request (and the exception) so the coordinator can be reused."""
        with self._lock:
            self._joined = False
            self._exc_info_to_raise = None
            self._stop_event.clear()

    def should_stop(self) -> bool:
        return self._stop_event.is_set()

    @contextlib.contextmanager
    def stop_on_exception(self):
        """``with coord.stop_on_exception():`` in a thread body: an exception raised inside
        requests a stop with it (and is not propagated further)."""
        try:
            yield
        except BaseException:  # noqa: BLE001 - handed to the coordinator, re-raised by join
            self.request_stop(ex=sys.exc_info())

    def wait_for_stop(self, timeout=None) -> bool:
        """Wait until a stop is requested (at most ``timeout`` seconds); True if it was."""
        return self._stop_event.wait(timeout)

    def register_thread(self, thread: threading.Thread) -> None:
        """Add a thread for ``join`` to wait for when called without a list."""
        with self._lock:
            self._registered_threads.add(thread)

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False) -> None:
        """Wait for ``threads`` (and the registered ones) to end.

        Once a stop has been requested they get ``stop_grace_period_secs`` more; threads
        still alive then raise RuntimeError naming them (unless ``ignore_live_threads``).
        Re-raises the exception passed to ``request_stop``, if any.
        """
        with self._lock:
            threads = set(threads or ()) | self._registered_threads
        # Wait for every thread to end, or for a stop request.
        while any(t.is_alive() for t in threads) and not self.wait_for_stop(0.05):
            pass
        # A stop was requested (or all ended): give the others the grace period.
        deadline = time.monotonic() + stop_grace_period_secs
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stragglers = [t.name for t in threads if t.is_alive()]
        with self._lock:
            self._joined = True
            self._registered_threads = set()
            exc = self._exc_info_to_raise
        if exc is not None:
            raise exc[1].with_traceback(exc[2])
        if stragglers and not ignore_live_threads:
            raise RuntimeError(f"coordinator stopped with threads still running: {' '.join(sorted(stragglers))}")

    @property
    def joined(self) -> bool:
        return self._joined

    def raise_requested_exception(self) -> None:
        """Re-raise the exception passed to ``request_stop``, if any."""
        with self._lock:
            if self._exc_info_to_raise is not None:
                e = self._exc_info_to_raise
                raise e[1].with_traceback(e[2])


class LooperThread(threading.Thread):
    """A thread that runs ``target(*args)`` every ``timer_interval_secs`` until the
    coordinator stops (``tf.train.LooperThread``)."""

    def __init__(self, coord, timer_interval_secs, target=None, args=None, kwargs=None):
        if not isinstance(coord, Coordinator):
            raise ValueError(f"coord must be a Coordinator, got {coord!r}")
        super().__init__()
        self.daemon = True
        self._coord = coord
        self._timer_interval_secs = timer_interval_secs
        self._target = target
        self._args = args or ()
        self._kwargs = kwargs or {}
        coord.register_thread(self)

    def run(self):
        with self._coord.stop_on_exception():
            if self._timer_interval_secs is None:
                while not self._coord.should_stop():
                    self._target(*self._args, **self._kwargs)
            else:
                while not self._coord.wait_for_stop(self._timer_interval_secs):
                    self._target(*self._args, **self._kwargs)
