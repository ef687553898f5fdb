"""String kernels: StringToHashBucketFast, AsString, SparseCross and VocabularyLookup.

The hash is the core's (``tensorweave.ops.string_ops.fingerprint64``: BLAKE2b-64, documented
there), so every device and process agrees on the buckets. Strings are object arrays of
``bytes``; the loops over elements are Python loops, each element hashed once.
VocabularyLookup builds its table once per vocabulary array (a constant is the same array
every step) and keeps it.
"""

from __future__ import annotations

import itertools

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.ops.string_ops import as_bytes, fingerprint64

CPU = "CPU"
_E = errors.InvalidArgumentError
_MASK = (1 << 64) - 1


def _str_array(items, shape) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.ravel()[:] = items  # a new object array: ravel is a view
    return out


def _hash_bucket(ctx):
    n = ctx.attrs["num_buckets"]

    def string_to_hash_bucket_fast(x):
        flat = x.ravel()
        out = np.fromiter((fingerprint64(v if type(v) is bytes else as_bytes(v)) % n for v in flat),
                          dtype=np.int64, count=flat.size)
        return out.reshape(x.shape)
    return string_to_hash_bucket_fast


def _as_string(ctx):
    dt = ctx.attrs["T"]
    if dt is dtypes.bool_:
        def bools(x):
            return _str_array([b"true" if v else b"false" for v in x.ravel().tolist()], x.shape)
        return bools
    fill, width, precision = ctx.attrs["fill"], ctx.attrs["width"], ctx.attrs["precision"]
    spec = "%" + fill + (str(width) if width > -1 else "") + (f".{precision}" if precision > -1 else "")
    if dt.is_floating:
        spec += "g" if ctx.attrs["shortest"] else ("e" if ctx.attrs["scientific"] else "f")
    else:
        spec += "d"

    def as_string(x):
        return _str_array([(spec % v).encode("ascii") for v in x.ravel().tolist()], x.shape)
    return as_string


def _rows_of_sparse(ctx, k, indices, values, shape, batch):
    """The values of sparse input ``k`` per row (in order of their indices)."""
    if indices.ndim != 2 or indices.shape[0] != values.shape[0] or shape.shape != (2,) or indices.shape[1] != 2:
        raise ctx.error(_E, f"sparse input {k} must be a rank-2 SparseTensor: indices [nnz, 2], values [nnz], "
                            f"shape [2]; got indices {list(indices.shape)}, values {list(values.shape)}, shape "
                            f"{shape.tolist()}")
    rows = [[] for _ in range(batch)]
    if indices.shape[0]:
        r = indices[:, 0]
        bad = (r < 0) | (r >= batch) | (indices[:, 1] < 0) | (indices[:, 1] >= shape[1])
        if bad.any():
            e = int(np.flatnonzero(bad)[0])
            raise ctx.error(_E, f"sparse input {k}: index {indices[e].tolist()} (entry {e}) is out of bounds for "
                                f"dense shape {shape.tolist()}")
        order = np.lexsort((indices[:, 1], r))
        vals = values.tolist()
        for i in order.tolist():
            rows[int(r[i])].append(vals[i])
    return rows


def _sparse_cross(ctx):
    n = ctx.attrs["N"]
    hashed = ctx.attrs["hashed_output"]
    buckets = ctx.attrs["num_buckets"]
    key = ctx.attrs["hash_key"] & _MASK

    def sparse_cross(*args):
        indices, values, shapes, dense = args[:n], args[n:2 * n], args[2 * n:3 * n], args[3 * n:]
        sizes = [int(s[0]) if s.size else -1 for s in shapes] + [d.shape[0] if d.ndim else -1 for d in dense]
        batch = sizes[0]
        if any(s != batch for s in sizes) or batch < 0:
            raise ctx.error(_E, f"SparseCross: the inputs' batch sizes (first dimensions) differ: {sizes}")
        per_input = [_rows_of_sparse(ctx, k, *parts, batch) for k, parts in enumerate(zip(indices, values, shapes))]
        for k, d in enumerate(dense):
            if d.ndim != 2:
                raise ctx.error(_E, f"SparseCross: dense input {k} must be a matrix [batch, k], got shape "
                                    f"{list(d.shape)}")
            per_input.append(d.tolist())
        if hashed:
            # each distinct value is fingerprinted once
            memo: dict = {}

            def fp(v):
                f = memo.get(v)
                if f is None:
                    f = memo[v] = fingerprint64(as_bytes(v)).to_bytes(8, "little")
                return f

            def combine(combo):
                h = key
                for v in combo:
                    h = fingerprint64(h.to_bytes(8, "little") + fp(v))
                return h % buckets if buckets > 0 else h & ((1 << 63) - 1)
        else:
            def combine(combo):
                return b"_X_".join(as_bytes(v) for v in combo)
        out_idx, out_val, width = [], [], 0
        for r in range(batch):
            combos = [combine(c) for c in itertools.product(*(rows[r] for rows in per_input))]
            out_idx.extend((r, j) for j in range(len(combos)))
            out_val.extend(combos)
            width = max(width, len(combos))
        idx = np.array(out_idx, dtype=np.int64).reshape(-1, 2)
        vals = np.array(out_val, dtype=np.int64) if hashed else _str_array(out_val, (len(out_val),))
        return idx, vals, np.array([batch, width], dtype=np.int64)
    return sparse_cross


def _key(v):
    """A lookup key: strings as bytes (object arrays may hold str), integers as ints."""
    if type(v) is bytes:
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return int(v)


def _vocabulary_lookup(ctx):
    oov = ctx.attrs["num_oov_buckets"]
    default = ctx.attrs["default_value"]
    cache = [(None, None)]   # (the vocabulary array, its table): replaced as one tuple

    def table_for(vocab):
        cached, table = cache[0]
        if cached is vocab:
            return table
        if vocab.ndim != 1:
            raise ctx.error(_E, f"VocabularyLookup: vocabulary must be a vector, got shape {list(vocab.shape)}")
        table = {}
        for i, v in enumerate(vocab.tolist()):
            k = _key(v)
            if k in table:
                raise ctx.error(_E, f"VocabularyLookup: the vocabulary has {k!r} twice (at {table[k]} and {i})")
            table[k] = i
        cache[0] = (vocab, table)
        return table

    def vocabulary_lookup(keys, vocab):
        table = table_for(vocab)
        size = len(table)
        flat = keys.ravel().tolist()
        out = np.empty(len(flat), dtype=np.int64)
        for i, k in enumerate(flat):
            k = _key(k)
            j = table.get(k)
            if j is None:
                j = size + fingerprint64(as_bytes(k)) % oov if oov else default
            out[i] = j
        return out.reshape(keys.shape)
    return vocabulary_lookup


def register(reg):
    reg.register("StringToHashBucketFast", CPU, factory=_hash_bucket)
    reg.register("AsString", CPU, factory=_as_string)
    reg.register("SparseCross", CPU, factory=_sparse_cross)
    reg.register("VocabularyLookup", CPU, factory=_vocabulary_lookup)
