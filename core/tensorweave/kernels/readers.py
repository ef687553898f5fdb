"""Reader kernels (WholeFileReaderV2, TextLineReaderV2, FixedLengthRecordReaderV2,
TFRecordReaderV2, ReaderReadV2, ReaderReadUpToV2, ReaderResetV2 and the counters) over the
reader resources in ``runtime/readers.py``: host logic, registered by the core for the CPU
device of every task.

Strings are 0-d or n-d object arrays of ``bytes``. Reads are async kernels: they never hold a
thread while the filename queue is empty (see ``runtime/readers.py``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime import file_access, queues, readers

CPU = "CPU"
_E = errors.InvalidArgumentError


def _str_array(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _reader_kernel(make):
    def factory(ctx):
        container = ctx.attrs["container"]
        name = ctx.attrs["shared_name"] or ctx.op.name
        handle = readers.make_handle(container, name)
        attrs = dict(ctx.attrs)

        files = file_access.of(ctx.resources)

        def create():
            reader = make(name, attrs)
            reader.files = files
            return reader

        def reader_op():
            readers.lookup_or_create(ctx.resources, container, name, create)
            return handle
        return reader_op
    return factory


def _read(ctx):
    resources = ctx.resources

    def read(step, done, reader_handle, queue_handle):
        try:
            reader = readers.lookup(resources, reader_handle)
            queue = queues.lookup(resources, queue_handle)
        except errors.OpError as e:
            done(None, e)
            return

        def finished(result, error=None):
            if error is not None:
                done(None, error)
            else:
                done((np.array(result[0], dtype=object), np.array(result[1], dtype=object)))
        reader.read_async(step, queue, finished)
    return read


def _read_up_to(ctx):
    resources = ctx.resources

    def read_up_to(step, done, reader_handle, queue_handle, num_records):
        try:
            n = int(num_records)
            if num_records.ndim != 0 or n <= 0:
                raise ctx.error(_E, f"num_records must be a positive scalar, got {num_records.tolist()}")
            reader = readers.lookup(resources, reader_handle)
            queue = queues.lookup(resources, queue_handle)
        except errors.OpError as e:
            done(None, e)
            return

        def finished(result, error=None):
            if error is not None:
                done(None, error)
            else:
                done((_str_array(result[0]), _str_array(result[1])))
        reader.read_async(step, queue, finished, num_records=n)
    return read_up_to


def _reset(ctx):
    resources = ctx.resources

    def reset(step, done, reader_handle):
        try:
            reader = readers.lookup(resources, reader_handle)
        except errors.OpError as e:
            done(None, e)
            return
        reader.reset_async(done)
    return reset


def _counter(attr):
    def factory(ctx):
        resources = ctx.resources
        return lambda handle: np.array(getattr(readers.lookup(resources, handle), attr), dtype=np.int64)
    return factory


def register_kernels(reg):
    reg.register("WholeFileReaderV2", CPU, factory=_reader_kernel(lambda name, a: readers.WholeFileReader(name)))
    reg.register("TextLineReaderV2", CPU, factory=_reader_kernel(
        lambda name, a: readers.TextLineReader(name, a["skip_header_lines"])))
    reg.register("FixedLengthRecordReaderV2", CPU, factory=_reader_kernel(
        lambda name, a: readers.FixedLengthRecordReader(name, a["record_bytes"], a["header_bytes"],
                                                         a["footer_bytes"], a["hop_bytes"], a["encoding"])))
    reg.register("TFRecordReaderV2", CPU, factory=_reader_kernel(
        lambda name, a: readers.TFRecordReader(name, a["compression_type"])))
    reg.register("ReaderReadV2", CPU, factory=_read, is_async=True)
    reg.register("ReaderReadUpToV2", CPU, factory=_read_up_to, is_async=True)
    reg.register("ReaderResetV2", CPU, factory=_reset, is_async=True)
    reg.register("ReaderNumRecordsProducedV2", CPU, factory=_counter("num_records_produced"))
    reg.register("ReaderNumWorkUnitsCompletedV2", CPU, factory=_counter("num_work_units_completed"))
