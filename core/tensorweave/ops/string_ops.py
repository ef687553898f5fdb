"""String hashing, formatting, crosses and vocabulary lookups: the ops sparse feature columns
stand on (``tw.string_to_hash_bucket_fast``, ``tw.as_string``, ``tw.sparse_cross``,
``tw.sparse_cross_hashed``, ``vocabulary_lookup``).

**The hash.** TensorFlow hashes with Farmhash's ``Fingerprint64``; tensorweave uses a
documented, stable hash of its own, so bucket assignments differ from TensorFlow's (a model
trained with TensorFlow's hash buckets does not carry over bucket for bucket):

- ``fingerprint64(b)``: the 8-byte BLAKE2b digest (RFC 7693, ``hashlib.blake2b(b,
  digest_size=8)``, no key) of the bytes ``b`` read as a little-endian unsigned 64-bit integer;
  a string is hashed as its UTF-8 bytes, an integer as its decimal string (``b"-12"``);
- ``StringToHashBucketFast``: ``fingerprint64(s) % num_buckets``;
- ``SparseCross`` with ``hashed_output``: the cross of the values ``v1 .. vk`` (one from
  each input, in input order) is ``h % num_buckets`` with ``h = hash_key`` then, for each
  value, ``h = fingerprint64(h as 8 little-endian bytes + fingerprint64(v) as 8 little-endian
  bytes)`` (TF's ``FingerprintCat64`` chain, with our fingerprint);
- ``VocabularyLookup``'s out-of-vocabulary buckets: ``vocabulary_size +
  fingerprint64(key) % num_oov_buckets``.

The same inputs give the same buckets in every process, on every platform and in every
version (Python's ``hash()`` is salted per process; this is not). The hash is not meant to
be cryptographically strong here: it only has to spread values evenly.

These ops run on the host (a CPU kernel: strings live on the host), are not differentiable,
and are element-wise over their inputs' values, except ``SparseCross`` (see its wrapper).
"""

from __future__ import annotations

import hashlib

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.sparse_tensor import SparseTensor, SparseTensorValue
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import math_ops

__all__ = ["string_to_hash_bucket_fast", "as_string", "sparse_cross", "sparse_cross_hashed"]

_E = errors.InvalidArgumentError
_MASK = (1 << 64) - 1
DEFAULT_HASH_KEY = 0xDECAFCAFFE  # TF's default hash_key for crosses
_AS_STRING_TYPES = "{int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64, bool}"
_KEY_TYPES = "{string, int32, int64}"


# ---------------------------------------------------------------------------------------
# the hash (used by the kernels; documented in the module docstring)
def as_bytes(value) -> bytes:
    """The bytes a value is hashed as: strings as UTF-8, integers as their decimal string."""
    if isinstance(value, np.ndarray):
        value = value.item()
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool | np.bool_):
        raise _E(f"cannot hash a bool value ({value!r}); cast it to an integer or a string first")
    if isinstance(value, int | np.integer):
        return str(int(value)).encode("ascii")
    raise _E(f"cannot hash a value of type {type(value).__name__} ({value!r}); use strings or integers")


def fingerprint64(data: bytes) -> int:
    """The 64-bit fingerprint of ``data``: BLAKE2b with an 8-byte digest, little-endian."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def hash_bucket(value, num_buckets: int) -> int:
    """The bucket of one value: ``fingerprint64(as_bytes(value)) % num_buckets``."""
    return fingerprint64(as_bytes(value)) % num_buckets


def cross_fingerprint(values, hash_key: int = DEFAULT_HASH_KEY) -> int:
    """The 64-bit hash of a cross of ``values`` (one per input, in input order)."""
    h = hash_key & _MASK
    for v in values:
        h = fingerprint64(h.to_bytes(8, "little") + fingerprint64(as_bytes(v)).to_bytes(8, "little"))
    return h


# ---------------------------------------------------------------------------------------
# op definitions
def _hash_bucket_shape(op):
    if op.get_attr("num_buckets") < 1:
        raise _E(f"num_buckets must be >= 1, got {op.get_attr('num_buckets')}")
    return [op.inputs[0].shape]


def _as_string_shape(op):
    if op.get_attr("scientific") and op.get_attr("shortest"):
        raise _E("AsString: cannot select both scientific and shortest notation")
    fill = op.get_attr("fill")
    if len(fill) > 1:
        raise _E(f"AsString: fill must be at most one character, got {fill!r}")
    if fill and fill not in " +-0#":
        raise _E(f"AsString: fill argument {fill!r} is not supported (use one of ' ', '+', '-', '0', '#')")
    dt = op.inputs[0].dtype
    if not dt.is_floating:
        if op.get_attr("precision") > -1:
            raise _E(f"AsString: precision is not supported for {dt.name}")
        if op.get_attr("scientific") or op.get_attr("shortest"):
            raise _E(f"AsString: scientific and shortest are not supported for {dt.name}")
    return [op.inputs[0].shape]


def _cross_shape(op):
    n = op.get_attr("N")
    sparse_types, dense_types = op.get_attr("sparse_types"), op.get_attr("dense_types")
    if len(sparse_types) != n:
        raise _E(f"SparseCross: {n} sparse inputs but {len(sparse_types)} sparse_types")
    for t in list(sparse_types) + list(dense_types):
        if t not in (dtypes.int64, dtypes.string):
            raise _E(f"SparseCross: inputs must be int64 or string, got {t.name}")
    if n + len(dense_types) < 1:
        raise _E("SparseCross: needs at least one input")
    if op.get_attr("hashed_output"):
        if op.get_attr("out_type") is not dtypes.int64:
            raise _E("SparseCross: hashed_output needs out_type int64")
    elif op.get_attr("out_type") is not dtypes.string:
        raise _E("SparseCross: out_type must be string unless hashed_output")
    for k in range(len(dense_types)):
        t = op.inputs[3 * n + k]
        if t.shape.ndims not in (None, 2):
            raise _E(f"SparseCross: dense input {k} must be a matrix [batch, k], got shape {t.shape}")
    return [TensorShape([None, 2]), TensorShape([None]), TensorShape([2])]


def _lookup_shape(op):
    if op.inputs[1].shape.ndims not in (None, 1):
        raise _E(f"VocabularyLookup: vocabulary must be a vector, got shape {op.inputs[1].shape}")
    if op.get_attr("num_oov_buckets") < 0:
        raise _E(f"VocabularyLookup: num_oov_buckets must be >= 0, got {op.get_attr('num_oov_buckets')}")
    return [op.inputs[0].shape]


def register_ops(reg):
    reg.op("StringToHashBucketFast", inputs=["input: string"], outputs=["output: int64"],
           attrs=["num_buckets: int >= 1"], shape_fn=_hash_bucket_shape,
           doc="fingerprint64(s) % num_buckets for each string s (BLAKE2b-64, not TensorFlow's Farmhash: see "
               "tensorweave.ops.string_ops).")
    reg.op("AsString", inputs=["input: T"], outputs=["output: string"],
           attrs=[f"T: {_AS_STRING_TYPES}", "precision: int = -1", "scientific: bool = false",
                  "shortest: bool = false", "width: int = -1", "fill: string = ''"],
           shape_fn=_as_string_shape,
           doc="Each element formatted as a string: integers in decimal, floats as printf's %f (%e with scientific, "
               "%g with shortest, precision digits), bools as true/false; width pads, fill is the printf flag.")
    reg.op("SparseCross", inputs=["indices: N * int64", "values: sparse_types", "shapes: N * int64",
                                  "dense_inputs: dense_types"],
           outputs=["output_indices: int64", "output_values: out_type", "output_shape: int64"],
           attrs=["N: int >= 0", "hashed_output: bool", "num_buckets: int >= 0", "hash_key: int",
                  "sparse_types: list(type) >= 0", "dense_types: list(type) >= 0", "out_type: {int64, string}",
                  "internal_type: {int64, string}"],
           shape_fn=_cross_shape,
           doc="Per row (batch entry), every combination of one value from each input, as a SparseTensor "
               "[batch, max combinations]: hashed (the fingerprint chain of the module docstring, mod num_buckets) "
               "or joined with '_X_'.")
    reg.op("VocabularyLookup", inputs=["keys: T", "vocabulary: T"], outputs=["ids: int64"],
           attrs=[f"T: {_KEY_TYPES}", "num_oov_buckets: int >= 0 = 0", "default_value: int = -1"],
           shape_fn=_lookup_shape,
           doc="The position of each key in the vector vocabulary; a key not in it gets vocabulary_size + "
               "fingerprint64(key) % num_oov_buckets, or default_value when num_oov_buckets is 0.")
    reg.no_gradient("StringToHashBucketFast", "AsString", "SparseCross", "VocabularyLookup")


# ---------------------------------------------------------------------------------------
# wrappers
def _string_input(x, who, what="input"):
    t = convert_to_tensor(x, name=what)
    if t.dtype is not dtypes.string:
        raise _E(f"{who}: {what} must be a string tensor, got {t.dtype.name} '{t.name}'")
    return t


def string_to_hash_bucket_fast(input, num_buckets, name=None):  # noqa: A002 - TF1 argument name
    """Each string of ``input`` hashed to a bucket in ``[0, num_buckets)``
    (``tf.string_to_hash_bucket_fast``; the hash is ours, not TensorFlow's Farmhash: see the
    module docstring)."""
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int | np.integer) or num_buckets < 1:
        raise _E(f"string_to_hash_bucket_fast: num_buckets must be an int >= 1, got {num_buckets!r}")
    x = _string_input(input, "string_to_hash_bucket_fast")
    return apply_op("StringToHashBucketFast", [x], {"num_buckets": int(num_buckets)},
                    name=name or "StringToHashBucketFast")


def as_string(input, precision=-1, scientific=False, shortest=False, width=-1, fill="", name=None):  # noqa: A002
    """Each element of ``input`` as a string (``tf.as_string``): integers in decimal, floats as
    C's ``%f`` (``%e`` with ``scientific``, ``%g`` with ``shortest``; ``precision`` digits),
    bools as ``true``/``false``; ``width`` pads to that many characters with spaces, or with
    zeros when ``fill="0"``."""
    x = convert_to_tensor(input, name="input")
    if x.dtype is dtypes.string:
        raise _E(f"as_string: input '{x.name}' is already a string tensor")
    return apply_op("AsString", [x], {"precision": int(precision), "scientific": bool(scientific),
                                      "shortest": bool(shortest), "width": int(width), "fill": str(fill)},
                    name=name or "AsString")


def _cross_inputs(inputs, who):
    if not isinstance(inputs, list | tuple):
        raise TypeError(f"{who}: inputs must be a list of SparseTensors and Tensors, got {type(inputs).__name__}")
    if not inputs:
        raise _E(f"{who}: inputs must not be empty")
    sparse, dense = [], []
    for i, x in enumerate(inputs):
        if isinstance(x, SparseTensorValue):
            x = SparseTensor.from_value(x)
        if isinstance(x, SparseTensor):
            values = x.values
            if values.dtype is not dtypes.string and values.dtype is not dtypes.int64:
                if not values.dtype.is_integer:
                    raise _E(f"{who}: input {i} must hold integers or strings, got {values.dtype.name}")
                values = math_ops.cast(values, dtypes.int64)
            if x.shape.ndims not in (None, 2):
                raise _E(f"{who}: sparse input {i} must have rank 2 ([batch, k]), got shape {x.shape}")
            sparse.append((x.indices, values, x.dense_shape))
            continue
        t = convert_to_tensor(x, name=f"input_{i}")
        if t.dtype is not dtypes.string and t.dtype is not dtypes.int64:
            if not t.dtype.is_integer:
                raise _E(f"{who}: input {i} must hold integers or strings, got {t.dtype.name} '{t.name}'")
            t = math_ops.cast(t, dtypes.int64)
        if t.shape.ndims not in (None, 2):
            raise _E(f"{who}: dense input {i} must be a matrix [batch, k], got '{t.name}' of shape {t.shape}")
        dense.append(t)
    return sparse, dense


def _sparse_cross(inputs, hashed, num_buckets, hash_key, name, who):
    sparse, dense = _cross_inputs(inputs, who)
    out_type = dtypes.int64 if hashed else dtypes.string
    with get_default_graph().name_scope(name or "SparseCross") as scope:
        attrs = {"N": len(sparse), "hashed_output": hashed, "num_buckets": int(num_buckets),
                 "hash_key": int(DEFAULT_HASH_KEY if hash_key is None else hash_key) & _MASK,
                 "sparse_types": [v.dtype for _, v, _ in sparse], "dense_types": [t.dtype for t in dense],
                 "out_type": out_type, "internal_type": dtypes.string}
        if attrs["hash_key"] >= 1 << 63:   # int attrs are signed 64-bit, as TF's
            attrs["hash_key"] -= 1 << 64
        idx, vals, shape = apply_op("SparseCross", [[i for i, _, _ in sparse], [v for _, v, _ in sparse],
                                                    [s for _, _, s in sparse], dense], attrs,
                                    _exact_name=scope.rstrip("/"))
    return SparseTensor(idx, vals, shape)


def sparse_cross(inputs, name=None):
    """The cross of ``inputs`` (rank-2 SparseTensors or dense ``[batch, k]`` tensors of strings
    or integers), ``tf.sparse.cross``: per row, every combination of one value from each input
    joined with ``"_X_"`` (integers as decimal strings), as a string SparseTensor
    ``[batch, max combinations]``. A row where any input is empty has no crosses."""
    return _sparse_cross(inputs, False, 0, 0, name, "sparse_cross")


def sparse_cross_hashed(inputs, num_buckets=0, hash_key=None, name=None):
    """Like ``sparse_cross`` with each combination hashed to an int64
    (``tf.sparse.cross_hashed``): ``num_buckets`` > 0 takes the hash modulo it, 0 keeps the
    whole (non-negative) 63-bit hash. The hash is ours (see the module docstring); ``hash_key``
    seeds it (TF's default ``0xDECAFCAFFE`` when None)."""
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int | np.integer) or num_buckets < 0:
        raise _E(f"sparse_cross_hashed: num_buckets must be an int >= 0, got {num_buckets!r}")
    return _sparse_cross(inputs, True, num_buckets, hash_key, name, "sparse_cross_hashed")


def vocabulary_lookup(keys, vocabulary, num_oov_buckets=0, default_value=-1, name=None):
    """The id of each of ``keys`` (a string or integer tensor) in ``vocabulary`` (a vector of
    distinct values, or a Python list): its position, else ``len(vocabulary) +
    fingerprint64(key) % num_oov_buckets``, else ``default_value`` (TF1's
    ``index_table_from_tensor(...).lookup``, as one stateless op: the vocabulary is an input,
    usually a constant, and the kernel keeps the table it builds from it)."""
    keys = convert_to_tensor(keys, name="keys")
    dtype = keys.dtype
    if dtype is not dtypes.string:
        if not dtype.is_integer:
            raise _E(f"vocabulary_lookup: keys must be strings or integers, got {dtype.name}")
        if dtype is not dtypes.int32 and dtype is not dtypes.int64:
            keys = math_ops.cast(keys, dtypes.int64)
            dtype = dtypes.int64
    vocab = vocabulary if isinstance(vocabulary, Tensor) else convert_to_tensor(
        np.asarray(vocabulary, dtype=object if dtype is dtypes.string else dtype.np_dtype), dtype=dtype,
        name="vocabulary")
    if vocab.dtype is not dtype:
        if dtype.is_integer and vocab.dtype.is_integer:
            keys, vocab = math_ops.cast(keys, dtypes.int64), math_ops.cast(vocab, dtypes.int64)
        else:
            raise _E(f"vocabulary_lookup: keys are {dtype.name} but the vocabulary is {vocab.dtype.name}")
    return apply_op("VocabularyLookup", [keys, vocab], {"num_oov_buckets": int(num_oov_buckets),
                                                        "default_value": int(default_value)},
                    name=name or "VocabularyLookup")

