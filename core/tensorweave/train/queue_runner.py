"""``tw.train.QueueRunner``: threads that keep running a queue's enqueue ops (TF1 semantics),
and the ``QUEUE_RUNNERS`` collection helpers ``add_queue_runner``/``start_queue_runners``.

A runner thread loops ``sess.run(enqueue_op)`` until its coordinator stops or the input is
exhausted (``OutOfRangeError``, e.g. an epoch limit): when the last of its threads ends
that way it closes the queue, so consumers drain what is left and then get
``OutOfRangeError``. One extra thread per runner waits for the coordinator's stop and then
closes the queue with ``cancel_pending_enqueues``, which ends enqueues blocked on a full
queue; their ``CancelledError`` is the expected way out, not an error. Any other exception
is handed to ``coord.request_stop`` and re-raised by ``coord.join``.
"""

from __future__ import annotations

import sys
import threading

from tensorweave.framework import errors
from tensorweave.framework.graph import GraphKeys, get_default_graph, get_default_session


class QueueRunner:
    """Holds a queue and a list of enqueue ops to run in threads (``tf.train.QueueRunner``)."""

    def __init__(self, queue=None, enqueue_ops=None, close_op=None, cancel_op=None,
                 queue_closed_exception_types=None):
        if queue is None or not enqueue_ops:
            raise errors.InvalidArgumentError("QueueRunner needs a queue and at least one enqueue op")
        self._queue = queue
        self._enqueue_ops = list(enqueue_ops)
        self._close_op = close_op if close_op is not None else queue.close()
        self._cancel_op = cancel_op if cancel_op is not None else queue.close(cancel_pending_enqueues=True)
        self._queue_closed_exception_types = tuple(queue_closed_exception_types or (errors.OutOfRangeError,))
        self._lock = threading.Lock()
        self._runs_per_session: dict = {}
        self._exceptions_raised: list = []

    queue = property(lambda self: self._queue)
    enqueue_ops = property(lambda self: list(self._enqueue_ops))
    close_op = property(lambda self: self._close_op)
    cancel_op = property(lambda self: self._cancel_op)
    queue_closed_exception_types = property(lambda self: self._queue_closed_exception_types)
    exceptions_raised = property(lambda self: list(self._exceptions_raised))

    @property
    def name(self) -> str:
        return self._queue.name

    def _run(self, sess, enqueue_op, coord=None):
        decremented = False
        try:
            run = sess.make_callable(enqueue_op)
            while True:
                if coord is not None and coord.should_stop():
                    break
                try:
                    run()
                except self._queue_closed_exception_types:
                    # Input exhausted: the last thread of this runner closes the queue.
                    with self._lock:
                        self._runs_per_session[sess] -= 1
                        decremented = True
                        last = self._runs_per_session[sess] == 0
                    if last:
                        try:
                            sess.run(self._close_op)
                        except errors.OpError:
                            pass  # the session may be closing; nothing left to close then
                    return
        except errors.CancelledError:
            # Our cancel op (coordinator stop) or the session closing ended a blocked enqueue.
            if coord is None or not coord.should_stop():
                if not getattr(sess, "_closed", False):
                    self._report(coord, *sys.exc_info())
        except Exception:  # noqa: BLE001 - handed to the coordinator
            if coord is not None and coord.should_stop() and getattr(sess, "_closed", False):
                return  # the session closed under us after a stop: not an error
            self._report(coord, *sys.exc_info())
        finally:
            if not decremented:
                with self._lock:
                    self._runs_per_session[sess] -= 1

    def _report(self, coord, exc_type, exc, tb):
        if coord is not None:
            coord.request_stop((exc_type, exc, tb))
        else:
            with self._lock:
                self._exceptions_raised.append(exc)

    def _close_on_stop(self, sess, cancel_op, coord):
        coord.wait_for_stop()
        try:
            sess.run(cancel_op)
        except Exception:  # noqa: BLE001 - e.g. the session is already closed
            pass

    def create_threads(self, sess, coord=None, daemon=False, start=False) -> list[threading.Thread]:
        """One thread per enqueue op (plus one that cancels pending enqueues when ``coord``
        stops). Returns [] if threads of this runner already run for ``sess``."""
        with self._lock:
            if self._runs_per_session.get(sess, 0) > 0:
                return []
            self._runs_per_session[sess] = len(self._enqueue_ops)
            self._exceptions_raised = []
        threads = [threading.Thread(target=self._run, args=(sess, op, coord), daemon=daemon,
                                    name=f"QueueRunner[{self.name}]#{i}")
                   for i, op in enumerate(self._enqueue_ops)]
        if coord is not None:
            threads.append(threading.Thread(target=self._close_on_stop, args=(sess, self._cancel_op, coord),
                                            daemon=daemon, name=f"QueueRunner[{self.name}]:close_on_stop"))
        for t in threads:
            if coord is not None:
                coord.register_thread(t)
            if start:
                t.start()
        return threads


def add_queue_runner(qr, collection=GraphKeys.QUEUE_RUNNERS) -> None:
    """Add ``qr`` to the graph collection ``collection`` (default QUEUE_RUNNERS)."""
    get_default_graph().add_to_collection(collection, qr)


def start_queue_runners(sess=None, coord=None, daemon=True, start=True, collection=GraphKeys.QUEUE_RUNNERS):
    """Create (and start) the threads of every QueueRunner in ``collection`` of the
    session's graph; returns them (for ``coord.join``)."""
    if sess is None:
        sess = get_default_session()
        if sess is None:
            raise errors.InvalidArgumentError(
                "start_queue_runners: no default session; pass sess= or use `with sess.as_default():`")
    threads = []
    for qr in sess.graph.get_collection(collection):
        threads.extend(qr.create_threads(sess, coord=coord, daemon=daemon, start=start))
    return threads
