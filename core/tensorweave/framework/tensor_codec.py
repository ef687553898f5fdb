"""Tensors as bytes: the one encoding every serialised tensor in tensorweave uses.

This module owns how a tensor becomes header fields (a dtype name, a shape, a byte count)
plus raw bytes, and how those come back as an array, checked. Its users only frame the
result: the wire format (``distributed/wire.py``) puts it in tensor frames, the JSON
GraphDef (``framework/serialization.py``) carries it as base64, and checkpoints
(``train/checkpoint_format.py``) store it as safetensors tensors.

**Dtype names** are safetensors' (``F16 F32 F64 I8 I16 I32 I64 U8 U16 U32 U64 BOOL C64``).
For the two tensorweave dtypes safetensors has no name for there is one extension name
each, used everywhere a tensor is encoded: ``C128`` (complex128, named like safetensors'
``C64``) and ``STR`` (string). ``BF16`` from other tools is read, widened to float32
(tensorweave has no bfloat16), and never written.

**Payloads.** A numeric tensor is its C-order elements, little-endian:
``nbytes == prod(shape) * itemsize``; bool bytes are 0 or 1. A string tensor of ``n =
prod(shape)`` elements (row-major order) is::

    (n + 1) little-endian int64 offsets | the elements' bytes, back to back

element ``i`` is ``bytes[off[i]:off[i + 1]]``; ``off[0] == 0``, offsets never decrease and
``off[n]`` is the number of bytes. The wire and the JSON GraphDef carry that as one payload;
a checkpoint stores its two parts as two safetensors tensors (``I64`` offsets, ``U8``
bytes) so that other tools read them as ordinary tensors. Strings decode to object arrays
of ``bytes``; ``str`` elements are encoded as UTF-8.

**Checks.** Every malformed, truncated or lying input raises a ``tw.errors`` class naming
what was wrong (``InvalidArgumentError`` unless the caller passes ``error=``, as checkpoints
do with ``DataLossError``): unknown dtype names, bad shapes, byte counts that do not match
the shape, bools other than 0/1, offsets that do not describe their bytes.

Zero copy: ``encode`` returns memoryviews of the array itself when it already is C-ordered
little-endian, and ``decode`` returns a view of the payload (``np.frombuffer``) unless
asked to copy, so the wire can hand out arrays over a message's own buffer.
"""

from __future__ import annotations

import math

import numpy as np

from tensorweave.framework import dtypes, errors

STRING = "STR"
MAX_RANK = 32
_MAX_DIM = 1 << 62

_NAME_OF = {
    dtypes.float16: "F16", dtypes.float32: "F32", dtypes.float64: "F64",
    dtypes.int8: "I8", dtypes.int16: "I16", dtypes.int32: "I32", dtypes.int64: "I64",
    dtypes.uint8: "U8", dtypes.uint16: "U16", dtypes.uint32: "U32", dtypes.uint64: "U64",
    dtypes.bool_: "BOOL", dtypes.complex64: "C64", dtypes.complex128: "C128", dtypes.string: STRING,
}
_DTYPE_OF = {v: k for k, v in _NAME_OF.items()}
NAMES = tuple(sorted(_DTYPE_OF))
# The little-endian NumPy dtype of each numeric name.
_LE = {name: dt.np_dtype.newbyteorder("<") for name, dt in _DTYPE_OF.items() if not dt.is_string}
# Names other safetensors writers use: read (BF16, widened to float32) or only sized.
_FOREIGN_ITEMSIZE = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
_OFFSET = np.dtype("<i8")


def name_of(dtype) -> str:
    """The encoded name of a tensorweave dtype (``float32`` -> ``"F32"``)."""
    return _NAME_OF[dtypes.as_dtype(dtype)]


def dtype_of(name, where: str, error=errors.InvalidArgumentError) -> dtypes.DType:
    """The tensorweave dtype an encoded name stands for; only names this module writes."""
    dt = _DTYPE_OF.get(name) if isinstance(name, str) else None
    if dt is None:
        raise error(f"{where}: unknown dtype {name!r}; expected one of {list(NAMES)}")
    return dt


def read_dtype(name) -> dtypes.DType | None:
    """The dtype a stored tensor of safetensors dtype ``name`` reads as (None: unreadable)."""
    if name == "BF16":
        return dtypes.float32
    return _DTYPE_OF.get(name)


def itemsize(name) -> int | None:
    """Bytes per element of a safetensors dtype name (None for strings and unknown names)."""
    le = _LE.get(name)
    return le.itemsize if le is not None else _FOREIGN_ITEMSIZE.get(name)


def check_shape(shape, where: str, error=errors.InvalidArgumentError) -> tuple:
    """``shape`` (a JSON list) as a tuple, or an error: at most 32 non-negative ints."""
    if (not isinstance(shape, list | tuple) or len(shape) > MAX_RANK
            or not all(type(d) is int and 0 <= d < _MAX_DIM for d in shape)):
        raise error(f"{where}: shape must be a list of at most {MAX_RANK} non-negative ints, got {str(shape)[:200]}")
    return tuple(shape)


def check_nbytes(dt: dtypes.DType, shape, nbytes: int, where: str, error=errors.InvalidArgumentError) -> None:
    """Whether ``nbytes`` can be the payload of a ``dt`` tensor of ``shape`` (exactly, for a
    numeric one; at least its offsets, for strings). Call before allocating anything."""
    count = math.prod(shape)
    if dt.is_string:
        need = 8 * (count + 1)
        if nbytes < need:
            raise error(f"{where}: byte count {nbytes} cannot hold the {count + 1} string offsets of shape "
                        f"{list(shape)} (needs at least {need})")
    elif count * dt.size != nbytes:
        raise error(f"{where}: byte count {nbytes} does not match shape {list(shape)} of {dt.name} "
                    f"({nbytes} bytes do not hold {count} elements of {dt.size} bytes = {count * dt.size} bytes)")


# ----------------------------------------------------------------------------------------
# Encoding


def as_array(value) -> np.ndarray:
    """``value`` as an ndarray; a ``bytes``/``str`` scalar becomes a 0-d string tensor
    (``np.asarray`` would make it dtype 'S' and drop trailing NULs)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, bytes | str):
        return np.array(value, dtype=object)
    return np.asarray(value)


def encode(value, where: str = "tensor") -> tuple[dict, list]:
    """``({"dtype", "shape", "nbytes"}, parts)`` of a tensor: the header fields and the payload
    as a list of byte memoryviews (numeric: one, a view of the array when it is already
    C-ordered little-endian; strings: two, the offsets and the bytes)."""
    arr = as_array(value)
    if arr.dtype.kind in "OSU":
        offsets, blob = string_parts(arr, where)
        return ({"dtype": STRING, "shape": list(arr.shape), "nbytes": offsets.nbytes + len(blob)},
                [memoryview(offsets).cast("B"), memoryview(blob)])
    try:
        dt = dtypes.as_dtype(arr.dtype if arr.dtype.isnative else arr.dtype.newbyteorder("="))
    except errors.InvalidArgumentError:
        raise errors.InvalidArgumentError(
            f"{where}: NumPy dtype {arr.dtype} cannot be encoded; expected one of "
            f"{sorted(d.name for d in _NAME_OF)}") from None
    name = _NAME_OF[dt]
    want = _LE[name]
    if arr.dtype != want or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=want)  # one copy, only for odd layouts
    return ({"dtype": name, "shape": list(arr.shape), "nbytes": arr.nbytes},
            [memoryview(arr.reshape(-1).view(np.uint8))])


def string_parts(arr: np.ndarray, where: str = "tensor") -> tuple[np.ndarray, bytes]:
    """(``n + 1`` int64 offsets, the concatenated bytes) of a string tensor's elements."""
    items = []
    for v in arr.reshape(-1):
        if isinstance(v, bytes):
            items.append(v)
        elif isinstance(v, str):
            items.append(v.encode("utf-8"))
        elif isinstance(v, bytearray | memoryview):
            items.append(bytes(v))
        else:
            raise errors.InvalidArgumentError(
                f"{where}: a string tensor holds bytes or str, got {type(v).__name__} {v!r:.80} "
                "(expected bytes or str)")
    offsets = np.zeros(len(items) + 1, dtype=_OFFSET)
    if items:
        np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=offsets[1:])
    return offsets, b"".join(items)


# ----------------------------------------------------------------------------------------
# Decoding


def _byte_view(payload):
    if isinstance(payload, np.ndarray):
        return payload.reshape(-1).view(np.uint8)
    mv = payload if isinstance(payload, memoryview) else memoryview(payload)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def decode(name: str, shape, payload, where: str, *, copy: bool = False, error=errors.InvalidArgumentError):
    """The array of a tensor with encoded dtype ``name`` and ``shape`` (a checked tuple) over
    ``payload`` (any buffer holding exactly the payload), checked.

    A numeric array is a view of ``payload`` (writable only if ``payload`` is) unless
    ``copy`` or a big-endian host forces a copy; a string tensor is always a new object
    array of ``bytes``. ``BF16`` payloads are widened to a new float32 array.
    """
    mv = _byte_view(payload)
    if name == "BF16":
        check_nbytes(dtypes.uint16, shape, len(mv), where, error)
        bits = np.frombuffer(mv, dtype="<u2").reshape(shape)
        return (bits.astype(np.uint32) << 16).view(np.float32)
    dt = dtype_of(name, where, error)
    check_nbytes(dt, shape, len(mv), where, error)
    if dt.is_string:
        head = 8 * (math.prod(shape) + 1)
        return decode_strings(np.frombuffer(mv[:head], dtype=_OFFSET), mv[head:], shape, where, error)
    want = _LE[name]
    arr = np.frombuffer(mv, dtype=want).reshape(shape)
    if dt.is_bool and arr.size and arr.view(np.uint8).max() > 1:
        raise error(f"{where}: bool tensor holds bytes other than 0 and 1")
    if not want.isnative:
        return arr.astype(dt.np_dtype)
    return arr.copy() if copy else arr


def decode_strings(offsets: np.ndarray, blob, shape, where: str, error=errors.InvalidArgumentError) -> np.ndarray:
    """The object array of ``bytes`` that ``offsets`` (``n + 1`` integers) cut ``blob`` into."""
    count = math.prod(shape)
    blob = bytes(blob)
    if offsets.dtype.kind not in "iu" or offsets.shape != (count + 1,):
        raise error(f"{where}: a string tensor of shape {list(shape)} needs {count + 1} integer offsets, "
                    f"got {offsets.dtype} of shape {list(offsets.shape)}")
    offsets = offsets.astype(np.int64, copy=False)  # unsigned ones too: a wrapped one is negative
    if offsets[0] != 0 or offsets[-1] != len(blob) or (count and np.any(np.diff(offsets) < 0)):
        raise error(f"{where}: its offsets do not describe its {len(blob)} bytes")
    o = offsets.tolist()
    out = np.empty(count, dtype=object)
    for i in range(count):
        out[i] = blob[o[i]:o[i + 1]]
    return out.reshape(shape)
