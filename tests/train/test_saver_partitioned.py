"""The Saver and partitioned variables: shards are saved as slices of one logical tensor
under its full name, and restore into the same or a different number of shards, or into an
unpartitioned variable; a different full shape is a clear error that changes nothing."""

import os

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors

FULL = np.arange(60, dtype=np.float32).reshape(10, 6)


def _build(shards, shape=(10, 6), axis=0, name="emb", value=FULL, extra=True):
    """A graph with variable ``name`` in ``shards`` shards (0: unpartitioned) and a bias."""
    g = tw.Graph()
    with g.as_default():
        partitioner = tw.fixed_size_partitioner(shards, axis=axis) if shards else None
        if value is not None:
            v = tw.get_variable(name, initializer=value, partitioner=partitioner)
        else:
            v = tw.get_variable(name, list(shape), initializer=tw.zeros_initializer(), partitioner=partitioner)
        if extra:
            tw.get_variable("bias", initializer=np.arange(3, dtype=np.float32))
        whole = tw.convert_to_tensor(v)
        saver = tw.train.Saver()
        init = tw.global_variables_initializer()
    return g, v, whole, saver, init


def _save(tmp_path, shards, **kw):
    g, _v, _whole, saver, init = _build(shards, **kw)
    with tw.Session(graph=g) as sess:
        sess.run(init)
        return saver.save(sess, os.path.join(tmp_path, f"model-{shards}"))


def _restore(path, shards, **kw):
    g, v, whole, saver, _init = _build(shards, value=None, **kw)
    with tw.Session(graph=g) as sess:
        saver.restore(sess, path)
        return v, sess.run(whole)


@pytest.mark.parametrize("saved,restored", [(4, 2), (4, 1), (4, 0), (1, 3), (0, 3), (3, 3), (2, 10)])
def test_restore_into_a_different_number_of_shards(tmp_path, saved, restored):
    path = _save(tmp_path, saved)
    v, got = _restore(path, restored)
    assert (len(v) if restored else 0) == restored
    np.testing.assert_array_equal(got, FULL)


def test_four_to_two_to_one_shards(tmp_path):
    path = _save(tmp_path, 4)
    g, v, whole, saver, _ = _build(2, value=None)
    with tw.Session(graph=g) as sess:
        saver.restore(sess, path)
        np.testing.assert_array_equal(sess.run(list(v)[1]), FULL[5:])
        path2 = saver.save(sess, os.path.join(tmp_path, "two"))
    _v, got = _restore(path2, 1)
    np.testing.assert_array_equal(got, FULL)


def test_axis_1_partitioning_repartitions(tmp_path):
    path = _save(tmp_path, 4, axis=1)
    _v, got = _restore(path, 2, axis=1)
    np.testing.assert_array_equal(got, FULL)
    _v, got = _restore(path, 3, axis=0)  # cut along the other axis
    np.testing.assert_array_equal(got, FULL)


def test_checkpoint_holds_the_full_logical_tensor(tmp_path):
    path = _save(tmp_path, 4)
    assert tw.train.list_variables(path) == [("bias", [3]), ("emb", [10, 6])]
    np.testing.assert_array_equal(tw.train.load_variable(path, "emb"), FULL)
    np.testing.assert_array_equal(tw.train.load_variable(str(tmp_path), "emb:0"), FULL)  # the directory's latest
    reader = tw.train.NewCheckpointReader(path)
    assert reader.get_variable_to_shape_map() == {"emb": [10, 6], "bias": [3]}
    assert reader.has_tensor("emb") and not reader.has_tensor("emb/part_0")
    np.testing.assert_array_equal(reader.get_tensor("emb"), FULL)


def test_different_full_shape_is_an_error_naming_both_shapes(tmp_path):
    path = _save(tmp_path, 4)
    for shards in (2, 0):
        g, v, whole, saver, init = _build(shards, shape=(12, 6), value=None)
        with tw.Session(graph=g) as sess:
            sess.run(init)
            bias = g.get_collection(tw.GraphKeys.GLOBAL_VARIABLES)[-1]
            sess.run(bias.assign([7.0, 7.0, 7.0]))
            before = sess.run(whole)
            with pytest.raises(errors.InvalidArgumentError, match=r"'emb'.*(\(12, 6\)|\[12, 6\]).*\[10, 6\]"):
                saver.restore(sess, path)
            np.testing.assert_array_equal(sess.run(whole), before)
            np.testing.assert_array_equal(sess.run(bias), [7.0, 7.0, 7.0])  # nothing was assigned


def test_restore_kernel_checks_the_full_shape_too(tmp_path):
    from tensorweave.ops import checkpoint_ops

    path = _save(tmp_path, 4)
    t = checkpoint_ops.restore_v2(path, ["emb"], ["12 6 0,6:-"], [tw.float32])
    assert t[0].shape.as_list() == [6, 6]
    with tw.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match=r"has shape \[10, 6\].*full shape \[12, 6\]"):
            sess.run(t)
    ok = checkpoint_ops.restore_v2(path, ["emb", "emb"], ["10 6 2,3:-", "10 6 -:1,2"], [tw.float32] * 2)
    with tw.Session() as sess:
        a, b = sess.run(ok)
    np.testing.assert_array_equal(a, FULL[2:5])
    np.testing.assert_array_equal(b, FULL[:, 1:3])


def test_var_list_forms(tmp_path):
    g, v, whole, _saver, init = _build(3, extra=False)
    with g.as_default():
        by_list = tw.train.Saver([v])
        by_dict = tw.train.Saver({"table": v})
        by_shards = tw.train.Saver(list(v))
        seq = tw.train.Saver([v], restore_sequentially=True)
        with pytest.raises(errors.InvalidArgumentError, match="cover 42 of the 60 elements"):
            tw.train.Saver(list(v)[:2])
        with pytest.raises(errors.InvalidArgumentError, match="appears twice"):
            tw.train.Saver([v, list(v)[0]])
        with pytest.raises(errors.InvalidArgumentError, match="is not"):
            tw.train.Saver({"x": [tw.Variable(1.0, name="plain")]})
    with tw.Session(graph=g) as sess:
        sess.run(init)
        p1 = by_list.save(sess, os.path.join(tmp_path, "list"), write_state=False)
        p2 = by_dict.save(sess, os.path.join(tmp_path, "dict"), write_state=False)
        p3 = by_shards.save(sess, os.path.join(tmp_path, "shards"), write_state=False)
        assert [n for n, _ in tw.train.list_variables(p1)] == ["emb"]
        assert [n for n, _ in tw.train.list_variables(p2)] == ["table"]
        assert [n for n, _ in tw.train.list_variables(p3)] == ["emb"]
        sess.run([s.assign(tw.zeros_like(s)) for s in v])
        seq.restore(sess, p1)
        np.testing.assert_array_equal(sess.run(whole), FULL)


def test_string_partitioned_variable(tmp_path):
    words = np.array([[b"a", b"bb"], [b"ccc", b""], [b"e", b"ff"]], dtype=object)
    g = tw.Graph()
    with g.as_default():
        v = tw.get_variable("words", initializer=tw.constant(words), partitioner=tw.fixed_size_partitioner(2))
        saver = tw.train.Saver()
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            path = saver.save(sess, os.path.join(tmp_path, "s"))
    np.testing.assert_array_equal(tw.train.load_variable(path, "words"), words)
    g = tw.Graph()
    with g.as_default():
        v = tw.get_variable("words", [3, 2], dtype=tw.string, partitioner=tw.fixed_size_partitioner(3))
        saver = tw.train.Saver()
        with tw.Session() as sess:
            saver.restore(sess, path)
            np.testing.assert_array_equal(sess.run(v.as_tensor()), words)
