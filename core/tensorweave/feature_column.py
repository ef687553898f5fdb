"""``tw.feature_column``: TF1's feature columns, with dense tensors throughout.

A feature column says how to turn one entry of a features dict (``{"age": tensor, ...}``,
as an ``input_fn`` returns) into model input. Columns are immutable, hashable values
(named tuples, as in TF1):

- dense columns, for ``input_layer``: ``numeric_column`` (a float32 ``[batch, *shape]``
  value, optionally through ``normalizer_fn``), ``indicator_column`` (a categorical column
  as a multi-hot ``[batch, num_buckets]`` vector), and ``bucketized_column`` (one-hot of the
  bucket each value falls in);
- categorical columns, for ``linear_model`` or ``indicator_column``:
  ``categorical_column_with_identity`` (integer ids), ``categorical_column_with_vocabulary_list``
  / ``_file`` (strings or integers looked up in a vocabulary), and ``bucketized_column``.

``input_layer(features, columns)`` concatenates the dense columns, sorted by name, into a
``[batch, n]`` float32 tensor; ``linear_model(features, columns, units)`` is a weighted sum
with one weight matrix per column (``linear_model/<column>/weights``, zero-initialised) and
``linear_model/bias_weights``.

Departure from TF1: TF1 turns categorical inputs into SparseTensors; tensorweave has no
sparse tensors yet (issue 11), so categorical ids are dense ``[batch, k]`` int64 tensors in
which ``-1`` marks a missing value (TF1 drops ``-1`` and ``""`` inputs the same way), and
``linear_model`` multiplies a multi-hot matrix by the weights instead of a sparse lookup (the
same numbers). What needs sparse tensors or a string hash is not provided and says so:
``embedding_column``, ``shared_embedding_columns``, ``categorical_column_with_hash_bucket``,
``crossed_column``, ``weighted_categorical_column`` and vocabulary columns with
``num_oov_buckets > 0``.

Identity ids outside ``[0, num_buckets)`` (other than -1) without a ``default_value`` fail
the step with an ``InvalidArgumentError`` naming the column, as TF1's assert does.
"""

from __future__ import annotations

import collections
import os

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, convert_to_tensor
from tensorweave.ops import array_ops, init_ops, math_ops, nn_ops
from tensorweave.ops import variable_scope as vs

__all__ = [
    "numeric_column", "bucketized_column", "categorical_column_with_identity",
    "categorical_column_with_vocabulary_list", "categorical_column_with_vocabulary_file", "indicator_column",
    "input_layer", "linear_model", "embedding_column", "shared_embedding_columns",
    "categorical_column_with_hash_bucket", "crossed_column", "weighted_categorical_column",
]

_E = errors.InvalidArgumentError


def _needs_sparse(what, instead):
    raise errors.UnimplementedError(
        f"tw.feature_column.{what} is not provided: it needs sparse tensors and embedding lookups, which "
        f"tensorweave does not have yet (the sparse-tensor issue, 11); {instead}")


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
        if key not in self._features:
            raise _E(f"feature column '{column.name}': feature {key!r} is not in the features dict "
                     f"(it has {sorted(self._features)})")
        value = self._features[key]
        try:
            return convert_to_tensor(value)
        except (TypeError, ValueError) as e:
            raise _E(f"feature column '{column.name}': feature {key!r} must be a tensor, got {value!r} ({e})") from None

    def get(self, column, what):
        key = (column, what)
        if key not in self._cache:
            self._cache[key] = getattr(column, what)(self)
        return self._cache[key]


def _rank2(t):
    """A rank-1 ``[batch]`` feature as ``[batch, 1]`` (TF1 expands rank-1 features the same way)."""
    if t.shape.ndims == 1:
        return array_ops.expand_dims(t, -1)
    if t.shape.ndims == 0:
        raise _E(f"feature '{t.name}' must have a batch dimension, got a scalar")
    return t


# ----------------------------------------------------------------------------------------
# numeric
class _NumericColumn(collections.namedtuple("_NumericColumn",
                                            ["key", "shape", "default_value", "dtype", "normalizer_fn"])):
    """A real-valued feature (see ``numeric_column``)."""

    is_dense = True
    is_categorical = False

    @property
    def name(self):
        return self.key

    @property
    def dimension(self):
        return int(np.prod(self.shape))

    def _dense(self, builder):
        x = builder.raw(self.key, self)
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

    def _dense_tensor(self, builder):
        return builder.get(self, "_dense")


def numeric_column(key, shape=(1,), default_value=None, dtype=dtypes.float32, normalizer_fn=None):
    """A real-valued feature ``key`` of ``shape`` per example (the model sees it as float32)."""
    if not isinstance(key, str) or not key:
        raise _E(f"numeric_column: key must be a non-empty string, got {key!r}")
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
def _one_hot_sum(ids, num_buckets):
    """[batch, num_buckets] float32 counts of each id in a [batch, k] id tensor (-1: none)."""
    return math_ops.reduce_sum(array_ops.one_hot(ids, num_buckets, dtype=dtypes.float32), axis=1)


def _valid_count(ids):
    return math_ops.reduce_sum(math_ops.cast(math_ops.greater_equal(ids, 0), dtypes.float32), axis=1,
                               keepdims=True)


class _CategoricalMixin:
    is_dense = False
    is_categorical = True

    def _ids_tensor(self, builder):
        return builder.get(self, "_ids")


class _IdentityCategoricalColumn(collections.namedtuple("_IdentityCategoricalColumn",
                                                        ["key", "num_buckets", "default_value"]),
                                 _CategoricalMixin):
    """Integer ids used as they are (see ``categorical_column_with_identity``)."""

    @property
    def name(self):
        return self.key

    def _ids(self, builder):
        x = builder.raw(self.key, self)
        if not x.dtype.is_integer:
            raise _E(f"categorical_column_with_identity '{self.key}': the feature must be integer ids, got "
                     f"{x.dtype.name} '{x.name}'")
        x = math_ops.cast(_rank2(x), dtypes.int64)
        missing = math_ops.equal(x, -1)
        in_range = math_ops.logical_and(math_ops.greater_equal(x, 0), math_ops.less(x, self.num_buckets))
        ok = math_ops.cast(math_ops.logical_or(missing, in_range), dtypes.int64)
        if self.default_value is None:
            # TF1 asserts the range; this check fails the step the same way (see the module docstring).
            flag = math_ops.cast(math_ops.reduce_all(math_ops.logical_or(missing, in_range)), dtypes.float32)
            checked = nn_ops.check_numerics(
                math_ops.log(flag), f"categorical_column_with_identity '{self.key}': ids must be in "
                                    f"[0, {self.num_buckets}) (or -1 for missing)")
            with x.graph.control_dependencies([checked]):
                return array_ops.identity(x)
        return x * ok + (1 - ok) * int(self.default_value)


def categorical_column_with_identity(key, num_buckets, default_value=None):
    """Integer feature ``key`` whose values are the ids ``0 .. num_buckets-1`` themselves.
    Ids out of range become ``default_value``, or fail the step when it is None."""
    if not isinstance(key, str) or not key:
        raise _E(f"categorical_column_with_identity: key must be a non-empty string, got {key!r}")
    if not isinstance(num_buckets, int) or isinstance(num_buckets, bool) or num_buckets < 1:
        raise _E(f"categorical_column_with_identity '{key}': num_buckets must be an int >= 1, got {num_buckets!r}")
    if default_value is not None and not (0 <= int(default_value) < num_buckets):
        raise _E(f"categorical_column_with_identity '{key}': default_value must be in [0, {num_buckets}), got "
                 f"{default_value!r}")
    return _IdentityCategoricalColumn(key, num_buckets, default_value)


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

    def _ids(self, builder):
        x = builder.raw(self.key, self)
        if (x.dtype is dtypes.string) != (self.dtype is dtypes.string) or not (
                x.dtype is dtypes.string or x.dtype.is_integer):
            raise _E(f"categorical column '{self.key}': the vocabulary holds {self.dtype.name} values but the "
                     f"feature '{x.name}' is {x.dtype.name}")
        x = _rank2(x)
        if x.dtype is not dtypes.string:
            x = math_ops.cast(x, dtypes.int64)
        vocab = array_ops.constant(list(self.vocabulary_list), dtype=x.dtype)
        eq = math_ops.equal(array_ops.expand_dims(x, -1), vocab)                  # [batch, k, V]
        found = math_ops.cast(math_ops.reduce_any(eq, axis=-1), dtypes.int64)
        position = math_ops.reduce_sum(
            math_ops.cast(eq, dtypes.int64) * array_ops.constant(np.arange(len(self.vocabulary_list)), dtypes.int64),
            axis=-1)
        return position * found + (1 - found) * int(self.default_value)


def _vocabulary_column(where, key, vocabulary, dtype, default_value, num_oov_buckets):
    if not isinstance(key, str) or not key:
        raise _E(f"{where}: key must be a non-empty string, got {key!r}")
    vocabulary = list(vocabulary)
    if not vocabulary:
        raise _E(f"{where} '{key}': the vocabulary is empty")
    if len(set(vocabulary)) != len(vocabulary):
        dup = sorted({v for v in vocabulary if vocabulary.count(v) > 1}, key=str)
        raise _E(f"{where} '{key}': duplicate keys in the vocabulary: {dup}")
    if num_oov_buckets:
        _needs_sparse(f"{where}(num_oov_buckets={num_oov_buckets})",
                      "out-of-vocabulary buckets hash the value; use default_value to map unknown values to one id")
    inferred = dtypes.string if isinstance(vocabulary[0], (str, bytes)) else dtypes.int64
    dtype = inferred if dtype is None else dtypes.as_dtype(dtype)
    if dtype is not dtypes.string and not dtype.is_integer:
        raise _E(f"{where} '{key}': dtype must be a string or integer type, got {dtype.name}")
    if (dtype is dtypes.string) != (inferred is dtypes.string):
        raise _E(f"{where} '{key}': the vocabulary holds {inferred.name} values but dtype is {dtype.name}")
    if dtype is dtypes.string:
        vocabulary = [v.decode() if isinstance(v, bytes) else v for v in vocabulary]
    else:
        vocabulary = [int(v) for v in vocabulary]
    default_value = -1 if default_value is None else int(default_value)
    if default_value != -1 and not 0 <= default_value < len(vocabulary):
        raise _E(f"{where} '{key}': default_value must be -1 (ignore) or an id in [0, {len(vocabulary)}), "
                 f"got {default_value}")
    return _VocabularyListCategoricalColumn(key, tuple(vocabulary), dtype, default_value, 0)


def categorical_column_with_vocabulary_list(key, vocabulary_list, dtype=None, default_value=-1, num_oov_buckets=0):
    """Feature ``key`` (strings or integers) mapped to its position in ``vocabulary_list``;
    a value not in it gets ``default_value`` (-1: no id, an all-zero indicator row)."""
    return _vocabulary_column("categorical_column_with_vocabulary_list", key, vocabulary_list, dtype,
                              default_value, num_oov_buckets)


def categorical_column_with_vocabulary_file(key, vocabulary_file, vocabulary_size=None, num_oov_buckets=0,
                                            default_value=None, dtype=dtypes.string):
    """Like ``categorical_column_with_vocabulary_list``, with the vocabulary read from a text
    file, one entry per line (the first ``vocabulary_size`` lines)."""
    path = os.fspath(vocabulary_file) if vocabulary_file is not None else None
    if not path:
        raise _E(f"categorical_column_with_vocabulary_file '{key}': vocabulary_file is required")
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\r\n") for line in f]
    except OSError as e:
        raise errors.NotFoundError(
            f"categorical_column_with_vocabulary_file '{key}': cannot read {path!r}: {e.strerror or e}") from None
    if vocabulary_size is not None:
        if vocabulary_size <= 0 or vocabulary_size > len(lines):
            raise _E(f"categorical_column_with_vocabulary_file '{key}': vocabulary_size must be in [1, {len(lines)}] "
                     f"(the file has {len(lines)} lines), got {vocabulary_size}")
        lines = lines[:vocabulary_size]
    dtype = dtypes.as_dtype(dtype)
    vocab = lines if dtype is dtypes.string else [int(v) for v in lines]
    return _vocabulary_column("categorical_column_with_vocabulary_file", key, vocab, dtype, default_value,
                              num_oov_buckets)


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

    def _dense(self, builder):
        return _one_hot_sum(self._ids_tensor(builder), self.num_buckets)

    def _dense_tensor(self, builder):
        return builder.get(self, "_dense")


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


class _IndicatorColumn(collections.namedtuple("_IndicatorColumn", ["categorical_column"])):
    """A categorical column as a multi-hot dense vector (see ``indicator_column``)."""

    is_dense = True
    is_categorical = False

    @property
    def name(self):
        return f"{self.categorical_column.name}_indicator"

    @property
    def dimension(self):
        return self.categorical_column.num_buckets

    def _dense(self, builder):
        return _one_hot_sum(self.categorical_column._ids_tensor(builder), self.categorical_column.num_buckets)

    def _dense_tensor(self, builder):
        return builder.get(self, "_dense")


def indicator_column(categorical_column):
    """``categorical_column`` as a dense ``[batch, num_buckets]`` vector: 1 at each id an
    example has (the count, if an id repeats), 0 elsewhere."""
    if not getattr(categorical_column, "is_categorical", False):
        raise _E(f"indicator_column: expected a categorical column (categorical_column_with_*, bucketized_column), "
                 f"got {categorical_column!r}")
    return _IndicatorColumn(categorical_column)


def embedding_column(categorical_column, dimension, combiner="mean", initializer=None, ckpt_to_load_from=None,
                     tensor_name_in_ckpt=None, max_norm=None, trainable=True):
    """Not provided yet (needs sparse tensors): raises UnimplementedError."""
    _needs_sparse("embedding_column", "use indicator_column(column) for a dense one-hot encoding instead")


def shared_embedding_columns(categorical_columns, dimension, combiner="mean", initializer=None,
                             shared_embedding_collection_name=None, ckpt_to_load_from=None,
                             tensor_name_in_ckpt=None, max_norm=None, trainable=True):
    """Not provided yet (needs sparse tensors): raises UnimplementedError."""
    _needs_sparse("shared_embedding_columns", "use indicator_column for each column instead")


def categorical_column_with_hash_bucket(key, hash_bucket_size, dtype=dtypes.string):
    """Not provided yet (needs a string hash and sparse tensors): raises UnimplementedError."""
    _needs_sparse("categorical_column_with_hash_bucket",
                  "use categorical_column_with_vocabulary_list when the values are known")


def crossed_column(keys, hash_bucket_size, hash_key=None):
    """Not provided yet (needs a hash and sparse tensors): raises UnimplementedError."""
    _needs_sparse("crossed_column", "cross the features in the input_fn and use a vocabulary column")


def weighted_categorical_column(categorical_column, weight_feature_key, dtype=dtypes.float32):
    """Not provided yet (needs sparse tensors): raises UnimplementedError."""
    _needs_sparse("weighted_categorical_column", "use an indicator_column and a numeric_column instead")


# ----------------------------------------------------------------------------------------
# layers
def _check_columns(feature_columns, fn):
    if feature_columns is None:
        raise _E(f"{fn}: feature_columns must not be None")
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


def input_layer(features, feature_columns, weight_collections=None, trainable=True, cols_to_vars=None):
    """The dense ``feature_columns`` of ``features`` (a dict of tensors) as one float32
    ``[batch, n]`` tensor: each column flattened to ``[batch, dimension]``, concatenated in
    order of column name."""
    cols = _check_columns(feature_columns, "input_layer")
    for c in cols:
        if not c.is_dense:
            raise _E(f"input_layer: items of feature_columns must be dense columns; wrap categorical column "
                     f"'{c.name}' in indicator_column() (embedding_column needs sparse tensors, issue 11)")
    builder = _Builder(features)
    outputs = []
    with vs.variable_scope(None, default_name="input_layer"):
        for c in cols:
            with vs.variable_scope(None, default_name=c.name):
                outputs.append(c._dense_tensor(builder))
                if cols_to_vars is not None:
                    cols_to_vars[c] = []
        return outputs[0] if len(outputs) == 1 else array_ops.concat(outputs, 1)


def linear_model(features, feature_columns, units=1, sparse_combiner="sum", weight_collections=None,
                 trainable=True, cols_to_vars=None):
    """A linear function of ``features``: ``sum_c column_c @ weights_c + bias`` with a
    ``[dimension or num_buckets, units]`` weight matrix per column and a ``[units]`` bias,
    all zero-initialised; returns ``[batch, units]``. Categorical columns with several ids
    per example combine their weights by ``sparse_combiner`` (``"sum"``, ``"mean"``,
    ``"sqrtn"``)."""
    if sparse_combiner not in ("sum", "mean", "sqrtn"):
        raise _E(f"linear_model: sparse_combiner must be 'sum', 'mean' or 'sqrtn', got {sparse_combiner!r}")
    if not isinstance(units, int) or isinstance(units, bool) or units < 1:
        raise _E(f"linear_model: units must be a positive int, got {units!r}")
    cols = _check_columns(feature_columns, "linear_model")
    builder = _Builder(features)
    collections_ = [GraphKeys.GLOBAL_VARIABLES, GraphKeys.MODEL_VARIABLES] + list(weight_collections or [])
    terms = []
    with vs.variable_scope(None, default_name="linear_model"):
        for c in cols:
            with vs.variable_scope(c.name):
                if c.is_categorical:
                    ids = c._ids_tensor(builder)
                    x = _one_hot_sum(ids, c.num_buckets)
                    if sparse_combiner != "sum":
                        n = _valid_count(ids)
                        n = n if sparse_combiner == "mean" else math_ops.sqrt(n)
                        x = x / math_ops.maximum(n, 1.0)
                    rows = c.num_buckets
                else:
                    x = c._dense_tensor(builder)
                    rows = c.dimension
                w = vs.get_variable("weights", [rows, units], dtypes.float32, init_ops.zeros_initializer(),
                                    trainable=trainable, collections=collections_)
                if cols_to_vars is not None:
                    cols_to_vars[c] = [w]
                terms.append(math_ops.matmul(x, w))
        bias = vs.get_variable("bias_weights", [units], dtypes.float32, init_ops.zeros_initializer(),
                               trainable=trainable, collections=collections_)
        if cols_to_vars is not None:
            cols_to_vars["bias"] = [bias]
        total = terms[0] if len(terms) == 1 else math_ops.add_n(terms)
        return nn_ops.bias_add(total, bias, name="weighted_sum")
