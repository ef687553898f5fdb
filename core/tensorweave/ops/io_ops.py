"""Input ops (whitepaper 4.5): readers that turn a queue of filenames into records, file
ops, and decode ops that turn records into tensors.

A reader is a stateful resource in the Session's containers, like a queue: the reader op
(``TFRecordReaderV2``, ...) outputs a *handle*, a scalar string ``b"<container>:<name>"``,
and ``ReaderReadV2(reader_handle, queue_handle)`` produces the next ``(key, value)``,
dequeuing the next filename from the queue when the current file is exhausted. Keys are as
in TensorFlow: ``b"<filename>:<n>"`` where n is the 1-based line number for text lines, the
0-based record index for fixed-length records and the byte offset of the record for
record files; a whole file's key is its filename.

The reader resources live in ``tensorweave.runtime.readers``; the record format in
``tensorweave.framework.record_io``; kernels in the device plugins (the CPU plugin's
``kernels/io.py``).
"""

from __future__ import annotations

import functools

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    GraphKeys,
    Tensor,
    apply_op,
    convert_to_tensor,
    get_default_graph,
)
from tensorweave.framework.record_io import TFRecordOptions
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import shape_fns
from tensorweave.ops.variables import Variable

__all__ = [
    "ReaderBase", "WholeFileReader", "TextLineReader", "FixedLengthRecordReader", "TFRecordReader",
    "read_file", "write_file", "matching_files", "decode_raw", "decode_csv", "string_to_number",
]

_READER_ATTRS = ["container: string = ''", "shared_name: string = ''"]
DECODE_RAW_TYPES = ("float16", "float32", "float64", "int32", "uint16", "uint8", "int16", "int8", "int64",
                    "complex64", "complex128", "bool")
CSV_TYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.string)


def _scalar_input(op, index, what):
    s = op.inputs[index].shape
    if s.ndims is not None and s.ndims != 0:
        raise errors.InvalidArgumentError(f"{what} must be a scalar, got shape {s}")


def _read_shape(op):
    _scalar_input(op, 0, "reader_handle")
    _scalar_input(op, 1, "queue_handle")
    return [TensorShape([]), TensorShape([])]


def _read_up_to_shape(op):
    _scalar_input(op, 0, "reader_handle")
    _scalar_input(op, 1, "queue_handle")
    _scalar_input(op, 2, "num_records")
    return [TensorShape([None]), TensorShape([None])]


def _handle_only(op):
    _scalar_input(op, 0, "reader_handle")
    return [TensorShape([]) for _ in op.outputs]


def _fixed_length_check(op):
    for attr in ("header_bytes", "footer_bytes", "hop_bytes"):
        if op.get_attr(attr) < 0:
            raise errors.InvalidArgumentError(f"{attr} must be >= 0, got {op.get_attr(attr)}")
    if op.get_attr("record_bytes") <= 0:
        raise errors.InvalidArgumentError(f"record_bytes must be > 0, got {op.get_attr('record_bytes')}")
    if op.get_attr("encoding") not in ("", "ZLIB", "GZIP"):
        raise errors.InvalidArgumentError(f"encoding must be '', 'ZLIB' or 'GZIP', got {op.get_attr('encoding')!r}")
    return [TensorShape([])]


def _tfrecord_check(op):
    if op.get_attr("compression_type") not in ("", "ZLIB", "GZIP"):
        raise errors.InvalidArgumentError(
            f"compression_type must be '', 'ZLIB' or 'GZIP', got {op.get_attr('compression_type')!r}")
    return [TensorShape([])]


def _text_line_check(op):
    if op.get_attr("skip_header_lines") < 0:
        raise errors.InvalidArgumentError(f"skip_header_lines must be >= 0, got {op.get_attr('skip_header_lines')}")
    return [TensorShape([])]


def _write_file_shape(op):
    _scalar_input(op, 0, "filename")
    _scalar_input(op, 1, "contents")
    return []


def _read_file_shape(op):
    _scalar_input(op, 0, "filename")
    return [TensorShape([])]


def _matching_files_shape(op):
    s = op.inputs[0].shape
    if s.ndims is not None and s.ndims > 1:
        raise errors.InvalidArgumentError(f"pattern must be a scalar or a vector, got shape {s}")
    return [TensorShape([None])]


def _decode_raw_shape(op):
    s = op.inputs[0].shape
    if s.ndims is None:
        return [TensorShape(None)]
    return [TensorShape(s.dims + [None])]


def _decode_csv_shape(op):
    types = op.get_attr("OUT_TYPE")
    for i, (t, dt) in enumerate(zip(op.inputs[1:], types)):
        if dt not in CSV_TYPES:
            raise errors.InvalidArgumentError(
                f"record_defaults[{i}] has dtype {dt.name}; DecodeCSV supports "
                f"{', '.join(d.name for d in CSV_TYPES)}")
        if t.shape.ndims is not None and t.shape.ndims > 1:
            raise errors.InvalidArgumentError(
                f"record_defaults[{i}] must be a vector with 0 or 1 element, got shape {t.shape}")
        if t.shape.ndims == 1 and t.shape[0] is not None and t.shape[0] > 1:
            raise errors.InvalidArgumentError(
                f"record_defaults[{i}] must have 0 or 1 element (the default; none: the field is "
                f"required), got {t.shape[0]}")
    cols = op.get_attr("select_cols")
    if cols and (any(c < 0 for c in cols) or any(b <= a for a, b in zip(cols, cols[1:]))):
        raise errors.InvalidArgumentError(f"select_cols must be non-negative and strictly increasing, got {cols}")
    if cols and len(cols) != len(types):
        raise errors.InvalidArgumentError(
            f"select_cols names {len(cols)} columns but there are {len(types)} record_defaults")
    if len(op.get_attr("field_delim")) != 1:
        raise errors.InvalidArgumentError(f"field_delim must be one character, got {op.get_attr('field_delim')!r}")
    return [op.inputs[0].shape for _ in types]


def register_ops(reg):
    reg.op("WholeFileReaderV2", outputs=["reader_handle: string"], attrs=_READER_ATTRS,
           shape_fn=shape_fns.scalar, stateful=True,
           doc="A reader whose one record per file is the whole file (key: the filename).")
    reg.op("TextLineReaderV2", outputs=["reader_handle: string"],
           attrs=["skip_header_lines: int = 0"] + _READER_ATTRS, shape_fn=_text_line_check, stateful=True,
           doc="A reader of the lines of text files, newline (and a \\r before it) removed.")
    reg.op("FixedLengthRecordReaderV2", outputs=["reader_handle: string"],
           attrs=["header_bytes: int = 0", "record_bytes: int", "footer_bytes: int = 0", "hop_bytes: int = 0",
                  "encoding: string = ''"] + _READER_ATTRS,
           shape_fn=_fixed_length_check, stateful=True,
           doc="A reader of fixed-length records, after a header and before a footer.")
    reg.op("TFRecordReaderV2", outputs=["reader_handle: string"],
           attrs=["compression_type: string = ''"] + _READER_ATTRS, shape_fn=_tfrecord_check, stateful=True,
           doc="A reader of record files (length + CRC32C framing, TFRecord format).")
    reg.op("ReaderReadV2", inputs=["reader_handle: string", "queue_handle: string"],
           outputs=["key: string", "value: string"], shape_fn=_read_shape, stateful=True,
           doc="The next record; dequeues a filename when the current file is done.")
    reg.op("ReaderReadUpToV2", inputs=["reader_handle: string", "queue_handle: string", "num_records: int64"],
           outputs=["keys: string", "values: string"], shape_fn=_read_up_to_shape, stateful=True,
           doc="Up to num_records records (fewer only at the end of the input).")
    reg.op("ReaderNumRecordsProducedV2", inputs=["reader_handle: string"], outputs=["records_produced: int64"],
           shape_fn=_handle_only, stateful=True)
    reg.op("ReaderNumWorkUnitsCompletedV2", inputs=["reader_handle: string"], outputs=["units_completed: int64"],
           shape_fn=_handle_only, stateful=True)
    reg.op("ReaderResetV2", inputs=["reader_handle: string"], shape_fn=_handle_only, stateful=True,
           doc="Back to the initial state: no current file, counters at zero.")
    # File ops are stateful: their results depend on the file system, never fold or merge them.
    reg.op("ReadFile", inputs=["filename: string"], outputs=["contents: string"], shape_fn=_read_file_shape,
           stateful=True)
    reg.op("WriteFile", inputs=["filename: string", "contents: string"], shape_fn=_write_file_shape,
           stateful=True)
    reg.op("MatchingFiles", inputs=["pattern: string"], outputs=["filenames: string"],
           shape_fn=_matching_files_shape, stateful=True,
           doc="The sorted file names matching a glob pattern (or any of a vector of patterns).")
    reg.op("DecodeRaw", inputs=["bytes: string"], outputs=["output: out_type"],
           attrs=[f"out_type: {{{', '.join(DECODE_RAW_TYPES)}}}", "little_endian: bool = true"],
           shape_fn=_decode_raw_shape, doc="Reinterpret the bytes of each string as a vector of out_type.")
    reg.op("DecodeCSV", inputs=["records: string", "record_defaults: OUT_TYPE"], outputs=["output: OUT_TYPE"],
           attrs=["OUT_TYPE: list(type)", "field_delim: string = ','", "use_quote_delim: bool = true",
                  "na_value: string = ''", "select_cols: list(int) = []"],
           shape_fn=_decode_csv_shape, doc="Parse CSV records into one tensor per column.")
    reg.op("StringToNumber", inputs=["string_tensor: string"], outputs=["output: out_type"],
           attrs=["out_type: {float32, float64, int32, int64} = float32"], shape_fn=shape_fns.unchanged)


# ---------------------------------------------------------------------------------------
# readers
def _queue_ref(queue):
    if isinstance(queue, Tensor):
        return queue
    ref = getattr(queue, "queue_ref", None)
    if ref is None:
        raise errors.InvalidArgumentError(f"expected a queue (or its handle tensor), got {queue!r}")
    return ref


def _on_reader(method):
    """Build the op on the reader's device: its position in the files lives in one process."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._reader_ref.graph.colocate_with(self._reader_ref.op):
            return method(self, *args, **kwargs)
    return wrapper


class ReaderBase:
    """A reader: ``read(queue)`` gives the next ``(key, value)``, taking filenames from
    ``queue`` (a queue object or its string handle tensor) as files run out."""

    def __init__(self, reader_ref, supports_serialize=False):
        self._reader_ref = reader_ref
        self._supports_serialize = supports_serialize

    @property
    def reader_ref(self):
        return self._reader_ref

    @property
    def supports_serialize(self):
        return self._supports_serialize

    @_on_reader
    def read(self, queue, name=None):
        """The next record: ``(key, value)`` scalar strings."""
        return apply_op("ReaderReadV2", [self._reader_ref, _queue_ref(queue)], name=name)

    @_on_reader
    def read_up_to(self, queue, num_records, name=None):
        """Up to ``num_records`` records as two vectors ``(keys, values)``: fewer only when
        the queue is closed and runs out (an OutOfRangeError when there are none)."""
        n = convert_to_tensor(num_records, dtype=dtypes.int64, name="num_records") \
            if not isinstance(num_records, Tensor) else num_records
        return apply_op("ReaderReadUpToV2", [self._reader_ref, _queue_ref(queue), n], name=name)

    @_on_reader
    def num_records_produced(self, name=None):
        return apply_op("ReaderNumRecordsProducedV2", [self._reader_ref], name=name)

    @_on_reader
    def num_work_units_completed(self, name=None):
        return apply_op("ReaderNumWorkUnitsCompletedV2", [self._reader_ref], name=name)

    @_on_reader
    def reset(self, name=None):
        return apply_op("ReaderResetV2", [self._reader_ref], name=name)

    def serialize_state(self, name=None):
        raise errors.UnimplementedError("readers do not serialize their state (supports_serialize is False)")

    def restore_state(self, state, name=None):
        raise errors.UnimplementedError("readers do not restore a serialized state (supports_serialize is False)")


def _reader_op(op_type, attrs, name, default_name):
    g = get_default_graph()
    attrs = dict(attrs, container=g._current_container(), shared_name="")
    return apply_op(op_type, [], attrs, name=name or default_name)


class WholeFileReader(ReaderBase):
    """Each file is one record: the key is the filename, the value its contents."""

    def __init__(self, name=None):
        super().__init__(_reader_op("WholeFileReaderV2", {}, name, "WholeFileReaderV2"))


class TextLineReader(ReaderBase):
    """Each line is a record (without its newline); keys ``b"file:line_number"`` (1-based)."""

    def __init__(self, skip_header_lines=None, name=None):
        super().__init__(_reader_op("TextLineReaderV2", {"skip_header_lines": int(skip_header_lines or 0)},
                                    name, "TextLineReaderV2"))


class FixedLengthRecordReader(ReaderBase):
    """Records of ``record_bytes`` bytes after ``header_bytes`` and before ``footer_bytes``;
    with ``hop_bytes`` > 0 a record starts every ``hop_bytes`` bytes (records may overlap).
    A trailing partial record is ignored. Keys ``b"file:index"`` (0-based)."""

    def __init__(self, record_bytes, header_bytes=None, footer_bytes=None, hop_bytes=None, name=None,
                 encoding=None):
        attrs = {"record_bytes": int(record_bytes), "header_bytes": int(header_bytes or 0),
                 "footer_bytes": int(footer_bytes or 0), "hop_bytes": int(hop_bytes or 0),
                 "encoding": encoding or ""}
        super().__init__(_reader_op("FixedLengthRecordReaderV2", attrs, name, "FixedLengthRecordReaderV2"))


class TFRecordReader(ReaderBase):
    """Records of record files (``tw.python_io.TFRecordWriter``); keys ``b"file:offset"``."""

    def __init__(self, name=None, options=None):
        compression = TFRecordOptions.get_compression_type_string(
            options if options is None or isinstance(options, TFRecordOptions) else TFRecordOptions(options))
        super().__init__(_reader_op("TFRecordReaderV2", {"compression_type": compression}, name,
                                    "TFRecordReaderV2"))


# ---------------------------------------------------------------------------------------
# files
def _string(value, what):
    return convert_to_tensor(value, dtype=dtypes.string, name=what)


def read_file(filename, name=None):
    """The contents of a file, as a scalar string."""
    return apply_op("ReadFile", [_string(filename, "filename")], name=name)


def write_file(filename, contents, name=None):
    """An op that writes ``contents`` to ``filename`` (creating missing directories)."""
    return apply_op("WriteFile", [_string(filename, "filename"), _string(contents, "contents")], name=name)


def matching_files(pattern, name=None):
    """The sorted names of the files matching a glob pattern (``*``, ``?``, ``[...]``)."""
    return apply_op("MatchingFiles", [_string(pattern, "pattern")], name=name)


def match_filenames_once(pattern, name=None):
    """A local variable holding the files matching ``pattern`` when it is initialised
    (``tw.local_variables_initializer()``)."""
    g = get_default_graph()
    with g.name_scope(name or "matching_filenames") as scope:
        return Variable(lambda: matching_files(pattern), trainable=False, validate_shape=False,
                        collections=[GraphKeys.LOCAL_VARIABLES], name=scope.rstrip("/").rsplit("/", 1)[-1])


# ---------------------------------------------------------------------------------------
# decoding
def decode_raw(bytes, out_type, little_endian=True, name=None):  # noqa: A002 - TF's argument name
    """Reinterpret each string's bytes as a vector of ``out_type``: shape ``bytes.shape + [n]``
    (all strings must have one length, a multiple of the type's size)."""
    return apply_op("DecodeRaw", [_string(bytes, "bytes")],
                    {"out_type": dtypes.as_dtype(out_type), "little_endian": bool(little_endian)}, name=name)


def _default_tensor(d, i):
    if isinstance(d, Tensor):
        return d
    name = f"record_default_{i}"
    if isinstance(d, list | tuple) and len(d) == 0:
        raise errors.InvalidArgumentError(
            f"record_defaults[{i}] is an empty list, which has no dtype: for a required column pass an "
            "empty tensor of the column's dtype, e.g. tw.constant([], dtype=tw.int32)")
    return convert_to_tensor(d, name=name)


def decode_csv(records, record_defaults, field_delim=",", use_quote_delim=True, name=None, na_value="",
               select_cols=None):
    """Parse CSV lines: one output per column, with the dtype and default of its
    ``record_defaults`` entry (``[value]``, or an empty tensor for a required column).

    Fields may be quoted (``"a, b"``, a quote doubled inside) when ``use_quote_delim``; an
    empty field or one equal to ``na_value`` takes the column's default.
    """
    records = _string(records, "records")
    defaults = [_default_tensor(d, i) for i, d in enumerate(record_defaults)]
    if not defaults:
        raise errors.InvalidArgumentError("decode_csv needs at least one record_default")
    out = apply_op("DecodeCSV", [records, defaults],
                   {"field_delim": field_delim, "use_quote_delim": bool(use_quote_delim),
                    "na_value": na_value, "select_cols": list(select_cols or [])}, name=name)
    return list(out) if isinstance(out, list | tuple) else [out]


def string_to_number(string_tensor, out_type=dtypes.float32, name=None):
    """Parse each string as a number of ``out_type`` (float32, float64, int32, int64)."""
    return apply_op("StringToNumber", [_string(string_tensor, "string_tensor")],
                    {"out_type": dtypes.as_dtype(out_type)}, name=name)
