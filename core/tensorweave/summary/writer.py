"""Event files: ``tw.summary.FileWriter`` (TF1's ``tf.summary.FileWriter``) and
``FileWriterCache``.

An event file is named ``events.out.tfevents.<seconds>.<hostname><suffix>`` and holds
TFRecord-framed records (``framework/record_io.py``: length, masked CRC32C, data, masked
CRC32C), each a serialized ``Event`` from tensorboard's ``event_pb2``; the first says
``file_version: "brain.Event:2"``. This is what TensorBoard (and TensorFlow's
``summary_iterator``) read.

Writing: callers put serialized events in a bounded queue (``max_queue``; a full queue
blocks the caller, as in TF1) and one background thread per file frames and writes them.
The file is unbuffered and each record goes to the operating system in one ``write``, so a
process killed at any moment leaves every record the thread had written whole and
readable; the thread also ``fsync``s every ``flush_secs`` seconds and on ``flush()``/
``close()`` (what survives a machine crash). Events still in the queue when a process dies
are lost; an ``atexit`` hook closes open writers at a normal exit, so those are written.
A write failure is raised once, as a tw.error naming the file, by the next ``flush``,
``close`` or ``add_*`` call; the file then takes no more events (it may end in a partial
record, and records behind it could not be read) until ``close`` and ``reopen``.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import queue
import socket
import threading
import time
import weakref

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.graph import get_default_graph
from tensorweave.framework.record_io import encode_record
from tensorweave.ops.summary_ops import tensorboard_protos
from tensorweave.summary.convert import graph_def_proto, run_metadata_proto

__all__ = ["FileWriter", "FileWriterCache", "EventFileWriter"]

log = logging.getLogger("tensorweave.summary")

FILE_VERSION = "brain.Event:2"
_CLOSE = object()


class _Flush:
    __slots__ = ("done",)

    def __init__(self):
        self.done = threading.Event()


def _os_error(e: OSError, path: str, action: str) -> errors.OpError:
    """A tw.error for an OSError while ``action`` on ``path``."""
    reason = e.strerror or str(e)
    msg = f"{action} {path!r}: {reason}"
    if isinstance(e, PermissionError) or e.errno in (errno.EACCES, errno.EPERM):
        return errors.PermissionDeniedError(msg + " (permission denied: choose a directory you can write to)")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return errors.ResourceExhaustedError(msg)
    return errors.FailedPreconditionError(msg)


def _make_logdir(logdir: str) -> None:
    if "://" in logdir:
        raise errors.UnimplementedError(
            f"FileWriter: {logdir!r} is not a local directory; only local file systems are supported")
    try:
        os.makedirs(logdir, exist_ok=True)
    except FileExistsError:
        raise errors.FailedPreconditionError(
            f"FileWriter: cannot use {logdir!r} as the log directory: it exists and is not a directory") from None
    except OSError as e:
        raise _os_error(e, logdir, "FileWriter: cannot create the log directory") from None
    if not os.path.isdir(logdir):
        raise errors.FailedPreconditionError(
            f"FileWriter: cannot use {logdir!r} as the log directory: it exists and is not a directory")


def _create_event_file(logdir: str, suffix: str) -> tuple[int, str]:
    # O_EXCL: two files started in the same second (a reopen, two writers on one logdir)
    # must not truncate each other; the later one takes the next second's name, which also
    # keeps TensorBoard's name order the creation order.
    host = socket.gethostname()
    stamp = int(time.time())
    for _ in range(1000):
        path = os.path.join(logdir, f"events.out.tfevents.{stamp:010d}.{host}{suffix}")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), path
        except FileExistsError:
            stamp += 1
        except OSError as e:
            raise _os_error(e, path, "FileWriter: cannot create the event file") from None
    raise errors.AlreadyExistsError(f"FileWriter: no free event file name in {logdir!r}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class EventFileWriter:
    """One event file at a time and the thread that writes it (TF1's EventFileWriter):
    ``add_event`` (a serialized Event or an Event proto), ``flush``, ``close``, ``reopen``."""

    def __init__(self, logdir, max_queue=10, flush_secs=120, filename_suffix=None):
        self._pb = tensorboard_protos("event files")
        self._logdir = os.fspath(logdir)
        if not isinstance(max_queue, int) or max_queue < 1:
            raise errors.InvalidArgumentError(f"FileWriter: max_queue must be an int >= 1, got {max_queue!r}")
        if not flush_secs or flush_secs <= 0:
            raise errors.InvalidArgumentError(f"FileWriter: flush_secs must be > 0, got {flush_secs!r}")
        self._max_queue, self._flush_secs = max_queue, float(flush_secs)
        self._suffix = filename_suffix or ""
        self._lock = threading.Lock()
        self._closed = True
        self._warned_closed = False
        _make_logdir(self._logdir)
        self._open()
        _LIVE.add(self)

    # -- the file and its thread ------------------------------------------------------------
    def _open(self):
        fd, path = _create_event_file(self._logdir, self._suffix)
        first = self._pb.event_pb2.Event(wall_time=time.time(), file_version=FILE_VERSION)
        try:
            _write_all(fd, encode_record(first.SerializeToString()))
        except OSError as e:
            os.close(fd)
            raise _os_error(e, path, "FileWriter: cannot write to the event file") from None
        self._fd, self._path = fd, path
        self._failure = self._unreported = None  # an OpError from the writer thread
        self._queue = queue.Queue(self._max_queue)
        self._thread = threading.Thread(target=self._run, args=(fd, path, self._queue),
                                        name=f"tw-event-writer:{os.path.basename(path)}", daemon=True)
        self._closed = False
        self._thread.start()

    def _run(self, fd, path, q):
        dirty = False
        next_sync = time.monotonic() + self._flush_secs
        while True:
            timeout = max(0.0, next_sync - time.monotonic()) if dirty else None
            try:
                item = q.get(timeout=timeout)
            except queue.Empty:
                self._sync(fd, path)
                dirty, next_sync = False, time.monotonic() + self._flush_secs
                continue
            try:
                if item is _CLOSE:
                    self._drain(fd, path, q)
                    self._sync(fd, path)
                    return
                if isinstance(item, _Flush):
                    self._sync(fd, path)
                    dirty, next_sync = False, time.monotonic() + self._flush_secs
                    item.done.set()
                else:
                    self._write(fd, path, item)
                    dirty = True
            finally:
                q.task_done()

    def _drain(self, fd, path, q):
        # Events put by a thread that raced with close(): written, not left to block anyone.
        while True:
            try:
                item = q.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Flush):
                item.done.set()
            elif item is not _CLOSE:
                self._write(fd, path, item)
            q.task_done()

    def _fail(self, err):
        # Sticky: after a failed write the file may end in a partial record, and anything
        # appended would be unreadable behind it. Reported once; reopen() starts a new file.
        self._failure = self._unreported = err

    def _write(self, fd, path, data):
        if self._failure is not None:
            return
        try:
            _write_all(fd, encode_record(data))
        except OSError as e:
            self._fail(_os_error(e, path, "FileWriter: cannot write to the event file"))

    def _sync(self, fd, path):
        if self._failure is not None:
            return
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOTSUP):  # not every file system syncs
                self._fail(_os_error(e, path, "FileWriter: cannot flush the event file"))

    def _raise_error(self):
        err, self._unreported = self._unreported, None
        if err is not None:
            raise err

    # -- API ----------------------------------------------------------------------------------
    def get_logdir(self) -> str:
        return self._logdir

    @property
    def path(self) -> str:
        """The event file being written (the last one once closed)."""
        return self._path

    def add_event(self, event) -> None:
        if self._closed:
            if not self._warned_closed:
                self._warned_closed = True
                log.warning("FileWriter for %r is closed: events added are dropped (call reopen())", self._logdir)
            return
        self._raise_error()
        data = event if isinstance(event, bytes) else event.SerializeToString()
        self._queue.put(data)

    def flush(self) -> None:
        if self._closed:
            return
        f = _Flush()
        thread = self._thread
        self._queue.put(f)
        # A close() from another thread may end the writer first: then there is nothing to wait for.
        while not f.done.wait(0.5) and thread.is_alive():
            pass
        self._raise_error()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(_CLOSE)
        self._thread.join()
        try:
            os.close(self._fd)
        except OSError as e:
            if self._failure is None:
                self._fail(_os_error(e, self._path, "FileWriter: cannot close the event file"))
        self._raise_error()

    def reopen(self) -> None:
        """Start a new event file after ``close`` (no effect while open)."""
        with self._lock:
            if not self._closed:
                return
            self._warned_closed = False
            self._open()


_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_live_writers():
    # At a normal exit, events still queued are written (the threads are daemons).
    for w in list(_LIVE):
        try:
            w.close()
        except Exception:  # noqa: BLE001 - the interpreter is exiting; nothing to report to
            pass


def _summary_proto(summary, pb):
    if isinstance(summary, np.ndarray):
        if summary.shape != ():
            raise errors.InvalidArgumentError(
                f"add_summary takes one serialized Summary (a 0-d string), got an array of shape {list(summary.shape)}")
        summary = summary.item()
    if isinstance(summary, bytes | np.bytes_):
        try:
            return pb.summary_pb2.Summary.FromString(bytes(summary))
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            raise errors.InvalidArgumentError(f"add_summary: the bytes are not a serialized Summary: {e}") from None
    if isinstance(summary, pb.summary_pb2.Summary):
        s = pb.summary_pb2.Summary()
        s.CopyFrom(summary)  # the metadata of repeated tags is stripped: not from the caller's proto
        return s
    raise errors.InvalidArgumentError(
        f"add_summary takes a serialized Summary (bytes, e.g. the result of running a summary op) or a "
        f"Summary proto, got {type(summary).__name__}")


class FileWriter:
    """Writes summaries, the graph, run metadata and session logs to an event file in
    ``logdir`` for TensorBoard (``tf.summary.FileWriter``). ``graph`` (a ``tw.Graph``) is
    written at once; a context manager that closes the file."""

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, graph_def=None, filename_suffix=None,
                 session=None):
        if session is not None:
            raise errors.UnimplementedError("FileWriter(session=...) (TF2's summary writer resource) is not supported")
        self._pb = tensorboard_protos("tw.summary.FileWriter")
        self.event_writer = EventFileWriter(logdir, max_queue, flush_secs, filename_suffix)
        self._lock = threading.Lock()
        self._seen_summary_tags: set = set()
        self._session_run_tags: set = set()
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def get_logdir(self) -> str:
        return self.event_writer.get_logdir()

    def _add_event(self, event, global_step):
        event.wall_time = time.time()
        if global_step is not None:
            event.step = int(global_step)
        self.event_writer.add_event(event)

    def add_event(self, event) -> None:
        """Write ``event`` (an ``Event`` proto) as it is."""
        self.event_writer.add_event(event)

    def add_summary(self, summary, global_step=None) -> None:
        """Write a summary: the bytes a summary op produced (``sess.run(merged)``) or a
        ``Summary`` proto. A plugin's metadata is written with the first value of each tag
        only (TensorBoard keeps the first), as TF1 does."""
        s = _summary_proto(summary, self._pb)
        with self._lock:
            for v in s.value:
                if not v.HasField("metadata"):
                    continue
                if v.tag in self._seen_summary_tags:
                    v.ClearField("metadata")
                else:
                    self._seen_summary_tags.add(v.tag)
        self._add_event(self._pb.event_pb2.Event(summary=s), global_step)

    def add_session_log(self, session_log, global_step=None) -> None:
        self._add_event(self._pb.event_pb2.Event(session_log=session_log), global_step)

    def add_graph(self, graph, global_step=None, graph_def=None, placement=None) -> None:
        """Write a graph for TensorBoard's graph dashboard: a ``tw.Graph``, our GraphDef dict
        or a ``graph_pb2.GraphDef`` (``graph_def``: TF1's deprecated spelling). ``placement``
        ({node: device}, e.g. ``Session.placement(fetches)``, or a ``tw.RunMetadata``) gives
        each node its assigned device, so the dashboard can colour nodes by device."""
        if graph is not None and graph_def is not None:
            raise errors.InvalidArgumentError("add_graph: pass graph or graph_def, not both")
        gdef = graph_def_proto(graph if graph is not None else graph_def, placement)
        self._add_event(self._pb.event_pb2.Event(graph_def=gdef.SerializeToString()), global_step)

    def add_run_metadata(self, run_metadata, tag, global_step=None) -> None:
        """Write a traced step (``Session.run(..., options=RunOptions(trace_level=FULL_TRACE),
        run_metadata=md)``) under ``tag``; the graph dashboard shows its compute time and
        memory per node. A tag can be used once per writer."""
        with self._lock:
            if tag in self._session_run_tags:
                raise errors.InvalidArgumentError(f"add_run_metadata: tag {tag!r} was already used by this writer")
            self._session_run_tags.add(tag)
        md = run_metadata_proto(run_metadata)
        tagged = self._pb.event_pb2.TaggedRunMetadata(tag=tag, run_metadata=md.SerializeToString())
        self._add_event(self._pb.event_pb2.Event(tagged_run_metadata=tagged), global_step)

    def flush(self) -> None:
        """Wait until every event added so far is written and synced to disk."""
        self.event_writer.flush()

    def close(self) -> None:
        """Write what is queued and close the file; later events are dropped until ``reopen``."""
        self.event_writer.close()

    def reopen(self) -> None:
        """After ``close``: continue in a new event file in the same directory."""
        self.event_writer.reopen()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class FileWriterCache:
    """One ``FileWriter`` per log directory in this process (``tf.summary.FileWriterCache``),
    shared by hooks and user code; a new one writes the default graph."""

    _cache: dict = {}
    _lock = threading.Lock()

    @staticmethod
    def get(logdir) -> FileWriter:
        key = os.fspath(logdir)
        with FileWriterCache._lock:
            w = FileWriterCache._cache.get(key)
            if w is None:
                w = FileWriterCache._cache[key] = FileWriter(key, graph=get_default_graph())
            else:
                w.reopen()  # closed by someone: continue in a new file rather than drop events
            return w

    @staticmethod
    def clear() -> None:
        """Close and forget every cached writer."""
        with FileWriterCache._lock:
            writers = list(FileWriterCache._cache.values())
            FileWriterCache._cache.clear()
        for w in writers:
            w.close()
