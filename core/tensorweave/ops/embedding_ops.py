"""Embedding lookups (``tw.nn.embedding_lookup``, ``tw.nn.embedding_lookup_sparse``) and the
SparseSegmentSum/Mean/SqrtN ops they combine with, with TensorFlow 1.x semantics.

``embedding_lookup(params, ids)`` reads rows ``ids`` of a table given as one tensor or
variable, a list of shards, or a ``PartitionedVariable``; the result has shape
``ids.shape + params.shape[1:]``. With several shards, each id goes to one shard by the
``partition_strategy``, with TF1's arithmetic (``n`` shards, ``N`` rows in all):

- ``"mod"``: shard ``id % n``, row ``id // n`` in it;
- ``"div"``: contiguous ranges, the first ``N % n`` shards one row longer (the shards a
  partitioner makes): shard ``max(id // (q + 1), (id - r) // q)`` with ``q, r = divmod(N, n)``,
  row ``id % (q + 1)`` in the long shards and ``(id - r) % q`` in the others.

The graph is TF1's: the flattened ids are split per shard by ``DynamicPartition``, each shard
is read by its own ``Gather`` colocated with it (so on a parameter server the rows are read
there and only they travel), and ``DynamicStitch`` puts the rows back in the ids' order. The
gradient reaching each shard is the Gather's: an ``IndexedSlices`` of the rows read.
``max_norm`` clips each looked-up embedding to that L2 norm (``clip_by_norm`` over the
embedding's axes). Ids outside ``[0, N)`` are an ``InvalidArgumentError`` naming the lookup,
the id and the range: the shard's Gather says it for one table, an ``EmbeddingIdsCheck``
node (which passes the ids through) for several, where a shard-local index would mislead.

``embedding_lookup_sparse(params, sp_ids, sp_weights, combiner=...)`` combines the
embeddings of each row of a ``SparseTensor`` of ids: each distinct id is looked up once
(``Unique``), then ``SparseSegmentSum``/``Mean``/``SqrtN`` (no weights) or weighted
``SegmentSum`` combine them per row.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import apply_op, constant_value, convert_to_tensor, get_default_graph
from tensorweave.framework.sparse_tensor import SparseTensor
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops, clip_ops, indexing_ops, math_ops
from tensorweave.ops.partitioned_variables import PartitionedVariable

__all__ = ["embedding_lookup", "embedding_lookup_sparse", "sparse_segment_sum", "sparse_segment_mean",
           "sparse_segment_sqrt_n"]

_INDEX = "{int32, int64}"
_E = errors.InvalidArgumentError


# ---------------------------------------------------------------------------------------
# op definitions
def _sparse_segment_shape(op):
    data, indices, segment_ids = op.inputs[:3]
    for what, t in (("indices", indices), ("segment_ids", segment_ids)):
        if t.shape.ndims not in (None, 1):
            raise _E(f"{what} must be a vector, got shape {t.shape}")
    if not indices.shape.is_compatible_with(segment_ids.shape):
        raise _E(f"indices {indices.shape} and segment_ids {segment_ids.shape} must have the same length")
    if data.shape.ndims == 0:
        raise _E("data must have rank >= 1, got a scalar")
    rest = data.shape[1:] if data.shape.ndims is not None else TensorShape(None)
    return [TensorShape([None]).concatenate(rest)]


def _sparse_segment_grad_shape(op):
    grad = op.inputs[0]
    rest = grad.shape[1:] if grad.shape.ndims is not None else TensorShape(None)
    dim0 = constant_value(op.inputs[3])
    return [TensorShape([None if dim0 is None else int(dim0)]).concatenate(rest)]


def _ids_check_shape(op):
    if op.inputs[1].shape.ndims not in (None, 0):
        raise _E(f"num_ids must be a scalar, got shape {op.inputs[1].shape}")
    return [op.inputs[0].shape]


def register_ops(reg):
    num = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64}"
    flt = "T: {float16, float32, float64}"
    for name, types, what in (("SparseSegmentSum", num, "sum"), ("SparseSegmentMean", flt, "mean"),
                              ("SparseSegmentSqrtN", flt, "sum divided by the square root of the count")):
        reg.op(name, inputs=["data: T", "indices: Tidx", "segment_ids: Tsegmentids"], outputs=["output: T"],
               attrs=[types, f"Tidx: {_INDEX} = int32", f"Tsegmentids: {_INDEX} = int32"],
               shape_fn=_sparse_segment_shape,
               doc=f"output[s] = the {what} of data[indices[i]] over the i with segment_ids[i] == s; segment_ids "
                   "sorted and non-negative, max(segment_ids) + 1 rows, empty segments zero.")
    for name in ("SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad"):
        reg.op(name, inputs=["grad: T", "indices: Tidx", "segment_ids: Tsegmentids", "output_dim0: int32"],
               outputs=["output: T"], attrs=[flt, f"Tidx: {_INDEX} = int32", f"Tsegmentids: {_INDEX} = int32"],
               shape_fn=_sparse_segment_grad_shape,
               doc=f"The gradient of {name[:-4]} with respect to its data (output_dim0 rows).")
    reg.op("EmbeddingIdsCheck", inputs=["ids: Tindices", "num_ids: Tindices"], outputs=["output: Tindices"],
           attrs=[f"Tindices: {_INDEX}"], shape_fn=_ids_check_shape,
           doc="Passes ids through after checking every id is in [0, num_ids) (the rows of a sharded table).")
    reg.no_gradient("SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad", "EmbeddingIdsCheck")


# ---------------------------------------------------------------------------------------
# sparse segment wrappers
def _segment_args(data, indices, segment_ids):
    data = convert_to_tensor(data, name="data")
    indices = convert_to_tensor(indices, name="indices")
    segment_ids = convert_to_tensor(segment_ids, name="segment_ids")
    return [data, indices, segment_ids]


def sparse_segment_sum(data, indices, segment_ids, name=None, num_segments=None):
    """``output[s] = sum(data[indices[i]] for i with segment_ids[i] == s)``
    (``tf.sparse_segment_sum``): ``segment_ids`` sorted and non-negative, one per index."""
    if num_segments is not None:
        raise errors.UnimplementedError("sparse_segment_sum: num_segments is not supported")
    return apply_op("SparseSegmentSum", _segment_args(data, indices, segment_ids), name=name)


def sparse_segment_mean(data, indices, segment_ids, name=None, num_segments=None):
    """Like ``sparse_segment_sum``, divided by each segment's count (``tf.sparse_segment_mean``)."""
    if num_segments is not None:
        raise errors.UnimplementedError("sparse_segment_mean: num_segments is not supported")
    return apply_op("SparseSegmentMean", _segment_args(data, indices, segment_ids), name=name)


def sparse_segment_sqrt_n(data, indices, segment_ids, name=None, num_segments=None):
    """Like ``sparse_segment_sum``, divided by the square root of each segment's count
    (``tf.sparse_segment_sqrt_n``)."""
    if num_segments is not None:
        raise errors.UnimplementedError("sparse_segment_sqrt_n: num_segments is not supported")
    return apply_op("SparseSegmentSqrtN", _segment_args(data, indices, segment_ids), name=name)


# ---------------------------------------------------------------------------------------
# embedding_lookup
def _shard_list(params, who):
    if params is None:
        raise _E(f"{who}: params must be specified")
    if isinstance(params, PartitionedVariable):
        return list(params)  # its shard variables
    if isinstance(params, list | tuple):
        if not params:
            raise _E(f"{who}: need at least one param (params is an empty list)")
        return list(params)
    return [params]


def _clip(values, ids, max_norm):
    """``values`` (looked-up embeddings for ``ids``) with each embedding's L2 norm clipped to
    ``max_norm``: the norm is taken over the axes after the ids' axes."""
    if max_norm is None:
        return values
    ids_rank, values_rank = ids.shape.ndims, values.shape.ndims
    if ids_rank is not None and values_rank is not None:
        axes = list(range(ids_rank, values_rank))
    else:
        axes = array_ops.range(array_ops.rank(ids), array_ops.rank(values))
    return clip_ops.clip_by_norm(values, max_norm, axes=axes)


def _static_rows(params):
    """Sum of the shards' first dimensions when every one is known, else None."""
    total = 0
    for p in params:
        d = p.shape[0] if p.shape.ndims else None
        if d is None:
            return None
        total += d
    return total


def _total_rows(params, dtype):
    """The table's row count as a scalar of ``dtype``: a constant when the shapes are known."""
    static = _static_rows(params)
    if static is not None:
        return array_ops.constant(static, dtype=dtype, name="num_ids")
    sizes = []
    for p in params:
        d = p.shape[0] if p.shape.ndims else None
        if d is not None:
            sizes.append(array_ops.constant(d, dtype=dtype))
        else:
            with get_default_graph().colocate_with(p):  # its shape is read where it lives
                sizes.append(math_ops.cast(array_ops.shape(p)[0], dtype))
    return math_ops.add_n(sizes) if len(sizes) > 1 else sizes[0]


def _assign_shards(flat_ids, params, strategy, num_ids):
    """(shard of each id as int32, row of each id in its shard), TF1's arithmetic."""
    n = len(params)
    if strategy == "mod":
        return math_ops.cast(flat_ids % n, dtypes.int32), flat_ids // n
    static = _static_rows(params)
    if static is not None:
        per, extras = divmod(static, n)
        if per == 0:  # fewer rows than shards: the first `extras` shards hold one row each
            return math_ops.cast(flat_ids, dtypes.int32), array_ops.zeros_like(flat_ids)
    else:
        per, extras = num_ids // n, num_ids % n
    shard = math_ops.maximum(flat_ids // (per + 1), (flat_ids - extras) // per)
    row = array_ops.where(shard < extras, flat_ids % (per + 1), (flat_ids - extras) % per)
    return math_ops.cast(shard, dtypes.int32), row


def _embedding_lookup_and_transform(params, ids, partition_strategy="mod", name=None, max_norm=None,
                                    transform_fn=None):
    """``embedding_lookup`` that can apply ``transform_fn`` to each shard's rows where they
    are read (after clipping), as TF1's helper of the same name does for sampled losses."""
    params = _shard_list(params, "embedding_lookup")
    if partition_strategy not in ("mod", "div"):
        raise _E(f"embedding_lookup: unrecognized partition_strategy {partition_strategy!r}; use 'mod' or 'div'")
    g = get_default_graph()
    with g.name_scope(name or "embedding_lookup"):
        params = [convert_to_tensor(p, name="params") for p in params]
        ids = convert_to_tensor(ids, name="ids")
        if ids.dtype not in (dtypes.int32, dtypes.int64):
            raise _E(f"embedding_lookup: ids must be int32 or int64, got {ids.dtype.name}")
        dtype = params[0].dtype
        for p in params[1:]:
            if p.dtype is not dtype:
                raise _E(f"embedding_lookup: every shard of params must have one dtype, got {dtype.name} and "
                         f"{p.dtype.name}")
        np_ = len(params)
        if np_ == 1 and (transform_fn is None or ids.shape.ndims == 1):
            with g.colocate_with(params[0]):
                result = _clip(array_ops.gather(params[0], ids), ids, max_norm)
                if transform_fn is not None:
                    result = transform_fn(result)
            # The result carries no colocation with the table, as the stitched one below.
            return array_ops.identity(result)

        shard_rows = params[0].shape[1:] if params[0].shape.ndims is not None else TensorShape(None)
        for p in params[1:]:
            rest = p.shape[1:] if p.shape.ndims is not None else TensorShape(None)
            if not shard_rows.is_compatible_with(rest):
                raise _E(f"embedding_lookup: the shards of params differ beyond their first dimension: "
                         f"{params[0].shape} and {p.shape}")
            shard_rows = shard_rows.merge_with(rest)
        flat_ids = array_ops.reshape(ids, [-1])
        num_ids = _total_rows(params, flat_ids.dtype)
        flat_ids = apply_op("EmbeddingIdsCheck", [flat_ids, num_ids], name="check_ids")
        original_indices = array_ops.range(array_ops.size(flat_ids))
        p_assignments, new_ids = _assign_shards(flat_ids, params, partition_strategy, num_ids)
        gather_ids = indexing_ops.dynamic_partition(new_ids, p_assignments, np_)
        pindices = indexing_ops.dynamic_partition(original_indices, p_assignments, np_)
        partitioned = []
        for p in range(np_):
            with g.colocate_with(params[p]):
                rows = array_ops.gather(params[p], gather_ids[p])
                if transform_fn is not None:
                    rows = transform_fn(_clip(rows, gather_ids[p], max_norm))
            partitioned.append(rows)
        ret = indexing_ops.parallel_dynamic_stitch(pindices, partitioned)

        if transform_fn is None:
            element_shape = shard_rows
        else:
            element_shape = ret.shape[1:] if ret.shape.ndims is not None else TensorShape(None)
        if ids.shape.is_fully_defined() and element_shape.is_fully_defined():
            ret = array_ops.reshape(ret, ids.shape.as_list() + element_shape.as_list())
        else:
            if element_shape.is_fully_defined():
                rest = array_ops.constant(element_shape.as_list(), dtype=dtypes.int32)
            elif transform_fn is None:
                with g.colocate_with(params[0]):
                    rest = array_ops.shape(params[0])[1:]
            else:
                rest = array_ops.shape(ret)[1:]
            ret = array_ops.reshape(ret, array_ops.concat([array_ops.shape(ids), rest], 0))
            ret.set_shape(ids.shape.concatenate(element_shape))
        if transform_fn is None:
            ret = _clip(ret, ids, max_norm)
        return ret


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True, max_norm=None):
    """Rows ``ids`` of the table ``params`` (``tf.nn.embedding_lookup``): shape
    ``ids.shape + params.shape[1:]``.

    ``params``: one tensor or variable, a list of shards (equal beyond the first dimension),
    or a ``PartitionedVariable``. With several shards ``partition_strategy`` ("mod" or
    "div", see the module docstring) says which shard holds each id. ``max_norm`` clips each
    embedding to that L2 norm. ``validate_indices`` is accepted for TF1 compatibility: ids
    are always checked on the CPU."""
    return _embedding_lookup_and_transform(params, ids, partition_strategy, name, max_norm)


def embedding_lookup_sparse(params, sp_ids, sp_weights, partition_strategy="mod", name=None, combiner="mean",
                            max_norm=None):
    """The embeddings of each row of the ``SparseTensor`` ``sp_ids`` combined
    (``tf.nn.embedding_lookup_sparse``).

    ``sp_ids``: ``[N, M]`` ids (canonical row-major order, every row with at least one id);
    ``sp_weights``: a ``SparseTensor`` of weights with the same indices, or None for 1.
    ``combiner``: "sum" (weighted sum), "mean" (weighted sum / sum of weights) or "sqrtn"
    (weighted sum / sqrt of the sum of squared weights). Returns ``[N] + params.shape[1:]``
    (rows after the last one with ids are not produced, as in TF1)."""
    if combiner is None:
        combiner = "mean"
    if combiner not in ("mean", "sqrtn", "sum"):
        raise _E(f"embedding_lookup_sparse: combiner must be one of 'mean', 'sqrtn' or 'sum', got {combiner!r}")
    params = _shard_list(params, "embedding_lookup_sparse")
    if not isinstance(sp_ids, SparseTensor):
        raise TypeError(f"embedding_lookup_sparse: sp_ids must be a SparseTensor, got {type(sp_ids).__name__}")
    if sp_weights is not None:
        if not isinstance(sp_weights, SparseTensor):
            raise TypeError("embedding_lookup_sparse: sp_weights must be None or a SparseTensor, got "
                            f"{type(sp_weights).__name__}")
        for what in ("values", "indices", "dense_shape"):
            a, b = getattr(sp_ids, what).shape, getattr(sp_weights, what).shape
            if not a.is_compatible_with(b):
                raise _E(f"embedding_lookup_sparse: sp_ids.{what} {a} and sp_weights.{what} {b} differ")
    g = get_default_graph()
    with g.name_scope(name or "embedding_lookup_sparse"):
        segment_ids = sp_ids.indices[:, 0]
        if segment_ids.dtype is not dtypes.int32:
            segment_ids = math_ops.cast(segment_ids, dtypes.int32)
        ids, idx = indexing_ops.unique(sp_ids.values)
        embeddings = embedding_lookup(params, ids, partition_strategy=partition_strategy, max_norm=max_norm)
        if embeddings.dtype is dtypes.float16:
            embeddings = math_ops.cast(embeddings, dtypes.float32)
        if sp_weights is None:
            fn = {"sum": sparse_segment_sum, "mean": sparse_segment_mean, "sqrtn": sparse_segment_sqrt_n}[combiner]
            return fn(embeddings, idx, segment_ids)
        weights = sp_weights.values
        if weights.dtype is not embeddings.dtype:
            weights = math_ops.cast(weights, embeddings.dtype)
        embeddings = array_ops.gather(embeddings, idx)
        # weights [n] broadcast over each embedding's axes
        rank = embeddings.shape.ndims
        if rank is not None:
            weights = array_ops.reshape(weights, [-1] + [1] * (rank - 1))
        else:
            ones = array_ops.fill(array_ops.expand_dims(array_ops.rank(embeddings) - 1, 0), 1)
            weights = array_ops.reshape(weights, array_ops.concat([array_ops.shape(weights), ones], 0))
        embeddings = embeddings * weights
        total = indexing_ops.segment_sum(embeddings, segment_ids)
        if combiner == "sum":
            return total
        if combiner == "mean":
            return math_ops.divide(total, indexing_ops.segment_sum(weights, segment_ids))
        return math_ops.divide(total, math_ops.sqrt(indexing_ops.segment_sum(weights * weights, segment_ids)))
