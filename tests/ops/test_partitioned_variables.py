"""Partitioned variables: the partitioners' shard counts (TF1's arithmetic), the shards
``get_variable(..., partitioner=...)`` creates, ``PartitionedVariable``, reuse, bad input, and
how ``replica_device_setter`` spreads the shards over ps tasks."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.tensor_shape import TensorShape


def _parts(partitioner, shape, dtype=tw.float32):
    return partitioner(shape=TensorShape(shape), dtype=dtype)


# ---------------------------------------------------------------------------------------
# partitioners
def test_fixed_size_partitioner():
    assert _parts(tw.fixed_size_partitioner(4), [10, 3]) == [4, 1]
    assert _parts(tw.fixed_size_partitioner(4, axis=1), [10, 3]) == [1, 3]  # never more than the axis
    assert _parts(tw.fixed_size_partitioner(1), [10]) == [1]
    with pytest.raises(errors.InvalidArgumentError, match="axis 2"):
        _parts(tw.fixed_size_partitioner(2, axis=2), [10, 3])


def test_min_max_variable_partitioner():
    mm = tw.min_max_variable_partitioner
    # TF1's docstring example: 4 MiB of float32 in 256 KiB slices is 16 partitions.
    assert _parts(mm(max_partitions=100), [1024, 1024]) == [16, 1]
    assert _parts(mm(max_partitions=8), [1024, 1024]) == [8, 1]
    assert _parts(mm(max_partitions=100), [3, 1 << 20]) == [3, 1]  # never more than the axis
    assert _parts(mm(max_partitions=100), [10, 10]) == [1, 1]  # 400 bytes: one partition
    assert _parts(mm(max_partitions=100, min_slice_size=100), [10, 10]) == [4, 1]  # ceil(400 / 100)
    assert _parts(mm(max_partitions=100, axis=1, min_slice_size=100), [10, 10]) == [1, 4]
    # strings count bytes_per_string_element bytes each
    assert _parts(mm(max_partitions=100, min_slice_size=100, bytes_per_string_element=8), [10, 10],
                  tw.string) == [8, 1]
    assert _parts(mm(), [1024, 1024]) == [1, 1]  # max_partitions defaults to 1
    with pytest.raises(errors.InvalidArgumentError, match="axis 1"):
        _parts(mm(axis=1), [10])


def test_variable_axis_size_partitioner():
    va = tw.variable_axis_size_partitioner
    # a slice of [10, 5] float32 along axis 0 is 20 bytes: 5 slices fit in 100 bytes
    assert _parts(va(100), [10, 5]) == [2, 1]
    assert _parts(va(30), [10, 5]) == [10, 1]  # one slice per shard
    assert _parts(va(10), [10, 5]) == [10, 1]  # a slice over the limit still makes a shard
    assert _parts(va(30, max_shards=3), [10, 5]) == [3, 1]
    assert _parts(va(1 << 20), [10, 5]) == [1, 1]
    assert _parts(va(40, axis=1), [10, 5]) == [1, 5]  # a slice along axis 1 is 40 bytes
    assert _parts(va(160, bytes_per_string_element=16), [10, 5], tw.string) == [5, 1]
    with pytest.raises(errors.InvalidArgumentError, match="must be positive"):
        va(0)
    with pytest.raises(errors.InvalidArgumentError, match="max_shards must be positive"):
        va(10, max_shards=-1)
    with pytest.raises(errors.InvalidArgumentError, match="not fully defined"):
        _parts(va(10), [None, 5])


# ---------------------------------------------------------------------------------------
# the shards
def test_get_variable_with_partitioner_creates_named_shards_with_slice_infos():
    v = tw.get_variable("emb", [10, 3], partitioner=tw.fixed_size_partitioner(4))
    assert isinstance(v, tw.PartitionedVariable)
    assert len(v) == 4 and v.name == "emb" and v.dtype is tw.float32
    assert v.get_shape().as_list() == [10, 3] and v.shape.as_list() == [10, 3]
    assert v._get_partitions() == [4, 1]
    shards = list(v)
    assert shards == v._get_variable_list()
    assert [s.name for s in shards] == [f"emb/part_{i}:0" for i in range(4)]
    # 10 rows in 4 shards: the first 10 % 4 shards hold one more
    assert [s.shape.as_list() for s in shards] == [[3, 3], [3, 3], [2, 3], [2, 3]]
    infos = [s._get_save_slice_info() for s in shards]
    assert {i.full_name for i in infos} == {"emb"}
    assert all(i.full_shape == [10, 3] for i in infos)
    assert [i.var_offset for i in infos] == [[0, 0], [3, 0], [6, 0], [8, 0]]
    assert [i.var_shape for i in infos] == [[3, 3], [3, 3], [2, 3], [2, 3]]
    assert infos[2].spec == "10 3 6,2:0,3"
    # the shards are the variables: in the collections, one Variable node each
    assert tw.global_variables() == shards and tw.trainable_variables() == shards
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        whole = sess.run(v.as_tensor())
        assert whole.shape == (10, 3)
        np.testing.assert_array_equal(whole, np.concatenate(sess.run(shards)))
        np.testing.assert_array_equal(sess.run(tw.convert_to_tensor(v)), whole)
        np.testing.assert_array_equal(sess.run(tw.matmul(tw.ones([1, 10]), v)), whole.sum(0, keepdims=True))


def test_value_initializer_is_sliced_and_axis_1_partitioning():
    value = np.arange(30, dtype=np.float32).reshape(3, 10)
    v = tw.get_variable("w", initializer=value, partitioner=tw.fixed_size_partitioner(4, axis=1))
    assert v._get_partitions() == [1, 4]
    assert [s.shape.as_list() for s in v] == [[3, 3], [3, 3], [3, 2], [3, 2]]
    assert [s._get_save_slice_info().var_offset for s in v] == [[0, 0], [0, 3], [0, 6], [0, 8]]
    t = v.as_tensor()
    assert t.shape.as_list() == [3, 10]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(t), value)
        np.testing.assert_array_equal(sess.run(list(v)[2]), value[:, 6:8])


def test_initializer_gets_each_shards_partition_info():
    seen = []

    def init(shape, dtype=None, partition_info=None):
        seen.append((list(shape), partition_info.full_shape, partition_info.var_offset,
                     partition_info.single_offset(shape), partition_info.single_slice_dim(shape)))
        return tw.fill(shape, float(partition_info.var_offset[0]))

    v = tw.get_variable("v", [5, 2], initializer=init, partitioner=tw.fixed_size_partitioner(2))
    assert seen == [([3, 2], [5, 2], [0, 0], 0, 0), ([2, 2], [5, 2], [3, 0], 3, 0)]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(v.as_tensor())[:, 0], [0, 0, 0, 3, 3])
    # a glorot initializer scales by the full shape's fans, as for an unpartitioned variable
    g = tw.get_variable("g", [400, 100], initializer=tw.glorot_uniform_initializer(seed=1),
                        partitioner=tw.fixed_size_partitioner(4))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        limit = np.sqrt(6.0 / 500)
        value = sess.run(g.as_tensor())
        assert np.abs(value).max() <= limit and np.abs(value).max() > 0.9 * limit


def test_one_shard_and_variable_scope_partitioner():
    with tw.variable_scope("outer", partitioner=tw.fixed_size_partitioner(3)):
        a = tw.get_variable("a", [6, 2])
        with tw.variable_scope("inner"):
            b = tw.get_variable("b", [4])  # inherited
        step = tw.get_variable("step", [], dtype=tw.int64)  # a scope's partitioner leaves scalars whole
        one = tw.get_variable("one", [5], partitioner=tw.fixed_size_partitioner(1))
    assert isinstance(a, tw.PartitionedVariable) and len(a) == 3
    assert isinstance(b, tw.PartitionedVariable) and [s.name for s in b][0] == "outer/inner/b/part_0:0"
    assert isinstance(step, tw.Variable) and step.name == "outer/step:0"
    assert isinstance(one, tw.PartitionedVariable) and len(one) == 1
    assert one._get_partitions() == [1] and list(one)[0]._get_save_slice_info().spec == "5 0,5"
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert sess.run(one.as_tensor()).shape == (5,)


def test_reuse_returns_the_same_partitioned_variable():
    p = tw.fixed_size_partitioner(2)
    with tw.variable_scope("s", partitioner=p):
        v = tw.get_variable("v", [4, 2])
    with tw.variable_scope("s", reuse=True, partitioner=p):
        assert tw.get_variable("v", [4, 2]) is v
        assert tw.get_variable("v") is v
    with tw.variable_scope("s", reuse=True):  # without restating the partitioner
        assert tw.get_variable("v") is v
    with tw.variable_scope("s", reuse=tw.AUTO_REUSE):
        assert tw.get_variable("v", [4, 2], partitioner=p) is v
    assert len(tw.global_variables()) == 2

    with pytest.raises(errors.InvalidArgumentError, match="already exists"):
        with tw.variable_scope("s", partitioner=p):
            tw.get_variable("v", [4, 2])
    with pytest.raises(errors.InvalidArgumentError, match="specified partitions \\[4, 1\\] and found partitions"):
        with tw.variable_scope("s", reuse=True):
            tw.get_variable("v", partitioner=tw.fixed_size_partitioner(4))
    with pytest.raises(errors.InvalidArgumentError, match="specified shape"):
        with tw.variable_scope("s", reuse=True):
            tw.get_variable("v", [5, 2], partitioner=p)
    with pytest.raises(errors.InvalidArgumentError, match="specified dtype"):
        with tw.variable_scope("s", reuse=True):
            tw.get_variable("v", [4, 2], dtype=tw.float64, partitioner=p)
    with pytest.raises(errors.InvalidArgumentError, match="PartitionedVariable s/w does not exist"):
        with tw.variable_scope("s", reuse=True):
            tw.get_variable("w", [4, 2], partitioner=p)


def test_bad_partitioned_variables_fail_clearly_and_create_nothing():
    p = tw.fixed_size_partitioner(2)
    tw.get_variable("plain", [4])
    with pytest.raises(errors.InvalidArgumentError, match="unpartitioned version of the variable was found: plain"):
        tw.get_variable("plain", [4], partitioner=p)
    with pytest.raises(errors.InvalidArgumentError, match="rank at least 1"):
        tw.get_variable("scalar", [], partitioner=p)
    with pytest.raises(ValueError, match="rank at least 1"):  # a ValueError too, as in TF
        tw.get_variable("scalar2", initializer=3.0, partitioner=p)
    with pytest.raises(errors.InvalidArgumentError, match="must be fully defined"):
        tw.get_variable("unknown", [None, 2], partitioner=p)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot create 20 slices for size 10"):
        tw.get_variable("many", [10, 2], partitioner=lambda shape, dtype: [20, 1])
    with pytest.raises(errors.InvalidArgumentError, match="only slice a variable along one dimension"):
        tw.get_variable("two", [10, 2], partitioner=lambda shape, dtype: [2, 2])
    with pytest.raises(errors.InvalidArgumentError, match="does not match the Variable's rank"):
        tw.get_variable("rank", [10, 2], partitioner=lambda shape, dtype: [2])
    with pytest.raises(errors.InvalidArgumentError, match="zero"):
        tw.get_variable("zero", [10, 2], partitioner=lambda shape, dtype: [0, 1])
    with pytest.raises(errors.InvalidArgumentError, match="partitioner must be callable"):
        tw.variable_scope("x", partitioner=4)
    assert [v.op.name for v in tw.global_variables()] == ["plain"]


def test_create_partitioned_variables():
    value = np.arange(12, dtype=np.float32).reshape(6, 2)
    shards = tw.create_partitioned_variables([6, 2], [3, 1], tw.ones_initializer(), name="cpv")
    assert [s.name for s in shards] == ["cpv/part_0:0", "cpv/part_1:0", "cpv/part_2:0"]
    shards2 = tw.create_partitioned_variables([6, 2], [2, 1], value)
    assert [s.op.name for s in shards2] == ["PartitionedVariable/part_0", "PartitionedVariable/part_1"]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        np.testing.assert_array_equal(np.concatenate(sess.run(shards2)), value)
    with pytest.raises(errors.InvalidArgumentError, match="same length"):
        tw.create_partitioned_variables([6, 2], [3], tw.zeros_initializer())


def test_training_through_a_partitioned_variable_matches_an_unpartitioned_one():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((7, 3)).astype(np.float32)
    x = rng.standard_normal((5, 7)).astype(np.float32)

    def run(partitioner):
        with tw.Graph().as_default():
            w = tw.get_variable("w", initializer=w0, partitioner=partitioner)
            loss = tw.reduce_sum(tw.square(tw.matmul(tw.constant(x), w)))
            train = tw.train.GradientDescentOptimizer(0.01).minimize(loss)
            with tw.Session() as sess:
                sess.run(tw.global_variables_initializer())
                losses = [sess.run([train, loss])[1] for _ in range(3)]
                return losses, sess.run(tw.convert_to_tensor(w))

    l1, w1 = run(None)
    l3, w3 = run(tw.fixed_size_partitioner(3))
    np.testing.assert_allclose(l3, l1, rtol=1e-5)
    np.testing.assert_allclose(w3, w1, rtol=1e-5, atol=1e-6)


def test_assign_splits_the_value_over_the_shards():
    v = tw.get_variable("v", [5, 2], partitioner=tw.fixed_size_partitioner(2))
    value = np.arange(10, dtype=np.float32).reshape(5, 2)
    assigns = v.assign(value)
    assert len(assigns) == 2
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run(assigns)
        np.testing.assert_array_equal(sess.run(v.as_tensor()), value)
        sess.run(v.assign_add(np.ones((5, 2), np.float32)))
        np.testing.assert_array_equal(sess.run(v.as_tensor()), value + 1)


# ---------------------------------------------------------------------------------------
# placement over ps tasks
def test_replica_device_setter_spreads_shards_round_robin():
    with tw.device(tw.train.replica_device_setter(ps_tasks=2)):
        emb = tw.get_variable("emb", [10, 4], partitioner=tw.fixed_size_partitioner(4))
        b = tw.get_variable("b", [4])
        y = tw.reduce_sum(emb.as_tensor())
    assert [s.device for s in emb] == ["/job:ps/task:0", "/job:ps/task:1"] * 2
    assert b.device == "/job:ps/task:0"
    # each shard's initializer and read run with it
    assert [s.initializer.device for s in emb] == [s.device for s in emb]
    assert [s.value().device for s in emb] == [s.device for s in emb]
    assert y.device == "/job:worker"


def test_greedy_load_balancing_by_bytes():
    training = tw.contrib.training
    strategy = training.GreedyLoadBalancingStrategy(2, training.byte_size_load_fn)
    with tw.device(tw.train.replica_device_setter(ps_tasks=2, ps_strategy=strategy)):
        big = tw.get_variable("big", [100, 10])        # 4000 bytes -> task 0
        emb = tw.get_variable("emb", [30, 10], partitioner=tw.fixed_size_partitioner(3))  # 400 bytes each
        small = tw.get_variable("small", [10], dtype=tw.float64)
    assert big.device == "/job:ps/task:0"
    assert [s.device for s in emb] == ["/job:ps/task:1"] * 3  # 400, 800, 1200 < 4000
    assert small.device == "/job:ps/task:1"
    assert strategy.loads == [4000.0, 1280.0]
    assert training.byte_size_load_fn(big.op) == 4000
    with pytest.raises(errors.InvalidArgumentError, match="num_tasks"):
        training.GreedyLoadBalancingStrategy(0, training.byte_size_load_fn)
