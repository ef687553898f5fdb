"""Input kernels: file ops and the decoders (DecodeRaw, DecodeCSV, StringToNumber). The reader
ops are host-side resources: their kernels are the core's (``tensorweave.kernels.readers``).

Strings are 0-d or n-d object arrays of ``bytes``.
"""

from __future__ import annotations

import os

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime import file_access

CPU = "CPU"
_E = errors.InvalidArgumentError


def _bytes_of(v) -> bytes:
    v = v.item() if isinstance(v, np.ndarray) else v
    return v.encode() if isinstance(v, str) else v


def _str_array(values, shape=None) -> np.ndarray:
    out = np.empty(len(values) if shape is None else shape, dtype=object)
    out.ravel()[:] = values  # object arrays: ravel is a view
    return out


# ---------------------------------------------------------------------------------------
# files
def _what(ctx) -> str:
    return f"{ctx.op.type} node '{ctx.op.name}' on {ctx.device.name}"


def _read_file(ctx):
    files = file_access.of(ctx.resources)

    def read_file(filename):
        path = files.check(_bytes_of(filename), _what(ctx))
        try:
            with open(path, "rb") as f:
                return np.array(f.read(), dtype=object)
        except FileNotFoundError:
            raise ctx.error(errors.NotFoundError, f"file {path!r} not found") from None
        except IsADirectoryError:
            raise ctx.error(errors.FailedPreconditionError, f"{path!r} is a directory, not a file") from None
        except PermissionError:
            raise ctx.error(errors.PermissionDeniedError, f"cannot read {path!r}: permission denied") from None
    return read_file


def _write_file(ctx):
    files = file_access.of(ctx.resources)

    def write_file(filename, contents):
        path = files.check(_bytes_of(filename), _what(ctx), write=True)
        data = _bytes_of(contents)
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)  # as TensorFlow's WriteFile
            with open(path, "wb") as f:
                f.write(data)
        except PermissionError:
            raise ctx.error(errors.PermissionDeniedError, f"cannot write {path!r}: permission denied") from None
        except OSError as e:
            raise ctx.error(errors.UnknownError, f"cannot write {path!r}: {e}") from None
    return write_file


def _matching_files(ctx):
    files = file_access.of(ctx.resources)

    def matching_files(pattern):
        names = set()
        for p in np.asarray(pattern).ravel():
            names.update(files.glob(_bytes_of(p), _what(ctx)))
        return _str_array([os.fsencode(n) for n in sorted(names)])
    return matching_files


# ---------------------------------------------------------------------------------------
# decoding
def _decode_raw(ctx):
    dt = ctx.attrs["out_type"].np_dtype
    if dt == np.bool_:
        wire = np.dtype(np.uint8)
    else:
        wire = np.dtype(dt).newbyteorder("<" if ctx.attrs["little_endian"] else ">")
    size = wire.itemsize

    def decode_raw(x):
        flat = [_bytes_of(v) for v in x.ravel()]
        if not flat:
            return np.empty(x.shape + (0,), dtype=dt)
        n0 = len(flat[0])
        for i, b in enumerate(flat):
            if len(b) != n0:
                raise ctx.error(_E, f"DecodeRaw requires all input strings to have one size; element 0 has "
                                    f"{n0} bytes but element {i} has {len(b)}")
        if n0 % size:
            raise ctx.error(_E, f"input to DecodeRaw has length {n0}, not a multiple of {size}, the size of "
                                f"{ctx.attrs['out_type'].name}")
        arr = np.frombuffer(b"".join(flat), dtype=wire).reshape(x.shape + (n0 // size,))
        if dt == np.bool_:
            return arr != 0
        return arr.astype(dt)  # native byte order, and a writable array of our own
    return decode_raw


_INT_RANGE = {np.dtype(np.int32): (-(2**31), 2**31 - 1), np.dtype(np.int64): (-(2**63), 2**63 - 1)}


def _parse_number(text: bytes, dt: np.dtype):
    """The value of ``text`` as ``dt``, or None when it is not a valid number of that type.
    Surrounding whitespace is allowed (as TF's safe_strto*); Python-only syntax such as
    digit separators (``1_000``) is not."""
    try:
        s = text.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if not s or "_" in s:
        return None
    if dt.kind == "f":
        try:
            v = float(s)
        except ValueError:
            return None
        with np.errstate(over="ignore"):
            return dt.type(v)
    try:
        v = int(s, 10)
    except ValueError:
        return None
    lo, hi = _INT_RANGE[dt]
    return v if lo <= v <= hi else None


def _string_to_number(ctx):
    dt = ctx.attrs["out_type"].np_dtype
    name = ctx.attrs["out_type"].name

    def string_to_number(x):
        out = np.empty(x.shape, dtype=dt)
        flat_out = out.reshape(-1)
        for i, v in enumerate(x.ravel()):
            b = _bytes_of(v)
            r = _parse_number(b, np.dtype(dt))
            if r is None:
                raise ctx.error(_E, f"StringToNumber could not convert string {b!r} (element {i}) to {name}")
            flat_out[i] = r
        return out
    return string_to_number


def _split_csv(rec: bytes, delim: bytes, quotes: bool, where):
    """The fields of one CSV record (TensorFlow's DecodeCSV rules)."""
    if not quotes or b'"' not in rec:
        return rec.split(delim)
    fields = []
    i, n = 0, len(rec)
    dq = ord('"')
    d = delim[0]
    while True:
        if i < n and rec[i] == dq:
            i += 1
            buf = bytearray()
            while True:
                if i >= n:
                    raise errors.InvalidArgumentError(
                        f"{where()}: a quoted field does not end with a quote (field {len(fields)})")
                c = rec[i]
                if c == dq:
                    if i + 1 < n and rec[i + 1] == dq:
                        buf.append(dq)
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(c)
                i += 1
            if i < n and rec[i] != d:
                raise errors.InvalidArgumentError(
                    f"{where()}: field {len(fields)}: a quote inside a quoted field must be doubled, and a "
                    "closing quote must be followed by the delimiter or the end of the record")
            fields.append(bytes(buf))
        else:
            j = rec.find(delim, i)
            end = n if j < 0 else j
            field = rec[i:end]
            if b'"' in field:
                raise errors.InvalidArgumentError(
                    f"{where()}: field {len(fields)} is not quoted but contains a quote: {field!r}")
            fields.append(field)
            i = end
        if i >= n:
            return fields
        i += 1  # the delimiter
        if i == n:
            fields.append(b"")
            return fields


def _decode_csv(ctx):
    types = [t for t in ctx.attrs["OUT_TYPE"]]
    delim = ctx.attrs["field_delim"].encode()
    quotes = ctx.attrs["use_quote_delim"]
    na = ctx.attrs["na_value"].encode()
    cols = list(ctx.attrs["select_cols"]) or None
    ncols = len(types)

    def decode_csv(records, *defaults):
        defs = []
        for i, d in enumerate(defaults):
            if d.ndim > 1 or d.size > 1:
                raise ctx.error(_E, f"record_defaults[{i}] must have 0 or 1 element, got shape {d.shape}")
            defs.append(d.reshape(-1)[0] if d.size else None)
        flat = records.ravel()
        outs = [np.empty(flat.shape, dtype=object if t.is_string else t.np_dtype) for t in types]
        for r, raw in enumerate(flat):
            rec = _bytes_of(raw)

            def where(r=r, rec=rec):
                shown = rec if len(rec) <= 80 else rec[:77] + b"..."
                return f"record {r} ({shown!r})"

            fields = _split_csv(rec, delim, quotes, where)
            if cols is None:
                if len(fields) != ncols:
                    raise ctx.error(_E, f"{where()}: expected {ncols} fields but found {len(fields)}")
                picked = fields
            else:
                if len(fields) <= cols[-1]:
                    raise ctx.error(_E, f"{where()}: select_cols needs field {cols[-1]} but the record has "
                                        f"{len(fields)} fields")
                picked = [fields[c] for c in cols]
            for k, (field, t) in enumerate(zip(picked, types)):
                col = cols[k] if cols else k
                if field == b"" or (na and field == na):
                    if defs[k] is None:
                        raise ctx.error(_E, f"{where()}: field {col} is required but missing")
                    outs[k][r] = defs[k]
                elif t.is_string:
                    outs[k][r] = field
                else:
                    v = _parse_number(field, np.dtype(t.np_dtype))
                    if v is None:
                        raise ctx.error(_E, f"{where()}: field {col} is not a valid {t.name}: {field!r}")
                    outs[k][r] = v
        return tuple(o.reshape(records.shape) for o in outs)
    return decode_csv


def register(reg):
    reg.register("ReadFile", CPU, factory=_read_file)
    reg.register("WriteFile", CPU, factory=_write_file)
    reg.register("MatchingFiles", CPU, factory=_matching_files)
    reg.register("DecodeRaw", CPU, factory=_decode_raw)
    reg.register("DecodeCSV", CPU, factory=_decode_csv)
    reg.register("StringToNumber", CPU, factory=_string_to_number)

