"""Datasets and iterators at run time: what the ``tw.data`` kernels build and what an
iterator resource holds.

Each dataset op's kernel (``kernels/datasets.py``) makes a ``Dataset``: an immutable
description of a stream of elements, holding the op's input values and its input datasets.
It travels to the next dataset op as a 0-d object array (``wrap``/``unwrap``), the run-time
value of a dataset tensor: datasets never leave the process, and are never converted to
bytes. ``MakeIterator`` (and ``OneShotIterator``) turn one into a running ``DatasetIterator``
inside an ``IteratorResource``, kept in the session's containers like a queue, which
``IteratorGetNext`` asks for elements.

An element is a tuple of ndarrays, one per flat component (structure is a Python-side
matter, ``tensorweave.data``). ``DatasetIterator.get_next`` returns the next element, or None
at the end; the end is sticky (every later call returns None again).

Threads. Most iterators run in the thread that asks (the step that runs GetNext). Two do not:

- ``map(num_parallel_calls=n)`` keeps up to ``n`` calls of its function in flight on the
  session's inter-op thread pool, in input order, and hands results out in that order. A
  consumer that needs a call the pool has not started yet takes it back and runs it itself,
  so waiting for the pool can never deadlock it (a pool thread may be the one waiting).
- ``prefetch(n)`` starts a background thread on the first ``get_next``: it pulls elements
  from its input while the consumer works, stopping when ``n`` elements wait in its buffer.

Both stop when their iterator is closed: re-initialising the iterator, resetting its
container (``Session.close``), or the resource being garbage collected close the whole
chain; closing joins the prefetch threads, so none outlives its session.

Errors name the dataset op (``"MapDataset 'map_1'"``) and say what was expected; the GetNext
kernel's error adds the node that asked.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import random
import struct
import threading
import weakref

import numpy as np

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors, record_io, tensor_codec
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.runtime import file_access, handles

__all__ = ["Dataset", "DatasetIterator", "IteratorResource", "Env", "wrap", "unwrap",
           "register_generator", "make_handle", "lookup", "lookup_or_create"]

_E = errors.InvalidArgumentError


# ----------------------------------------------------------------------------------------
# values and handles
def wrap(dataset: Dataset) -> np.ndarray:
    """The run-time value of a dataset tensor: a 0-d object array holding ``dataset``."""
    out = np.empty((), dtype=object)
    out[()] = dataset
    return out


def unwrap(value, what: str) -> Dataset:
    v = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
    if not isinstance(v, Dataset):
        raise _E(f"{what}: expected a dataset as input, got {type(v).__name__} (a dataset tensor can only come "
                 "from a dataset op in the same process)")
    return v


def make_handle(container: str, name: str) -> np.ndarray:
    return handles.make_handle(container, name, "iterator")


def lookup(resources, handle) -> IteratorResource:
    return handles.lookup(resources, handle, IteratorResource, "iterator")


def lookup_or_create(resources, container: str, name: str, create) -> IteratorResource:
    r = resources.manager_for(container).lookup_or_create(container, name, create)
    if not isinstance(r, IteratorResource):
        raise _E(f"resource {name!r} in container {container!r} is not an iterator")
    return r


def _scalar(v):
    return v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v


def _int(v, what: str, name: str) -> int:
    a = np.asarray(v)
    if a.ndim != 0 or a.dtype.kind not in "iu":
        raise _E(f"{what}: {name} must be an integer scalar, got {a.tolist()!r}")
    return int(a)


def _strings(v, what: str, name: str = "filenames") -> list[bytes]:
    a = np.asarray(v, dtype=object)
    if a.ndim > 1:
        raise _E(f"{what}: {name} must be a string scalar or vector, got shape {a.shape}")
    out = []
    for x in a.reshape(-1):
        if isinstance(x, str):
            x = x.encode()
        if not isinstance(x, bytes):
            raise _E(f"{what}: {name} must hold strings, got {x!r}")
        out.append(x)
    return out


# ----------------------------------------------------------------------------------------
# Python generators (Dataset.from_generator): process-local, found by a token
_generators: dict[str, object] = {}
_generators_lock = threading.Lock()


def register_generator(token: str, make, owner=None) -> None:
    """Make ``make(*args) -> iterator of flat element tuples`` known as ``token`` in this
    process; with ``owner`` (the graph) it is forgotten when the owner is collected."""
    with _generators_lock:
        _generators[token] = make
    if owner is not None:
        weakref.finalize(owner, _forget_generator, token)


def _forget_generator(token: str) -> None:
    with _generators_lock:
        _generators.pop(token, None)


def _lookup_generator(token: str, what: str):
    with _generators_lock:
        make = _generators.get(token)
    if make is None:
        raise errors.FailedPreconditionError(
            f"{what}: its Python generator ({token!r}) is not known in this process. A Dataset.from_generator "
            "pipeline runs only in the Python process that built the graph; it cannot run on a remote "
            "worker (pin it to the client's task, or write the data to TFRecord files)")
    return make


# ----------------------------------------------------------------------------------------
class Env:
    """Where a pipeline runs: the session whose inter-op pool parallel map calls use (or a
    process-wide fallback pool where the kernel has no session, as on a worker)."""

    def __init__(self, session=None):
        self._session = weakref.ref(session) if session is not None else None

    def pool(self) -> concurrent.futures.Executor | None:
        s = self._session() if self._session is not None else None
        if s is not None:
            if getattr(s, "_closed", False):
                return None
            get = getattr(s, "_thread_pool", None)
            if get is not None:
                return get()
        return _fallback_pool()


_fallback = None
_fallback_lock = threading.Lock()


def _fallback_pool():
    global _fallback
    with _fallback_lock:
        if _fallback is None:
            _fallback = concurrent.futures.ThreadPoolExecutor(max(os.cpu_count() or 2, 2),
                                                              thread_name_prefix="tw-data-pool")
        return _fallback


class IterCtx:
    """Shared by every stage of one running iterator: cancellation and the pool."""

    __slots__ = ("env", "cancelled")

    def __init__(self, env: Env):
        self.env = env
        self.cancelled = False

    def check(self, what: str) -> None:
        if self.cancelled:
            raise errors.CancelledError(f"{what}: the iterator was closed (re-initialised, or its session closed)")


# ----------------------------------------------------------------------------------------
class Dataset:
    """A stream of elements (tuples of ndarrays with ``dtypes``/``shapes``), described by the
    op ``name`` that made it; ``make_iterator`` starts one pass over it."""

    kind = "Dataset"

    def __init__(self, name: str, dtypes, shapes):
        self.name = name
        self.dtypes = [dtypes_mod.as_dtype(d) for d in dtypes]
        self.shapes = [TensorShape(s) for s in shapes]

    def describe(self) -> str:
        return f"{self.kind} '{self.name}'"

    def make_iterator(self, ictx: IterCtx) -> DatasetIterator:
        raise NotImplementedError


class DatasetIterator:
    """One pass over a dataset: ``get_next()`` -> element tuple, or None at the end."""

    def __init__(self, dataset: Dataset, ictx: IterCtx):
        self.dataset = dataset
        self.ictx = ictx

    def get_next(self):
        raise NotImplementedError

    def close(self) -> None:
        """Release files and threads (idempotent; may be called from another thread)."""


class _FnIterator(DatasetIterator):
    """An iterator written as a Python generator function of its own state."""

    def __init__(self, dataset, ictx, gen):
        super().__init__(dataset, ictx)
        self._gen = gen
        self._ended = False

    def get_next(self):
        if self._ended:
            return None
        try:
            return next(self._gen)
        except StopIteration:
            self._ended = True
            return None
        except BaseException:
            self._ended = True
            raise

    def close(self):
        self._ended = True
        try:
            self._gen.close()
        except (ValueError, RuntimeError):  # still running in another thread: it ends with its owner
            pass


# ----------------------------------------------------------------------------------------
# sources
class TensorDataset(Dataset):
    kind = "TensorDataset"

    def __init__(self, name, components, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.components = tuple(components)

    def make_iterator(self, ictx):
        def gen():
            yield self.components
        return _FnIterator(self, ictx, gen())


class TensorSliceDataset(Dataset):
    kind = "TensorSliceDataset"

    def __init__(self, name, components, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        n = None
        for i, c in enumerate(components):
            if c.ndim == 0:
                raise _E(f"{self.describe()}: component {i} is a scalar; slicing needs rank >= 1")
            if n is None:
                n = c.shape[0]
            elif c.shape[0] != n:
                raise _E(f"{self.describe()}: all components must have the same size in dimension 0, but "
                         f"component 0 has {n} and component {i} has {c.shape[0]}")
        self.components = tuple(components)
        self.n = n or 0

    def make_iterator(self, ictx):
        comps = self.components

        def gen():
            for i in range(self.n):
                # c[i, ...] is a 0-d array for a vector (c[i] would be a NumPy scalar or bytes).
                yield tuple(c[i, ...] for c in comps)
        return _FnIterator(self, ictx, gen())


class RangeDataset(Dataset):
    kind = "RangeDataset"

    def __init__(self, name, start, stop, step):
        super().__init__(name, [dtypes_mod.int64], [[]])
        self.start, self.stop, self.step = (_int(v, self.describe(), n) for v, n in
                                            ((start, "start"), (stop, "stop"), (step, "step")))
        if self.step == 0:
            raise _E(f"{self.describe()}: step must not be 0")

    def make_iterator(self, ictx):
        def gen():
            for v in range(self.start, self.stop, self.step):
                yield (np.array(v, dtype=np.int64),)
        return _FnIterator(self, ictx, gen())


def _open(path: str, compression: str, what: str):
    """(file object, raw file) for reading, decompressing GZIP/ZLIB; errors name ``what``."""
    try:
        kind = record_io._compression(compression)
        return record_io._open_read(path, kind)
    except errors.OpError as e:
        raise type(e)(f"{what}: {e.message}") from None


class _FileDataset(Dataset):
    """Records from a list of files, one file after the other."""

    def __init__(self, name, filenames, dtypes=(dtypes_mod.string,), shapes=((),), files=file_access.UNRESTRICTED):
        super().__init__(name, dtypes, shapes)
        # Checked here, before any is opened: the session's file access (a worker's is limited).
        self.filenames = [files.check(f, self.describe()) for f in _strings(filenames, self.describe())]

    def _records(self, path):
        raise NotImplementedError

    def make_iterator(self, ictx):
        def gen():
            for path in self.filenames:
                for rec in self._records(path):
                    v = np.empty((), dtype=object)
                    v[()] = rec
                    yield (v,)
        return _FnIterator(self, ictx, gen())


class TextLineDataset(_FileDataset):
    kind = "TextLineDataset"

    def __init__(self, name, filenames, compression_type, files=file_access.UNRESTRICTED):
        super().__init__(name, filenames, files=files)
        self.compression = _scalar(compression_type) or b""

    def _records(self, path):
        f, raw = _open(path, self.compression, self.describe())
        try:
            if f is not raw:  # a decompressing reader: split lines ourselves
                buf = b""
                while True:
                    chunk = f.read(65536)
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        yield line[:-1] if line.endswith(b"\r") else line
                if buf:
                    yield buf[:-1] if buf.endswith(b"\r") else buf
                return
            for line in f:
                if line.endswith(b"\n"):
                    line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
                yield line
        finally:
            f.close()
            if raw is not f:
                raw.close()


class TFRecordDataset(_FileDataset):
    kind = "TFRecordDataset"

    def __init__(self, name, filenames, compression_type, files=file_access.UNRESTRICTED):
        super().__init__(name, filenames, files=files)
        self.compression = _scalar(compression_type) or b""
        if isinstance(self.compression, bytes):
            self.compression = self.compression.decode()

    def _records(self, path):
        try:
            reader = record_io.RecordReader(path, self.compression)
        except errors.OpError as e:
            raise type(e)(f"{self.describe()}: {e.message}") from None
        try:
            while True:
                try:
                    rec = reader.read()
                except errors.OpError as e:
                    raise type(e)(f"{self.describe()}: {e.message}") from None
                if rec is None:
                    return
                yield rec
        finally:
            reader.close()


class FixedLengthRecordDataset(_FileDataset):
    kind = "FixedLengthRecordDataset"

    def __init__(self, name, filenames, header_bytes, record_bytes, footer_bytes, files=file_access.UNRESTRICTED):
        super().__init__(name, filenames, files=files)
        what = self.describe()
        self.header = _int(header_bytes, what, "header_bytes")
        self.record = _int(record_bytes, what, "record_bytes")
        self.footer = _int(footer_bytes, what, "footer_bytes")
        if self.record <= 0 or self.header < 0 or self.footer < 0:
            raise _E(f"{what}: record_bytes must be positive and header_bytes/footer_bytes not negative, got "
                     f"{self.record}, {self.header}, {self.footer}")

    def _records(self, path):
        f, raw = _open(path, "", self.describe())
        try:
            size = os.fstat(raw.fileno()).st_size
            body = size - self.header - self.footer
            if body < 0 or body % self.record:
                raise errors.DataLossError(
                    f"{self.describe()}: input file {path!r} has {size} bytes; without its {self.header}-byte "
                    f"header and {self.footer}-byte footer that leaves {body}, which is not a whole number of "
                    f"{self.record}-byte records")
            f.seek(self.header)
            for _ in range(body // self.record):
                rec = f.read(self.record)
                if len(rec) != self.record:
                    raise errors.DataLossError(f"{self.describe()}: input file {path!r} ended inside a record")
                yield rec
        finally:
            f.close()


class GeneratorDataset(Dataset):
    """Elements from a Python generator of this process (``Dataset.from_generator``)."""

    kind = "GeneratorDataset"

    def __init__(self, name, token, args, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.make = _lookup_generator(token, self.describe())
        self.args = [_scalar(a) for a in args]

    def make_iterator(self, ictx):
        what = self.describe()
        try:
            source = self.make(*self.args)
        except errors.OpError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's generator: reported as this dataset's failure
            raise _python_error(what, "calling the generator", e) from e
        dts, shapes = self.dtypes, self.shapes

        def gen():
            try:
                while True:
                    try:
                        values = next(source)
                    except StopIteration:
                        return
                    except errors.OpError as e:
                        raise type(e)(f"{what}: {e.message}") from None
                    except Exception as e:  # noqa: BLE001
                        raise _python_error(what, "the generator", e) from e
                    yield tuple(_convert(what, i, v, dt, shape) for i, (v, dt, shape) in
                                enumerate(zip(values, dts, shapes)))
            finally:
                close = getattr(source, "close", None)
                if close is not None:
                    close()
        return _FnIterator(self, ictx, gen())


def _python_error(what, where, e) -> errors.OpError:
    cls = _E if isinstance(e, ValueError | TypeError | IndexError | KeyError) else errors.UnknownError
    return cls(f"{what}: {where} raised {type(e).__name__}: {e}")


def _convert(what: str, i: int, v, dt: dtypes_mod.DType, shape: TensorShape) -> np.ndarray:
    try:
        if dt.is_string:
            arr = dtypes_mod.to_numpy(v, dt)
            if not all(isinstance(x, bytes) for x in arr.reshape(-1)):
                raise TypeError("not a string")
        else:
            raw = np.asarray(v)
            if raw.dtype.kind in "OSUV" or (raw.dtype.kind == "c" and not dt.is_complex):
                raise TypeError(f"a {raw.dtype} value")
            arr = raw.astype(dt.np_dtype, copy=False)
    except (TypeError, ValueError, OverflowError):
        raise _E(f"{what}: the generator yielded {v!r:.80} ({type(v).__name__}) for component {i}, which cannot "
                 f"be converted to the expected type {dt.name}") from None
    if not shape.is_compatible_with(arr.shape):
        raise _E(f"{what}: the generator yielded a value of shape {tuple(arr.shape)} for component {i}, where "
                 f"shape {shape} was expected (output_shapes)")
    return arr


class ZipDataset(Dataset):
    kind = "ZipDataset"

    def __init__(self, name, inputs, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.inputs = list(inputs)

    def make_iterator(self, ictx):
        its = [d.make_iterator(ictx) for d in self.inputs]

        def gen():
            try:
                while True:
                    out = []
                    for it in its:
                        el = it.get_next()
                        if el is None:
                            return
                        out.extend(el)
                    yield tuple(out)
            finally:
                for it in its:
                    it.close()
        return _Chain(self, ictx, gen(), its)


class _Chain(_FnIterator):
    """A generator-function iterator with inner iterators that close with it."""

    def __init__(self, dataset, ictx, gen, inner):
        super().__init__(dataset, ictx, gen)
        self._inner = inner

    def close(self):
        super().close()
        for it in list(self._inner):
            it.close()


class ConcatenateDataset(Dataset):
    kind = "ConcatenateDataset"

    def __init__(self, name, first, second, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.first, self.second = first, second

    def make_iterator(self, ictx):
        inner = []

        def gen():
            for d in (self.first, self.second):
                it = d.make_iterator(ictx)
                inner[:] = [it]
                try:
                    while True:
                        el = it.get_next()
                        if el is None:
                            break
                        yield el
                finally:
                    it.close()
        return _Chain(self, ictx, gen(), inner)


# ----------------------------------------------------------------------------------------
# transformations with functions
class MapDataset(Dataset):
    """``map``: ``fn(element + captured) -> new element``; with ``num_parallel_calls`` > 1 up
    to that many calls run at once on the inter-op pool, results kept in input order."""

    kind = "MapDataset"

    def __init__(self, name, input_dataset, fn, captured, dtypes, shapes, num_parallel_calls=1, kind=None):
        super().__init__(name, dtypes, shapes)
        if kind:
            self.kind = kind
        self.input = input_dataset
        self.fn = fn
        self.captured = list(captured)
        self.parallel = int(num_parallel_calls)
        if self.parallel < 1 and self.parallel != -1:
            raise _E(f"{self.describe()}: num_parallel_calls must be positive, got {self.parallel}")
        self._check = fn.output_checker(self.dtypes, self.shapes)

    def call(self, element):
        return self._check(self.fn(list(element) + self.captured))

    def make_iterator(self, ictx):
        n = self.parallel if self.parallel != -1 else max(os.cpu_count() or 2, 2)
        if n <= 1:
            it = self.input.make_iterator(ictx)

            def gen():
                while True:
                    el = it.get_next()
                    if el is None:
                        return
                    yield self.call(el)
            return _Chain(self, ictx, gen(), [it])
        return _ParallelMapIterator(self, ictx, n)


class _Call:
    """One function call of a parallel map: its input element, its future, or the input's error."""

    __slots__ = ("element", "future", "error")

    def __init__(self, element=None, future=None, error=None):
        self.element, self.future, self.error = element, future, error


class _ParallelMapIterator(DatasetIterator):
    def __init__(self, dataset: MapDataset, ictx, n):
        super().__init__(dataset, ictx)
        self._input = dataset.input.make_iterator(ictx)
        self._n = n
        self._calls: collections.deque[_Call] = collections.deque()
        self._input_done = False

    def _fill(self):
        """Start calls until ``n`` are in flight or the input ends (the input is read here, in
        the consumer's thread: its order is the output order)."""
        ds = self.dataset
        while len(self._calls) < self._n and not self._input_done:
            try:
                el = self._input.get_next()
            except Exception as e:  # noqa: BLE001 - raised when its turn comes, after the calls before it
                self._input_done = True
                self._calls.append(_Call(error=e))
                return
            if el is None:
                self._input_done = True
                return
            call = _Call(el)
            pool = self.ictx.env.pool()
            if pool is not None:
                try:
                    call.future = pool.submit(ds.call, el)
                except RuntimeError:  # the pool is shutting down: the consumer runs it
                    call.future = None
            self._calls.append(call)

    def get_next(self):
        self.ictx.check(self.dataset.describe())
        try:
            return self._next()
        except BaseException:
            self.close()  # an error ends the pass, as in every other stage
            raise

    def _next(self):
        self._fill()
        if not self._calls:
            return None
        call = self._calls.popleft()
        if call.error is not None:
            raise call.error
        fut = call.future
        if fut is None or fut.cancel():
            # Not started by the pool yet: run it here rather than wait for a thread.
            result = self.dataset.call(call.element)
        else:
            result = fut.result()
        self._fill()  # the next calls run while the consumer uses this element
        return result

    def close(self):
        self._input_done = True
        for c in self._calls:
            if c.future is not None:
                c.future.cancel()
        self._calls.clear()
        self._input.close()


class FilterDataset(Dataset):
    kind = "FilterDataset"

    def __init__(self, name, input_dataset, fn, captured, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input, self.fn, self.captured = input_dataset, fn, list(captured)

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)
        what = self.describe()

        def gen():
            while True:
                el = it.get_next()
                if el is None:
                    return
                out = self.fn(list(el) + self.captured)
                keep = np.asarray(out[0])
                if keep.shape != () or keep.dtype != np.bool_:
                    raise _E(f"{what}: the predicate must return a bool scalar, returned a {keep.dtype} value of "
                             f"shape {keep.shape}")
                if keep:
                    yield el
        return _Chain(self, ictx, gen(), [it])


class FlatMapDataset(Dataset):
    """``flat_map``: ``fn(element)`` returns a dataset; its elements, one dataset after another."""

    kind = "FlatMapDataset"

    def __init__(self, name, input_dataset, fn, captured, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input, self.fn, self.captured = input_dataset, fn, list(captured)

    def inner(self, el, ictx) -> DatasetIterator:
        out = self.fn(list(el) + self.captured)
        return unwrap(out[0], self.describe()).make_iterator(ictx)

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)
        inner = [it]

        def gen():
            while True:
                el = it.get_next()
                if el is None:
                    return
                sub = self.inner(el, ictx)
                inner.append(sub)
                try:
                    while True:
                        x = sub.get_next()
                        if x is None:
                            break
                        yield x
                finally:
                    sub.close()
                    inner.remove(sub)
        return _Chain(self, ictx, gen(), inner)


class InterleaveDataset(FlatMapDataset):
    """``interleave``: up to ``cycle_length`` datasets from ``fn`` open at once; ``block_length``
    elements from each in turn; an exhausted one is replaced by the next input element's."""

    kind = "InterleaveDataset"

    def __init__(self, name, input_dataset, fn, captured, cycle_length, block_length, dtypes, shapes):
        super().__init__(name, input_dataset, fn, captured, dtypes, shapes)
        what = self.describe()
        self.cycle = _int(cycle_length, what, "cycle_length")
        self.block = _int(block_length, what, "block_length")
        if self.cycle <= 0 or self.block <= 0:
            raise _E(f"{what}: cycle_length and block_length must be positive, got {self.cycle} and {self.block}")

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)
        slots: list = [None] * self.cycle
        inner = [it]

        def gen():
            pos, taken, open_, input_done = 0, 0, 0, False

            def advance():
                nonlocal pos, taken
                pos, taken = (pos + 1) % self.cycle, 0

            try:
                while not input_done or open_:
                    cur = slots[pos]
                    if cur is not None:
                        x = cur.get_next()
                        if x is not None:
                            taken += 1
                            if taken == self.block:
                                advance()
                            yield x
                            continue
                        cur.close()
                        inner.remove(cur)
                        slots[pos] = None
                        open_ -= 1
                        advance()
                    elif not input_done:
                        el = it.get_next()
                        if el is None:
                            input_done = True
                            continue
                        slots[pos] = self.inner(el, ictx)
                        inner.append(slots[pos])
                        open_ += 1
                    else:
                        advance()
            finally:
                for s in slots:
                    if s is not None:
                        s.close()
        return _Chain(self, ictx, gen(), inner)


# ----------------------------------------------------------------------------------------
# transformations without functions
class BatchDataset(Dataset):
    kind = "BatchDatasetV2"

    def __init__(self, name, input_dataset, batch_size, drop_remainder, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input = input_dataset
        self.batch_size = _int(batch_size, self.describe(), "batch_size")
        if self.batch_size <= 0:
            raise _E(f"{self.describe()}: batch_size must be positive, got {self.batch_size}")
        self.drop_remainder = bool(_scalar(drop_remainder))

    def _take(self, it):
        els = []
        while len(els) < self.batch_size:
            el = it.get_next()
            if el is None:
                break
            els.append(el)
        if not els or (self.drop_remainder and len(els) < self.batch_size):
            return None
        return els

    def _combine(self, els):
        out = []
        for i in range(len(els[0])):
            first = els[0][i].shape
            for j, el in enumerate(els):
                if el[i].shape != first:
                    raise _E(f"{self.describe()}: cannot batch tensors of different shapes in component {i}: "
                             f"element 0 has shape {list(first)} and element {j} has shape {list(el[i].shape)}; "
                             "use padded_batch to pad them to a common shape")
            out.append(np.stack([el[i] for el in els]))
        return tuple(out)

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)

        def gen():
            while True:
                els = self._take(it)
                if els is None:
                    return
                yield self._combine(els)
        return _Chain(self, ictx, gen(), [it])


class PaddedBatchDataset(BatchDataset):
    kind = "PaddedBatchDatasetV2"

    def __init__(self, name, input_dataset, batch_size, padded_shapes, padding_values, drop_remainder, dtypes,
                 shapes):
        super().__init__(name, input_dataset, batch_size, drop_remainder, dtypes, shapes)
        what = self.describe()
        self.padded = []
        for i, s in enumerate(padded_shapes):
            a = np.asarray(s)
            if a.ndim != 1 or a.dtype.kind not in "iu":
                raise _E(f"{what}: padded shape {i} must be an int vector, got {a.tolist()!r}")
            self.padded.append([int(d) for d in a])
        self.padding = []
        for i, v in enumerate(padding_values):
            a = np.asarray(v, dtype=object) if self.dtypes[i].is_string else np.asarray(v)
            if a.ndim != 0:
                raise _E(f"{what}: padding value {i} must be a scalar, got shape {a.shape}")
            self.padding.append(a)

    def _combine(self, els):
        what = self.describe()
        out = []
        for i, (pshape, pad, dt) in enumerate(zip(self.padded, self.padding, self.dtypes)):
            vals = [el[i] for el in els]
            for j, v in enumerate(vals):
                if v.ndim != len(pshape):
                    raise _E(f"{what}: component {i} of element {j} has rank {v.ndim} (shape {list(v.shape)}), but "
                             f"its padded shape {pshape} has rank {len(pshape)}")
            target = []
            for k, d in enumerate(pshape):
                longest = max(v.shape[k] for v in vals)
                if d < 0:
                    d = longest
                elif longest > d:
                    j = next(j for j, v in enumerate(vals) if v.shape[k] > d)
                    raise _E(f"{what}: component {i} of element {j} has shape {list(vals[j].shape)}, larger than "
                             f"its padded shape {pshape} in dimension {k}")
                target.append(d)
            batch = np.empty([len(vals)] + target, dtype=object if dt.is_string else dt.np_dtype)
            batch[...] = pad[()] if dt.is_string else pad.astype(batch.dtype)
            for j, v in enumerate(vals):
                batch[(j,) + tuple(slice(0, s) for s in v.shape)] = v
            out.append(batch)
        return tuple(out)


def _rng_seeds(seed, seed2):
    """The seed sequence of a (seed, seed2) op pair; (0, 0) means nondeterministic, as in TF."""
    seed, seed2 = int(_scalar(seed)), int(_scalar(seed2))
    if seed == 0 and seed2 == 0:
        return np.random.SeedSequence().entropy, False
    return [seed & 0xFFFFFFFFFFFFFFFF, seed2 & 0xFFFFFFFFFFFFFFFF], True


class ShuffleDataset(Dataset):
    """A shuffle buffer of ``buffer_size`` elements: each output is a uniformly random element
    of the buffer, replaced by the next input element. Seeded by the op's (seed, seed2): the
    same seeds give the same orders; ``reshuffle_each_iteration`` gives each pass (each
    ``repeat`` epoch) a new order drawn from that seed."""

    kind = "ShuffleDataset"

    def __init__(self, name, input_dataset, buffer_size, seed, seed2, reshuffle, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input = input_dataset
        self.buffer_size = _int(buffer_size, self.describe(), "buffer_size")
        if self.buffer_size <= 0:
            raise _E(f"{self.describe()}: buffer_size must be positive, got {self.buffer_size}")
        self._seeds, _ = _rng_seeds(seed, seed2)
        self.reshuffle = bool(reshuffle)
        self._epoch_seeds = np.random.default_rng(self._seeds)
        self._lock = threading.Lock()

    def _rng(self) -> random.Random:
        # Python's generator, seeded from the op's seeds: one draw per element costs a
        # fraction of a NumPy Generator call.
        if not self.reshuffle:
            seed = int(np.random.SeedSequence(self._seeds).generate_state(1, np.uint64)[0])
        else:
            with self._lock:
                seed = int(self._epoch_seeds.integers(2**63))
        return random.Random(seed)

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)
        rng = self._rng()
        size = self.buffer_size

        def gen():
            buf = []
            done = False
            while True:
                while not done and len(buf) < size:
                    el = it.get_next()
                    if el is None:
                        done = True
                    else:
                        buf.append(el)
                if not buf:
                    return
                i = rng.randrange(len(buf))
                out = buf[i]
                buf[i] = buf[-1]
                buf.pop()
                yield out
        return _Chain(self, ictx, gen(), [it])


class RepeatDataset(Dataset):
    kind = "RepeatDataset"

    def __init__(self, name, input_dataset, count, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input = input_dataset
        self.count = _int(count, self.describe(), "count")

    def make_iterator(self, ictx):
        inner = []

        def gen():
            epoch = 0
            while self.count < 0 or epoch < self.count:
                it = self.input.make_iterator(ictx)
                inner[:] = [it]
                got = False
                try:
                    while True:
                        el = it.get_next()
                        if el is None:
                            break
                        got = True
                        yield el
                finally:
                    it.close()
                epoch += 1
                if not got and self.count < 0:
                    return  # an empty input repeated forever is empty, not a hang
        return _Chain(self, ictx, gen(), inner)


class TakeDataset(Dataset):
    kind = "TakeDataset"

    def __init__(self, name, input_dataset, count, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input = input_dataset
        self.count = _int(count, self.describe(), "count")

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)

        def gen():
            n = 0
            while self.count < 0 or n < self.count:
                el = it.get_next()
                if el is None:
                    return
                n += 1
                yield el
        return _Chain(self, ictx, gen(), [it])


class SkipDataset(TakeDataset):
    kind = "SkipDataset"

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)

        def gen():
            n = 0
            while True:
                el = it.get_next()
                if el is None:
                    return
                if self.count >= 0 and n >= self.count:
                    yield el
                elif self.count < 0:
                    continue  # skip(-1) skips everything
                n += 1
        return _Chain(self, ictx, gen(), [it])


class ShardDataset(Dataset):
    """Every ``num_shards``-th element, starting with element ``index``."""

    kind = "ShardDataset"

    def __init__(self, name, input_dataset, num_shards, index, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input = input_dataset
        what = self.describe()
        self.num_shards, self.index = _int(num_shards, what, "num_shards"), _int(index, what, "index")
        if self.num_shards <= 0 or not 0 <= self.index < self.num_shards:
            raise _E(f"{what}: needs num_shards > 0 and 0 <= index < num_shards, got num_shards={self.num_shards}, "
                     f"index={self.index}")

    def make_iterator(self, ictx):
        it = self.input.make_iterator(ictx)

        def gen():
            n = 0
            while True:
                el = it.get_next()
                if el is None:
                    return
                if n % self.num_shards == self.index:
                    yield el
                n += 1
        return _Chain(self, ictx, gen(), [it])


class PrefetchDataset(Dataset):
    kind = "PrefetchDataset"

    def __init__(self, name, input_dataset, buffer_size, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input = input_dataset
        self.buffer_size = _int(buffer_size, self.describe(), "buffer_size")
        if self.buffer_size == -1:
            self.buffer_size = 2  # "autotune": a small fixed buffer
        if self.buffer_size <= 0:
            raise _E(f"{self.describe()}: buffer_size must be positive, got {self.buffer_size}")

    def make_iterator(self, ictx):
        return _PrefetchIterator(self, ictx)


class _PrefetchIterator(DatasetIterator):
    """A producer thread that keeps up to ``buffer_size`` elements ready. It waits for room
    *before* it pulls, so it is never more than ``buffer_size`` elements ahead."""

    def __init__(self, dataset: PrefetchDataset, ictx):
        super().__init__(dataset, ictx)
        self._input = dataset.input.make_iterator(ictx)
        self._cond = threading.Condition()
        self._buf: collections.deque = collections.deque()
        self._ended = False
        self._error = None
        self._stop = False
        self._thread = None

    def _produce(self):
        size = self.dataset.buffer_size
        cond = self._cond
        while True:
            with cond:
                while len(self._buf) >= size and not self._stop:
                    cond.wait()
                if self._stop:
                    return
            try:
                el = self._input.get_next()
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, in order
                with cond:
                    self._error, self._ended = e, True
                    cond.notify_all()
                return
            with cond:
                if el is None:
                    self._ended = True
                else:
                    self._buf.append(el)
                cond.notify_all()
                if el is None:
                    return

    def get_next(self):
        cond = self._cond
        with cond:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._produce, daemon=True,
                                                name=f"tw-data-prefetch-{self.dataset.name}")
                self._thread.start()
            while not self._buf and not self._ended and not self._stop:
                cond.wait()
            if self._buf:
                el = self._buf.popleft()
                cond.notify_all()
                return el
            if self._stop:
                raise errors.CancelledError(f"{self.dataset.describe()}: the iterator was closed")
            if self._error is not None:  # once, in its place; then the pass is over
                e, self._error = self._error, None
                raise e
            return None

    def close(self):
        with self._cond:
            self._stop = True
            self._buf.clear()
            self._cond.notify_all()
            t = self._thread
        self._input.close()  # wakes a producer waiting inside its input
        if t is not None and t is not threading.current_thread():
            t.join()
            self._input.close()  # again: what was busy in the producer's thread is free now


class CacheDataset(Dataset):
    """Elements of its input, read once: the first complete pass fills the cache (memory, or
    the file ``filename`` + ``.twcache``) and later passes read it. A pass that stops early
    caches nothing."""

    kind = "CacheDataset"

    def __init__(self, name, input_dataset, filename, dtypes, shapes):
        super().__init__(name, dtypes, shapes)
        self.input = input_dataset
        f = _scalar(filename)
        self.filename = (f.decode() if isinstance(f, bytes) else str(f or ""))
        self._memory = None
        self._lock = threading.Lock()

    @property
    def path(self):
        return self.filename + ".twcache"

    def make_iterator(self, ictx):
        if self.filename:
            if os.path.exists(self.path):
                return _FnIterator(self, ictx, self._read_file())
            return self._writer(ictx, _FileSink)
        with self._lock:
            cached = self._memory
        if cached is not None:
            return _FnIterator(self, ictx, (el for el in cached))
        return self._writer(ictx, _MemorySink)

    def _writer(self, ictx, make_sink):
        it = self.input.make_iterator(ictx)

        def gen():
            sink = make_sink(self)  # here, not before: a pass that never starts leaves no file behind
            complete = False
            try:
                while True:
                    el = it.get_next()
                    if el is None:
                        complete = True
                        sink.commit()
                        return
                    sink.add(el)
                    yield el
            finally:
                if not complete:
                    sink.abandon()
        return _Chain(self, ictx, gen(), [it])

    def _read_file(self):
        what = self.describe()
        reader = record_io.RecordReader(self.path)
        try:
            while True:
                try:
                    rec = reader.read()
                except errors.OpError as e:
                    raise type(e)(f"{what}: {e.message}") from None
                if rec is None:
                    return
                yield _decode_element(rec, f"{what}: cache file {self.path!r}")
        finally:
            reader.close()


class _MemorySink:
    def __init__(self, ds):
        self.ds, self.items = ds, []

    def add(self, el):
        self.items.append(el)

    def commit(self):
        with self.ds._lock:
            if self.ds._memory is None:
                self.ds._memory = self.items

    def abandon(self):
        self.items = []


class _FileSink:
    """Writes the cache beside its final name and renames it into place when complete, so a
    cache file is always whole."""

    def __init__(self, ds):
        self.ds = ds
        self.tmp = f"{ds.path}.tmp-{os.getpid()}-{id(self)}"
        try:
            self.writer = record_io.TFRecordWriter(self.tmp)
        except OSError as e:
            raise errors.NotFoundError(f"{ds.describe()}: cannot write the cache file {self.tmp!r}: {e}") from None

    def add(self, el):
        self.writer.write(_encode_element(el))

    def commit(self):
        self.writer.close()
        os.replace(self.tmp, self.ds.path)

    def abandon(self):
        self.writer.close()
        try:
            os.remove(self.tmp)
        except OSError:
            pass


_LEN = struct.Struct("<I")


def _encode_element(el) -> bytes:
    """One element as one record: a JSON header (the codec's dtype and shape per component),
    then the payloads (``framework/tensor_codec.py``'s bytes)."""
    heads, parts = [], []
    for v in el:
        fields, payload = tensor_codec.encode(v, "cached element")
        heads.append([fields["dtype"], fields["shape"], fields["nbytes"]])
        parts.extend(bytes(p) for p in payload)
    header = json.dumps(heads, separators=(",", ":")).encode()
    return _LEN.pack(len(header)) + header + b"".join(parts)


def _decode_element(rec: bytes, where: str) -> tuple:
    try:
        (n,) = _LEN.unpack_from(rec, 0)
        heads = json.loads(rec[4:4 + n])
        pos = 4 + n
        out = []
        for name, shape, nbytes in heads:
            shape = tensor_codec.check_shape(shape, where)
            out.append(tensor_codec.decode(name, shape, rec[pos:pos + nbytes], where, copy=True))
            pos += nbytes
    except (ValueError, TypeError, struct.error) as e:
        raise errors.DataLossError(f"{where}: a damaged record: {e}") from None
    return tuple(out)


# ----------------------------------------------------------------------------------------
class _Running:
    """The iterator an IteratorResource runs now (what its finaliser closes)."""

    __slots__ = ("it", "ictx", "lock")

    def __init__(self):
        self.it = None
        self.ictx = None
        self.lock = threading.Lock()

    def swap(self, it, ictx):
        with self.lock:
            old = (self.it, self.ictx)
            self.it, self.ictx = it, ictx
        return old

    def close(self):
        it, ictx = self.swap(None, None)
        _close(it, ictx)


def _close(it, ictx):
    if ictx is not None:
        ictx.cancelled = True
    if it is not None:
        it.close()


class IteratorResource:
    """The state behind an iterator op: the running pass over the dataset it was last
    initialised with. ``get_next`` serves one caller at a time."""

    kind = "iterator"

    def __init__(self, name: str, dtypes, shapes):
        self.name = name
        self.dtypes = [dtypes_mod.as_dtype(d) for d in dtypes]
        self.shapes = [TensorShape(s) for s in shapes]
        self._running = _Running()
        self._get_lock = threading.Lock()
        self.init_lock = threading.Lock()
        self.one_shot_started = False
        # Collected without a reset (a session dropped without close): stop its threads.
        weakref.finalize(self, self._running.close)

    def describe(self) -> str:
        return f"iterator '{self.name}'"

    def compatible_shapes(self, shapes) -> bool:
        return len(self.shapes) == len(shapes) and all(a.is_compatible_with(b) for a, b in zip(self.shapes, shapes))

    def check_types(self, dtypes, what: str) -> None:
        if list(dtypes) != self.dtypes:
            raise _E(f"{what}: {self.describe()} produces {[d.name for d in self.dtypes]}, not "
                     f"{[dtypes_mod.as_dtype(d).name for d in dtypes]}")

    def make_iterator(self, dataset: Dataset, env: Env) -> None:
        """Start a new pass over ``dataset`` (the previous one is closed)."""
        if dataset.dtypes != self.dtypes or len(dataset.shapes) != len(self.shapes) or not all(
                a.is_compatible_with(b) for a, b in zip(dataset.shapes, self.shapes)):
            raise _E(f"{self.describe()} expects elements of types {[d.name for d in self.dtypes]} and shapes "
                     f"{[str(s) for s in self.shapes]}, but {dataset.describe()} has types "
                     f"{[d.name for d in dataset.dtypes]} and shapes {[str(s) for s in dataset.shapes]}")
        ictx = IterCtx(env)
        it = dataset.make_iterator(ictx)
        _close(*self._running.swap(it, ictx))

    def get_next(self) -> tuple:
        with self._get_lock:
            it = self._running.it
            if it is None:
                raise errors.FailedPreconditionError(
                    f"GetNext() failed because {self.describe()} has not been initialized: run its "
                    "initializer (iterator.initializer, or the op from make_initializer) first")
            el = it.get_next()
            if el is None:
                raise errors.OutOfRangeError(f"End of sequence: {self.describe()} has no more elements")
            return el

    def reset(self) -> None:
        """Container reset (``Session.close``, ``Session.reset``): stop and forget the pass."""
        self._running.close()
        self.one_shot_started = False
