"""``tw.nn.embedding_lookup`` / ``embedding_lookup_sparse`` and the sparse segment ops: TF1's
id -> shard arithmetic, shapes, max_norm, IndexedSlices gradients per shard, colocation of
each shard's Gather, and clear errors for bad ids."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.testing.gradient_checker import check_gradients

TABLE = np.arange(13 * 3, dtype=np.float32).reshape(13, 3)


def _run(fetches, feed=None):
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        return sess.run(fetches, feed)


# ---------------------------------------------------------------------------------------
# which shard holds which id
@pytest.mark.parametrize("strategy,layout", [
    # TF1's docstring: 13 ids over 5 shards
    ("mod", [[0, 5, 10], [1, 6, 11], [2, 7, 12], [3, 8], [4, 9]]),
    ("div", [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10], [11, 12]]),
])
def test_partition_strategies_match_tf1(strategy, layout):
    # shard p's row r holds the id that the strategy puts there, so looking up id i gives i
    shards = [tw.constant(np.array(ids, dtype=np.float32).reshape(-1, 1)) for ids in layout]
    ids = np.array([12, 0, 7, 3, 3, 9, 11, 4], dtype=np.int64)
    got = _run(tw.nn.embedding_lookup(shards, ids, partition_strategy=strategy))
    np.testing.assert_array_equal(got[:, 0], ids)


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 13])
def test_partitioned_variable_lookup_equals_numpy(strategy, n):
    if strategy == "mod":  # a mod-partitioned table: shard p holds rows p, p + n, ...
        params = [tw.Variable(TABLE[p::n], name=f"shard{p}") for p in range(n)]
    else:
        params = tw.get_variable("emb", initializer=TABLE, partitioner=tw.fixed_size_partitioner(n))
    ids = np.array([[0, 12, 5, 7], [7, 1, 1, 6]], dtype=np.int32)
    y = tw.nn.embedding_lookup(params, ids, partition_strategy=strategy)
    assert y.shape.as_list() == [2, 4, 3]
    np.testing.assert_array_equal(_run(y), TABLE[ids])


def test_single_tensor_variable_and_ids_shapes():
    v = tw.Variable(TABLE, name="table")
    for ids in (np.int64(4), np.array([4, 2]), np.array([[4], [2]]), np.zeros([0], np.int32)):
        y = tw.nn.embedding_lookup(v, ids)
        assert y.shape.as_list() == list(np.shape(ids)) + [3]
        np.testing.assert_array_equal(_run(y), TABLE[ids])
    np.testing.assert_array_equal(_run(tw.nn.embedding_lookup(tw.constant(TABLE), [1, 1])), TABLE[[1, 1]])
    # unknown ids shape, several shards: the static shape keeps what is known
    ph = tw.placeholder(tw.int32, [None, None])
    y = tw.nn.embedding_lookup([tw.constant(TABLE[:7]), tw.constant(TABLE[7:])], ph, partition_strategy="div")
    assert y.shape.as_list() == [None, None, 3]
    ids = np.array([[12, 0, 6]])
    np.testing.assert_array_equal(_run(y, {ph: ids}), TABLE[ids])
    # a table whose row shape is unknown statically
    tp = tw.placeholder(tw.float32, [None, None])
    y = tw.nn.embedding_lookup([tp, tp], [1, 2])
    np.testing.assert_array_equal(_run(y, {tp: TABLE[:4]}), TABLE[:4][[0, 1]])
    # "div" over shards whose row counts are known only when the step runs
    tq = tw.placeholder(tw.float32, [None, 3])
    y = tw.nn.embedding_lookup([tp, tq], [6, 0, 4, 2], partition_strategy="div")
    np.testing.assert_array_equal(_run(y, {tp: TABLE[:4], tq: TABLE[4:7]}), TABLE[[6, 0, 4, 2]])


def test_max_norm_clips_each_embedding():
    table = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0], [0.0, 0.0]], np.float32)
    ids = np.array([[0, 1], [2, 3]])
    norms = np.linalg.norm(table, axis=1, keepdims=True)
    want = (table * np.minimum(1.0, 2.0 / np.maximum(norms, 1e-12)))[ids]
    for params in (tw.constant(table), [tw.constant(table[0::2]), tw.constant(table[1::2])]):
        got = _run(tw.nn.embedding_lookup(params, ids, max_norm=2.0))
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_gradient_is_indexed_slices_per_shard():
    emb = tw.get_variable("emb", initializer=TABLE, partitioner=tw.fixed_size_partitioner(3))
    ids = tw.constant([12, 0, 0, 5])
    y = tw.nn.embedding_lookup(emb, ids, partition_strategy="div")
    weights = tw.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    loss = tw.reduce_sum(y * weights)
    grads = tw.gradients(loss, list(emb))
    assert all(isinstance(g, tw.IndexedSlices) for g in grads)
    values = _run(grads)
    dense = np.zeros_like(TABLE)
    np.add.at(dense, [12, 0, 0, 5], np.arange(12, dtype=np.float32).reshape(4, 3))
    offsets = [0, 5, 9, 13]
    for p, v in enumerate(values):
        shard = np.zeros((offsets[p + 1] - offsets[p], 3), np.float32)
        np.add.at(shard, np.asarray(v.indices), np.asarray(v.values))
        np.testing.assert_array_equal(shard, dense[offsets[p]:offsets[p + 1]])
        assert len(np.asarray(v.indices)) < shard.shape[0] + 1  # only the rows read


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_gradients_match_finite_differences(strategy):
    ids = np.array([[4, 0], [2, 4]])

    def fn(a, b):
        return tw.nn.embedding_lookup([a, b], ids, partition_strategy=strategy, max_norm=3.0)

    check_gradients(fn, [np.random.default_rng(0).standard_normal((3, 2)),
                         np.random.default_rng(1).standard_normal((2, 2))])


def test_sgd_on_a_partitioned_embedding_matches_an_unpartitioned_one():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((11, 4)).astype(np.float32)
    ids = np.array([[1, 10, 3], [3, 3, 7]])
    target = rng.standard_normal((2, 3, 4)).astype(np.float32)

    def trajectory(partitioner, strategy):
        with tw.Graph().as_default():
            emb = tw.get_variable("emb", initializer=table, partitioner=partitioner)
            y = tw.nn.embedding_lookup(emb, ids, partition_strategy=strategy, max_norm=2.5)
            loss = tw.reduce_mean(tw.square(y - target))
            train = tw.train.GradientDescentOptimizer(0.5).minimize(loss)
            with tw.Session() as sess:
                sess.run(tw.global_variables_initializer())
                losses = [sess.run([train, loss])[1] for _ in range(4)]
                return losses, sess.run(tw.convert_to_tensor(emb))

    base, final = trajectory(None, "mod")
    for n in (2, 4):  # a partitioner makes contiguous shards: "div" is their strategy
        losses, table_n = trajectory(tw.fixed_size_partitioner(n), "div")
        np.testing.assert_allclose(losses, base, rtol=1e-5)
        np.testing.assert_allclose(table_n, final, rtol=1e-5, atol=1e-6)


def test_each_shards_gather_runs_with_the_shard():
    with tw.device(tw.train.replica_device_setter(ps_tasks=2)):
        emb = tw.get_variable("emb", [10, 4], partitioner=tw.fixed_size_partitioner(2))
        y = tw.nn.embedding_lookup(emb, tw.constant([1, 8]), partition_strategy="div")
    gathers = [op for op in tw.get_default_graph().get_operations() if op.type == "GatherV2"]
    assert sorted(op.device for op in gathers) == ["/job:ps/task:0", "/job:ps/task:1"]
    assert y.op.device == "/job:worker"


# ---------------------------------------------------------------------------------------
# bad input
def test_out_of_range_ids_name_the_op_the_id_and_the_range():
    v = tw.Variable(TABLE, name="table")
    y = tw.nn.embedding_lookup(v, [1, 13], name="lookup")
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        with pytest.raises(errors.InvalidArgumentError, match=r"lookup.*\] = 13 is not in \[0, 13\)"):
            sess.run(y)
    emb = tw.get_variable("emb", initializer=TABLE, partitioner=tw.fixed_size_partitioner(2))
    for strategy in ("mod", "div"):
        for bad in (25, -1):
            y = tw.nn.embedding_lookup(emb, [[0, 3], [bad, 2]], partition_strategy=strategy, name="sharded")
            with tw.Session() as sess:
                sess.run(tw.global_variables_initializer())
                with pytest.raises(errors.InvalidArgumentError,
                                   match=rf"sharded(_\d+)?/.*ids\[2\] = {bad} is not in \[0, 13\)"):
                    sess.run(y)


def test_bad_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="params must be specified"):
        tw.nn.embedding_lookup(None, [0])
    with pytest.raises(errors.InvalidArgumentError, match="at least one param"):
        tw.nn.embedding_lookup([], [0])
    with pytest.raises(errors.InvalidArgumentError, match="partition_strategy"):
        tw.nn.embedding_lookup([tw.constant(TABLE)] * 2, [0], partition_strategy="round")
    with pytest.raises(errors.InvalidArgumentError, match="int32 or int64"):
        tw.nn.embedding_lookup(tw.constant(TABLE), [0.5])
    with pytest.raises(errors.InvalidArgumentError, match="differ beyond their first dimension"):
        tw.nn.embedding_lookup([tw.constant(TABLE), tw.zeros([3, 2])], [0])


# ---------------------------------------------------------------------------------------
# embedding_lookup_sparse and the sparse segment ops
def _sparse(indices, values, shape, dtype):
    return tw.SparseTensor(tw.constant(np.array(indices, np.int64)), tw.constant(np.array(values, dtype)),
                           tw.constant(np.array(shape, np.int64)))


def _combined(table, rows, combiner, weights=None):
    out = []
    for r, ids in enumerate(rows):
        w = np.ones(len(ids)) if weights is None else np.array(weights[r])
        s = (table[ids] * w[:, None]).sum(0)
        if combiner == "mean":
            s = s / w.sum()
        elif combiner == "sqrtn":
            s = s / np.sqrt((w * w).sum())
        out.append(s)
    return np.array(out)


# Weighted combiners gather the unique rows back per id; the gradient of that gather is
# densified at an unknown shape, and TF1 warns about it just the same.
@pytest.mark.filterwarnings("ignore:Converting sparse IndexedSlices")
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shards", [1, 3])
def test_embedding_lookup_sparse(combiner, weighted, shards):
    # TF1's docstring example, on a 13-row table: rows [1, 3], [0], [1]
    indices = [[0, 0], [0, 1], [1, 0], [2, 3]]
    ids, weights = [1, 3, 0, 1], [2.0, 0.5, 1.0, 3.0]
    sp_ids = _sparse(indices, ids, [3, 4], np.int64)
    sp_w = _sparse(indices, weights, [3, 4], np.float32) if weighted else None
    params = tw.get_variable(f"t{combiner}{weighted}{shards}", initializer=TABLE,
                             partitioner=tw.fixed_size_partitioner(shards))
    y = tw.nn.embedding_lookup_sparse(params, sp_ids, sp_w, partition_strategy="div", combiner=combiner)
    want = _combined(TABLE, [[1, 3], [0], [1]], combiner, [[2.0, 0.5], [1.0], [3.0]] if weighted else None)
    np.testing.assert_allclose(_run(y), want, rtol=1e-6)
    grads = tw.gradients(tw.reduce_sum(y), list(params))
    assert all(isinstance(g, tw.IndexedSlices) for g in grads if g is not None)


def test_embedding_lookup_sparse_bad_input():
    sp = _sparse([[0, 0]], [1], [1, 1], np.int64)
    with pytest.raises(errors.InvalidArgumentError, match="combiner"):
        tw.nn.embedding_lookup_sparse(tw.constant(TABLE), sp, None, combiner="max")
    with pytest.raises(TypeError, match="sp_ids must be a SparseTensor"):
        tw.nn.embedding_lookup_sparse(tw.constant(TABLE), tw.constant([1]), None)
    with pytest.raises(TypeError, match="sp_weights"):
        tw.nn.embedding_lookup_sparse(tw.constant(TABLE), sp, tw.constant([1.0]))


def test_sparse_segment_ops():
    data = np.arange(12, dtype=np.float64).reshape(4, 3)
    idx, seg = np.array([0, 2, 2, 3, 1]), np.array([0, 0, 1, 3, 3])
    sums = np.stack([data[0] + data[2], data[2], np.zeros(3), data[3] + data[1]])
    counts = np.array([2, 1, 1, 2])[:, None]  # empty segment: divided by 1, stays 0
    got = _run([tw.sparse_segment_sum(data, idx, seg), tw.sparse_segment_mean(data, idx, seg),
                tw.sparse_segment_sqrt_n(data, idx, seg)])
    np.testing.assert_allclose(got[0], sums)
    np.testing.assert_allclose(got[1], sums / counts)
    np.testing.assert_allclose(got[2], sums / np.sqrt(counts))
    assert tw.sparse_segment_sum(data, idx, seg).shape.as_list() == [None, 3]
    for fn in (tw.sparse_segment_sum, tw.sparse_segment_mean, tw.sparse_segment_sqrt_n):
        check_gradients(lambda d, fn=fn: fn(d, idx, seg), [data])

    with tw.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match=r"SparseSegmentSum.*indices\[1\] = 7 is not in \[0, 4\)"):
            sess.run(tw.sparse_segment_sum(data, [0, 7], [0, 0]))
        with pytest.raises(errors.InvalidArgumentError, match="not increasing"):
            sess.run(tw.sparse_segment_mean(data, [0, 1], [1, 0]))
    with pytest.raises(errors.InvalidArgumentError, match="same length"):
        tw.sparse_segment_sum(data, [0, 1], [0])
