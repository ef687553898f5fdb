"""tw.data iterators: one-shot, initializable (re-initialised with new feeds), reinitializable
(from_structure + make_initializer), feedable (from_string_handle + string_handle), the end of
a dataset (OutOfRangeError, sticky; MonitoredTrainingSession stops cleanly on it)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import data as tw_data

Dataset = tw_data.Dataset


def test_one_shot_iterator_needs_no_initializer_and_ends_with_out_of_range():
    nxt = Dataset.range(3).map(lambda x: x * 2).make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        assert [int(sess.run(nxt)) for _ in range(3)] == [0, 2, 4]
        for _ in range(3):  # the iterator stays at the end
            with pytest.raises(tw.errors.OutOfRangeError, match="End of sequence"):
                sess.run(nxt)
    with tw.Session() as sess:  # a new session starts a new iterator
        assert int(sess.run(nxt)) == 0


def test_one_shot_iterator_refuses_placeholders():
    n = tw.placeholder(tw.int64, [])
    with pytest.raises(tw.errors.InvalidArgumentError, match="placeholder.*make_initializable_iterator"):
        Dataset.range(n).make_one_shot_iterator()
    with pytest.raises(tw.errors.InvalidArgumentError, match="initializer"):
        _ = Dataset.range(3).make_one_shot_iterator().initializer


def test_initializable_iterator_restarts_with_new_feeds():
    data = tw.placeholder(tw.float32, [None, 2])
    it = Dataset.from_tensor_slices(data).batch(2).make_initializable_iterator()
    nxt = it.get_next()
    with tw.Session() as sess:
        with pytest.raises(tw.errors.FailedPreconditionError, match="not been initialized"):
            sess.run(nxt)
        sess.run(it.initializer, {data: np.ones((3, 2), np.float32)})
        assert sess.run(nxt).shape == (2, 2)
        sess.run(it.initializer, {data: np.zeros((5, 2), np.float32)})  # restarts, with the new value
        shapes = []
        while True:
            try:
                v = sess.run(nxt)
            except tw.errors.OutOfRangeError:
                break
            assert not v.any()
            shapes.append(v.shape)
        assert shapes == [(2, 2), (2, 2), (1, 2)]


def test_reinitializable_iterator_switches_datasets():
    train = Dataset.range(100).map(lambda x: tw.cast(x, tw.float32)).batch(4)
    val = Dataset.from_tensor_slices(np.full((3,), -1.0, np.float32)).batch(4)
    it = tw_data.Iterator.from_structure(train.output_types, train.output_shapes)
    assert it.output_types == tw.float32 and it.output_shapes == tw.TensorShape([None])
    nxt = it.get_next()
    train_init, val_init = it.make_initializer(train), it.make_initializer(val)
    with tw.Session() as sess:
        sess.run(train_init)
        assert sess.run(nxt).tolist() == [0, 1, 2, 3]
        sess.run(val_init)
        assert sess.run(nxt).tolist() == [-1, -1, -1]
        with pytest.raises(tw.errors.OutOfRangeError):
            sess.run(nxt)
        sess.run(train_init)
        assert sess.run(nxt).tolist() == [0, 1, 2, 3]


def test_make_initializer_checks_types_and_structure():
    it = tw_data.Iterator.from_structure((tw.int64, tw.float32), ([], [None]))
    with pytest.raises(TypeError, match="output types"):
        it.make_initializer(Dataset.from_tensors((np.int64(1), [1, 2])))  # int32, not float32
    with pytest.raises(TypeError, match="structure"):
        it.make_initializer(Dataset.range(3))
    with pytest.raises(TypeError, match="output shapes"):
        it.make_initializer(Dataset.from_tensors((np.int64(1), np.float32(2))))


def test_feedable_iterator_chooses_the_iterator_per_step():
    train = Dataset.range(1000).repeat()
    val = Dataset.range(-10, 0)
    handle = tw.placeholder(tw.string, [])
    it = tw_data.Iterator.from_string_handle(handle, train.output_types, train.output_shapes)
    nxt = it.get_next()
    train_it = train.make_one_shot_iterator()
    val_it = val.make_initializable_iterator()
    with tw.Session() as sess:
        th, vh = sess.run([train_it.string_handle(), val_it.string_handle()])
        assert isinstance(th, bytes) and th != vh
        assert [int(sess.run(nxt, {handle: th})) for _ in range(3)] == [0, 1, 2]
        sess.run(val_init := val_it.initializer)
        assert [int(sess.run(nxt, {handle: vh})) for _ in range(2)] == [-10, -9]
        assert int(sess.run(nxt, {handle: th})) == 3  # the training iterator kept its place
        sess.run(val_init)
        assert int(sess.run(nxt, {handle: vh})) == -10


def test_string_handle_of_another_element_type_is_refused():
    ints = Dataset.range(3).make_one_shot_iterator()
    handle = tw.placeholder(tw.string, [])
    floats = tw_data.Iterator.from_string_handle(handle, tw.float32, [])
    nxt = floats.get_next()
    with tw.Session() as sess:
        h = sess.run(ints.string_handle())
        with pytest.raises(tw.errors.InvalidArgumentError, match="produces.*int64.*not.*float32"):
            sess.run(nxt, {handle: h})


def test_get_next_structures():
    ds = Dataset.from_tensor_slices({"x": np.zeros((2, 3), np.float32), "y": ([1, 2], [b"a", b"b"])})
    el = ds.make_one_shot_iterator().get_next()
    assert set(el) == {"x", "y"} and isinstance(el["y"], tuple)
    assert el["x"].shape == tw.TensorShape([3]) and el["y"][1].dtype is tw.string
    with tw.Session() as sess:
        v = sess.run(el)
    assert v["y"][1] == b"a" and v["x"].shape == (3,)


def test_monitored_training_session_stops_at_the_end():
    step = tw.train.get_or_create_global_step()
    nxt = Dataset.range(10).batch(3).make_one_shot_iterator().get_next()
    inc = tw.assign_add(step, 1)
    seen = []
    with tw.train.MonitoredTrainingSession() as sess:
        while not sess.should_stop():
            b, _ = sess.run([nxt, inc])
            seen.append(b.tolist())
    assert seen == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_shared_iterators_by_name():
    with tw.container("data_test_shared"):
        a = Dataset.range(5).make_initializable_iterator(shared_name="shared_it")
        b = tw_data.Iterator.from_structure(tw.int64, [], shared_name="shared_it")
    na, nb = a.get_next(), b.get_next()
    try:
        with tw.Session() as sess:
            sess.run(a.initializer)
            assert [int(sess.run(na)), int(sess.run(nb)), int(sess.run(na))] == [0, 1, 2]
    finally:
        tw.Session.reset("", ["data_test_shared"])
