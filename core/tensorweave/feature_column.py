"""``tw.feature_column``: TF1's feature columns, dense and sparse.

A feature column says how to turn one entry of a features dict (``{"age": tensor, ...}``,
as an ``input_fn`` returns) into model input. Columns are immutable, hashable values
(named tuples, as in TF1):

- dense columns, for ``input_layer``: ``numeric_column``, ``bucketized_column`` (one-hot of
  the bucket), ``indicator_column`` (a categorical column as a multi-hot vector),
  ``embedding_column`` and ``shared_embedding_columns`` (a categorical column's ids looked up
  in a trained ``[num_buckets, dimension]`` table and combined per example);
- categorical columns, for ``linear_model`` or the two wrappers above:
  ``categorical_column_with_identity``, ``_with_hash_bucket``, ``_with_vocabulary_list``,
  ``_with_vocabulary_file``, ``weighted_categorical_column``, ``crossed_column`` and
  ``bucketized_column``.

Categorical inputs are dense tensors of strings or integers (``[batch]`` or ``[batch, k]``;
``""`` and ``-1`` mark missing values and are dropped) or ``tw.SparseTensor``s (row-major
order, the first index is the example), as in TF1. A categorical column turns its input into
an ``IdWeightPair`` of SparseTensors (int64 ids in ``[0, num_buckets)`` at the input's
indices, and optional float32 weights). Everything an example holds is combined, whatever the
input's rank (TF1's ``linear_model`` reshapes to ``[batch, -1]`` first, the same).

``input_layer(features, columns)`` concatenates the dense columns, sorted by name, into a
``[batch, n]`` float32 tensor; ``linear_model(features, columns, units)`` is a weighted sum
with one weight matrix per column (``linear_model/<column>/weights``, zero-initialised) and
``linear_model/bias_weights``. Both combine a categorical column's ids as TF1's
``_safe_embedding_lookup_sparse``: ids < 0 (and weights <= 0) are pruned, empty examples get
zeros, and ``tw.nn.embedding_lookup_sparse`` (``div`` partitioning, so partitioned weights
work) combines the rest with the column's combiner (``sparse_combiner`` in ``linear_model``,
``"sum"`` by default). Gradients reach the tables as ``IndexedSlices``: optimizers update only
the rows looked up.

Departures from TF1: hash buckets (``categorical_column_with_hash_bucket``, ``crossed_column``,
out-of-vocabulary buckets) use tensorweave's documented stable hash (BLAKE2b-64, see
``tensorweave.ops.string_ops``), not TensorFlow's Farmhash, so bucket assignments differ from
TF's. TF1's asserts are checks that fail the step with an ``InvalidArgumentError`` naming the
column (identity ids out of range without a ``default_value``; weights whose indices differ
from their ids'). A vocabulary file is read when the column is made.
"""

from __future__ import annotations

import collections
import json
import math
import os

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, convert_to_tensor, get_default_graph
from tensorweave.framework.sparse_tensor import SparseTensor, SparseTensorValue
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import (
    array_ops,
    checkpoint_ops,
    embedding_ops,
    indexing_ops,
    init_ops,
    math_ops,
    nn_ops,
    sparse_ops,
    string_ops,
)
from tensorweave.ops import variable_scope as vs
from tensorweave.ops.partitioned_variables import PartitionedVariable

__all__ = [
    "numeric_column", "bucketized_column", "categorical_column_with_identity", "categorical_column_with_hash_bucket",
    "categorical_column_with_vocabulary_list", "categorical_column_with_vocabulary_file",
    "weighted_categorical_column", "crossed_column", "indicator_column", "embedding_column",
    "shared_embedding_columns", "input_layer", "linear_model",
]

_E = errors.InvalidArgumentError
_COMBINERS = ("mean", "sqrtn", "sum")

IdWeightPair = collections.namedtuple("IdWeightPair", ["id_tensor", "weight_tensor"])
IdWeightPair.__doc__ = "A categorical column's ids (an int64 SparseTensor) and weights (a float32 one, or None)."


def _check_key(key, where):
    if not isinstance(key, str) or not key:
        raise _E(f"{where}: key must be a non-empty string, got {key!r}")


def _check_int(value, where, what, minimum):
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise _E(f"{where}: {what} must be an int >= {minimum}, got {value!r}")
    return int(value)


# ----------------------------------------------------------------------------------------
# building from a features dict
class _Builder:
    """Transforms each column of one features dict once (a column used twice, or the source
    of a bucketized column that is also used alone, is computed once)."""

    def __init__(self, features):
        if not isinstance(features, dict):
            raise _E(f"features must be a dict of feature name -> tensor, got {type(features).__name__}")
        self._features = features
        self._cache: dict = {}

    def raw(self, key, column):
        """The feature ``key`` as a Tensor or a SparseTensor."""
        cache_key = ("raw", key)
        if cache_key in self._cache:
            return self._cache[cache_key]
        if key not in self._features:
            raise _E(f"feature column '{column.name}': feature {key!r} is not in the features dict "
                     f"(it has {sorted(map(str, self._features))})")
        value = self._features[key]
        if isinstance(value, SparseTensorValue):
            value = SparseTensor.from_value(value)
        if not isinstance(value, SparseTensor):
            try:
                value = convert_to_tensor(value)
            except (TypeError, ValueError) as e:
                raise _E(f"feature column '{column.name}': feature {key!r} must be a tensor or a SparseTensor, "
                         f"got {value!r} ({e})") from None
        self._cache[cache_key] = value
        return value

    def get(self, column, what):
        key = (column, what)
        if key not in self._cache:
            self._cache[key] = getattr(column, what)(self)
        return self._cache[key]

    def sparse(self, key, column, ignore=None):
        """The feature ``key`` as a SparseTensor: a dense one without its ``ignore`` values
        (``""`` for strings, -1 for integers by default), rank 1 taken as ``[batch, 1]``."""
        cache_key = ("sparse", key, ignore)
        if cache_key not in self._cache:
            self._cache[cache_key] = _to_sparse(self.raw(key, column), column, ignore)
        return self._cache[cache_key]


def _rank2(t, column=None):
    """A rank-1 ``[batch]`` feature as ``[batch, 1]`` (TF1 expands rank-1 features the same way)."""
    if t.shape.ndims == 1:
        return array_ops.expand_dims(t, -1)
    if t.shape.ndims == 0:
        who = f"feature column '{column.name}': " if column is not None else ""
        raise _E(f"{who}feature '{t.name}' must have a batch dimension, got a scalar")
    return t


def _to_sparse(x, column, ignore=None):
    """TF1's ``_to_sparse_input``: a SparseTensor as is; a dense tensor without ``ignore``."""
    if isinstance(x, SparseTensor):
        if x.shape.ndims is not None and x.shape.ndims < 1:
            raise _E(f"feature column '{column.name}': the SparseTensor {x} must have rank >= 1")
        return x
    if x.shape.ndims is None:
        raise _E(f"feature column '{column.name}': feature '{x.name}' has an unknown rank; give it a static shape "
                 "(at least its rank) or feed a SparseTensor")
    x = _rank2(x, column)
    with get_default_graph().name_scope("to_sparse_input"):
        if ignore is None:
            ignore = "" if x.dtype is dtypes.string else -1
        if x.dtype is dtypes.string:
            ignore_t = convert_to_tensor(ignore, dtype=dtypes.string)
        else:
            ignore_t = math_ops.cast(convert_to_tensor(ignore), x.dtype)
        indices = array_ops.where(math_ops.not_equal(x, ignore_t))
        values = indexing_ops.gather_nd(x, indices)
        dense_shape = math_ops.cast(array_ops.shape(x), dtypes.int64)
    return SparseTensor(indices, values, dense_shape)


def _runtime_check(ok, message):
    """A node that fails the step with ``message`` unless every element of ``ok`` is true
    (tensorweave has no Assert op: ``check_numerics`` of a value that is -inf exactly then)."""
    flag = math_ops.cast(math_ops.reduce_all(ok), dtypes.float32)
    return nn_ops.check_numerics(math_ops.log(flag), message)


def _collections(weight_collections):
    cols = list(weight_collections or [])
    for c in (GraphKeys.GLOBAL_VARIABLES, GraphKeys.MODEL_VARIABLES):
        if c not in cols:
            cols.append(c)
    return cols


def _var_list(v):
    return list(v) if isinstance(v, PartitionedVariable) else [v]


# ----------------------------------------------------------------------------------------
# the combined lookup (TF1's _safe_embedding_lookup_sparse)
def _safe_embedding_lookup_sparse(params, sp_ids, sp_weights=None, combiner="mean", max_norm=None, name=None):
    """``[batch, dimension]``: per example (the first index of ``sp_ids``), the rows of
    ``params`` at its valid ids combined by ``combiner``; ids < 0 and weights <= 0 are pruned,
    and an example left without ids gets zeros."""
    g = get_default_graph()
    with g.name_scope(name or "embedding_lookup"):
        ids = sp_ids.values
        if ids.dtype is not dtypes.int64:
            ids = math_ops.cast(ids, dtypes.int64)
        rows = sp_ids.indices[:, 0]
        batch = sp_ids.dense_shape[0]
        weights = None
        valid = math_ops.greater_equal(ids, 0)
        if sp_weights is not None:
            weights = sp_weights.values
            if weights.dtype is not dtypes.float32:
                weights = math_ops.cast(weights, dtypes.float32)
            valid = math_ops.logical_and(valid, math_ops.greater(weights, 0.0))
        keep = array_ops.reshape(array_ops.where(valid), [-1])
        ids, rows = array_ops.gather(ids, keep), array_ops.gather(rows, keep)
        if weights is not None:
            weights = array_ops.gather(weights, keep)
        # every example gets at least one entry (id 0, weight 1), zeroed at the end
        counts = math_ops.unsorted_segment_sum(array_ops.ones_like(rows, dtype=dtypes.int32), rows, batch)
        empty = math_ops.equal(counts, 0)
        empty_rows = array_ops.reshape(array_ops.where(empty), [-1])
        rows = array_ops.concat([rows, empty_rows], 0)
        ids = array_ops.concat([ids, array_ops.zeros_like(empty_rows)], 0)
        if weights is not None:
            weights = array_ops.concat([weights, array_ops.ones_like(empty_rows, dtype=dtypes.float32)], 0)
        # segments in order: sort the entries by example (stable)
        n = math_ops.cast(array_ops.size(rows), dtypes.int64)
        position = array_ops.range(n)
        order = sparse_ops.sparse_reorder(SparseTensor(array_ops.stack([rows, position], axis=1), position,
                                                       array_ops.stack([batch, n]))).values
        rows, ids = array_ops.gather(rows, order), array_ops.gather(ids, order)
        lookup_ids = SparseTensor(array_ops.stack([rows, array_ops.zeros_like(rows)], axis=1), ids,
                                  array_ops.stack([batch, array_ops.ones_like(batch)]))
        lookup_weights = None
        if weights is not None:
            lookup_weights = SparseTensor(lookup_ids.indices, array_ops.gather(weights, order), lookup_ids.dense_shape)
        result = embedding_ops.embedding_lookup_sparse(params, lookup_ids, lookup_weights, partition_strategy="div",
                                                       combiner=combiner, max_norm=max_norm)
        return array_ops.where(empty, array_ops.zeros_like(result), result)


# ----------------------------------------------------------------------------------------
# numeric
class _DenseMixin:
    is_dense = True
    is_categorical = False

    @property
    def _variable_shape(self):
        return TensorShape([self.dimension])

    def _dense_tensor(self, builder, weight_collections=None, trainable=True):
        return builder.get(self, "_dense")

    _get_dense_tensor = _dense_tensor


class _NumericColumn(collections.namedtuple("_NumericColumn",
                                            ["key", "shape", "default_value", "dtype", "normalizer_fn"]),
                     _DenseMixin):
    """A real-valued feature (see ``numeric_column``)."""

    @property
    def name(self):
        return self.key

    @property
    def dimension(self):
        return int(np.prod(self.shape))

    def _dense(self, builder):
        x = builder.raw(self.key, self)
        if isinstance(x, SparseTensor):
            raise _E(f"numeric_column '{self.key}': the feature must be a dense Tensor, got the SparseTensor {x}")
        if not (x.dtype.is_floating or x.dtype.is_integer or x.dtype is dtypes.bool_):
            raise _E(f"numeric_column '{self.key}': the feature must be numeric, got {x.dtype.name} '{x.name}'")
        if self.normalizer_fn is not None:
            x = convert_to_tensor(self.normalizer_fn(x))
        x = math_ops.cast(x, dtypes.float32)
        n = self.dimension
        if x.shape.ndims is not None and x.shape.ndims >= 1:
            per_example = x.shape.dims[1:]
            known = [d for d in per_example if d is not None]
            if len(known) == len(per_example) and int(np.prod(known or [1])) != n:
                raise _E(f"numeric_column '{self.key}' has shape {self.shape} ({n} values per example) but the "
                         f"feature '{x.name}' has shape {x.shape}")
        return array_ops.reshape(x, [-1, n])


def numeric_column(key, shape=(1,), default_value=None, dtype=dtypes.float32, normalizer_fn=None):
    """A real-valued feature ``key`` of ``shape`` per example (the model sees it as float32)."""
    _check_key(key, "numeric_column")
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise _E(f"numeric_column '{key}': shape must be an int or a tuple of ints, got {shape!r}") from None
    if not shape or any(d <= 0 for d in shape):
        raise _E(f"numeric_column '{key}': shape dimensions must be positive ints, got {shape}")
    dtype = dtypes.as_dtype(dtype)
    if not (dtype.is_floating or dtype.is_integer):
        raise _E(f"numeric_column '{key}': dtype must be convertible to float, got {dtype.name}")
    if default_value is not None:
        arr = np.asarray(default_value, dtype=dtype.as_numpy_dtype)
        if arr.shape not in ((), shape):
            raise _E(f"numeric_column '{key}': default_value must be a scalar or of shape {shape}, got shape "
                     f"{arr.shape}")
        default_value = tuple(np.broadcast_to(arr, shape).reshape(-1).tolist())
    if normalizer_fn is not None and not callable(normalizer_fn):
        raise TypeError(f"numeric_column '{key}': normalizer_fn must be callable, got {normalizer_fn!r}")
    return _NumericColumn(key, shape, default_value, dtype, normalizer_fn)


# ----------------------------------------------------------------------------------------
# categorical
class _CategoricalMixin:
    is_dense = False
    is_categorical = True

    @property
    def _num_buckets(self):
        return self.num_buckets

    def _get_sparse_tensors(self, builder, weight_collections=None, trainable=None):
        """The column's ``IdWeightPair``."""
        return IdWeightPair(builder.get(self, "_transform"), None)


def _check_feature_dtype(column, sp, want_integer, where):
    """The input ``sp`` holds strings or integers, as the column expects."""
    got = sp.dtype
    if got is not dtypes.string and not got.is_integer:
        raise _E(f"{where} '{column.key}': the feature must hold strings or integers, got {got.name}")
    if got.is_integer != want_integer:
        raise _E(f"{where} '{column.key}': the column's dtype is {'integer' if want_integer else 'string'} but "
                 f"the feature is {got.name}; column dtype and the feature's must be compatible")


class _IdentityCategoricalColumn(collections.namedtuple("_IdentityCategoricalColumn",
                                                        ["key", "num_buckets", "default_value"]),
                                 _CategoricalMixin):
    """Integer ids used as they are (see ``categorical_column_with_identity``)."""

    @property
    def name(self):
        return self.key

    def _transform(self, builder):
        sp = builder.sparse(self.key, self)
        if not sp.dtype.is_integer:
            raise _E(f"categorical_column_with_identity '{self.key}': the feature must be integer ids, got "
                     f"{sp.dtype.name} {sp.values.name!r}")
        values = math_ops.cast(sp.values, dtypes.int64)
        n = self.num_buckets
        in_range = math_ops.logical_and(math_ops.greater_equal(values, 0), math_ops.less(values, n))
        if self.default_value is None:
            # TF1 asserts the range; this check fails the step the same way (see the module docstring).
            checked = _runtime_check(in_range, f"categorical_column_with_identity '{self.key}': ids must be in "
                                               f"[0, {n}) (or -1 for missing in a dense feature)")
            with get_default_graph().control_dependencies([checked]):
                values = array_ops.identity(values)
        else:
            values = array_ops.where(in_range, values, array_ops.fill(array_ops.shape(values),
                                                                      np.int64(self.default_value)))
        return SparseTensor(sp.indices, values, sp.dense_shape)


def categorical_column_with_identity(key, num_buckets, default_value=None):
    """Integer feature ``key`` whose values are the ids ``0 .. num_buckets-1`` themselves.
    Ids out of range become ``default_value``, or fail the step when it is None."""
    where = "categorical_column_with_identity"
    _check_key(key, where)
    num_buckets = _check_int(num_buckets, f"{where} '{key}'", "num_buckets", 1)
    if default_value is not None and not (0 <= int(default_value) < num_buckets):
        raise _E(f"{where} '{key}': default_value must be in [0, {num_buckets}), got {default_value!r}")
    return _IdentityCategoricalColumn(key, num_buckets, None if default_value is None else int(default_value))


class _HashedCategoricalColumn(collections.namedtuple("_HashedCategoricalColumn",
                                                      ["key", "hash_bucket_size", "dtype"]),
                               _CategoricalMixin):
    """Values hashed to buckets (see ``categorical_column_with_hash_bucket``)."""

    @property
    def name(self):
        return self.key

    @property
    def num_buckets(self):
        return self.hash_bucket_size

    def _transform(self, builder):
        where = "categorical_column_with_hash_bucket"
        sp = builder.sparse(self.key, self)
        _check_feature_dtype(self, sp, self.dtype.is_integer, where)
        values = sp.values if sp.dtype is dtypes.string else string_ops.as_string(sp.values)
        ids = string_ops.string_to_hash_bucket_fast(values, self.hash_bucket_size, name="lookup")
        return SparseTensor(sp.indices, ids, sp.dense_shape)


def categorical_column_with_hash_bucket(key, hash_bucket_size, dtype=dtypes.string):
    """Feature ``key`` (strings, or integers hashed as their decimal strings) hashed into
    ``hash_bucket_size`` buckets: ``fingerprint64(value) % hash_bucket_size`` with
    tensorweave's stable hash (``tensorweave.ops.string_ops``; buckets differ from TF's)."""
    where = "categorical_column_with_hash_bucket"
    _check_key(key, where)
    if hash_bucket_size is None:
        raise _E(f"{where} '{key}': hash_bucket_size must be set")
    hash_bucket_size = _check_int(hash_bucket_size, f"{where} '{key}'", "hash_bucket_size", 1)
    dtype = dtypes.as_dtype(dtype)
    if dtype is not dtypes.string and not dtype.is_integer:
        raise _E(f"{where} '{key}': dtype must be string or integer, got {dtype.name}")
    return _HashedCategoricalColumn(key, hash_bucket_size, dtype)


class _VocabularyListCategoricalColumn(collections.namedtuple(
        "_VocabularyListCategoricalColumn", ["key", "vocabulary_list", "dtype", "default_value", "num_oov_buckets"]),
        _CategoricalMixin):
    """Values looked up in a vocabulary (see ``categorical_column_with_vocabulary_list``)."""

    @property
    def name(self):
        return self.key

    @property
    def num_buckets(self):
        return len(self.vocabulary_list) + self.num_oov_buckets

    def _transform(self, builder):
        sp = builder.sparse(self.key, self)
        _check_feature_dtype(self, sp, self.dtype.is_integer, "categorical column with vocabulary")
        values = sp.values
        if values.dtype is dtypes.string:
            vocab = np.empty(len(self.vocabulary_list), dtype=object)
            vocab[:] = [v.encode("utf-8") for v in self.vocabulary_list]
            vocab_t = array_ops.constant(vocab, dtype=dtypes.string, name=f"{self.key}_vocabulary")
        else:
            values = math_ops.cast(values, dtypes.int64)
            vocab_t = array_ops.constant(np.asarray(self.vocabulary_list, np.int64), dtype=dtypes.int64,
                                         name=f"{self.key}_vocabulary")
        ids = string_ops.vocabulary_lookup(values, vocab_t, num_oov_buckets=self.num_oov_buckets,
                                           default_value=self.default_value, name=f"{self.key}_lookup")
        return SparseTensor(sp.indices, ids, sp.dense_shape)


def _vocabulary_column(where, key, vocabulary, dtype, default_value, num_oov_buckets):
    _check_key(key, where)
    if vocabulary is None:
        raise _E(f"{where} '{key}': the vocabulary is empty")
    vocabulary = list(vocabulary)
    if not vocabulary:
        raise _E(f"{where} '{key}': the vocabulary is empty")
    if len(set(vocabulary)) != len(vocabulary):
        dup = sorted({v for v in vocabulary if vocabulary.count(v) > 1}, key=str)
        raise _E(f"{where} '{key}': duplicate keys in the vocabulary: {dup}")
    num_oov_buckets = 0 if num_oov_buckets is None else _check_int(num_oov_buckets, f"{where} '{key}'",
                                                                   "num_oov_buckets", 0)
    default_value = -1 if default_value is None else int(default_value)
    if num_oov_buckets and default_value != -1:
        raise _E(f"{where} '{key}': can't specify both num_oov_buckets and default_value")
    inferred = dtypes.string if isinstance(vocabulary[0], str | bytes) else dtypes.int64
    dtype = inferred if dtype is None else dtypes.as_dtype(dtype)
    if dtype is not dtypes.string and not dtype.is_integer:
        raise _E(f"{where} '{key}': dtype must be a string or integer type, got {dtype.name}")
    if (dtype is dtypes.string) != (inferred is dtypes.string):
        raise _E(f"{where} '{key}': the vocabulary holds {inferred.name} values but dtype is {dtype.name}")
    if dtype is dtypes.string:
        vocabulary = [v.decode("utf-8") if isinstance(v, bytes) else v for v in vocabulary]
        if not all(isinstance(v, str) for v in vocabulary):
            raise _E(f"{where} '{key}': a string vocabulary must hold only strings")
    else:
        try:
            vocabulary = [int(v) for v in vocabulary]
        except (TypeError, ValueError):
            raise _E(f"{where} '{key}': an integer vocabulary must hold only integers") from None
    if default_value != -1 and not 0 <= default_value < len(vocabulary):
        raise _E(f"{where} '{key}': default_value must be -1 (ignore) or an id in [0, {len(vocabulary)}), "
                 f"got {default_value}")
    return _VocabularyListCategoricalColumn(key, tuple(vocabulary), dtype, default_value, num_oov_buckets)


def categorical_column_with_vocabulary_list(key, vocabulary_list, dtype=None, default_value=-1, num_oov_buckets=0):
    """Feature ``key`` (strings or integers) mapped to its position in ``vocabulary_list``; a
    value not in it goes to one of ``num_oov_buckets`` buckets after the vocabulary (by its
    hash), or gets ``default_value`` (-1: no id; the example contributes nothing)."""
    return _vocabulary_column("categorical_column_with_vocabulary_list", key, vocabulary_list, dtype,
                              default_value, num_oov_buckets)


def categorical_column_with_vocabulary_file(key, vocabulary_file, vocabulary_size=None, num_oov_buckets=0,
                                            default_value=None, dtype=dtypes.string):
    """Like ``categorical_column_with_vocabulary_list``, with the vocabulary read from a text
    file, one entry per line (the first ``vocabulary_size`` lines), when the column is made."""
    where = "categorical_column_with_vocabulary_file"
    path = os.fspath(vocabulary_file) if vocabulary_file is not None else None
    if not path:
        raise _E(f"{where} '{key}': vocabulary_file is required")
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\r\n") for line in f]
    except OSError as e:
        raise errors.NotFoundError(f"{where} '{key}': cannot read {path!r}: {e.strerror or e}") from None
    if vocabulary_size is not None:
        if vocabulary_size <= 0 or vocabulary_size > len(lines):
            raise _E(f"{where} '{key}': vocabulary_size must be in [1, {len(lines)}] (the file has {len(lines)} "
                     f"lines), got {vocabulary_size}")
        lines = lines[:vocabulary_size]
    dtype = dtypes.as_dtype(dtype)
    if dtype is dtypes.string:
        vocab = lines
    else:
        try:
            vocab = [int(v) for v in lines]
        except ValueError as e:
            raise _E(f"{where} '{key}': dtype is {dtype.name} but {path!r} holds a line that is not an integer "
                     f"({e})") from None
    return _vocabulary_column(where, key, vocab, dtype, default_value, num_oov_buckets)


class _WeightedCategoricalColumn(collections.namedtuple("_WeightedCategoricalColumn",
                                                        ["categorical_column", "weight_feature_key", "dtype"]),
                                 _CategoricalMixin):
    """A categorical column with a weight per id (see ``weighted_categorical_column``)."""

    @property
    def name(self):
        return f"{self.categorical_column.name}_weighted_by_{self.weight_feature_key}"

    @property
    def key(self):
        return self.categorical_column.name

    @property
    def num_buckets(self):
        return self.categorical_column.num_buckets

    def _transform(self, builder):
        where = f"weighted_categorical_column '{self.name}'"
        ids = self.categorical_column._get_sparse_tensors(builder).id_tensor
        w = builder.raw(self.weight_feature_key, self)
        if w.dtype is not self.dtype:
            raise _E(f"{where}: bad dtype of the weights {self.weight_feature_key!r}: expected {self.dtype.name}, got "
                     f"{w.dtype.name}")
        if not isinstance(w, SparseTensor):
            w = _to_sparse(w, self, ignore=0)   # dense weights: zeros are missing, as TF1
        values = w.values if w.dtype is dtypes.float32 else math_ops.cast(w.values, dtypes.float32)
        with get_default_graph().name_scope("check_weights"):
            message = (f"{where}: the weights must have the same indices as the ids of "
                       f"'{self.categorical_column.name}'")
            same_count = _runtime_check(math_ops.equal(array_ops.size(ids.values), array_ops.size(values)), message)
            with get_default_graph().control_dependencies([same_count]):
                same = _runtime_check(math_ops.equal(ids.indices, w.indices), message)
            with get_default_graph().control_dependencies([same]):
                values = array_ops.identity(values)
        return ids, SparseTensor(ids.indices, values, ids.dense_shape)

    def _get_sparse_tensors(self, builder, weight_collections=None, trainable=None):
        ids, weights = builder.get(self, "_transform")
        return IdWeightPair(ids, weights)


def weighted_categorical_column(categorical_column, weight_feature_key, dtype=dtypes.float32):
    """``categorical_column`` with a weight for each of its ids, from the feature
    ``weight_feature_key`` (a SparseTensor with the ids' indices, or a dense tensor of their
    shape: zeros there are missing). ``linear_model`` multiplies each id's weights by it;
    ``embedding_column`` and ``indicator_column`` weigh by it."""
    where = "weighted_categorical_column"
    if not getattr(categorical_column, "is_categorical", False):
        raise _E(f"{where}: categorical_column must be a categorical column, got {categorical_column!r}")
    _check_key(weight_feature_key, where)
    dtype = dtypes.as_dtype(dtype) if dtype is not None else None
    if dtype is None or not (dtype.is_integer or dtype.is_floating):
        raise _E(f"{where}: dtype {dtype} is not convertible to float")
    return _WeightedCategoricalColumn(categorical_column, weight_feature_key, dtype)


def _leaf_keys(cross):
    out = []
    for k in cross.keys:
        out.extend(_leaf_keys(k) if isinstance(k, _CrossedColumn) else [k])
    return out


class _CrossedColumn(collections.namedtuple("_CrossedColumn", ["keys", "hash_bucket_size", "hash_key"]),
                     _CategoricalMixin):
    """Hashed crosses of categorical features (see ``crossed_column``)."""

    @property
    def name(self):
        return "_X_".join(sorted(k if isinstance(k, str) else k.name for k in _leaf_keys(self)))

    @property
    def num_buckets(self):
        return self.hash_bucket_size

    def _transform(self, builder):
        inputs = []
        for key in _leaf_keys(self):
            if isinstance(key, str):
                x = builder.raw(key, self)
                if not isinstance(x, SparseTensor):
                    if x.shape.ndims is None:
                        raise _E(f"crossed_column '{self.name}': feature '{x.name}' has an unknown rank")
                    x = _rank2(x, self)
                if x.dtype is not dtypes.string and not x.dtype.is_integer:
                    raise _E(f"crossed_column '{self.name}': feature {key!r} must hold strings or integers, got "
                             f"{x.dtype.name}")
                inputs.append(x)
            else:
                pair = key._get_sparse_tensors(builder)
                if pair.weight_tensor is not None:
                    raise _E(f"crossed_column '{self.name}' does not support weighted columns, but '{key.name}' has "
                             "weights")
                inputs.append(pair.id_tensor)
        return string_ops.sparse_cross_hashed(inputs, num_buckets=self.hash_bucket_size, hash_key=self.hash_key)


def crossed_column(keys, hash_bucket_size, hash_key=None):
    """The crosses of ``keys`` (feature names, whose strings or integers are used as they
    are, or categorical columns, whose ids are used) hashed into ``hash_bucket_size``
    buckets: per example, every combination of one value from each key, with tensorweave's
    stable cross hash (``tensorweave.ops.string_ops``; buckets differ from TF's). A dense
    string or integer feature is crossed with all its values."""
    where = "crossed_column"
    if not hash_bucket_size or isinstance(hash_bucket_size, bool):
        raise _E(f"{where}: hash_bucket_size must be > 1, got {hash_bucket_size!r}")
    hash_bucket_size = _check_int(hash_bucket_size, where, "hash_bucket_size", 1)
    if isinstance(keys, str) or not keys or len(keys) < 2:
        raise _E(f"{where}: keys must be a list with length > 1, got {keys!r}")
    for key in keys:
        if isinstance(key, _HashedCategoricalColumn):
            raise _E(f"{where}: categorical_column_with_hash_bucket is not supported in a cross; use the feature "
                     f"name {key.key!r} as a string instead")
        if not isinstance(key, str) and not getattr(key, "is_categorical", False):
            raise _E(f"{where}: each key must be a feature name or a categorical column, got {key!r}")
    if hash_key is not None:
        hash_key = _check_int(hash_key, where, "hash_key", 0)
    return _CrossedColumn(tuple(keys), hash_bucket_size, hash_key)


# ----------------------------------------------------------------------------------------
# bucketized and indicator
class _BucketizedColumn(collections.namedtuple("_BucketizedColumn", ["source_column", "boundaries"]),
                        _CategoricalMixin):
    """Which of ``len(boundaries) + 1`` ranges each value of a numeric column falls in;
    usable as a dense column (one-hot) and as a categorical one."""

    is_dense = True

    @property
    def name(self):
        return f"{self.source_column.name}_bucketized"

    @property
    def num_buckets(self):
        return self.source_column.dimension * (len(self.boundaries) + 1)

    @property
    def dimension(self):
        return self.num_buckets

    @property
    def _variable_shape(self):
        return TensorShape([self.dimension])

    def _ids(self, builder):
        x = self.source_column._dense_tensor(builder)                              # [batch, d]
        bounds = array_ops.constant(list(self.boundaries), dtype=dtypes.float32)
        # bucket i holds boundaries[i-1] <= x < boundaries[i]: the number of boundaries <= x
        bucket = math_ops.reduce_sum(math_ops.cast(
            math_ops.greater_equal(array_ops.expand_dims(x, -1), bounds), dtypes.int64), axis=-1)
        d = self.source_column.dimension
        # each of the d source values gets its own range of ids, as TF1 does
        offsets = array_ops.constant(np.arange(d) * (len(self.boundaries) + 1), dtypes.int64)
        return bucket + offsets

    def _transform(self, builder):
        ids = builder.get(self, "_ids")                                             # [batch, d]
        indices = array_ops.where(math_ops.greater_equal(ids, 0))                   # every position, row-major
        return SparseTensor(indices, array_ops.reshape(ids, [-1]),
                            math_ops.cast(array_ops.shape(ids), dtypes.int64))

    def _dense(self, builder):
        return math_ops.reduce_sum(array_ops.one_hot(builder.get(self, "_ids"), self.num_buckets,
                                                     dtype=dtypes.float32), axis=1)

    def _dense_tensor(self, builder, weight_collections=None, trainable=True):
        return builder.get(self, "_dense")

    _get_dense_tensor = _dense_tensor


def bucketized_column(source_column, boundaries):
    """``source_column`` (a ``numeric_column``) split at the sorted ``boundaries``: value v
    goes to bucket i where ``boundaries[i-1] <= v < boundaries[i]``."""
    if not isinstance(source_column, _NumericColumn):
        raise _E(f"bucketized_column: source_column must be a column made by numeric_column(), got {source_column!r}")
    if len(source_column.shape) > 1:
        raise _E(f"bucketized_column: source_column must be one-dimensional, got shape {source_column.shape}")
    try:
        b = tuple(float(x) for x in boundaries)
    except (TypeError, ValueError):
        raise _E(f"bucketized_column: boundaries must be a sorted list of numbers, got {boundaries!r}") from None
    if not b or any(b[i] >= b[i + 1] for i in range(len(b) - 1)):
        raise _E(f"bucketized_column: boundaries must be a non-empty, strictly increasing list, got {list(b)}")
    return _BucketizedColumn(source_column, b)


def _multi_hot(pair, num_buckets):
    """``[batch, num_buckets]`` float32: per example, the count (or the summed weights) of
    each id; ids outside ``[0, num_buckets)`` count nowhere."""
    ids = pair.id_tensor
    values = ids.values if ids.values.dtype is dtypes.int64 else math_ops.cast(ids.values, dtypes.int64)
    rows = ids.indices[:, 0]
    batch = ids.dense_shape[0]
    ok = math_ops.logical_and(math_ops.greater_equal(values, 0), math_ops.less(values, num_buckets))
    cell = array_ops.where(ok, rows * num_buckets + values, array_ops.fill(array_ops.shape(values), np.int64(-1)))
    weights = array_ops.ones_like(values, dtype=dtypes.float32) if pair.weight_tensor is None \
        else pair.weight_tensor.values
    flat = math_ops.unsorted_segment_sum(weights, cell, batch * num_buckets)
    out = array_ops.reshape(flat, [-1, num_buckets])
    return out


class _IndicatorColumn(collections.namedtuple("_IndicatorColumn", ["categorical_column"]), _DenseMixin):
    """A categorical column as a multi-hot dense vector (see ``indicator_column``)."""

    @property
    def name(self):
        return f"{self.categorical_column.name}_indicator"

    @property
    def dimension(self):
        return self.categorical_column.num_buckets

    def _dense(self, builder):
        return _multi_hot(self.categorical_column._get_sparse_tensors(builder), self.categorical_column.num_buckets)


def indicator_column(categorical_column):
    """``categorical_column`` as a dense ``[batch, num_buckets]`` vector: 1 at each id an
    example has (the count, if an id repeats; the summed weights of a weighted column), 0
    elsewhere."""
    if not getattr(categorical_column, "is_categorical", False):
        raise _E(f"indicator_column: expected a categorical column (categorical_column_with_*, bucketized_column, "
                 f"crossed_column, weighted_categorical_column), got {categorical_column!r}")
    return _IndicatorColumn(categorical_column)


# ----------------------------------------------------------------------------------------
# embeddings
def _latest_checkpoint(path, where):
    """``path`` itself, or the newest checkpoint of the directory ``path`` (its ``checkpoint``
    state file, as ``tw.train.Saver`` writes it)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return path
    state = os.path.join(path, "checkpoint")
    try:
        with open(state, encoding="utf-8") as f:
            model = json.load(f)["model_checkpoint_path"]
    except FileNotFoundError:
        raise errors.NotFoundError(f"{where}: no checkpoint in directory {path!r} (no 'checkpoint' state file)") \
            from None
    except (ValueError, KeyError, TypeError) as e:
        raise errors.DataLossError(f"{where}: the checkpoint state file {state} is corrupt ({e})") from None
    return model if os.path.isabs(model) else os.path.join(path, model)


def _checkpoint_initializer(ckpt, tensor_name, where):
    """An initializer reading ``tensor_name`` (the whole logical tensor, or this shard's slice
    of it) from the checkpoint ``ckpt`` (TF1's ``init_from_checkpoint``)."""
    def initializer(shape, dtype=dtypes.float32, partition_info=None):
        prefix = _latest_checkpoint(ckpt, where)
        spec = ""
        if partition_info is not None:
            full = partition_info.full_shape
            spec = " ".join(str(d) for d in full) + " " + ":".join(
                f"{o},{s}" for o, s in zip(partition_info.var_offset, shape))
        (value,) = checkpoint_ops.restore_v2(prefix, [tensor_name], [spec], [dtypes.as_dtype(dtype)],
                                             name="restore_from_checkpoint")
        return array_ops.reshape(value, list(shape))
    return initializer


def _check_embedding_args(where, categorical_column, dimension, combiner, initializer, ckpt_to_load_from,
                          tensor_name_in_ckpt, max_norm):
    if not getattr(categorical_column, "is_categorical", False):
        raise _E(f"{where}: categorical_column must be a categorical column (categorical_column_with_*, "
                 f"crossed_column, ...), got {categorical_column!r}")
    if dimension is None or isinstance(dimension, bool) or not isinstance(dimension, int | np.integer) \
            or dimension < 1:
        raise _E(f"{where}: invalid dimension {dimension!r}; it must be an int >= 1")
    if combiner not in _COMBINERS:
        raise _E(f"{where}: combiner must be one of {_COMBINERS}, got {combiner!r}")
    if (ckpt_to_load_from is None) != (tensor_name_in_ckpt is None):
        raise _E(f"{where}: must specify both ckpt_to_load_from and tensor_name_in_ckpt or none of them")
    if initializer is not None and not callable(initializer):
        raise _E(f"{where}: initializer must be callable if specified; embedding of column "
                 f"'{categorical_column.name}'")
    if max_norm is not None and not float(max_norm) > 0:
        raise _E(f"{where}: max_norm must be positive, got {max_norm!r}")
    if initializer is None:
        initializer = init_ops.truncated_normal_initializer(mean=0.0, stddev=1.0 / math.sqrt(dimension))
    return int(dimension), initializer


def _embedding_variable(column, weight_collections, trainable, where):
    shape = [column.categorical_column.num_buckets, column.dimension]
    init = column.initializer
    if column.ckpt_to_load_from is not None:
        init = _checkpoint_initializer(column.ckpt_to_load_from, column.tensor_name_in_ckpt, where)
    return vs.get_variable("embedding_weights", shape, dtypes.float32, init,
                           trainable=bool(column.trainable and trainable), collections=_collections(weight_collections))


class _EmbeddingColumn(collections.namedtuple("_EmbeddingColumn", [
        "categorical_column", "dimension", "combiner", "initializer", "ckpt_to_load_from", "tensor_name_in_ckpt",
        "max_norm", "trainable"]), _DenseMixin):
    """A categorical column's ids looked up in a trained table (see ``embedding_column``)."""

    @property
    def name(self):
        return f"{self.categorical_column.name}_embedding"

    def _dense_tensor(self, builder, weight_collections=None, trainable=True):
        key = (self, "_dense")
        if key not in builder._cache:
            weights = _embedding_variable(self, weight_collections, trainable, f"embedding_column '{self.name}'")
            builder._cache[(self, "_vars")] = _var_list(weights)
            pair = self.categorical_column._get_sparse_tensors(builder)
            builder._cache[key] = _safe_embedding_lookup_sparse(
                weights, pair.id_tensor, pair.weight_tensor, self.combiner, self.max_norm, name=f"{self.name}_weights")
        return builder._cache[key]

    _get_dense_tensor = _dense_tensor


def embedding_column(categorical_column, dimension, combiner="mean", initializer=None, ckpt_to_load_from=None,
                     tensor_name_in_ckpt=None, max_norm=None, trainable=True):
    """``categorical_column``'s ids as a dense ``[batch, dimension]`` input: the rows of a
    trained table ``embedding_weights`` (``[num_buckets, dimension]``, initialised by
    ``initializer``, by default a truncated normal of stddev ``1/sqrt(dimension)``) at each
    example's ids, combined by ``combiner`` (``"mean"``, ``"sqrtn"`` or ``"sum"``, weighted
    for a weighted column); an example without ids gets zeros. ``max_norm`` clips each
    looked-up row to that L2 norm. ``ckpt_to_load_from`` (a checkpoint prefix or a directory
    holding checkpoints) with ``tensor_name_in_ckpt`` initialises the table from that
    checkpoint's tensor instead. The table lives in the enclosing variable scope, and is
    partitioned by its partitioner."""
    dimension, initializer = _check_embedding_args("embedding_column", categorical_column, dimension, combiner,
                                                   initializer, ckpt_to_load_from, tensor_name_in_ckpt, max_norm)
    return _EmbeddingColumn(categorical_column, dimension, combiner, initializer, ckpt_to_load_from,
                            tensor_name_in_ckpt, max_norm, bool(trainable))


class _SharedEmbeddingColumn(collections.namedtuple("_SharedEmbeddingColumn", [
        "categorical_column", "dimension", "combiner", "initializer", "shared_embedding_collection_name",
        "ckpt_to_load_from", "tensor_name_in_ckpt", "max_norm", "trainable"]), _DenseMixin):
    """One of several columns looked up in one table (see ``shared_embedding_columns``)."""

    @property
    def name(self):
        return f"{self.categorical_column.name}_shared_embedding"

    def _dense_tensor(self, builder, weight_collections=None, trainable=True):
        key = (self, "_dense")
        if key not in builder._cache:
            where = f"shared_embedding_columns '{self.name}'"
            g = get_default_graph()
            shared = g.get_collection(self.shared_embedding_collection_name)
            shape = TensorShape([self.categorical_column.num_buckets, self.dimension])
            if shared:
                if len(shared) > 1:
                    raise _E(f"{where}: collection {self.shared_embedding_collection_name!r} holds {len(shared)} "
                             "tables; it must hold one")
                weights = shared[0]
                if not weights.get_shape().is_compatible_with(shape):
                    raise _E(f"{where}: the shared table has shape {weights.get_shape()}, expected {shape}")
            else:
                weights = _embedding_variable(self, weight_collections, trainable, where)
                g.add_to_collection(self.shared_embedding_collection_name, weights)
            builder._cache[(self, "_vars")] = _var_list(weights)
            pair = self.categorical_column._get_sparse_tensors(builder)
            builder._cache[key] = _safe_embedding_lookup_sparse(
                weights, pair.id_tensor, pair.weight_tensor, self.combiner, self.max_norm, name=f"{self.name}_weights")
        return builder._cache[key]

    _get_dense_tensor = _dense_tensor


def shared_embedding_columns(categorical_columns, dimension, combiner="mean", initializer=None,
                             shared_embedding_collection_name=None, ckpt_to_load_from=None,
                             tensor_name_in_ckpt=None, max_norm=None, trainable=True):
    """One ``embedding_column``-like column per categorical column, all looked up in one
    table (the columns must have the same ``num_buckets``). The table is created where the
    first of them is built and kept in the graph collection
    ``shared_embedding_collection_name`` (default: the sorted column names joined by ``_``,
    then ``_shared_embedding``), where the others find it."""
    where = "shared_embedding_columns"
    if isinstance(categorical_columns, tuple) and hasattr(categorical_columns, "_fields"):
        categorical_columns = [categorical_columns]
    cols = list(categorical_columns or [])
    if not cols:
        raise _E(f"{where}: categorical_columns must not be empty")
    dimension, initializer = _check_embedding_args(where, cols[0], dimension, combiner, initializer,
                                                   ckpt_to_load_from, tensor_name_in_ckpt, max_norm)
    for c in cols:
        if not getattr(c, "is_categorical", False):
            raise _E(f"{where}: all categorical_columns must be categorical columns, got {c!r}")
        if c.num_buckets != cols[0].num_buckets:
            raise _E(f"{where}: all categorical_columns must have the same number of buckets; column '{c.name}' has "
                     f"{c.num_buckets} but '{cols[0].name}' has {cols[0].num_buckets}")
    if not shared_embedding_collection_name:
        shared_embedding_collection_name = "_".join(sorted(c.name for c in cols)) + "_shared_embedding"
    return [_SharedEmbeddingColumn(c, dimension, combiner, initializer, shared_embedding_collection_name,
                                   ckpt_to_load_from, tensor_name_in_ckpt, max_norm, bool(trainable)) for c in cols]


# ----------------------------------------------------------------------------------------
# layers
def _check_columns(feature_columns, fn):
    if feature_columns is None:
        raise _E(f"{fn}: feature_columns must not be None")
    if isinstance(feature_columns, dict):
        raise _E(f"{fn}: expected feature_columns to be iterable, found a dict")
    if isinstance(feature_columns, tuple) and hasattr(feature_columns, "_fields"):
        feature_columns = [feature_columns]   # one column given alone
    cols = list(feature_columns)
    if not cols:
        raise _E(f"{fn}: feature_columns must not be empty")
    for c in cols:
        if not hasattr(c, "is_dense"):
            raise _E(f"{fn}: items of feature_columns must be feature columns (tw.feature_column.*), got {c!r}")
    names = [c.name for c in cols]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise _E(f"{fn}: duplicate feature column name found for columns: {dups}")
    return sorted(cols, key=lambda c: c.name)


def _check_batch_sizes(tensors, cols, fn):
    """The columns' static batch sizes agree (TF1's ``_verify_static_batch_size_equality``)."""
    first = None
    for t, c in zip(tensors, cols):
        b = t.shape[0] if t.shape.ndims else None
        if b is None:
            continue
        if first is None:
            first = (b, c)
        elif b != first[0]:
            raise _E(f"{fn}: batch size (first dimension) of each feature must be the same; column "
                     f"'{first[1].name}' has {first[0]} and column '{c.name}' has {b}")


def input_layer(features, feature_columns, weight_collections=None, trainable=True, cols_to_vars=None):
    """The dense ``feature_columns`` of ``features`` (a dict of tensors and SparseTensors) as
    one float32 ``[batch, n]`` tensor: each column flattened to ``[batch, dimension]``,
    concatenated in order of column name. Embedding tables are created in
    ``input_layer/<column>/`` (and listed in ``cols_to_vars`` when given)."""
    cols = _check_columns(feature_columns, "input_layer")
    for c in cols:
        if not c.is_dense:
            raise _E(f"input_layer: items of feature_columns must be dense columns; wrap categorical column "
                     f"'{c.name}' in indicator_column() or embedding_column()")
    builder = _Builder(features)
    outputs = []
    with vs.variable_scope(None, default_name="input_layer"):
        for c in cols:
            with vs.variable_scope(None, default_name=c.name):
                t = c._dense_tensor(builder, weight_collections, trainable)
                outputs.append(array_ops.reshape(t, [-1, c.dimension]))
                if cols_to_vars is not None:
                    cols_to_vars[c] = list(builder._cache.get((c, "_vars"), []))
        _check_batch_sizes(outputs, cols, "input_layer")
        return outputs[0] if len(outputs) == 1 else array_ops.concat(outputs, 1)


def linear_model(features, feature_columns, units=1, sparse_combiner="sum", weight_collections=None,
                 trainable=True, cols_to_vars=None):
    """A linear function of ``features``: ``sum_c column_c @ weights_c + bias`` with a
    ``[dimension or num_buckets, units]`` weight matrix per column and a ``[units]`` bias,
    all zero-initialised; returns ``[batch, units]``. A categorical column's ids select rows
    of its weights, combined by ``sparse_combiner`` (``"sum"``, ``"mean"``, ``"sqrtn"``;
    weighted for a weighted column) — an indicator column times the weights, computed
    sparsely."""
    if sparse_combiner not in _COMBINERS:
        raise _E(f"linear_model: sparse_combiner must be 'sum', 'mean' or 'sqrtn', got {sparse_combiner!r}")
    if not isinstance(units, int) or isinstance(units, bool) or units < 1:
        raise _E(f"linear_model: units must be a positive int, got {units!r}")
    cols = _check_columns(feature_columns, "linear_model")
    builder = _Builder(features)
    collections_ = _collections(weight_collections)
    terms = []
    with vs.variable_scope(None, default_name="linear_model"):
        for c in cols:
            with vs.variable_scope(c.name):
                if c.is_categorical:
                    pair = c._get_sparse_tensors(builder)
                    w = vs.get_variable("weights", [c.num_buckets, units], dtypes.float32,
                                        init_ops.zeros_initializer(), trainable=trainable, collections=collections_)
                    term = _safe_embedding_lookup_sparse(w, pair.id_tensor, pair.weight_tensor, sparse_combiner,
                                                         name="weighted_sum")
                else:
                    x = array_ops.reshape(c._dense_tensor(builder, weight_collections, trainable), [-1, c.dimension])
                    w = vs.get_variable("weights", [c.dimension, units], dtypes.float32,
                                        init_ops.zeros_initializer(), trainable=trainable, collections=collections_)
                    term = math_ops.matmul(x, w, name="weighted_sum")
                if cols_to_vars is not None:
                    cols_to_vars[c] = _var_list(w)
                terms.append(term)
        _check_batch_sizes(terms, cols, "linear_model")
        bias = vs.get_variable("bias_weights", [units], dtypes.float32, init_ops.zeros_initializer(),
                               trainable=trainable, collections=collections_)
        if cols_to_vars is not None:
            cols_to_vars["bias"] = _var_list(bias)
        total = terms[0] if len(terms) == 1 else math_ops.add_n(terms, name="weighted_sum_no_bias")
        return nn_ops.bias_add(total, bias, name="weighted_sum")

