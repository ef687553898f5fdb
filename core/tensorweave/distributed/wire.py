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

All integers are little-endian. A numeric payload is the C-order element bytes,
``nbytes == prod(shape) * itemsize``. A string payload is ``u32 count | count x u64 length |
the bytes``. A dead tensor (control flow, ``runtime.step.DEAD``) has ``"dead": true`` and
no payload. In a message each tensor header is padded with spaces so its payload starts
16-byte aligned relative to the message start, which keeps zero-copy arrays aligned.

Ownership: ``decode_message``/``decode_response`` return numeric arrays that are read-only
views of the buffer they were given (zero copy; they keep it alive); pass ``copy=True`` for
owned, writable arrays. String tensors are always new object arrays of ``bytes``.
``assemble_tensor`` returns an owned, writable array: it preallocates from the header and
copies each chunk into place once.

Every malformed input raises a ``tw.errors`` class: ``DataLossError`` for truncation (a
stream or message that ends early), ``ResourceExhaustedError`` above ``max_bytes`` (2 GiB by
default), ``InvalidArgumentError`` for everything else (bad magic, lengths, dtype, shape, byte
counts, JSON, trailing bytes, unknown ops in a graph). No ``IndexError``, ``struct.error`` or
``JSONDecodeError`` escapes.
"""

from __future__ import annotations

import json
import math
import re
import struct

import numpy as np

from tensorweave import plugins
from tensorweave.framework import dtypes, errors
from tensorweave.framework import serialization as _ser
from tensorweave.framework.op_def import AttrDef, OpRegistry
from tensorweave.runtime.step import DEAD

MESSAGE_MAGIC = b"TWM1"
TENSOR_MAGIC = b"TWT1"
DEFAULT_MAX_BYTES = 1 << 31          # 2 GiB: larger messages or tensors are refused
DEFAULT_CHUNK_BYTES = 1 << 20
MAX_GRAPH_NODES = 1 << 20
MAX_RANK = 32
_ALIGN = 16

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_DTYPE_NAMES = {d.name: d for d in dtypes.ALL_DTYPES}
_TENSOR_KEYS = frozenset({"dtype", "shape", "nbytes", "dead"})


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
    """(header dict, payload buffers) of one tensor; numeric payloads are views, not copies."""
    if value is DEAD:
        return {"dtype": "float32", "shape": [0], "nbytes": 0, "dead": True}, []
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, bytes | str):
        # A fetched scalar string (bytes); np.asarray would make it dtype 'S' and drop trailing NULs.
        arr = np.array(value, dtype=object)
    else:
        arr = np.asarray(value)
    if arr.dtype.kind in "OSU":
        return _string_parts(arr, what)
    try:
        dt = dtypes.as_dtype(arr.dtype if arr.dtype.isnative else arr.dtype.newbyteorder("="))
    except errors.InvalidArgumentError:
        raise errors.InvalidArgumentError(
            f"{what}: NumPy dtype {arr.dtype} cannot be sent; expected one of {sorted(_DTYPE_NAMES)}") from None
    want = dt.np_dtype.newbyteorder("<")
    if arr.dtype != want or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=want)  # one copy, only for odd layouts
    header = {"dtype": dt.name, "shape": list(arr.shape), "nbytes": arr.nbytes}
    return header, ([memoryview(arr.reshape(-1).view(np.uint8))] if arr.nbytes else [])


def _string_parts(arr: np.ndarray, what: str) -> tuple[dict, list]:
    items = []
    for v in arr.reshape(-1):
        if isinstance(v, bytes):
            items.append(v)
        elif isinstance(v, str):
            items.append(v.encode("utf-8"))
        elif isinstance(v, bytearray | memoryview | np.bytes_):
            items.append(bytes(v))
        else:
            raise errors.InvalidArgumentError(
                f"{what}: a string tensor holds bytes or str, got {type(v).__name__} {v!r:.80}")
    if len(items) >= 1 << 32:
        raise errors.ResourceExhaustedError(f"{what}: {len(items)} strings exceed the wire limit of 2**32 - 1")
    lengths = np.fromiter((len(b) for b in items), dtype="<u8", count=len(items))
    parts = [_U32.pack(len(items)), lengths.tobytes(), *items]
    nbytes = 4 + 8 * len(items) + int(lengths.sum())
    return {"dtype": "string", "shape": list(arr.shape), "nbytes": nbytes}, parts


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
    name = h.get("dtype")
    dt = _DTYPE_NAMES.get(name) if isinstance(name, str) else None
    if dt is None:
        raise errors.InvalidArgumentError(
            f"{where}: unknown dtype {name!r}; expected one of {sorted(_DTYPE_NAMES)}")
    shape = h.get("shape")
    if (not isinstance(shape, list) or len(shape) > MAX_RANK
            or not all(type(d) is int and 0 <= d < 1 << 62 for d in shape)):
        raise errors.InvalidArgumentError(
            f"{where}: shape must be a list of at most {MAX_RANK} non-negative ints, got {str(shape)[:200]}")
    nbytes = h.get("nbytes")
    if type(nbytes) is not int or nbytes < 0:
        raise errors.InvalidArgumentError(f"{where}: nbytes must be a non-negative int, got {nbytes!r}")
    dead = h.get("dead", False)
    if type(dead) is not bool:
        raise errors.InvalidArgumentError(f"{where}: 'dead' must be a bool, got {dead!r}")
    if max_bytes is not None and nbytes > max_bytes:
        raise errors.ResourceExhaustedError(
            f"{where}: tensor of {nbytes} bytes exceeds the limit of {max_bytes} bytes")
    count = math.prod(shape)
    if dead:
        if nbytes:
            raise errors.InvalidArgumentError(f"{where}: a dead tensor carries no bytes, header says {nbytes}")
    elif dt.is_string:
        if nbytes < 4 + 8 * count:
            raise errors.InvalidArgumentError(
                f"{where}: header byte count {nbytes} cannot hold the {count} string lengths of shape "
                f"{shape} (needs at least {4 + 8 * count})")
    elif count * dt.size != nbytes:
        raise errors.InvalidArgumentError(
            f"{where}: header byte count {nbytes} does not match shape {shape} of {dt.name} "
            f"({count} elements x {dt.size} bytes = {count * dt.size} bytes)")
    return {"dtype": dt.name, "shape": tuple(shape), "nbytes": nbytes, "dead": dead}


def _read_tensor_header(r: _Reader, where: str, max_bytes: int | None) -> dict:
    r.magic(TENSOR_MAGIC)
    hlen = r.u32("the tensor header length")
    raw = r.take(hlen, "the tensor header")
    return _check_tensor_header(_loads(raw, f"{where}: header"), where, max_bytes)


def _array_from_payload(h: dict, payload, where: str, copy: bool):
    """The tensor of a checked header ``h`` over ``payload`` (exactly ``h['nbytes']`` bytes)."""
    if h["dead"]:
        return DEAD
    dt = _DTYPE_NAMES[h["dtype"]]
    if dt.is_string:
        return _strings_from_payload(h, payload, where)
    want = dt.np_dtype.newbyteorder("<")
    arr = np.frombuffer(payload, dtype=want)
    if dt.is_bool and arr.size and arr.view(np.uint8).max() > 1:
        raise errors.InvalidArgumentError(f"{where}: bool tensor holds bytes other than 0 and 1")
    try:
        arr = arr.reshape(h["shape"])
    except ValueError as e:
        raise errors.InvalidArgumentError(f"{where}: cannot shape the payload as {list(h['shape'])}: {e}") from None
    if not want.isnative:
        return arr.astype(dt.np_dtype)
    if copy:
        return arr.copy()
    if arr.flags.writeable:
        arr.flags.writeable = False  # a view of the caller's buffer: not ours to write through
    return arr


def _strings_from_payload(h: dict, payload, where: str) -> np.ndarray:
    mv = _bytes_view(payload, where)
    r = _Reader(mv, f"{where}: string payload")
    count = math.prod(h["shape"])
    n = r.u32("the string count")
    if n != count:
        raise errors.InvalidArgumentError(
            f"{where}: string payload holds {n} strings but shape {list(h['shape'])} has {count} elements")
    lengths = np.frombuffer(r.take(8 * n, "the string lengths"), dtype="<u8")
    left = len(mv) - r.pos
    if n and (int(lengths.max()) > left or int(lengths.sum()) != left):
        raise errors.InvalidArgumentError(
            f"{where}: string lengths add up to {int(lengths.sum(dtype=object))} bytes but {left} follow them")
    if not n and left:
        raise errors.InvalidArgumentError(f"{where}: {left} stray bytes after an empty string tensor")
    out = np.empty(n, dtype=object)
    pos = r.pos
    for i, ln in enumerate(lengths.tolist()):
        out[i] = bytes(mv[pos:pos + ln])
        pos += ln
    return out.reshape(h["shape"])


def decode_tensor_header(data, max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[dict, int]:
    """Parse a tensor frame header (a stream's first chunk): ``(header, payload offset)``.

    ``header`` is normalised: ``{"dtype": name, "shape": tuple, "nbytes": int, "dead": bool}``,
    checked (known dtype, byte count matching the shape, at most ``max_bytes``); any bytes of
    ``data`` from the offset on are the payload's beginning.
    """
    r = _Reader(_bytes_view(data, "tensor header"), "tensor header")
    return _read_tensor_header(r, "tensor", max_bytes), r.pos


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
        dt = _DTYPE_NAMES[header["dtype"]]
        self._array = None
        if header["dead"] or dt.is_string:
            self._raw = bytearray(self.nbytes)
            self.buffer = memoryview(self._raw)
        else:
            self._array = np.empty(header["shape"], dtype=dt.np_dtype.newbyteorder("<"))
            self.buffer = memoryview(self._array.reshape(-1).view(np.uint8))

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
        if self._array is None:
            return _array_from_payload(self.header, self.buffer, self.where, copy=False)
        arr = self._array
        if arr.dtype == np.bool_ and arr.size and arr.reshape(-1).view(np.uint8).max() > 1:
            raise errors.InvalidArgumentError(f"{self.where}: bool tensor holds bytes other than 0 and 1")
        return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


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
    if header["dtype"] == "string" and len(parts) > 1:
        parts = [memoryview(b"".join(parts))]  # many small strings: one payload buffer, then sliced
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
        code, message, node = err.get("code"), err.get("message", ""), err.get("node")
        cls = getattr(errors, code, None) if isinstance(code, str) else None
        if not (isinstance(cls, type) and issubclass(cls, errors.OpError) and cls is not errors.OpError):
            cls, message = errors.UnknownError, f"{code!s:.100}: {message}"
        raise cls(str(message), node_def=node if isinstance(node, str) else None)
    if header.get("ok") is not True:
        raise errors.InvalidArgumentError("malformed response: its header has neither \"ok\": true nor \"error\"")
    del header["ok"]
    return header, tensors


# ----------------------------------------------------------------------------------------
# Graphs

# Ops the runtime inserts itself (TF's _Send/_Recv); the op registry does not declare them.
# Their attrs are those ``passes/partition.py`` writes (``_transfer_attrs``); a registered op
# of the same name takes precedence. ``_RUNTIME_MAX_INPUTS``: the most data inputs each takes.
_RUNTIME_OPS = OpRegistry()
_RUNTIME_OPS.source = "tensorweave.distributed.wire"
_TRANSFER_ATTRS = ["tensor_name: string", "send_device: string", "recv_device: string",
                   "tensor_type: type = float32", "control: bool = false", "frame_name: string = ''",
                   "iterations: {'all', 'first', 'later'} = 'all'", "loop_cond_of: string = ''",
                   "send_device_incarnation: int = 0", "client_terminated: bool = false"]
_RUNTIME_OPS.op("_Send", attrs=_TRANSFER_ATTRS)
_RUNTIME_OPS.op("_Recv", outputs=["tensor: tensor_type"], attrs=_TRANSFER_ATTRS)
_RUNTIME_MAX_INPUTS = {"_Send": 1, "_Recv": 0}

_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9_.\-/>]*$")
_NODE_KEYS = frozenset({"name", "op", "input", "device", "attr", "output_shapes"})
_MAX_NAME = 4096
_KIND_OF = {"type": "type", "int": "i", "float": "f", "bool": "b", "string": "s", "shape": "shape",
            "tensor": "tensor"}


def _ops_of(registry):
    if registry is None:
        registry = plugins.registry()
    return getattr(registry, "ops", registry)


def _check_attr(where: str, a, v):
    """Check one tagged attr value ``v`` against the declared AttrDef ``a`` (None: any kind)."""
    if not isinstance(v, dict) or len(v) != 1:
        raise errors.InvalidArgumentError(f"{where}: expected one tagged value like {{\"i\": 3}}, got {str(v)[:200]}")
    (kind, x), = v.items()
    t = a.type if a is not None else "any"
    if kind == "none":  # an attr whose default is None (or an undeclared "_" attr) may be unset
        if x is not True or (a is not None and not (a.has_default and a.default is None)):
            raise errors.InvalidArgumentError(f"{where}: no value (\"none\") is not allowed here")
        return
    if t.startswith("list("):
        if kind != "list" or not isinstance(x, list):
            raise errors.InvalidArgumentError(f"{where}: expected a list ({t}), got kind {kind!r}")
        inner = AttrDef(a.name, t[5:-1], allowed=a.allowed)
        for i, e in enumerate(x):
            _check_attr(f"{where}[{i}]", inner, e)
        if a.minimum is not None and len(x) < a.minimum:
            raise errors.InvalidArgumentError(f"{where}: needs at least {a.minimum} elements, got {len(x)}")
        return
    if t in ("any", "func"):
        if kind not in ("type", "i", "f", "b", "s", "shape", "tensor", "list"):
            raise errors.InvalidArgumentError(f"{where}: unknown attr kind {kind!r}")
    elif _KIND_OF.get(t) != kind:
        raise errors.InvalidArgumentError(f"{where}: declared {t}, so expected kind {_KIND_OF.get(t)!r}, got {kind!r}")
    bad = errors.InvalidArgumentError(f"{where}: malformed {kind!r} value {str(x)[:200]}")
    if kind == "type":
        dt = _DTYPE_NAMES.get(x) if isinstance(x, str) else None
        if dt is None:
            raise errors.InvalidArgumentError(f"{where}: unknown dtype {x!r}")
        if a is not None and a.allowed is not None and dt not in a.allowed:
            raise errors.InvalidArgumentError(
                f"{where}: dtype {dt.name} is not allowed; expected one of {sorted(d.name for d in a.allowed)}")
    elif kind == "i":
        if type(x) is not int:
            raise bad
        if a is not None and a.minimum is not None and x < a.minimum:
            raise errors.InvalidArgumentError(f"{where}: must be >= {a.minimum}, got {x}")
    elif kind == "f":
        if not (type(x) in (int, float) or x in ("nan", "inf", "-inf")):
            raise bad
    elif kind == "b":
        if type(x) is not bool:
            raise bad
    elif kind == "s":
        if not isinstance(x, str):
            raise bad
        if a is not None and a.allowed is not None and x not in a.allowed:
            raise errors.InvalidArgumentError(f"{where}: {x!r} is not one of {sorted(a.allowed)}")
    elif kind == "shape":
        if x is not None and not (isinstance(x, list) and len(x) <= 255
                                  and all(d is None or (type(d) is int and d >= 0) for d in x)):
            raise bad
    elif kind == "tensor":
        try:
            _ser.decode_tensor(x)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{where}: {e.message}") from None
        except (AttributeError, OverflowError, MemoryError):
            raise bad from None
    elif kind == "list":
        if not isinstance(x, list):
            raise bad
        for i, e in enumerate(x):
            _check_attr(f"{where}[{i}]", None, e)


def _arg_count(arg, attrs: dict, op_def) -> int | None:
    """How many flat tensors ``arg`` stands for, from the node's attrs (None: not known)."""
    if arg.number_attr:
        v = attrs.get(arg.number_attr)
        if isinstance(v, dict) and type(v.get("i")) is int:
            return v["i"]
        d = op_def.attrs.get(arg.number_attr)
        return d.default if d is not None and type(d.default) is int else None
    if arg.type_list_attr:
        v = attrs.get(arg.type_list_attr)
        return len(v["list"]) if isinstance(v, dict) and isinstance(v.get("list"), list) else None
    return 1


def _flat_count(args, attrs, op_def) -> int | None:
    total = 0
    for arg in args:
        n = _arg_count(arg, attrs, op_def)
        if n is None:
            return None
        total += n
    return total


def _validate_graph_def(obj, ops, feeds=(), max_nodes: int = MAX_GRAPH_NODES) -> dict:
    """The checks of ``decode_graph_def``; ``ops=None`` checks structure only (no registry)."""
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
        op_def = None
        if ops is not None:
            if op in ops:
                op_def = ops.get(op)
            elif op in _RUNTIME_OPS:
                op_def = _RUNTIME_OPS.get(op)
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
        for k, v in attrs.items():
            a = None
            if op_def is not None and not k.startswith("_"):
                a = op_def.attrs.get(k)
                if a is None:
                    raise errors.InvalidArgumentError(
                        f"{where}: unknown attr {k!r} for op {op}; {op} has {sorted(op_def.attrs)}")
            _check_attr(f"{where}: attr {k!r}", a, v)
        if op_def is not None:
            # GraphDefs carry every attr (inferred and defaulted ones too): required ones must be there.
            missing = [a.name for a in op_def.attrs.values() if not a.has_default and a.name not in attrs]
            if missing:
                raise errors.InvalidArgumentError(f"{where}: op {op} needs attr(s) {missing}")
        node = {"name": name, "op": op, "input": list(inputs), "device": device, "attr": dict(attrs)}
        if "output_shapes" in n:
            shapes = n["output_shapes"]
            if not isinstance(shapes, list) or not all(
                    s is None or (isinstance(s, list) and all(d is None or (type(d) is int and d >= 0) for d in s))
                    for s in shapes):
                raise errors.InvalidArgumentError(f"{where}: malformed 'output_shapes'")
            node["output_shapes"] = list(shapes)
        by_name[name] = (node, op_def)
        out_nodes.append(node)
    # Pass 2: edges refer to nodes of this graph (or to fed tensors) and to outputs they have.
    for node in out_nodes:
        name, op_def = node["name"], by_name[node["name"]][1]
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
            src_node, src_def = by_name[src]
            if src_def is not None:
                n_out = _flat_count(src_def.outputs, src_node["attr"], src_def)
                if n_out is not None and int(idx) >= n_out:
                    raise errors.InvalidArgumentError(
                        f"{where}: input {s!r} refers to output {idx} of {src_node['op']} node {src!r}, "
                        f"which has {n_out} output(s)")
        if op_def is not None:
            if node["op"] in _RUNTIME_MAX_INPUTS and node["op"] not in (ops or ()):
                if n_data > _RUNTIME_MAX_INPUTS[node["op"]]:
                    raise errors.InvalidArgumentError(
                        f"{where}: {node['op']} takes at most {_RUNTIME_MAX_INPUTS[node['op']]} data input(s), got {n_data}")
            else:
                want = _flat_count(op_def.inputs, node["attr"], op_def)
                if want is not None and want != n_data:
                    raise errors.InvalidArgumentError(
                        f"{where}: op {node['op']} takes {want} data input(s), got {n_data}")
    return {"versions": {"producer": versions["producer"]}, "node": out_nodes}


def encode_graph_def(gd) -> dict:
    """A partition's GraphDef (a dict, or anything with ``to_graph_def()``/``as_graph_def()``)
    as a checked JSON-safe dict for a message header (the structure is checked here, the ops
    by the receiver's ``decode_graph_def``)."""
    if not isinstance(gd, dict):
        for m in ("to_graph_def", "as_graph_def"):
            if hasattr(gd, m):
                gd = getattr(gd, m)()
                break
    try:
        return _validate_graph_def(gd, None, feeds=_AnyFeed())
    except RecursionError:
        raise errors.InvalidArgumentError("graph def attr values are nested too deeply") from None


class _AnyFeed:
    """A feed set containing every tensor name: the sender cannot know the receiver's feeds."""

    def __contains__(self, item):
        return True

    def __iter__(self):
        return iter(())


def decode_graph_def(obj, registry=None, *, feeds=(), max_nodes: int = MAX_GRAPH_NODES) -> dict:
    """Validate a received GraphDef against the op registry and return it normalised.

    ``registry``: ``plugins.registry()`` or its ``.ops`` (default: this process's). Every node
    must use a registered op (or the runtime's ``_Send``/``_Recv``), with a valid unique name,
    declared attrs of their declared kinds, inputs ``"node:index"``/``"^node"`` naming nodes of
    this graph (or a tensor name in ``feeds``, for a partition fed by the client) and existing
    outputs, and the op's number of inputs. At most ``max_nodes`` nodes.
    """
    if isinstance(feeds, str):
        feeds = (feeds,)
    try:
        return _validate_graph_def(obj, _ops_of(registry), feeds=frozenset(feeds), max_nodes=max_nodes)
    except RecursionError:  # attr values nested deeper than Python's stack
        raise errors.InvalidArgumentError("graph def attr values are nested too deeply") from None
