"""The wire format of the distributed runtime: messages, tensors, responses, graphs — never pickle.

This module owns how requests, responses, tensors and partition graphs become bytes and come
back. Transports (``distributed/transport.py``) only move the bytes this module produces, so
every transport carries exactly the same format. Nothing read from the wire is ever
unpickled or evaluated: headers are JSON objects parsed with ``json``, tensor payloads are
raw little-endian bytes interpreted with ``np.frombuffer`` after the header has been checked.

Message (one request or response)::

    b"TWM1" | u32 header length | UTF-8 JSON object | u32 tensor count
            | per tensor: u64 frame length | tensor frame

Tensor frame (also the first chunk of a streamed tensor, then its payload in chunks)::

    b"TWT1" | u32 header length | UTF-8 JSON {"dtype", "shape", "nbytes", "dead"?} | payload

All integers are little-endian. A tensor's ``dtype``, ``shape``, ``nbytes`` and payload are
``framework/tensor_codec.py``'s, the one tensor encoding (safetensors dtype names such as
``"F32"``; a string payload is ``n + 1`` int64 offsets then the bytes); this module only
frames them. A dead tensor (control flow, ``runtime.step.DEAD``) has ``"dead": true`` and
no payload. In a message each tensor header is padded with spaces so its payload starts
16-byte aligned relative to the message start, which keeps zero-copy arrays aligned.

Graphs (``encode_graph_def``/``decode_graph_def``) travel in a message header as
``framework/serialization.py``'s tagged dicts, their tensor values as frames of the same
message (``{"tensor": {"frame": i}}``), never as base64 in the header. A received graph is
checked against the op registry with the OpDef attr checks graph construction uses
(``op_def.check_attr_value``); ``_Send``/``_Recv`` are defined in ``ops/transfer_ops.py``.

Ownership: ``decode_message``/``decode_response`` return numeric arrays that are read-only
views of the buffer they were given (zero copy; they keep it alive); pass ``copy=True`` for
owned, writable arrays. String tensors are always new object arrays of ``bytes``.
``assemble_tensor`` returns an owned, writable array: it preallocates from the header and
copies each chunk into place once.

A traced step's stats (``runtime.config.StepStats``) travel in a response header as their
dict form (``encode_step_stats``/``decode_step_stats``: TF's step_stats field names,
integer nanoseconds), checked field by field when read.

Every malformed input raises a ``tw.errors`` class: ``DataLossError`` for truncation (a
stream or message that ends early), ``ResourceExhaustedError`` above ``max_bytes`` (2 GiB by
default), ``InvalidArgumentError`` for everything else (bad magic, lengths, dtype, shape, byte
counts, JSON, trailing bytes, unknown ops in a graph). No ``IndexError``, ``struct.error`` or
``JSONDecodeError`` escapes (``tests/distributed/test_wire_fuzz.py`` fuzzes every decoder).
Nothing is allocated on a size the input only claims: a message's tensors must lie in the
message, and a streamed tensor's buffer is reserved, not committed (``reserve_buffer``).

Requests: ``REQUEST_FIELDS`` is the schema of every service method's header (its fields,
their kinds, which are required); ``decode_request`` decodes a request and checks it.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import mmap
import re
import struct
import sys

import numpy as np

from tensorweave import plugins
from tensorweave.framework import dtypes, errors, tensor_codec
from tensorweave.framework import serialization as _ser
from tensorweave.framework.op_def import check_attr_value
from tensorweave.ops import transfer_ops
from tensorweave.runtime.config import StepStats
from tensorweave.runtime.step import DEAD

MESSAGE_MAGIC = b"TWM1"
TENSOR_MAGIC = b"TWT1"
DEFAULT_MAX_BYTES = 1 << 31          # 2 GiB: larger messages or tensors are refused
DEFAULT_CHUNK_BYTES = 1 << 20
MAX_GRAPH_NODES = 1 << 20
MAX_RANK = tensor_codec.MAX_RANK
_ALIGN = 16

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TENSOR_KEYS = frozenset({"dtype", "shape", "nbytes", "dead"})
_DEAD_DTYPE = tensor_codec.name_of(dtypes.float32)


# ----------------------------------------------------------------------------------------
# Small helpers


def _bytes_view(data, what: str) -> memoryview:
    """``data`` as a flat memoryview of unsigned bytes (no copy)."""
    try:
        mv = data if isinstance(data, memoryview) else memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
    except TypeError:
        raise errors.InvalidArgumentError(
            f"{what} must be bytes, bytearray or a contiguous memoryview, got {type(data).__name__}") from None
    return mv


def _dumps(obj, what: str) -> bytes:
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as e:
        raise errors.InvalidArgumentError(f"{what} is not JSON-serialisable: {e}") from None


def _loads(raw: memoryview, what: str):
    try:
        return json.loads(str(raw, "utf-8"))
    except UnicodeDecodeError as e:
        raise errors.InvalidArgumentError(f"{what} is not valid UTF-8: {e}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise errors.InvalidArgumentError(f"{what} is not valid JSON: {e}") from None


class _Reader:
    """Bounds-checked reads from a byte view; running past the end is truncation (DataLoss)."""

    __slots__ = ("mv", "pos", "what")

    def __init__(self, mv: memoryview, what: str, pos: int = 0):
        self.mv, self.pos, self.what = mv, pos, what

    def take(self, n: int, field: str) -> memoryview:
        left = len(self.mv) - self.pos
        if n > left:
            raise errors.DataLossError(
                f"{self.what} is truncated: {field} needs {n} bytes at offset {self.pos}, "
                f"but only {left} remain (of {len(self.mv)})")
        out = self.mv[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self, field: str) -> int:
        return _U32.unpack(self.take(4, field))[0]

    def u64(self, field: str) -> int:
        return _U64.unpack(self.take(8, field))[0]

    def magic(self, magic: bytes) -> None:
        head = bytes(self.mv[self.pos:self.pos + len(magic)])
        if head != magic[:len(head)]:
            raise errors.InvalidArgumentError(
                f"{self.what} does not start with the magic {magic!r} (got {head!r}): "
                "not a tensorweave wire frame, or a different format version")
        self.take(len(magic), f"the magic {magic!r}")


# ----------------------------------------------------------------------------------------
# Tensors


def _tensor_parts(value, what: str) -> tuple[dict, list]:
    """(header dict, payload buffers) of one tensor (``tensor_codec.encode``); numeric
    payloads are views, not copies."""
    if value is DEAD:
        return {"dtype": _DEAD_DTYPE, "shape": [0], "nbytes": 0, "dead": True}, []
    return tensor_codec.encode(value, what)


def _tensor_header_bytes(header: dict, frame_at: int | None = None) -> bytes:
    """TWT1 | u32 | JSON. With ``frame_at`` (the frame's offset in its message) the JSON is
    padded with spaces so the payload starts at a multiple of 16 there."""
    raw = _dumps(header, "tensor header")
    if frame_at is not None:
        raw += b" " * ((-(frame_at + 8 + len(raw))) % _ALIGN)
    return TENSOR_MAGIC + _U32.pack(len(raw)) + raw


def _check_tensor_header(h, where: str, max_bytes: int | None) -> dict:
    """Validate a decoded tensor header; return it normalised (shape a tuple)."""
    if not isinstance(h, dict):
        raise errors.InvalidArgumentError(f"{where}: header must be a JSON object, got {type(h).__name__}")
    extra = set(h) - _TENSOR_KEYS
    if extra:
        raise errors.InvalidArgumentError(
            f"{where}: unknown header field(s) {sorted(extra)}; expected {sorted(_TENSOR_KEYS)}")
    dt = tensor_codec.dtype_of(h.get("dtype"), where)
    shape = tensor_codec.check_shape(h.get("shape"), where)
    nbytes = h.get("nbytes")
    if type(nbytes) is not int or nbytes < 0:
        raise errors.InvalidArgumentError(f"{where}: nbytes must be a non-negative int, got {nbytes!r}")
    dead = h.get("dead", False)
    if type(dead) is not bool:
        raise errors.InvalidArgumentError(f"{where}: 'dead' must be a bool, got {dead!r}")
    if max_bytes is not None and nbytes > max_bytes:
        raise errors.ResourceExhaustedError(
            f"{where}: tensor of {nbytes} bytes exceeds the limit of {max_bytes} bytes")
    if dead:
        if nbytes:
            raise errors.InvalidArgumentError(f"{where}: a dead tensor carries no bytes, header says {nbytes}")
    else:
        tensor_codec.check_nbytes(dt, shape, nbytes, where)
    return {"dtype": h["dtype"], "shape": shape, "nbytes": nbytes, "dead": dead}


def _read_tensor_header(r: _Reader, where: str, max_bytes: int | None) -> dict:
    r.magic(TENSOR_MAGIC)
    hlen = r.u32("the tensor header length")
    raw = r.take(hlen, "the tensor header")
    return _check_tensor_header(_loads(raw, f"{where}: header"), where, max_bytes)


def _array_from_payload(h: dict, payload, where: str, copy: bool):
    """The tensor of a checked header ``h`` over ``payload`` (exactly ``h['nbytes']`` bytes)."""
    if h["dead"]:
        return DEAD
    arr = tensor_codec.decode(h["dtype"], h["shape"], payload, where, copy=copy)
    if not copy and arr.base is not None and arr.flags.writeable and arr.dtype != object:
        arr.flags.writeable = False  # a view of the caller's buffer: not ours to write through
    return arr


def decode_tensor_header(data, max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[dict, int]:
    """Parse a tensor frame header (a stream's first chunk): ``(header, payload offset)``.

    ``header`` is normalised: ``{"dtype": name, "shape": tuple, "nbytes": int, "dead": bool}``,
    checked (known dtype, byte count matching the shape, at most ``max_bytes``); any bytes of
    ``data`` from the offset on are the payload's beginning.
    """
    r = _Reader(_bytes_view(data, "tensor header"), "tensor header")
    return _read_tensor_header(r, "tensor", max_bytes), r.pos


# A streamed tensor at least this large is received into an anonymous mapping of its own.
RESERVE_BYTES = 4 << 20
# Linux's MAP_NORESERVE (Python 3.11's mmap module does not name it): no swap is set aside.
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def reserve_buffer(nbytes: int, where: str = "tensor") -> np.ndarray:
    """A writable uint8 array of ``nbytes`` whose memory the OS commits page by page as it is
    written, so a header announcing gigabytes costs what its bytes cost as they arrive, not
    what it claims (a stream that ends early has committed only what came).

    From ``RESERVE_BYTES`` on it is an anonymous private mapping (``MAP_NORESERVE``: no swap
    is set aside; huge pages where the kernel gives them, as NumPy asks for its own large
    arrays); smaller ones come from NumPy. Memory the system refuses is
    ``ResourceExhaustedError``, never ``MemoryError``.
    """
    try:
        if nbytes >= RESERVE_BYTES and hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS"):
            m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
            if hasattr(mmap, "MADV_HUGEPAGE"):
                with contextlib.suppress(OSError):
                    m.madvise(mmap.MADV_HUGEPAGE)
            return np.frombuffer(m, dtype=np.uint8)
        return np.empty(nbytes, dtype=np.uint8)
    except (MemoryError, OSError, OverflowError, ValueError) as e:
        raise errors.ResourceExhaustedError(f"{where}: cannot reserve {nbytes} bytes for it ({e})") from None


class TensorAssembler:
    """Fills one preallocated tensor from payload chunks (streamed tensors, no concatenation).

    ``TensorAssembler(header)`` with a header from ``decode_tensor_header``; ``write(chunk)``
    copies each bytes-like chunk into place; ``finish()`` checks the total and returns the
    array (owned and writable) or ``DEAD``. ``buffer`` is the writable byte view being filled,
    for transports that can receive straight into it (then call ``advance(n)``).
    """

    def __init__(self, header: dict, where: str = "streamed tensor"):
        self.header, self.where = header, where
        self.nbytes = header["nbytes"]
        self.pos = 0
        # Aligned for any element type (NumPy's allocations and mappings are): the array is a
        # view of it. Reserved, not committed: see ``reserve_buffer``.
        self._raw = reserve_buffer(self.nbytes, where)
        self.buffer = memoryview(self._raw)

    def advance(self, n: int) -> None:
        if self.pos + n > self.nbytes:
            raise errors.DataLossError(
                f"{self.where}: the stream carried more than the {self.nbytes} bytes its header announced "
                f"({self.pos + n} so far)")
        self.pos += n

    def write(self, chunk) -> None:
        mv = _bytes_view(chunk, f"{self.where}: chunk")
        n = len(mv)
        at = self.pos
        self.advance(n)
        self.buffer[at:at + n] = mv

    def finish(self):
        if self.pos != self.nbytes:
            raise errors.DataLossError(
                f"{self.where}: the stream ended after {self.pos} of the {self.nbytes} bytes its header announced")
        if self.header["dead"]:
            return DEAD
        return tensor_codec.decode(self.header["dtype"], self.header["shape"], self._raw, self.where)


def tensor_chunks(arr, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
    """Stream one tensor: an iterator of a header chunk (bytes), then payload chunks.

    Numeric payload chunks are memoryviews of the array's own memory (no copies; a
    non-contiguous or big-endian array is first made contiguous little-endian, once); each is
    at most ``chunk_bytes``. ``DEAD`` streams as a header with ``"dead": true`` and no payload.
    The value is checked now, so a tensor that cannot be sent fails here, not mid-stream.
    """
    if type(chunk_bytes) is not int or chunk_bytes < 1:
        raise errors.InvalidArgumentError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    header, parts = _tensor_parts(arr, "streamed tensor")
    head = _tensor_header_bytes(header)

    def gen():
        yield head
        for p in parts:
            mv = _bytes_view(p, "payload")
            for i in range(0, len(mv), chunk_bytes):
                yield mv[i:i + chunk_bytes]

    return gen()


def assemble_tensor(chunks, max_bytes: int | None = DEFAULT_MAX_BYTES):
    """Rebuild a streamed tensor from an iterable of chunks (the inverse of ``tensor_chunks``).

    The first chunk must hold the whole tensor header (it may also hold payload bytes); a
    first chunk that is an error response (``encode_error``) raises that error. The array is
    preallocated from the header (refused above ``max_bytes`` before allocating) and each
    chunk is copied into place once. Fewer or more bytes than announced -> DataLossError.
    """
    it = iter(chunks)
    first = next(it, None)
    if first is None:
        raise errors.DataLossError("tensor stream ended before its header")
    mv = _bytes_view(first, "tensor stream chunk")
    if bytes(mv[:4]) == MESSAGE_MAGIC:
        decode_response(mv, max_bytes)  # raises the error it carries
        raise errors.InvalidArgumentError("tensor stream began with a response message instead of a tensor header")
    header, off = decode_tensor_header(mv, max_bytes)
    asm = TensorAssembler(header)
    if off < len(mv):
        asm.write(mv[off:])
    for c in it:
        asm.write(c)
    return asm.finish()


# ----------------------------------------------------------------------------------------
# Messages


def encode_message(header: dict, tensors=(), *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> bytes:
    """One request or response: a JSON-object header and a list of tensors (arrays or DEAD).

    The result is built with one copy of each tensor's bytes. Above ``max_bytes`` ->
    ResourceExhaustedError (stream big tensors with ``tensor_chunks`` instead).
    """
    if not isinstance(header, dict):
        raise errors.InvalidArgumentError(f"message header must be a dict, got {type(header).__name__}")
    if isinstance(tensors, np.ndarray) or not isinstance(tensors, list | tuple):
        raise errors.InvalidArgumentError(
            f"tensors must be a list or tuple of arrays, got {type(tensors).__name__}")
    if len(tensors) >= 1 << 32:
        raise errors.ResourceExhaustedError(f"{len(tensors)} tensors exceed the wire limit of 2**32 - 1")
    raw = _dumps(header, "message header")
    parts = [MESSAGE_MAGIC, _U32.pack(len(raw)), raw, _U32.pack(len(tensors))]
    pos = 12 + len(raw)
    for i, t in enumerate(tensors):
        th, payload = _tensor_parts(t, f"tensor {i}")
        head = _tensor_header_bytes(th, frame_at=pos + 8)
        flen = len(head) + th["nbytes"]
        parts += [_U64.pack(flen), head, *payload]
        pos += 8 + flen
        if max_bytes is not None and pos > max_bytes:
            break
    if max_bytes is not None and pos > max_bytes:
        raise errors.ResourceExhaustedError(
            f"wire message of at least {pos} bytes exceeds the limit of {max_bytes} bytes; "
            "stream large tensors in chunks (tensor_chunks)")
    return b"".join(parts)


def decode_message(data, max_bytes: int | None = DEFAULT_MAX_BYTES, *, copy: bool = False):
    """``(header dict, list of tensors)`` from ``encode_message``'s bytes; everything checked.

    Numeric tensors are read-only zero-copy views of ``data`` unless ``copy=True``.
    """
    mv = _bytes_view(data, "wire message")
    if max_bytes is not None and len(mv) > max_bytes:
        raise errors.ResourceExhaustedError(
            f"wire message of {len(mv)} bytes exceeds the limit of {max_bytes} bytes")
    r = _Reader(mv, "wire message")
    r.magic(MESSAGE_MAGIC)
    hlen = r.u32("the header length")
    header = _loads(r.take(hlen, "the header"), "wire message header")
    if not isinstance(header, dict):
        raise errors.InvalidArgumentError(
            f"wire message header must be a JSON object, got {type(header).__name__}")
    count = r.u32("the tensor count")
    tensors = []
    for i in range(count):
        where = f"wire message tensor {i} of {count}"
        flen = r.u64(f"{where}: frame length")
        fr = _Reader(r.take(flen, f"{where}: frame"), where)
        h = _read_tensor_header(fr, where, max_bytes)
        if len(fr.mv) - fr.pos != h["nbytes"]:
            raise errors.InvalidArgumentError(
                f"{where}: frame of {flen} bytes holds {len(fr.mv) - fr.pos} payload bytes "
                f"but its header says nbytes={h['nbytes']}")
        tensors.append(_array_from_payload(h, fr.mv[fr.pos:], where, copy))
    if r.pos != len(mv):
        raise errors.InvalidArgumentError(
            f"wire message has {len(mv) - r.pos} trailing bytes after its {count} tensor(s)")
    return header, tensors


# ----------------------------------------------------------------------------------------
# Responses


def encode_response(header: dict | None = None, tensors=()) -> bytes:
    """A successful response: ``{"ok": true, **header}`` and tensors."""
    header = {} if header is None else header
    if not isinstance(header, dict):
        raise errors.InvalidArgumentError(f"response header must be a dict, got {type(header).__name__}")
    if "ok" in header or "error" in header:
        raise errors.InvalidArgumentError("response header keys 'ok' and 'error' are reserved for the wire format")
    return encode_message({"ok": True, **header}, tensors)


def _error_class_name(exc: BaseException) -> str:
    """The nearest ``tw.errors`` class of ``exc`` (a plugin's subclass travels as its base)."""
    for cls in type(exc).__mro__:
        if getattr(errors, cls.__name__, None) is cls and issubclass(cls, errors.OpError) and cls is not errors.OpError:
            return cls.__name__
    return "UnknownError"


def encode_error(exc: BaseException) -> bytes:
    """An error response carrying ``exc``'s class name, message and node.

    A non-``OpError`` exception travels as ``UnknownError`` with its Python type in the message.
    """
    if isinstance(exc, errors.OpError):
        code, message = _error_class_name(exc), str(exc.message)
        node = exc.node_def if isinstance(exc.node_def, str) else None
    else:
        code, message, node = "UnknownError", f"{type(exc).__name__}: {exc}", None
    err = {"code": code, "error_code": getattr(errors, code).error_code, "message": message}
    if node is not None:
        err["node"] = node
    return encode_message({"error": err})


def decode_response(data, max_bytes: int | None = DEFAULT_MAX_BYTES, *, copy: bool = False):
    """``(header, tensors)`` of a successful response (``"ok"`` removed from the header);
    an error response raises its ``tw.errors`` class (unknown codes become UnknownError)."""
    header, tensors = decode_message(data, max_bytes, copy=copy)
    if "error" in header:
        err = header["error"]
        if not isinstance(err, dict):
            raise errors.InvalidArgumentError(f"malformed error response: 'error' is {type(err).__name__}, not an object")
        code, message, node = err.get("code"), err.get("message"), err.get("node")
        if not isinstance(message, str) or not message:
            message = f"(the peer's error response carried no message: {_short(message)})"
        cls = getattr(errors, code, None) if isinstance(code, str) else None
        if not (isinstance(cls, type) and issubclass(cls, errors.OpError) and cls is not errors.OpError):
            cls, message = errors.UnknownError, f"{_short(code)}: {message}"
        raise cls(message, node_def=node if isinstance(node, str) else None)
    if header.get("ok") is not True:
        raise errors.InvalidArgumentError("malformed response: its header has neither \"ok\": true nor \"error\"")
    del header["ok"]
    return header, tensors


# ----------------------------------------------------------------------------------------
# Requests: what each service method's header may hold

# Per method: field -> (kind, required). Every request of the worker service and the master
# service is checked against this one table before a handler reads it, so an unknown field
# (a misspelling: {"contaners": [...]}) or a field of the wrong type ({"containers": null})
# is an InvalidArgumentError naming the method and the field, never a default.
REQUEST_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "GetStatus": {},
    "Health": {},
    "RegisterGraph": {"partitions": ("partitions", True), "feeds": ("str_list", False),
                      "fetches": ("str_list", False), "feed_types": ("str_map", False)},
    "DeregisterGraph": {"handle": ("str", True)},
    "RunGraph": {"handle": ("str", True), "step_id": ("step_id", True), "timeout": ("timeout", False),
                 "trace": ("bool", False)},
    "AbortStep": {"step_id": ("step_id", True), "message": ("str", False)},
    "CleanupStep": {"step_id": ("step_id", True)},
    # exactly one of the two (the worker checks that): named containers, or every one
    "ResetContainers": {"containers": ("str_list", False), "all": ("true", False)},
    "RecvTensor": {"step_id": ("step_id", True), "key": ("str", True)},
    "CreateSession": {"graph_def": ("dict", True)},
    "ExtendSession": {"session": ("str", True), "graph_def": ("dict", True)},
    "RunStep": {"session": ("str", True), "feeds": ("str_list", False), "fetches": ("str_list", False),
                "targets": ("str_list", False), "timeout_in_ms": ("int", False), "trace_level": ("int", False)},
    "CloseSession": {"session": ("str", True)},
    # collectives (distributed/collective.py): a member joins its group at the leader; a value
    # (or a member's failure, "error") from one member to another
    "CompleteGroup": {"group_key": ("int", True), "group_size": ("int", True), "device": ("str", True),
                      "timeout": ("timeout", False)},
    "CollectivePut": {"group_key": ("int", True), "instance_key": ("int", True), "exec": ("int", True),
                      "round": ("int", True), "src": ("str", True), "dst": ("str", True),
                      "signature": ("dict", False), "error": ("dict", False)},
}
# The methods whose requests carry tensors (feeds, a graph's constants, a collective's value); the
# others carry none.
REQUEST_TENSORS = frozenset({"RegisterGraph", "RunGraph", "CreateSession", "ExtendSession", "RunStep",
                             "CollectivePut"})
# One partition of a RegisterGraph request.
PARTITION_FIELDS = {"device": ("str", True), "graph_def": ("dict", True), "loops": ("dict", False)}

_KIND_TEXT = {
    "str": "a string", "int": "an integer", "step_id": "an integer in [-2**63, 2**63)", "bool": "true or false",
    "true": "true", "dict": "a JSON object", "str_list": "a list of strings",
    "str_map": "an object mapping strings to strings", "timeout": "a non-negative number of seconds or null",
    "partitions": "a non-empty list of objects",
}


def _is_int(v) -> bool:
    return type(v) is int


def _kind_ok(kind: str, v) -> bool:
    if kind == "str":
        return isinstance(v, str)
    if kind == "int":
        return _is_int(v)
    if kind == "step_id":
        return _is_int(v) and -(1 << 63) <= v < (1 << 63)
    if kind == "bool":
        return type(v) is bool
    if kind == "true":
        return v is True
    if kind == "dict":
        return isinstance(v, dict)
    if kind == "str_list":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "str_map":
        return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
    if kind == "timeout":
        return v is None or (type(v) in (int, float) and 0 <= v < float("inf"))
    if kind == "partitions":
        return isinstance(v, list) and bool(v) and all(isinstance(p, dict) for p in v)
    raise AssertionError(kind)


def _check_fields(obj: dict, schema: dict, where: str) -> None:
    extra = [k for k in obj if k not in schema]
    if extra:
        hints = []
        for k in extra[:3]:
            close = difflib.get_close_matches(str(k), list(schema), n=1)
            if close:
                hints.append(f"{close[0]!r} for {str(k)[:60]!r}")
        raise errors.InvalidArgumentError(
            f"{where}: unknown field(s) {[str(k)[:60] for k in extra[:10]]}; it takes {sorted(schema) or 'none'}"
            + (f" (did you mean {', '.join(hints)}?)" if hints else ""))
    for name, (kind, required) in schema.items():
        if name not in obj:
            if required:
                raise errors.InvalidArgumentError(f"{where}: field {name!r} ({_KIND_TEXT[kind]}) is missing")
            continue
        if not _kind_ok(kind, obj[name]):
            raise errors.InvalidArgumentError(
                f"{where}: field {name!r} must be {_KIND_TEXT[kind]}, got {_short(obj[name])}")


def _short(v) -> str:
    try:
        text = json.dumps(v)
    except (TypeError, ValueError, RecursionError):
        text = type(v).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def check_request(method: str, header, n_tensors: int = 0) -> dict:
    """Check a decoded request header of service method ``method`` against ``REQUEST_FIELDS``:
    no unknown field, every required one, each of its kind (``n_tensors``: how many tensors
    the message carried; only ``REQUEST_TENSORS`` methods take any). Returns ``header``."""
    schema = REQUEST_FIELDS.get(method)
    if schema is None:
        raise errors.UnimplementedError(f"unknown method {method!r}")
    if not isinstance(header, dict):
        raise errors.InvalidArgumentError(f"{method}: the request header must be a JSON object")
    _check_fields(header, schema, method)
    if n_tensors and method not in REQUEST_TENSORS:
        raise errors.InvalidArgumentError(f"{method}: the request carries {n_tensors} tensor(s); it takes none")
    for i, p in enumerate(header.get("partitions", ())):
        _check_fields(p, PARTITION_FIELDS, f"{method}: partitions[{i}]")
    return header


def decode_request(method: str, data, max_bytes: int | None = DEFAULT_MAX_BYTES, *, copy: bool = False):
    """``(header, tensors)`` of a request to ``method``: ``decode_message`` then ``check_request``."""
    header, tensors = decode_message(data, max_bytes, copy=copy)
    return check_request(method, header, len(tensors)), tensors


# ----------------------------------------------------------------------------------------
# Step stats


def encode_step_stats(stats: StepStats) -> dict:
    """A traced step's stats as a JSON-safe dict for a message header."""
    return stats.to_dict()


def decode_step_stats(obj, where: str = "step_stats") -> StepStats:
    """The ``StepStats`` in a header; a malformed one is InvalidArgumentError naming ``where``
    and the field."""
    return StepStats.from_dict(obj, where)


# ----------------------------------------------------------------------------------------
# Graphs

_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9_.\-/>]*$")
_NODE_KEYS = frozenset({"name", "op", "input", "device", "attr", "output_shapes"})
_MAX_NAME = 4096


def _ops_of(registry):
    if registry is None:
        registry = plugins.registry()
    return getattr(registry, "ops", registry)


def _arg_count(arg, values: dict, op_def) -> int | None:
    """How many flat tensors ``arg`` stands for, from the node's decoded attrs (None: not known)."""
    if arg.number_attr:
        v = values.get(arg.number_attr)
        if type(v) is int:
            return v
        d = op_def.attrs.get(arg.number_attr)
        return d.default if d is not None and type(d.default) is int else None
    if arg.type_list_attr:
        v = values.get(arg.type_list_attr)
        return len(v) if isinstance(v, list) else None
    return 1


def _flat_count(args, values, op_def) -> int | None:
    total = 0
    for arg in args:
        n = _arg_count(arg, values, op_def)
        if n is None:
            return None
        total += n
    return total


class _Frames:
    """The tensor side of a graph def on the wire: a tensor attr is ``{"tensor": {"frame": i}}``,
    tensor ``i`` of the message that carries the graph; a tensor in the JSON form
    (``serialization.decode_tensor``) is read as well, for graphs a client built by hand."""

    def __init__(self, tensors):
        self.tensors = tensors

    def decode(self, d):
        if not (isinstance(d, dict) and set(d) == {"frame"}):
            return _ser.decode_tensor(d)
        i = d["frame"]
        if type(i) is not int or not 0 <= i < len(self.tensors):
            raise errors.InvalidArgumentError(
                f"tensor frame {str(i)[:50]} is not one of the message's {len(self.tensors)} tensor(s)")
        t = self.tensors[i]
        if not isinstance(t, np.ndarray):
            raise errors.InvalidArgumentError(f"tensor frame {i} is {'a dead tensor' if t is DEAD else type(t).__name__}, "
                                              "not a value")
        return t

    def encode(self, arr) -> dict:
        self.tensors.append(arr)
        return {"frame": len(self.tensors) - 1}


def _attr_value(where: str, op: str, node: str, a, v, decode_tensor):
    """Decode the tagged attr ``v`` (its tag checked against the declared AttrDef ``a``; None: an
    undeclared ``_`` attr, or no registry) and check it with the OpDef checks ``apply_op`` uses."""
    try:
        value = _ser.decode_attr(v, a.type if a is not None else None, decode_tensor)
    except errors.InvalidArgumentError as e:
        raise errors.InvalidArgumentError(f"{where}: {e.message}") from None
    if a is None:
        return value
    if value is None:  # "none": only where the attr's default is None
        if not (a.has_default and a.default is None):
            raise errors.InvalidArgumentError(f"{where}: no value (\"none\") is not allowed here")
        return value
    check_attr_value(op, node, a, value, where=where)
    return value


def _validate_graph_def(obj, ops, feeds, max_nodes: int, decode_tensor, encode_tensor) -> dict:
    """The checks of ``decode_graph_def``; ``ops=None`` checks structure only (no registry).
    Tensor attr values are read with ``decode_tensor`` and written with ``encode_tensor``."""
    if not isinstance(obj, dict):
        raise errors.InvalidArgumentError(f"graph def must be a JSON object, got {type(obj).__name__}")
    extra = set(obj) - {"versions", "node"}
    if extra:
        raise errors.InvalidArgumentError(f"graph def has unknown field(s) {sorted(extra)}; expected 'versions', 'node'")
    versions = obj.get("versions", {"producer": _ser.GRAPH_DEF_VERSION})
    if not isinstance(versions, dict) or type(versions.get("producer")) is not int:
        raise errors.InvalidArgumentError(f"graph def 'versions' must be {{\"producer\": int}}, got {str(versions)[:100]}")
    if versions["producer"] > _ser.GRAPH_DEF_VERSION:
        raise errors.InvalidArgumentError(
            f"graph def version {versions['producer']} is newer than this process reads ({_ser.GRAPH_DEF_VERSION})")
    nodes = obj.get("node")
    if not isinstance(nodes, list):
        raise errors.InvalidArgumentError("graph def must have a 'node' list")
    if len(nodes) > max_nodes:
        raise errors.ResourceExhaustedError(f"graph def has {len(nodes)} nodes, more than the limit of {max_nodes}")
    # Pass 1: each node on its own; names unique.
    by_name: dict[str, tuple] = {}
    out_nodes = []
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            raise errors.InvalidArgumentError(f"graph def node {i} must be an object, got {type(n).__name__}")
        name = n.get("name")
        if not isinstance(name, str) or len(name) > _MAX_NAME or not _NODE_NAME_RE.match(name):
            raise errors.InvalidArgumentError(f"graph def node {i}: invalid node name {str(name)[:200]!r}")
        where = f"node {name!r}"
        extra = set(n) - _NODE_KEYS
        if extra:
            raise errors.InvalidArgumentError(f"{where}: unknown field(s) {sorted(extra)}; expected {sorted(_NODE_KEYS)}")
        if name in by_name:
            raise errors.InvalidArgumentError(f"graph def has two nodes named {name!r}")
        op = n.get("op")
        if not isinstance(op, str) or not op:
            raise errors.InvalidArgumentError(f"{where}: 'op' must be a non-empty string, got {op!r}")
        op_def, transfer = None, False
        if ops is not None:
            if op in ops:
                op_def = ops.get(op)
            elif op in transfer_ops.RUNTIME_OPS:
                op_def, transfer = transfer_ops.RUNTIME_OPS.get(op), True
            else:
                raise errors.InvalidArgumentError(
                    f"{where}: op {op!r} is not registered in this process (is the plugin that "
                    "defines it installed on this worker?)")
        device = n.get("device", "")
        if not isinstance(device, str) or len(device) > _MAX_NAME:
            raise errors.InvalidArgumentError(f"{where}: 'device' must be a string, got {str(device)[:100]!r}")
        inputs = n.get("input", [])
        if not isinstance(inputs, list) or not all(isinstance(s, str) for s in inputs):
            raise errors.InvalidArgumentError(f"{where}: 'input' must be a list of strings")
        attrs = n.get("attr", {})
        if not isinstance(attrs, dict):
            raise errors.InvalidArgumentError(f"{where}: 'attr' must be an object")
        values, out_attrs = {}, {}
        for k, v in attrs.items():
            a = None
            if op_def is not None and not k.startswith("_"):
                a = op_def.attrs.get(k)
                if a is None:
                    raise errors.InvalidArgumentError(
                        f"{where}: unknown attr {k!r} for op {op}; {op} has {sorted(op_def.attrs)}")
            values[k] = _attr_value(f"{where}: attr {k!r}", op, name, a, v, decode_tensor)
            out_attrs[k] = _ser.encode_attr(values[k], encode_tensor)
        if op_def is not None:
            # GraphDefs carry every attr (inferred and defaulted ones too): required ones must be there.
            missing = [a.name for a in op_def.attrs.values() if not a.has_default and a.name not in attrs]
            if missing:
                raise errors.InvalidArgumentError(f"{where}: op {op} needs attr(s) {missing}")
            if transfer:
                transfer_ops.decode_attrs(out_attrs, name)  # checks what its op definition cannot say
        node = {"name": name, "op": op, "input": list(inputs), "device": device, "attr": out_attrs}
        if "output_shapes" in n:
            shapes = n["output_shapes"]
            if not isinstance(shapes, list) or not all(
                    s is None or (isinstance(s, list) and all(d is None or (type(d) is int and d >= 0) for d in s))
                    for s in shapes):
                raise errors.InvalidArgumentError(f"{where}: malformed 'output_shapes'")
            node["output_shapes"] = list(shapes)
        by_name[name] = (node, op_def, values, transfer)
        out_nodes.append(node)
    # Pass 2: edges refer to nodes of this graph (or to fed tensors) and to outputs they have.
    for node in out_nodes:
        name, (_, op_def, values, transfer) = node["name"], by_name[node["name"]]
        where = f"node {name!r}"
        n_data, seen_control = 0, False
        for s in node["input"]:
            if s.startswith("^"):
                seen_control = True
                src = s[1:]
                if src not in by_name:
                    raise errors.InvalidArgumentError(f"{where}: control input {s!r} names no node of this graph")
                continue
            if seen_control:
                raise errors.InvalidArgumentError(f"{where}: data input {s!r} comes after a control input")
            n_data += 1
            src, sep, idx = s.rpartition(":")
            if not sep or not idx.isdigit() or not idx.isascii() or (len(idx) > 1 and idx[0] == "0") or not src:
                raise errors.InvalidArgumentError(f"{where}: input {s!r} is not of the form 'node:index' or '^node'")
            if src not in by_name:
                if s in feeds:
                    continue
                raise errors.InvalidArgumentError(f"{where}: input {s!r} names no node of this graph")
            src_node, src_def, src_values, _ = by_name[src]
            if src_def is not None:
                n_out = _flat_count(src_def.outputs, src_values, src_def)
                if n_out is not None and int(idx) >= n_out:
                    raise errors.InvalidArgumentError(
                        f"{where}: input {s!r} refers to output {idx} of {src_node['op']} node {src!r}, "
                        f"which has {n_out} output(s)")
        if op_def is not None:
            if transfer:
                most = transfer_ops.MAX_DATA_INPUTS[node["op"]]
                if n_data > most:
                    raise errors.InvalidArgumentError(
                        f"{where}: {node['op']} takes at most {most} data input(s), got {n_data}")
            else:
                want = _flat_count(op_def.inputs, values, op_def)
                if want is not None and want != n_data:
                    raise errors.InvalidArgumentError(
                        f"{where}: op {node['op']} takes {want} data input(s), got {n_data}")
    return {"versions": {"producer": versions["producer"]}, "node": out_nodes}


def encode_graph_def(gd, tensors: list) -> dict:
    """A GraphDef for a message header; its tensor values are appended to ``tensors``, the
    message's tensor list, and travel as frames (``{"tensor": {"frame": i}}``).

    ``gd`` is a dict — tensor values as arrays (``to_graph_def(arrays=True)``, no
    base64 on the way) or in the JSON form — or anything with ``to_graph_def()`` or
    ``as_graph_def()``. Its structure and attr tags are checked here; the ops, by the
    receiver's ``decode_graph_def``.
    """
    if not isinstance(gd, dict):
        for m in ("to_graph_def", "as_graph_def"):
            if hasattr(gd, m):
                gd = getattr(gd, m)()
                break
    frames = _Frames(tensors)
    try:
        return _validate_graph_def(gd, None, _AnyFeed(), MAX_GRAPH_NODES, _ser.decode_tensor, frames.encode)
    except RecursionError:
        raise errors.InvalidArgumentError("graph def attr values are nested too deeply") from None


class _AnyFeed:
    """A feed set containing every tensor name: the sender cannot know the receiver's feeds."""

    def __contains__(self, item):
        return True

    def __iter__(self):
        return iter(())


def decode_graph_def(obj, registry=None, *, feeds=(), tensors=(), max_nodes: int = MAX_GRAPH_NODES) -> dict:
    """Validate a received GraphDef against the op registry and return it normalised.

    ``registry``: ``plugins.registry()`` or its ``.ops`` (default: this process's). Every node
    must use a registered op (or the runtime's ``_Send``/``_Recv``, ``ops/transfer_ops.py``),
    with a valid unique name, declared attrs of their declared kinds passing the op's attr
    checks (``op_def.check_attr_value``, as at graph construction), inputs
    ``"node:index"``/``"^node"`` naming nodes of this graph (or a tensor name in ``feeds``,
    for a partition fed by the client) and existing outputs, and the op's number of inputs.
    At most ``max_nodes`` nodes. ``tensors``: the tensors of the message that carried it,
    which its frame references (``encode_graph_def``) name; tensor values come back as those
    arrays (the in-memory form ``import_graph_def`` takes), so decode the message with
    ``copy=True`` when the graph outlives its buffer.
    """
    if isinstance(feeds, str):
        feeds = (feeds,)
    try:
        return _validate_graph_def(obj, _ops_of(registry), frozenset(feeds), max_nodes,
                                   _Frames(tensors).decode, _ser.keep_array)
    except RecursionError:  # attr values nested deeper than Python's stack
        raise errors.InvalidArgumentError("graph def attr values are nested too deeply") from None
