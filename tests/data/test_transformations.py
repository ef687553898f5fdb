"""tw.data transformations against TF 1.x's documented behaviour: map (structures,
captured tensors, control flow inside), filter, flat_map, interleave, batch, padded_batch,
shuffle (seeds, reshuffling), repeat, take, skip, cache, apply, prefetch."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import data as tw_data
from tensorweave.testing.datasets import elements as values

Dataset = tw_data.Dataset


def ints(dataset, **kw):
    return [int(v) for v in values(dataset, **kw)]


# -- map ----------------------------------------------------------------------------------
def test_map_unpacks_tuples_and_passes_dicts_whole():
    ds = Dataset.from_tensor_slices(([1, 2], [10, 20])).map(lambda a, b: {"sum": a + b, "pair": (a, b)})
    assert ds.output_types == {"pair": (tw.int32, tw.int32), "sum": tw.int32}
    out = values(ds)
    assert [int(o["sum"]) for o in out] == [11, 22]
    ds2 = Dataset.from_tensor_slices({"a": [1, 2], "b": [3, 4]}).map(lambda d: d["a"] * d["b"])
    assert ints(ds2) == [3, 8]


def test_map_static_shapes_come_from_tracing():
    ds = Dataset.from_tensor_slices(np.zeros((4, 3, 2), np.float32)).map(lambda x: tw.reshape(x, [6]))
    assert ds.output_shapes == tw.TensorShape([6])
    assert values(ds)[0].shape == (6,)


def test_map_returning_python_values_and_lists():
    ds = Dataset.range(3).map(lambda x: (x, 7, [x, x]))
    assert ds.output_types == (tw.int64, tw.int32, tw.int64)
    assert [(int(a), int(b), list(c)) for a, b, c in values(ds)] == [(0, 7, [0, 0]), (1, 7, [1, 1]), (2, 7, [2, 2])]


def test_map_captures_constants_placeholders_and_variables():
    scale = tw.placeholder(tw.int64, [])
    offset = tw.constant(100, tw.int64)
    v = tw.Variable(np.int64(5), name="v")
    ds = Dataset.range(3).map(lambda x: x * scale + offset + v)
    ops_before = len(tw.get_default_graph().get_operations())
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert ints(ds, sess=sess, feed={scale: 2}) == [105, 107, 109]
        assert ints(ds, sess=sess, feed={scale: 10}) == [105, 115, 125]  # re-initialised with the new feed
    # the function's ops are not in the user's graph: values(...) only added iterator ops
    names = [op.name for op in tw.get_default_graph().get_operations()[:ops_before]]
    assert not any("/fn/" in n for n in names)


def test_map_with_cond_and_while_loop_inside():
    def fn(x):
        small = tw.cond(x < 2, lambda: x * 10, lambda: -x)
        _, total = tw.while_loop(lambda i, s: i < x, lambda i, s: (i + 1, s + i),
                                 [tw.constant(0, tw.int64), tw.constant(0, tw.int64)])
        return small, total

    assert [(int(a), int(b)) for a, b in values(Dataset.range(4).map(fn))] == [(0, 0), (10, 0), (-2, 1), (-3, 3)]


def test_nested_functions_flat_map_of_a_map():
    ds = Dataset.range(3).flat_map(lambda x: Dataset.range(x).map(lambda y: y + 10 * x))
    assert ints(ds) == [10, 20, 21]


# -- filter, flat_map, interleave ------------------------------------------------------
def test_filter():
    assert ints(Dataset.range(10).filter(lambda x: tw.equal(x % 3, 0))) == [0, 3, 6, 9]
    t = tw.placeholder(tw.int64, [])
    assert ints(Dataset.range(10).filter(lambda x: x > t), feed={t: 6}) == [7, 8, 9]


def test_flat_map():
    ds = Dataset.from_tensor_slices([[1, 2], [3, 4]]).flat_map(lambda row: Dataset.from_tensor_slices(row))
    assert ints(ds) == [1, 2, 3, 4]


def test_interleave_documented_example():
    a = Dataset.from_tensor_slices(np.array([1, 2, 3, 4, 5], np.int64))
    ds = a.interleave(lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
    assert ints(ds) == [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4,
                        5, 5, 5, 5, 5, 5]


def test_interleave_of_files(tmp_path):
    paths = []
    for f in range(3):
        p = str(tmp_path / f"f{f}.tfrecord")
        with tw.python_io.TFRecordWriter(p) as w:
            for i in range(2):
                w.write(b"%d%d" % (f, i))
        paths.append(p)
    ds = Dataset.from_tensor_slices(paths).interleave(tw_data.TFRecordDataset, cycle_length=3)
    assert values(ds) == [b"00", b"10", b"20", b"01", b"11", b"21"]


# -- batching ----------------------------------------------------------------------------------
def test_batch_and_remainder():
    out = values(Dataset.range(10).batch(4))
    assert [list(b) for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    ds = Dataset.range(10).batch(4, drop_remainder=True)
    assert ds.output_shapes == tw.TensorShape([4])
    assert [list(b) for b in values(ds)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert Dataset.range(10).batch(4).output_shapes == tw.TensorShape([None])


def test_batch_of_structures():
    ds = Dataset.from_tensor_slices((np.arange(6).reshape(3, 2), [b"a", b"b", b"c"])).batch(2)
    assert ds.output_shapes == (tw.TensorShape([None, 2]), tw.TensorShape([None]))
    (x0, s0), (x1, s1) = values(ds)
    np.testing.assert_array_equal(x0, [[0, 1], [2, 3]])
    assert list(s0) == [b"a", b"b"] and list(s1) == [b"c"]


def test_padded_batch_documented_example():
    a = Dataset.range(1, 5).map(lambda x: tw.fill(tw.reshape(tw.cast(x, tw.int32), [1]), x))
    b = a.padded_batch(2, padded_shapes=[None])
    assert b.output_shapes == tw.TensorShape([None, None])
    out = values(b)
    assert [x.tolist() for x in out] == [[[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]


def test_padded_batch_fixed_shapes_and_padding_values():
    ds = Dataset.from_generator(lambda: iter([([1], b"a"), ([2, 2], b"bb")]), (tw.int32, tw.string),
                                ([None], []))
    out = values(ds.padded_batch(2, padded_shapes=([4], []), padding_values=(-1, b"")))
    assert out[0][0].tolist() == [[1, -1, -1, -1], [2, 2, -1, -1]]
    assert out[0][1].tolist() == [b"a", b"bb"]


# -- order ----------------------------------------------------------------------------------
def test_shuffle_is_a_permutation_and_seeded():
    tw.set_random_seed(3)
    ds = Dataset.range(20).shuffle(10)
    with tw.Session() as s1:
        first = ints(ds, sess=s1)
    with tw.Session() as s2:
        again = ints(ds, sess=s2)
    assert sorted(first) == list(range(20)) and first != list(range(20))
    assert again == first  # same graph seed: the same order in a new session
    tw.reset_default_graph()
    other = ints(Dataset.range(20).shuffle(10, seed=5))
    tw.reset_default_graph()
    assert ints(Dataset.range(20).shuffle(10, seed=5)) == other  # op seed alone is deterministic too


def test_shuffle_reshuffles_each_epoch_unless_told_not_to():
    epochs = ints(Dataset.range(10).shuffle(10, seed=1).repeat(3))
    e = [epochs[i * 10:(i + 1) * 10] for i in range(3)]
    assert all(sorted(x) == list(range(10)) for x in e)
    assert len({tuple(x) for x in e}) == 3
    fixed = ints(Dataset.range(10).shuffle(10, seed=1, reshuffle_each_iteration=False).repeat(3))
    assert fixed[:10] == fixed[10:20] == fixed[20:]


def test_shuffle_buffer_limits_how_far_elements_move():
    out = ints(Dataset.range(100).shuffle(3, seed=2))
    # with a buffer of 3, element i can come out no earlier than position i - 2
    assert all(pos >= v - 2 for pos, v in enumerate(out))


def test_repeat_take_skip():
    assert ints(Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert ints(Dataset.range(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert ints(Dataset.range(3).repeat(0)) == []
    assert ints(Dataset.range(0).repeat()) == []  # an empty input repeated forever is empty
    assert ints(Dataset.range(5).take(2)) == [0, 1]
    assert ints(Dataset.range(5).take(-1)) == [0, 1, 2, 3, 4]
    assert ints(Dataset.range(5).skip(2)) == [2, 3, 4]
    assert ints(Dataset.range(5).skip(-1)) == []
    assert ints(Dataset.range(5).skip(9)) == []


def test_prefetch_keeps_elements_and_order():
    assert ints(Dataset.range(50).map(lambda x: x * 2).prefetch(4)) == list(range(0, 100, 2))


def test_apply():
    def every_other(ds):
        return ds.filter(lambda x: tw.equal(x % 2, 0))
    assert ints(Dataset.range(6).apply(every_other)) == [0, 2, 4]
    with pytest.raises(TypeError, match="must return a Dataset"):
        Dataset.range(3).apply(lambda ds: 3)


# -- cache ----------------------------------------------------------------------------------
def counting_source():
    calls = []

    def gen():
        calls.append(1)
        yield from range(3)
    return Dataset.from_generator(gen, tw.int64, []), calls


def test_cache_in_memory_reads_the_input_once():
    ds, calls = counting_source()
    assert ints(ds.cache().repeat(3)) == [0, 1, 2] * 3
    assert len(calls) == 1


def test_cache_file_is_reused_by_a_later_session(tmp_path):
    prefix = str(tmp_path / "cache")
    ds, calls = counting_source()
    cached = ds.map(lambda x: (x, tw.constant(b"s"), tw.cast(x, tw.float32) / 2)).cache(prefix)
    first = values(cached)
    assert len(calls) == 1 and (tmp_path / "cache.twcache").exists()
    again = values(cached)  # a new session: the file is read, the generator not called
    assert len(calls) == 1
    assert [(int(a), b, float(c)) for a, b, c in again] == [(int(a), b, float(c)) for a, b, c in first]
    assert [float(c) for _, _, c in first] == [0.0, 0.5, 1.0]


def test_cache_partial_pass_caches_nothing():
    ds, calls = counting_source()
    it = ds.cache().repeat(2).make_initializable_iterator()
    nxt = it.get_next()
    with tw.Session() as sess:
        sess.run(it.initializer)
        assert int(sess.run(nxt)) == 0
        sess.run(it.initializer)  # restarted before the first pass finished
        assert [int(sess.run(nxt)) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    assert len(calls) == 2


def test_shard():
    assert ints(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert ints(Dataset.range(10).shard(3, 0)) == [0, 3, 6, 9]
    with pytest.raises(tw.errors.InvalidArgumentError, match="index < num_shards"):
        ints(Dataset.range(10).shard(3, 3))


def test_cache_file_of_a_partial_pass_leaves_no_file(tmp_path):
    ds, calls = counting_source()
    it = ds.cache(str(tmp_path / "c")).make_initializable_iterator()
    nxt = it.get_next()
    with tw.Session() as sess:
        sess.run(it.initializer)
        sess.run(it.initializer)  # a pass that never started
        assert int(sess.run(nxt)) == 0
    assert list(tmp_path.iterdir()) == []  # the stopped pass's temporary file is gone too
