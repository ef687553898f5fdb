"""The checkpoint file format: safetensors data plus a small JSON index (whitepaper 3.3).

A checkpoint with prefix ``P`` is two files:

* ``P.safetensors`` — a standard safetensors file (8-byte little-endian header length, a
  JSON header mapping each stored tensor to ``dtype``/``shape``/``data_offsets``, an
  optional ``"__metadata__"`` map of strings, then the raw little-endian bytes with no
  holes), so other tools (``safetensors``, PyTorch, JAX loaders) can open it.
* ``P.index.json`` — variables with their tensorweave dtypes and shapes, the global step,
  the tensorweave and format versions and a CRC-32 per stored tensor.

Tensor bytes and dtype names are ``framework/tensor_codec.py``'s, the one tensor encoding:
dtypes safetensors has are stored as themselves (``F16 F32 F64 I8 I16 I32 I64 U8 U16 U32
U64 BOOL``). The others are stored so that other tools can read them, and the tensorweave
dtype is recorded as JSON in ``__metadata__["tensorweave.encodings"]``:

* ``complex64``/``complex128``: the codec's bytes labelled as real pairs, an ``F32``/``F64``
  tensor of shape ``shape + [2]`` (real, imaginary) under the variable's own name;
* ``string``: the codec's two parts, the concatenated bytes as a ``U8`` tensor under the
  variable's name and the ``n + 1`` ``I64`` offsets (element ``i`` is
  ``blob[off[i]:off[i+1]]``, in row-major order) under a companion name recorded in the
  encoding.

The data file alone is self-describing (its metadata repeats the global step, versions and
a per-save id), so the index is a convenience and the *commit marker*: both files are
written to temp files in the same directory, fsynced, then renamed, data first and index
last. A crash leaves either the previous checkpoint untouched (crash before the index
rename), or, when a save replaces a checkpoint of the same prefix, possibly a complete new
data file beside the previous index; the reader notices the save ids differ and reads the
data file's own header. Reading validates the header against the file size, then reads
each tensor with ``preadv`` straight into a new array: one copy, only of the tensors asked
for (measured faster than copying out of an ``mmap``, whose page faults dominate).
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import os
import struct
import tempfile
import threading
import uuid
import zlib

import numpy as np

from tensorweave.framework import dtypes, errors, tensor_codec

FORMAT_VERSION = 1
DATA_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".index.json"
TEMP_SUFFIX = ".tmp"
# The safetensors reference implementation refuses headers above 100 MB.
MAX_HEADER_BYTES = 100_000_000
# Writes go out in chunks so huge tensors need no second in-memory copy for byte order
# conversion beyond one chunk, and so a test can slow a save down (``_after_chunk``).
CHUNK_BYTES = 8 << 20

# Complex tensors are stored as real pairs (labelled with safetensors' real dtypes, which
# every loader knows): the codec's bytes of complex64 are those of float32 pairs.
_PAIRS_OF = {"C64": "F32", "C128": "F64"}


def _after_chunk():
    """Called after each chunk written; tests replace it to make a save slow."""


def data_path(prefix: str) -> str:
    return os.fspath(prefix) + DATA_SUFFIX


def index_path(prefix: str) -> str:
    return os.fspath(prefix) + INDEX_SUFFIX


def checkpoint_exists(prefix) -> bool:
    """Whether a committed checkpoint (its index) exists for ``prefix``, or ``prefix`` is
    itself a safetensors file."""
    prefix = os.fspath(prefix)
    if os.path.isfile(index_path(prefix)):
        return True
    return prefix.endswith(DATA_SUFFIX) and os.path.isfile(prefix)


def _version() -> str:
    try:
        return md.version("tensorweave")
    except md.PackageNotFoundError:
        return "0+unknown"


# ----------------------------------------------------------------------------------------
# encoding
def _as_array(value, dtype=None):
    """``value`` as an ndarray and its tensorweave dtype."""
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
    arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object if dtype is not None
                                                                 and dtype.is_string else None)
    if arr.dtype.kind not in "OSU" and not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if dtype is None:
        dtype = dtypes.string if arr.dtype.kind in "OSU" else dtypes.as_dtype(arr.dtype)
    if not dtype.is_string and arr.dtype != dtype.np_dtype:
        raise errors.InvalidArgumentError(
            f"tensor has NumPy dtype {arr.dtype}, expected {dtype.name}")
    return arr, dtype


def _encode(name: str, value, dtype, taken: set):
    """The stored parts of one tensor: [(stored name, safetensors dtype, shape, byte view)]
    and its encoding entry (None for a dtype safetensors has)."""
    arr, dt = _as_array(value, dtype)
    if dt.is_string and arr.dtype.kind not in "OSU":
        arr = arr.astype(object)  # the codec names what is not bytes or str
    fields, parts = tensor_codec.encode(arr, f"tensor '{name}'")
    st, shape = fields["dtype"], fields["shape"]
    if dt.is_string:
        offsets, blob = parts
        companion = name + ":offsets"
        while companion in taken:
            companion += "_"
        taken.add(companion)
        return ([(name, "U8", [len(blob)], blob), (companion, "I64", [len(offsets) // 8], offsets)],
                {"dtype": "string", "shape": shape, "offsets": companion}, dt)
    if st in _PAIRS_OF:
        return [(name, _PAIRS_OF[st], shape + [2], parts[0])], {"dtype": dt.name, "shape": shape}, dt
    return [(name, st, shape, parts[0])], None, dt


def _fsync_dir(directory: str) -> None:
    if os.name != "posix":
        return
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _atomic_file(path: str):
    """A file object for a temp file beside ``path``; on success it is flushed, fsynced
    and renamed onto ``path``; on any failure the temp file is removed."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=TEMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync dir)."""
    path = os.fspath(path)
    with _atomic_file(path) as f:
        f.write(data)
    _fsync_dir(os.path.dirname(path))


def _write_parts(f, parts, crcs: dict) -> None:
    for stored, _st, _shape, raw in parts:
        crc = 0
        for i in range(0, len(raw), CHUNK_BYTES):
            chunk = raw[i:i + CHUNK_BYTES]
            f.write(chunk)
            crc = zlib.crc32(chunk, crc)
            _after_chunk()
        crcs[stored] = crc


def _layout(names, values, dtypes_list):
    """Encode every tensor; order stored parts by alignment (8-byte types first) so each
    starts at a multiple of its item size, as the safetensors writers do."""
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if list(names).count(n) > 1})
        raise errors.InvalidArgumentError(f"duplicate tensor names {dup}")
    taken = set(names)
    parts, encodings, variables = [], {}, {}
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise errors.InvalidArgumentError(f"invalid tensor name {name!r}")
        p, enc, dt = _encode(name, values[i], dtypes_list[i] if dtypes_list else None, taken)
        parts.extend(p)
        if enc is not None:
            encodings[name] = enc
        variables[name] = {"dtype": dt.name, "shape": [int(d) for d in np.shape(values[i])]}
    parts.sort(key=lambda p: -tensor_codec.itemsize(p[1]))  # stable: keeps the caller's order per size
    return parts, encodings, variables


def _header_bytes(parts, metadata: dict) -> bytes:
    header = {"__metadata__": metadata} if metadata else {}
    off = 0
    for stored, st, shape, raw in parts:
        header[stored] = {"dtype": st, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % 8)  # data starts 8-byte aligned; spaces are allowed
    return struct.pack("<Q", len(raw)) + raw


def save_file(path, tensors: dict, metadata: dict | None = None) -> None:
    """Write ``tensors`` ({name: array}) as one safetensors file, atomically.
    ``metadata`` is a {str: str} map stored in ``__metadata__``."""
    names = list(tensors)
    _write_data(os.fspath(path), names, [tensors[n] for n in names], None, metadata or {})


def _write_data(path, names, values, dtypes_list, metadata) -> tuple[dict, dict, int]:
    parts, encodings, variables = _layout(names, values, dtypes_list)
    meta = {str(k): str(v) for k, v in metadata.items()}
    if encodings:
        meta["tensorweave.encodings"] = json.dumps(encodings, separators=(",", ":"))
    head = _header_bytes(parts, meta)
    crcs: dict = {}
    with _atomic_file(path) as f:
        f.write(head)
        _write_parts(f, parts, crcs)
    return variables, crcs, len(head) + sum(len(p[3]) for p in parts)


def _after_data_rename():
    """Called between the data file's and the index's rename; tests replace it to crash there."""


def write_checkpoint(prefix, names, values, dtypes_list=None, global_step=None) -> str:
    """Write checkpoint ``prefix`` (``prefix.safetensors`` then ``prefix.index.json``).

    ``values`` are ndarrays (object arrays of bytes for strings); ``dtypes_list`` their
    tensorweave dtypes (inferred when None). Returns the prefix. The parent directory must
    exist (NotFoundError otherwise)."""
    prefix = os.fspath(prefix)
    directory = os.path.dirname(prefix) or "."
    if not os.path.isdir(directory):
        raise errors.NotFoundError(f"cannot save checkpoint {prefix!r}: directory {directory!r} does not exist")
    names = list(names)
    if len(values) != len(names):
        raise errors.InvalidArgumentError(f"{len(names)} tensor names but {len(values)} tensors")
    save_id = uuid.uuid4().hex
    version = _version()
    meta = {"format": "np", "tensorweave.format_version": str(FORMAT_VERSION),
            "tensorweave.version": version, "tensorweave.save_id": save_id}
    if global_step is not None:
        meta["tensorweave.global_step"] = str(int(global_step))
    data = data_path(prefix)
    variables, crcs, nbytes = _write_data(data, names, values, dtypes_list, meta)
    _fsync_dir(directory)
    _after_data_rename()
    index = {
        "format": "tensorweave-checkpoint", "format_version": FORMAT_VERSION,
        "tensorweave_version": version, "save_id": save_id,
        "global_step": None if global_step is None else int(global_step),
        "data_file": os.path.basename(data), "data_bytes": nbytes,
        "variables": variables, "crc32": crcs,
    }
    atomic_write_bytes(index_path(prefix), json.dumps(index, indent=1).encode())
    return prefix


def remove_checkpoint(prefix) -> None:
    """Delete checkpoint ``prefix``: the index first (uncommitting it), then the data."""
    for p in (index_path(prefix), data_path(prefix)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)


# ----------------------------------------------------------------------------------------
# reading
class SafetensorsFile:
    """A validated, memory-mapped safetensors file. ``entries`` maps each stored name to
    (safetensors dtype, shape, begin, end) with offsets relative to the data buffer."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - kept open for the mapping's life
        except FileNotFoundError:
            raise errors.NotFoundError(f"checkpoint data file {self.path} not found") from None
        except OSError as e:
            raise errors.PermissionDeniedError(f"cannot open checkpoint data file {self.path}: {e}") from None
        try:
            self._parse(f)
        except BaseException:
            f.close()
            raise
        self._file = f

    def _lost(self, what: str) -> errors.DataLossError:
        return errors.DataLossError(f"corrupt or truncated safetensors file {self.path}: {what}")

    def _parse(self, f) -> None:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise self._lost(f"the file has {size} bytes, fewer than the 8-byte header length")
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise self._lost(f"header length {n} does not fit in the file's {size} bytes")
        raw = f.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise self._lost(f"header is not valid JSON ({e})") from None
        if not isinstance(header, dict):
            raise self._lost("header is not a JSON object")
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise self._lost("__metadata__ must map strings to strings")
        self.metadata = meta
        self.data_start = 8 + n
        entries = {}
        for name, e in header.items():
            try:
                st, shape, (b, end) = e["dtype"], [int(d) for d in e["shape"]], e["data_offsets"]
                b, end = int(b), int(end)
            except (KeyError, TypeError, ValueError):
                raise self._lost(f"bad header entry for tensor '{name}': {e!r}") from None
            if not isinstance(st, str) or any(d < 0 for d in shape) or b < 0 or end < b:
                raise self._lost(f"tensor '{name}' has a bad dtype {st!r}, shape {shape} or offsets {[b, end]}")
            # dtypes newer than this reader (F4, F6, ...) are listed but not size-checked
            item = tensor_codec.itemsize(st)
            if item is not None and int(np.prod(shape, dtype=np.int64)) * item != end - b:
                raise self._lost(f"tensor '{name}' of dtype {st} and shape {shape} needs "
                                 f"{int(np.prod(shape, dtype=np.int64)) * item} bytes but its "
                                 f"offsets {[b, end]} give {end - b}")
            entries[name] = (st, shape, b, end)
        pos = 0
        for name, (_st, _shape, b, end) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
            if b != pos:
                raise self._lost(f"tensor '{name}' starts at {b}, expected {pos} (holes or overlaps)")
            pos = end
        if self.data_start + pos != size:
            raise self._lost(f"the header describes {self.data_start + pos} bytes but the file has {size}"
                             + (" (truncated)" if self.data_start + pos > size else ""))
        self.entries = entries
        self._lock = threading.Lock()  # for the seek+read fallback where preadv is missing

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of ``name`` as a new uint8 array (8-byte aligned)."""
        _st, _shape, b, end = self.entries[name]
        n = end - b
        buf = np.empty((n + 7) // 8, dtype=np.uint64).view(np.uint8)[:n]  # aligned for any dtype view
        view, pos, off = memoryview(buf), 0, self.data_start + b
        while pos < n:
            if hasattr(os, "preadv"):
                got = os.preadv(self._file.fileno(), [view[pos:]], off + pos)
            else:
                with self._lock:
                    self._file.seek(off + pos)
                    got = self._file.readinto(view[pos:])
            if not got:
                raise self._lost(f"tensor '{name}' ends at byte {off + pos} of {off + n}: the file shrank")
            pos += got
        return buf

    def array(self, name: str, raw: np.ndarray | None = None) -> np.ndarray:
        """The stored tensor as a native-endian array, independent of the file (decoded from
        ``raw``, its bytes, when already read)."""
        st, shape, _b, _e = self.entries[name]
        if tensor_codec.read_dtype(st) is None:
            raise errors.UnimplementedError(
                f"tensor '{name}' in {self.path} has dtype {st}, which tensorweave cannot represent")
        return tensor_codec.decode(st, tuple(shape), self.raw(name) if raw is None else raw,
                                   f"tensor '{name}' in {self.path}", error=errors.DataLossError)

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load_file(path) -> dict:
    """Every tensor of a safetensors file as {name: ndarray}, tensorweave encodings decoded."""
    with CheckpointReader(path) as r:
        return {n: r.get_tensor(n) for n in r.names()}


class CheckpointReader:
    """Reads a checkpoint by prefix (``P`` -> ``P.index.json`` + ``P.safetensors``) or any
    safetensors file by path (``TF1 NewCheckpointReader``)."""

    def __init__(self, path):
        path = os.fspath(path)
        self.prefix = path
        self.index = None
        if path.endswith(DATA_SUFFIX) and os.path.isfile(path):
            data = path
        elif os.path.isfile(index_path(path)):
            self.index = self._read_index(index_path(path))
            data = data_path(path)  # by definition; the index's "data_file" is informational
            if not os.path.exists(data):
                raise errors.DataLossError(
                    f"checkpoint {path}: index {index_path(path)} exists but its data file {data} is missing")
        else:
            raise errors.NotFoundError(
                f"checkpoint {path!r} not found: neither {index_path(path)} nor a safetensors file at that path exists")
        self.file = SafetensorsFile(data)
        self.path = data
        meta = self.file.metadata
        if self.index is not None and self.index.get("save_id") != meta.get("tensorweave.save_id"):
            # A save to this prefix was interrupted between the data and index renames: the
            # data file is complete (renamed only when fully written), its header describes it.
            self.index = None
        try:
            enc = json.loads(meta.get("tensorweave.encodings", "{}"))
        except json.JSONDecodeError as e:
            raise errors.DataLossError(f"{data}: bad tensorweave.encodings metadata ({e})") from None
        self._encodings = enc if isinstance(enc, dict) else {}
        companions = {e.get("offsets") for e in self._encodings.values() if isinstance(e, dict)}
        self._names = [n for n in self.file.entries if n not in companions]
        if self.index is not None:
            known = self.index.get("variables", {})
            self._names = [n for n in known if n in self.file.entries] + \
                [n for n in self._names if n not in known]
        self._name_set = set(self._names)
        step = self.index.get("global_step") if self.index is not None else meta.get("tensorweave.global_step")
        self.global_step = None if step is None else int(step)

    @staticmethod
    def _read_index(path):
        try:
            with open(path, "rb") as f:
                index = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise errors.DataLossError(f"checkpoint index {path} is corrupt: {e}") from None
        if not isinstance(index, dict) or index.get("format") != "tensorweave-checkpoint":
            raise errors.DataLossError(f"{path} is not a tensorweave checkpoint index")
        if int(index.get("format_version", 0)) > FORMAT_VERSION:
            raise errors.UnimplementedError(
                f"checkpoint index {path} has format version {index.get('format_version')}; this tensorweave "
                f"reads up to {FORMAT_VERSION}")
        return index

    def names(self) -> list:
        return list(self._names)

    def has_tensor(self, name: str) -> bool:
        return name in self._name_set

    def _require(self, name):
        if not self.has_tensor(name):
            shown = sorted(self._names)
            raise errors.NotFoundError(
                f"tensor '{name}' not found in checkpoint {self.path}; it holds "
                f"{shown[:20]}{' ...' if len(shown) > 20 else ''}")

    def dtype(self, name: str) -> dtypes.DType:
        self._require(name)
        enc = self._encodings.get(name)
        if enc is not None:
            return dtypes.as_dtype(enc["dtype"])
        st = self.file.entries[name][0]
        dt = tensor_codec.read_dtype(st)
        if dt is None:
            raise errors.UnimplementedError(f"tensor '{name}' in {self.path} has dtype {st}, which tensorweave "
                                            "cannot represent")
        return dt

    def shape(self, name: str) -> list:
        self._require(name)
        enc = self._encodings.get(name)
        return list(enc["shape"]) if enc is not None else list(self.file.entries[name][1])

    def get_variable_to_shape_map(self) -> dict:
        return {n: self.shape(n) for n in self._names}

    def get_variable_to_dtype_map(self) -> dict:
        return {n: self.dtype(n) for n in self._names}

    def _read(self, stored: str) -> np.ndarray:
        """The stored bytes of ``stored``, checked against the index's CRC-32."""
        raw = self.file.raw(stored)
        want = self.index.get("crc32", {}).get(stored) if self.index is not None else None
        if want is not None and zlib.crc32(raw) != want:
            _st, _shape, b, _e = self.file.entries[stored]
            raise errors.DataLossError(
                f"checksum mismatch for tensor '{stored}' in {self.path} (bytes at offset "
                f"{self.file.data_start + b}): the file is corrupt")
        return raw

    def get_tensor(self, name: str) -> np.ndarray:
        self._require(name)
        enc = self._encodings.get(name)
        raw = self._read(name)
        if enc is None:
            return self.file.array(name, raw)
        try:
            kind, shape = enc["dtype"], tuple(int(d) for d in enc["shape"])
            where = f"{kind} tensor '{name}' in {self.path}"
            if kind in ("complex64", "complex128"):
                return tensor_codec.decode(tensor_codec.name_of(kind), shape, raw, where, error=errors.DataLossError)
            if kind == "string":
                comp = enc["offsets"]
                offsets = self.file.array(comp, self._read(comp))
                return tensor_codec.decode_strings(offsets, raw, shape, where, error=errors.DataLossError)
        except (KeyError, TypeError, ValueError) as e:
            raise errors.DataLossError(f"tensor '{name}' in {self.path}: bad encoding {enc!r} ({e})") from None
        raise errors.UnimplementedError(f"tensor '{name}' in {self.path} uses unknown encoding {kind!r}")

    def close(self) -> None:
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
