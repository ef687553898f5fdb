"""Reader resources: the state behind the reader ops (whitepaper 4.5), kept in a Session's
containers like queues and variables.

A reader works through *work units* (files) that it takes from a queue of filenames, one at
a time, and produces records from the current one. The reader op outputs a handle, a
scalar string ``b"<container>:<name>"`` (the same form as queue handles, see
``runtime/queues.py``), and kernels find the reader with ``lookup(resources, handle)``.

Reads are asynchronous (the executor's async-kernel convention): ``read_async`` never
holds a thread while the filename queue is empty; it parks a dequeue in the queue and goes
on in the thread that later enqueues (or closes the queue). One reader serves one read at
a time, in arrival order: a read that arrives while another is in progress waits in the
reader's own list, not in a thread. File reading itself is synchronous.

Errors: a missing file is a ``NotFoundError`` naming it; damaged record files a
``DataLossError`` naming the file and the offset. After such an error the reader drops
that file (it is not counted as completed) and the next read starts on the next filename,
so one bad file does not repeat its error forever.
"""

from __future__ import annotations

import collections
import gzip
import os
import threading
import zlib

import numpy as np

from tensorweave.framework import errors, record_io
from tensorweave.runtime import file_access, handles

__all__ = ["Reader", "WholeFileReader", "TextLineReader", "FixedLengthRecordReader", "TFRecordReader",
           "make_handle", "parse_handle", "lookup", "lookup_or_create"]


# ----------------------------------------------------------------------------------------
# handles
def make_handle(container: str, name: str) -> np.ndarray:
    return handles.make_handle(container, name, "reader")


def parse_handle(handle) -> tuple[str, str]:
    return handles.parse_handle(handle, "reader")


def lookup(resources, handle) -> Reader:
    return handles.lookup(resources, handle, Reader, "reader")


def lookup_or_create(resources, container: str, name: str, create) -> Reader:
    """The reader ``name`` in ``container``, made by ``create()`` if absent; an existing one
    must be of the same kind with the same settings (a shared_name reused)."""
    r = resources.manager_for(container).lookup_or_create(container, name, create)
    if not isinstance(r, Reader):
        raise errors.InvalidArgumentError(f"resource {name!r} in container {container!r} is not a reader")
    want = create()
    if not r.same_spec(want):
        raise errors.InvalidArgumentError(
            f"{r.describe()} already exists in container {container!r} with settings {r.spec()}; this "
            f"node asks for {want.describe()} with {want.spec()}")
    return r


def _open(path: str):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise errors.NotFoundError(f"input file {path!r} not found") from None
    except IsADirectoryError:
        raise errors.FailedPreconditionError(f"input file {path!r} is a directory") from None
    except PermissionError:
        raise errors.PermissionDeniedError(f"input file {path!r}: permission denied") from None
    except OSError as e:
        raise errors.UnknownError(f"cannot open input file {path!r}: {e}") from None


def _key(filename: bytes, n) -> bytes:
    return filename + b":" + str(n).encode()


# ----------------------------------------------------------------------------------------
class Reader:
    """Base of the reader kinds: the work-unit loop, counters, and serving one read at a
    time. Subclasses implement ``_begin``/``_next``/``_end`` on the current file."""

    kind = "Reader"

    def __init__(self, name: str = ""):
        self.name = name
        self._lock = threading.Lock()
        self._busy = False
        self._waiting: collections.deque = collections.deque()
        self._work: bytes | None = None      # the current file, as dequeued
        # Records read for a request that then failed or was cancelled (read_up_to): served
        # first to the next request, so no record is lost to a failed step.
        self._pushback: collections.deque = collections.deque()
        self._produced = 0
        self._completed = 0
        # Which files it may open: set from the session that made it (a worker's are limited).
        self.files = file_access.UNRESTRICTED

    # -- settings --------------------------------------------------------------------------
    def spec(self) -> dict:
        return {}

    def same_spec(self, other: Reader) -> bool:
        return type(self) is type(other) and self.spec() == other.spec()

    def describe(self) -> str:
        return f"{self.kind} '{self.name}'"

    # -- counters --------------------------------------------------------------------------
    @property
    def num_records_produced(self) -> int:
        return self._produced

    @property
    def num_work_units_completed(self) -> int:
        return self._completed

    # -- per-file hooks (called while this reader is serving one read) -----------------------
    def _begin(self, filename: bytes) -> None:
        raise NotImplementedError

    def _next(self) -> tuple[bytes, bytes] | None:
        """The next (key, value) of the current file, or None when it is exhausted."""
        raise NotImplementedError

    def _end(self) -> None:
        """Release the current file."""

    def _open_input(self, filename: bytes):
        return _open(self.files.check(filename, self.describe()))

    # -- serving reads ---------------------------------------------------------------------
    def read_async(self, step, queue, done, num_records: int | None = None) -> None:
        """Produce one record (``num_records`` None: ``done((key, value))``) or up to
        ``num_records`` (``done((keys, values))``, lists of bytes), taking filenames from
        ``queue`` (a ``runtime.queues.Queue``). ``done(None, error)`` on failure."""
        self._submit(_Read(self, step, queue, done, num_records))

    def reset_async(self, done) -> None:
        """Reset once the reads that arrived before have been served."""
        def task():
            self.reset()
            done(None)
            return True
        self._submit(_Call(task))

    def reset(self) -> None:
        """No current file, counters at zero (the ReaderReset op; a container reset)."""
        self._drop_work()
        self._pushback.clear()
        self._produced = 0
        self._completed = 0

    def _drop_work(self) -> None:
        if self._work is not None:
            self._work = None
            try:
                self._end()
            except Exception:  # noqa: BLE001 - closing a file we are abandoning anyway
                pass

    def _submit(self, task) -> None:
        with self._lock:
            self._waiting.append(task)
            queued = self._busy
            self._busy = True
        if not queued:
            self._drain()
            return
        # Waiting behind another read: a cancelled step takes its request out of the line.
        step = getattr(task, "step", None)
        if step is not None and hasattr(step, "on_cancel") and not step.on_cancel(lambda: self._withdraw(task)):
            self._withdraw(task)

    def _withdraw(self, task) -> None:
        with self._lock:
            try:
                self._waiting.remove(task)
            except ValueError:
                return  # already running or finished
        task.done(None, errors.CancelledError(f"{self.describe()}: read cancelled with its step"))

    def _drain(self) -> None:
        """Serve waiting tasks until one goes asynchronous (it calls ``_drain`` again when it
        finishes) or none are left. Only one thread drains at a time (``_busy``)."""
        while True:
            with self._lock:
                if not self._waiting:
                    self._busy = False
                    return
                task = self._waiting.popleft()
            if not task.run():
                return


class _Call:
    def __init__(self, fn):
        self.run = fn


class _Read:
    """One read request: a loop over records and files that parks when it needs a filename
    the queue does not have yet, and resumes in the thread that provides one."""

    def __init__(self, reader: Reader, step, queue, done, num_records):
        self.reader = reader
        self.step = step
        self.queue = queue
        self.done = done
        self.single = num_records is None
        self.want = 1 if num_records is None else int(num_records)
        self.keys: list[bytes] = []
        self.values: list[bytes] = []

    def run(self) -> bool:
        """Serve the request as far as possible: True when it finished, False when it
        waits for a filename (it then finishes, and drains the reader, on its own)."""
        return self._loop(None)

    def _cancelled(self) -> bool:
        return self.step is not None and getattr(self.step, "cancelled", False)

    def _loop(self, arrived) -> bool:
        r = self.reader
        while True:
            if arrived is not None:
                components, error = arrived
                arrived = None
                if error is not None:
                    if not self.single and self.keys and isinstance(error, errors.OutOfRangeError):
                        return self._succeed()  # read_up_to: the end of the input ends the batch
                    return self._fail(error)
                try:
                    filename = components[0]
                    filename = filename.item() if isinstance(filename, np.ndarray) else filename
                    if isinstance(filename, str):
                        filename = filename.encode()
                    if not isinstance(filename, bytes):
                        raise errors.InvalidArgumentError(
                            f"{r.describe()}: the filename queue gave {filename!r}, not a string")
                    r._work = filename
                    r._begin(filename)
                except Exception as e:  # noqa: BLE001 - reported through done
                    r._work = None
                    return self._fail(e)
            if len(self.keys) >= self.want:
                return self._succeed()
            if self._cancelled():  # its step is gone: take nothing more for it
                return self._fail(errors.CancelledError(f"{r.describe()}: read cancelled with its step"))
            if r._pushback:
                k, v = r._pushback.popleft()
                self.keys.append(k)
                self.values.append(v)
                r._produced += 1
                continue
            if r._work is None:
                arrived = self._dequeue()
                if arrived is None:
                    return False
                continue
            try:
                rec = r._next()
            except Exception as e:  # noqa: BLE001 - reported through done; the file is dropped
                r._drop_work()
                return self._fail(e)
            if rec is None:
                r._drop_work()
                r._completed += 1
                continue
            self.keys.append(rec[0])
            self.values.append(rec[1])
            r._produced += 1

    def _dequeue(self):
        """The filename queue's answer if it came at once, else None (``_loop`` resumes in
        the thread that answers later)."""
        lock = threading.Lock()
        box = {}

        def got(components, error=None):
            with lock:
                if "returned" not in box:
                    box["answer"] = (components, error)
                    return
            if self._loop((components, error)):
                self.reader._drain()

        self.queue.dequeue_async(self.step, got)
        with lock:
            box["returned"] = True
            return box.get("answer")

    def _succeed(self) -> bool:
        if self.single:
            self.done((self.keys[0], self.values[0]))
        else:
            self.done((self.keys, self.values))
        return True

    def _fail(self, e) -> bool:
        if self.keys:  # read_up_to had some: keep them for the next request
            r = self.reader
            r._pushback.extendleft(reversed(list(zip(self.keys, self.values))))
            r._produced -= len(self.keys)
            self.keys, self.values = [], []
        self.done(None, e)
        return True


# ----------------------------------------------------------------------------------------
# the kinds
class WholeFileReader(Reader):
    """One record per file: key the filename, value the whole contents."""

    kind = "WholeFileReader"

    def __init__(self, name=""):
        super().__init__(name)
        self._contents = None

    def _begin(self, filename):
        with self._open_input(filename) as f:
            self._contents = f.read()

    def _next(self):
        c, self._contents = self._contents, None
        return None if c is None else (self._work, c)

    def _end(self):
        self._contents = None


class TextLineReader(Reader):
    """A record per line, without the trailing newline (``\\n`` or ``\\r\\n``); keys carry
    the 1-based line number, counting skipped header lines."""

    kind = "TextLineReader"

    def __init__(self, name="", skip_header_lines: int = 0):
        super().__init__(name)
        self.skip_header_lines = int(skip_header_lines)
        self._f = None
        self._line = 0

    def spec(self):
        return {"skip_header_lines": self.skip_header_lines}

    def _begin(self, filename):
        self._f = self._open_input(filename)
        self._line = 0
        for _ in range(self.skip_header_lines):
            if not self._f.readline():
                break
            self._line += 1

    def _next(self):
        line = self._f.readline()
        if not line:
            return None
        self._line += 1
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        return _key(self._work, self._line), line

    def _end(self):
        if self._f is not None:
            self._f.close()
            self._f = None


class FixedLengthRecordReader(Reader):
    """Records of ``record_bytes`` after ``header_bytes``, the last ``footer_bytes`` of the
    file excluded; with ``hop_bytes`` a record starts every ``hop_bytes`` (overlapping
    windows). A trailing partial record is dropped. ``encoding`` "GZIP"/"ZLIB" reads
    compressed files. Keys carry the 0-based record index."""

    kind = "FixedLengthRecordReader"

    def __init__(self, name="", record_bytes: int = 1, header_bytes: int = 0, footer_bytes: int = 0,
                 hop_bytes: int = 0, encoding: str = ""):
        super().__init__(name)
        self.record_bytes = int(record_bytes)
        self.header_bytes = int(header_bytes)
        self.footer_bytes = int(footer_bytes)
        self.hop_bytes = int(hop_bytes)
        self.encoding = encoding or ""
        self._f = None

    def spec(self):
        return {"record_bytes": self.record_bytes, "header_bytes": self.header_bytes,
                "footer_bytes": self.footer_bytes, "hop_bytes": self.hop_bytes, "encoding": self.encoding}

    def _begin(self, filename):
        raw = self._open_input(filename)
        if self.encoding == "GZIP":
            self._f = gzip.GzipFile(fileobj=raw, mode="rb")
        elif self.encoding == "ZLIB":
            self._f = record_io._ZlibReader(raw)
        else:
            self._f = raw
        self._raw = raw
        self._path = os.fsdecode(filename)
        self._buf = b""
        # Start of the next record in _buf (consumed bytes are dropped on refill); it may lie
        # beyond the buffer (the header, a hop longer than a record): _fill skips to it.
        self._pos = self.header_bytes
        self._eof = False
        self._index = 0

    def _fill(self, n: int) -> None:
        """Read until ``n`` bytes from ``_pos`` on are buffered or the file ends."""
        if len(self._buf) - self._pos >= n or self._eof:
            return
        skip = max(0, self._pos - len(self._buf))  # a header or hop beyond what is buffered
        parts = [self._buf[self._pos:]]
        have = len(parts[0])
        while have < n + skip:
            try:
                chunk = self._f.read(max(n + skip - have, 65536))
            except (OSError, EOFError, zlib.error) as e:
                raise errors.DataLossError(f"input file {self._path!r}: cannot read it: {e}") from None
            if not chunk:
                self._eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self._buf = b"".join(parts)[skip:]
        self._pos = 0

    def _next(self):
        # A record counts only if the footer still fits after it.
        need = self.record_bytes + self.footer_bytes
        self._fill(need)
        pos = self._pos
        if len(self._buf) - pos < need:
            return None
        value = self._buf[pos:pos + self.record_bytes]
        self._pos = pos + (self.hop_bytes or self.record_bytes)
        key = _key(self._work, self._index)
        self._index += 1
        return key, value

    def _end(self):
        if self._f is not None:
            self._f.close()
            if self._raw is not self._f:
                self._raw.close()
            self._f = None
        self._buf = b""


class TFRecordReader(Reader):
    """Records of record files (``record_io``); keys carry each record's byte offset."""

    kind = "TFRecordReader"

    def __init__(self, name="", compression_type: str = ""):
        super().__init__(name)
        self.compression_type = compression_type or ""
        self._rr = None

    def spec(self):
        return {"compression_type": self.compression_type}

    def _begin(self, filename):
        self._rr = record_io.RecordReader(self.files.check(filename, self.describe()), self.compression_type)

    def _next(self):
        offset = self._rr.offset
        data = self._rr.read()
        if data is None:
            return None
        return _key(self._work, offset), data

    def _end(self):
        if self._rr is not None:
            self._rr.close()
            self._rr = None
