"""The checkpoint file format: safetensors data plus a small JSON index (whitepaper 3.3).

A checkpoint with prefix ``P`` is two files:

* ``P.safetensors`` — a standard safetensors file (8-byte little-endian header length, a
  JSON header mapping each stored tensor to ``dtype``/``shape``/``data_offsets``, an
  optional ``"__metadata__"`` map of strings, then the raw little-endian bytes with no
  holes), so other tools (``safetensors``, PyTorch, JAX loaders) can open it.
* ``P.index.json`` — variables with their tensorweave dtypes and shapes, the global step,
  the tensorweave and format versions and a CRC-32 per stored tensor.

A partitioned variable is stored as its one logical tensor under its full name (the saver
assembles the shards, ``assemble_slices``), so a reader never needs to know how it was
partitioned, and a restore takes any slice of it (``take_slice``).

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

The data file alone is self-describing and self-checking: its metadata repeats the global
step, versions and a per-save id, and holds a CRC-32 of every stored tensor
(``tensorweave.crc32``) and of the header itself (``tensorweave.header_crc32``, the first
metadata key, computed with its own value as ``00000000``). The index carries a CRC-32 of
its own text the same way (``index_crc32``, its first key). So any change to a data header
or an index — one flipped bit included — is a ``DataLossError``, never other values, and
every read of a tensor is checked whichever file describes it.

The index is the *commit marker*: both files are written to temp files in the same
directory (each locked while it is written), fsynced, then renamed, data first and index
last. A crash leaves either the previous checkpoint untouched (crash before the index
rename), or, when a save replaces a checkpoint of the same prefix, a complete new data file
beside the previous index: the new data file names the save it replaces
(``tensorweave.replaces``), so the reader knows to read it alone; a data file whose save id
is neither the index's nor replacing it (a file swapped in from another checkpoint) is a
``DataLossError``. A save removes the temp files interrupted saves left in its directory
(those no live writer holds locked). Reading validates the header against the file size,
then reads each tensor with ``preadv`` straight into a new array: one copy, only of the
tensors asked for (measured faster than copying out of an ``mmap``, whose page faults
dominate).

Files of format version 1 (no checksums of headers or index) are still read, with every
field type-checked; files of other tools have no tensorweave metadata and no checksums.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import os
import re
import struct
import tempfile
import threading
import uuid
import zlib

try:
    import fcntl
except ImportError:  # not POSIX: temp files are not locked, nor swept
    fcntl = None

import numpy as np

from tensorweave.framework import dtypes, errors, tensor_codec

FORMAT_VERSION = 2
DATA_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".index.json"
TEMP_SUFFIX = ".tmp"
# The safetensors reference implementation refuses headers above 100 MB.
MAX_HEADER_BYTES = 100_000_000
# Writes go out in chunks so huge tensors need no second in-memory copy for byte order
# conversion beyond one chunk, and so a test can slow a save down (``_after_chunk``).
CHUNK_BYTES = 8 << 20

# The checksum fields, first in their JSON object, at a fixed place: the value is computed
# over the whole text with the 8 hex digits as "00000000".
_CRC_PLACEHOLDER = "00000000"
_HEADER_CRC_KEY = "tensorweave.header_crc32"
_HEADER_CRC_PREFIX = b'{"__metadata__":{"' + _HEADER_CRC_KEY.encode() + b'":"'
_INDEX_CRC_PREFIX = b'{\n "index_crc32": "'
_HEX8 = re.compile(rb"[0-9a-f]{8}")
# What a temp file of ours is called: mkstemp's 8 random characters between the name of the
# file it becomes (a data file, an index, the state file) and ".tmp".
_TEMP_RE = re.compile(r"^(?:.+\.safetensors|.+\.index\.json|checkpoint)\.[a-z0-9_]{8}\.tmp$")

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


def _locked_temp(path: str) -> tuple[int, str]:
    """A new temp file beside ``path``, locked (``flock``) for as long as it is open, so a
    sweep by another save knows it is being written."""
    directory = os.path.dirname(path) or "."
    while True:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=TEMP_SUFFIX, dir=directory)
        if fcntl is None:
            return fd, tmp
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)  # swept between its creation and our lock: another one


def remove_stale_temps(directory: str) -> list[str]:
    """Remove the temp files that interrupted saves (a killed process) left in
    ``directory``: ours by name, and held by no live writer (their lock is free). Returns
    the names removed."""
    if fcntl is None:
        return []
    removed = []
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    for name in names:
        if not _TEMP_RE.match(name):
            continue
        path = os.path.join(directory or ".", name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a save is writing it
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                    os.unlink(path)
                    removed.append(name)
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def _atomic_file(path: str):
    """A file object for a locked temp file beside ``path``; on success it is flushed,
    fsynced and renamed onto ``path``; on any failure the temp file is removed."""
    fd, tmp = _locked_temp(path)
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
    header = {"__metadata__": metadata} if metadata else {}  # the header checksum is its first key
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


def _crc_map(parts, crcs=None) -> str:
    return json.dumps({p[0]: _CRC_PLACEHOLDER if crcs is None else f"{crcs[p[0]]:08x}" for p in parts},
                      separators=(",", ":"))


def _write_data(path, names, values, dtypes_list, metadata) -> tuple[dict, dict, int]:
    parts, encodings, variables = _layout(names, values, dtypes_list)
    # The header checksum first (at a fixed place), the tensors' checksums as placeholders of
    # the same width: once the data is written (and its checksums known) the header is written
    # again over the first one, the same length.
    meta = {_HEADER_CRC_KEY: _CRC_PLACEHOLDER}
    meta.update((str(k), str(v)) for k, v in metadata.items() if str(k) != _HEADER_CRC_KEY)
    if encodings:
        meta["tensorweave.encodings"] = json.dumps(encodings, separators=(",", ":"))
    meta["tensorweave.crc32"] = _crc_map(parts)
    head = _header_bytes(parts, meta)
    crcs: dict = {}
    with _atomic_file(path) as f:
        f.write(head)
        _write_parts(f, parts, crcs)
        meta["tensorweave.crc32"] = _crc_map(parts, crcs)
        meta[_HEADER_CRC_KEY] = f"{zlib.crc32(_header_bytes(parts, meta)):08x}"
        final = _header_bytes(parts, meta)
        if len(final) != len(head):  # pragma: no cover - fixed-width fields
            raise errors.InternalError(f"checkpoint header of {path} changed length while it was written")
        f.seek(0)
        f.write(final)
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
    remove_stale_temps(directory)  # what saves killed mid-way left behind
    save_id = uuid.uuid4().hex
    version = _version()
    meta = {"format": "np", "tensorweave.format_version": str(FORMAT_VERSION),
            "tensorweave.version": version, "tensorweave.save_id": save_id}
    if global_step is not None:
        meta["tensorweave.global_step"] = str(int(global_step))
    replaced = _committed_save_id(index_path(prefix))
    if replaced is not None:  # a crash between the two renames leaves this data file beside that index
        meta["tensorweave.replaces"] = replaced
    data = data_path(prefix)
    variables, crcs, nbytes = _write_data(data, names, values, dtypes_list, meta)
    _fsync_dir(directory)
    _after_data_rename()
    index = {
        "index_crc32": _CRC_PLACEHOLDER,  # first: at a fixed place
        "format": "tensorweave-checkpoint", "format_version": FORMAT_VERSION,
        "tensorweave_version": version, "save_id": save_id,
        "global_step": None if global_step is None else int(global_step),
        "data_file": os.path.basename(data), "data_bytes": nbytes,
        "variables": variables, "crc32": crcs,
    }
    text = json.dumps(index, indent=1).encode()
    crc = f"{zlib.crc32(text):08x}".encode()
    n = len(_INDEX_CRC_PREFIX)
    atomic_write_bytes(index_path(prefix), text[:n] + crc + text[n + 8:])
    return prefix


def _committed_save_id(path: str) -> str | None:
    """The save id in the index at ``path`` (None: no index, or not one we can read)."""
    try:
        with open(path, "rb") as f:
            index = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    sid = index.get("save_id") if isinstance(index, dict) else None
    return sid if isinstance(sid, str) else None


def remove_checkpoint(prefix) -> None:
    """Delete checkpoint ``prefix``: the index first (uncommitting it), then the data."""
    for p in (index_path(prefix), data_path(prefix)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)


# ----------------------------------------------------------------------------------------
# slices of one logical tensor (the shards of a partitioned variable)
def _volume(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def check_tiling(name: str, full_shape, boxes) -> None:
    """``boxes`` ([(starts, lengths)], each inside ``full_shape``) must cover the full shape
    without overlapping: the shards of a partitioned variable, saved as its one tensor."""
    full_shape = [int(d) for d in full_shape]
    covered = 0
    for i, (starts, lengths) in enumerate(boxes):
        covered += _volume(lengths)
        for j, (s2, n2) in enumerate(boxes[:i]):
            if all(a < b + m and b < a + n for a, n, b, m in zip(starts, lengths, s2, n2)):
                raise errors.InvalidArgumentError(
                    f"the slices of tensor '{name}' overlap: slice {j} (offset {list(s2)}, shape {list(n2)}) and "
                    f"slice {i} (offset {list(starts)}, shape {list(lengths)}) of full shape {full_shape}")
    if covered != _volume(full_shape):
        raise errors.InvalidArgumentError(
            f"the {len(boxes)} slices of tensor '{name}' cover {covered} of the {_volume(full_shape)} elements of "
            f"its full shape {full_shape}: save every shard of a partitioned variable together")


def assemble_slices(name: str, full_shape, dtype, pieces) -> np.ndarray:
    """The full tensor ``name`` from ``pieces`` ([(starts, lengths, array)]), which must tile
    ``full_shape`` exactly."""
    dtype = dtypes.as_dtype(dtype)
    check_tiling(name, full_shape, [(s, n) for s, n, _ in pieces])
    out = np.empty([int(d) for d in full_shape], dtype=object if dtype.is_string else dtype.np_dtype)
    for starts, lengths, value in pieces:
        value = np.asarray(value, dtype=object) if dtype.is_string else np.asarray(value)
        if list(value.shape) != list(lengths):
            raise errors.InvalidArgumentError(
                f"a slice of tensor '{name}' has shape {list(value.shape)}, but its spec says {list(lengths)}")
        out[tuple(slice(a, a + n) for a, n in zip(starts, lengths))] = value
    return out


def take_slice(value: np.ndarray, starts, lengths) -> np.ndarray:
    """``value[starts : starts + lengths]``, copied (a shard must not keep the whole tensor
    alive)."""
    return np.array(value[tuple(slice(a, a + n) for a, n in zip(starts, lengths))], copy=True)


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
        head8 = f.read(8)
        (n,) = struct.unpack("<Q", head8)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise self._lost(f"header length {n} does not fit in the file's {size} bytes")
        raw = f.read(n)
        if len(raw) != n:
            raise self._lost(f"the file ended inside its {n}-byte header")
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise self._lost(f"header is not valid JSON ({e})") from None
        if not isinstance(header, dict):
            raise self._lost("header is not a JSON object")
        meta = header.pop("__metadata__", None)
        meta = {} if meta is None else meta
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise self._lost("__metadata__ must map strings to strings")
        self.checked = self._check_header_crc(head8 + raw, meta)
        self.metadata = meta
        self.format_version = self._format_version(meta)
        self.data_start = 8 + n
        entries = {}
        for name, e in header.items():
            ok = (isinstance(e, dict) and isinstance(e.get("dtype"), str) and isinstance(e.get("shape"), list)
                  and len(e["shape"]) <= 64 and all(type(d) is int and d >= 0 for d in e["shape"])
                  and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2
                  and all(type(o) is int for o in e["data_offsets"]))
            if not ok:
                raise self._lost(f"bad header entry for tensor '{name}': {str(e)[:200]}; expected "
                                 "{\"dtype\": str, \"shape\": [non-negative ints], \"data_offsets\": [begin, end]}")
            st, shape, (b, end) = e["dtype"], e["shape"], e["data_offsets"]
            if b < 0 or end < b:
                raise self._lost(f"tensor '{name}' has bad offsets {[b, end]}")
            # dtypes newer than this reader (F4, F6, ...) are listed but not size-checked
            item = tensor_codec.itemsize(st)
            count = 1
            for d in shape:
                count *= d
            if item is not None and count * item != end - b:
                raise self._lost(f"tensor '{name}' of dtype {st} and shape {shape} needs "
                                 f"{count * item} bytes but its offsets {[b, end]} give {end - b}")
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
        self.crcs = self._crc_table(meta)
        self._lock = threading.Lock()  # for the seek+read fallback where preadv is missing

    def _check_header_crc(self, head: bytes, meta: dict) -> bool:
        """Whether the header carries its checksum (and it matches: else DataLossError)."""
        at = 8 + len(_HEADER_CRC_PREFIX)
        if head[8:at] == _HEADER_CRC_PREFIX and _HEADER_CRC_KEY in meta:
            digits = head[at:at + 8]
            if not _HEX8.fullmatch(digits) or head[at + 8:at + 9] != b'"' or meta[_HEADER_CRC_KEY] != digits.decode():
                raise self._lost(f"its header checksum ({_HEADER_CRC_KEY}) is malformed")
            if zlib.crc32(head[:at] + _CRC_PLACEHOLDER.encode() + head[at + 8:]) != int(digits, 16):
                raise self._lost("its header does not match its checksum: the header (names, dtypes, shapes, "
                                 "offsets or metadata) is corrupt")
            return True
        if _HEADER_CRC_KEY in meta:
            raise self._lost(f"its header checksum ({_HEADER_CRC_KEY}) is not the header's first key, where "
                             "tensorweave writes it (a corrupt header, or one rewritten by another tool)")
        return False

    def _format_version(self, meta: dict) -> int | None:
        """The tensorweave format version of the file (None: a file of another tool)."""
        v = meta.get("tensorweave.format_version")
        if v is None:
            return None
        if not (isinstance(v, str) and v.isdigit() and len(v) < 6):
            raise self._lost(f"bad tensorweave.format_version {v[:50]!r}")
        version = int(v)
        if version >= 2 and not self.checked:
            raise self._lost(f"format version {version} requires a header checksum ({_HEADER_CRC_KEY}) and "
                             "it has none")
        if version > FORMAT_VERSION:
            raise errors.UnimplementedError(
                f"{self.path} has checkpoint format version {version}; this tensorweave reads up to {FORMAT_VERSION}")
        return version

    def _crc_table(self, meta: dict) -> dict | None:
        """{stored name: CRC-32} from the data file's own metadata (None where it has none)."""
        text = meta.get("tensorweave.crc32")
        if text is None:
            if self.checked:
                raise self._lost("it has a header checksum but no tensor checksums (tensorweave.crc32)")
            return None
        try:
            table = json.loads(text)
        except (ValueError, RecursionError):
            table = None
        if not (isinstance(table, dict) and set(table) == set(self.entries)
                and all(isinstance(v, str) and _HEX8.fullmatch(v.encode()) for v in table.values())):
            raise self._lost("tensorweave.crc32 must map every stored tensor to 8 hex digits")
        return {k: int(v, 16) for k, v in table.items()}

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
        index_checked = False
        if path.endswith(DATA_SUFFIX) and os.path.isfile(path):
            data = path
        elif os.path.isfile(index_path(path)):
            self.index, index_checked = self._read_index(index_path(path))
            data = data_path(path)  # by definition; the index's "data_file" is informational
            if not os.path.exists(data):
                raise errors.DataLossError(
                    f"checkpoint {path}: index {index_path(path)} exists but its data file {data} is missing")
        else:
            raise errors.NotFoundError(
                f"checkpoint {path!r} not found: neither {index_path(path)} nor a safetensors file at that path exists")
        self.file = SafetensorsFile(data)
        self.path = data
        try:
            self._init(path, data, index_checked)
        except BaseException:
            self.file.close()
            raise

    def _init(self, path, data, index_checked):
        meta = self.file.metadata
        if self.index is not None and self.index["save_id"] != meta.get("tensorweave.save_id"):
            if self.index["save_id"] is not None and meta.get("tensorweave.replaces") == self.index["save_id"]:
                # A save to this prefix was interrupted between the data and index renames: the
                # data file is complete (renamed only when fully written), its header describes it.
                self.index = None
            elif index_checked or self.file.checked:
                raise errors.DataLossError(
                    f"checkpoint {path}: its data file {data} is from another save "
                    f"({str(meta.get('tensorweave.save_id'))[:40]}) than its index {index_path(path)} "
                    f"({str(self.index['save_id'])[:40]}), nor the save that replaced it: the files were swapped "
                    "or mixed up")
            else:  # format 1 files, which do not say which save they replace
                self.index = None
        self._encodings = self._check_encodings(meta.get("tensorweave.encodings", "{}"), data)
        companions = {e["offsets"] for e in self._encodings.values() if e["dtype"] == "string"}
        self._names = [n for n in self.file.entries if n not in companions]
        if self.index is not None:
            known = self.index["variables"]
            self._names = [n for n in known if n in self.file.entries] + \
                [n for n in self._names if n not in known]
        self._name_set = set(self._names)
        if self.index is not None:
            self.global_step = self.index["global_step"]
        else:
            step = meta.get("tensorweave.global_step")
            if step is not None and not re.fullmatch(r"-?[0-9]{1,20}", step):
                raise errors.DataLossError(f"{data}: bad tensorweave.global_step {step[:50]!r}")
            self.global_step = None if step is None else int(step)

    def _check_encodings(self, text, data) -> dict:
        """The ``tensorweave.encodings`` of the data file, every entry checked against the
        tensors it describes."""
        def lost(what):
            return errors.DataLossError(f"{data}: bad tensorweave.encodings metadata ({what})")
        try:
            enc = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise lost(e) from None
        if not isinstance(enc, dict):
            raise lost("not a JSON object")
        entries = self.file.entries
        for name, e in enc.items():
            where = f"tensor '{name}'"
            if not (isinstance(e, dict) and name in entries and isinstance(e.get("shape"), list)
                    and len(e["shape"]) <= tensor_codec.MAX_RANK
                    and all(type(d) is int and d >= 0 for d in e["shape"])):
                raise lost(f"{where}: {str(e)[:200]}")
            count = 1
            for d in e["shape"]:
                count *= d
            st, stored_shape = entries[name][0], entries[name][1]
            if e.get("dtype") in ("complex64", "complex128") and set(e) == {"dtype", "shape"}:
                pairs = _PAIRS_OF[tensor_codec.name_of(e["dtype"])]
                if (st, stored_shape) != (pairs, e["shape"] + [2]):
                    raise lost(f"{where}: {e['dtype']} of shape {e['shape']} is not stored as {st} {stored_shape}")
            elif e.get("dtype") == "string" and set(e) == {"dtype", "shape", "offsets"}:
                off = e["offsets"]
                if not (isinstance(off, str) and off in entries and off != name):
                    raise lost(f"{where}: its offsets {str(off)[:100]!r} are not a stored tensor")
                if st != "U8" or len(stored_shape) != 1 or entries[off][0] != "I64" or entries[off][1] != [count + 1]:
                    raise lost(f"{where}: a string tensor of shape {e['shape']} is not stored as U8 bytes and "
                               f"{count + 1} I64 offsets")
            else:
                raise lost(f"{where}: {str(e)[:200]}")
        return enc

    @staticmethod
    def _read_index(path) -> tuple[dict, bool]:
        """The index at ``path``, every field checked, and whether it carried its checksum."""
        def lost(what):
            return errors.DataLossError(f"checkpoint index {path} is corrupt: {what}")
        with open(path, "rb") as f:
            raw = f.read()
        try:
            index = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise lost(e) from None
        if not isinstance(index, dict):
            raise errors.DataLossError(f"{path} is not a tensorweave checkpoint index")
        checked = False
        n = len(_INDEX_CRC_PREFIX)
        if raw[:n] == _INDEX_CRC_PREFIX and "index_crc32" in index:
            digits = raw[n:n + 8]
            if not _HEX8.fullmatch(digits) or raw[n + 8:n + 9] != b'"' or index["index_crc32"] != digits.decode():
                raise lost("its checksum (index_crc32) is malformed")
            if zlib.crc32(raw[:n] + _CRC_PLACEHOLDER.encode() + raw[n + 8:]) != int(digits, 16):
                raise lost("its text does not match its checksum")
            checked = True
        elif "index_crc32" in index:
            raise lost("its checksum (index_crc32) is not its first key, where tensorweave writes it")
        if index.get("format") != "tensorweave-checkpoint":
            raise errors.DataLossError(f"{path} is not a tensorweave checkpoint index")
        version = index.get("format_version", 0)
        if type(version) is not int:
            raise lost(f"format_version is {str(version)[:50]}")
        if version > FORMAT_VERSION:
            raise errors.UnimplementedError(
                f"checkpoint index {path} has format version {version}; this tensorweave "
                f"reads up to {FORMAT_VERSION}")
        if version >= 2 and not checked:
            raise lost(f"format version {version} requires its checksum (index_crc32) and it has none")
        # Every field a reader uses, of its type (format 1 files have no checksum to rely on).
        step, variables, crcs = index.get("global_step"), index.get("variables", {}), index.get("crc32", {})
        if not (index.get("save_id") is None or isinstance(index.get("save_id"), str)):
            raise lost("save_id must be a string")
        if not (step is None or type(step) is int):
            raise lost(f"global_step must be an integer or null, got {str(step)[:50]}")
        if not (isinstance(variables, dict) and all(isinstance(v, dict) for v in variables.values())):
            raise lost("variables must map names to {dtype, shape}")
        if not (isinstance(crcs, dict) and all(type(c) is int and 0 <= c < 1 << 32 for c in crcs.values())):
            raise lost("crc32 must map names to 32-bit checksums")
        index.setdefault("save_id", None)
        index["global_step"], index["variables"], index["crc32"] = step, variables, crcs
        return index, checked

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
        """The stored bytes of ``stored``, checked against its CRC-32 (the data file's own;
        the index's for files of format 1)."""
        raw = self.file.raw(stored)
        if self.file.crcs is not None:
            want = self.file.crcs.get(stored)
        else:
            want = self.index["crc32"].get(stored) if self.index is not None else None
        if want is not None and zlib.crc32(raw) != want:
            _st, _shape, b, _e = self.file.entries[stored]
            raise errors.DataLossError(
                f"checksum mismatch for tensor '{stored}' in {self.path} (bytes at offset "
                f"{self.file.data_start + b}): the file is corrupt")
        return raw

    def get_tensor(self, name: str) -> np.ndarray:
        self._require(name)
        enc = self._encodings.get(name)  # checked when the file was opened
        raw = self._read(name)
        if enc is None:
            return self.file.array(name, raw)
        kind, shape = enc["dtype"], tuple(enc["shape"])
        where = f"{kind} tensor '{name}' in {self.path}"
        if kind == "string":
            comp = enc["offsets"]
            offsets = self.file.array(comp, self._read(comp))
            return tensor_codec.decode_strings(offsets, raw, shape, where, error=errors.DataLossError)
        return tensor_codec.decode(tensor_codec.name_of(kind), shape, raw, where, error=errors.DataLossError)

    def close(self) -> None:
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
