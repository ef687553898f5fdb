"""tw.get_variable and tw.variable_scope: naming, reuse semantics and errors."""

import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors


def test_nested_scopes_name_variables():
    with tw.variable_scope("foo"):
        with tw.variable_scope("bar"):
            v = tw.get_variable("v", [1])
    assert v.name == "foo/bar/v:0"
    assert v.dtype is tw.float32 and v.shape.as_list() == [1]
    assert v in tw.trainable_variables() and v in tw.global_variables()


def test_reuse_true_returns_the_existing_variable():
    with tw.variable_scope("foo"):
        v = tw.get_variable("v", [2, 3])
    with tw.variable_scope("foo", reuse=True):
        v1 = tw.get_variable("v", [2, 3])
        v2 = tw.get_variable("v")  # shape may be left out when reusing
    assert v1 is v and v2 is v
    assert len(tw.global_variables()) == 1


def test_existing_variable_without_reuse_is_an_error():
    with tw.variable_scope("foo"):
        tw.get_variable("v", [1])
    with pytest.raises(errors.InvalidArgumentError, match="Variable foo/v already exists, disallowed"):
        with tw.variable_scope("foo"):
            tw.get_variable("v", [1])
    with pytest.raises(ValueError):  # also a ValueError, as in TensorFlow
        with tw.variable_scope("foo", reuse=False):
            tw.get_variable("v", [1])


def test_missing_variable_with_reuse_is_an_error():
    with pytest.raises(errors.InvalidArgumentError, match="Variable foo/w does not exist"):
        with tw.variable_scope("foo", reuse=True):
            tw.get_variable("w", [1])
    assert tw.global_variables() == []


def test_auto_reuse():
    def f():
        with tw.variable_scope("foo", reuse=tw.AUTO_REUSE):
            return tw.get_variable("v", [1])
    assert f() is f()
    assert len(tw.global_variables()) == 1


def test_reuse_is_inherited_and_cannot_be_switched_off_inside():
    with tw.variable_scope("a"):
        with tw.variable_scope("b"):
            v = tw.get_variable("v", [1])
    with tw.variable_scope("a", reuse=True) as outer:
        assert outer.reuse is True
        with tw.variable_scope("b", reuse=False) as inner:
            assert inner.reuse is True
            assert tw.get_variable("v", [1]) is v


def test_reuse_variables_switches_the_rest_of_the_block():
    with tw.variable_scope("foo") as scope:
        v = tw.get_variable("v", [1])
        scope.reuse_variables()
        assert tw.get_variable("v", [1]) is v
        assert tw.get_variable_scope().reuse is True


def test_reentering_a_captured_scope():
    with tw.variable_scope("foo") as foo:
        v = tw.get_variable("v", [1])
    with tw.variable_scope("other"):
        with tw.variable_scope(foo, reuse=True) as again:
            assert again.name == "foo"  # not nested under "other"
            assert tw.get_variable("v") is v
            w = tw.get_variable_scope()
            assert w.name == "foo"
    with tw.variable_scope(foo):
        u = tw.get_variable("u", [1])
    assert u.name == "foo/u:0"


def test_shape_and_dtype_mismatch_on_reuse():
    with tw.variable_scope("foo"):
        tw.get_variable("v", [2])
    with tw.variable_scope("foo", reuse=True):
        with pytest.raises(errors.InvalidArgumentError, match="specified shape .*3.* and found shape"):
            tw.get_variable("v", [3])
        with pytest.raises(errors.InvalidArgumentError, match="specified dtype float64 and found dtype float32"):
            tw.get_variable("v", [2], dtype=tw.float64)


def test_default_name_is_made_unique_and_reset_when_the_parent_is_reentered():
    names = []
    with tw.variable_scope("model"):
        for _ in range(2):
            with tw.variable_scope(None, default_name="dense"):
                names.append(tw.get_variable("w", [1]).name)
    with tw.variable_scope("model", reuse=True):
        with tw.variable_scope(None, default_name="dense"):
            again = tw.get_variable("w", [1])
    assert names == ["model/dense/w:0", "model/dense_1/w:0"]
    assert again.name == "model/dense/w:0"


def test_ops_in_a_scope_get_its_name_scope_but_get_variable_ignores_name_scopes():
    with tw.variable_scope("foo") as scope:
        c = tw.constant(1.0, name="c")
        assert scope.original_name_scope == "foo/"
    with tw.variable_scope("foo", reuse=tw.AUTO_REUSE):
        c2 = tw.constant(1.0, name="c")
    with tw.name_scope("ns"):
        v = tw.get_variable("v", [1])
    assert (c.name, c2.name, v.name) == ("foo/c:0", "foo_1/c:0", "v:0")


def test_scope_initializer_and_dtype_are_defaults():
    with tw.variable_scope("s", initializer=tw.constant_initializer(2.0), dtype=tw.float64):
        a = tw.get_variable("a", [2])
        b = tw.get_variable("b", [2], initializer=tw.ones_initializer())
        with tw.variable_scope("inner"):
            c = tw.get_variable("c", [1])
    assert a.dtype is tw.float64 and c.dtype is tw.float64
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        np.testing.assert_array_equal(s.run(a), [2.0, 2.0])
        np.testing.assert_array_equal(s.run(b), [1.0, 1.0])
        np.testing.assert_array_equal(s.run(c), [2.0])


def test_default_initializers():
    f = tw.get_variable("f", [50, 50])
    i = tw.get_variable("i", [3], dtype=tw.int64)
    bo = tw.get_variable("bo", [2], dtype=tw.bool)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        fv, iv, bv = s.run([f, i, bo])
    limit = np.sqrt(6.0 / 100)
    assert np.abs(fv).max() <= limit and fv.std() > 0.3 * limit  # glorot_uniform
    np.testing.assert_array_equal(iv, [0, 0, 0])
    np.testing.assert_array_equal(bv, [False, False])
    names = [op.name for op in tw.get_default_graph().get_operations()]
    assert any(n.startswith("f/Initializer/") for n in names)


def test_initializer_forms():
    a = tw.get_variable("a", initializer=tw.constant([1.0, 2.0], tw.float64))
    b = tw.get_variable("b", initializer=np.arange(3, dtype=np.int32))
    c = tw.get_variable("c", initializer=lambda: np.ones(2, np.float32))
    d = tw.get_variable("d", [2], initializer=tw.ones_initializer)  # a class is instantiated
    e = tw.get_variable("e", [2], initializer=lambda shape, dtype=None, partition_info=None: tw.fill(shape, 7.0))
    assert (a.dtype, b.dtype, c.dtype) == (tw.float64, tw.int32, tw.float32)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        np.testing.assert_array_equal(s.run(a), [1.0, 2.0])
        np.testing.assert_array_equal(s.run(b), [0, 1, 2])
        np.testing.assert_array_equal(s.run(c), [1.0, 1.0])
        np.testing.assert_array_equal(s.run(d), [1.0, 1.0])
        np.testing.assert_array_equal(s.run(e), [7.0, 7.0])


def test_bad_get_variable_calls():
    with pytest.raises(errors.InvalidArgumentError, match="do not also specify a shape"):
        tw.get_variable("a", [2], initializer=tw.constant([1.0, 2.0]))
    with pytest.raises(errors.InvalidArgumentError, match="must be fully defined"):
        tw.get_variable("b", [None, 2])
    with pytest.raises(errors.InvalidArgumentError, match="must be fully defined"):
        tw.get_variable("c")
    with pytest.raises(errors.InvalidArgumentError, match="initializer is required"):
        tw.get_variable("d", [2], dtype=tw.complex64)
    with pytest.raises(errors.InvalidArgumentError, match="non-empty string"):
        tw.get_variable("", [2])
    with pytest.raises(errors.InvalidArgumentError, match="Partitioner must return a sequence"):
        tw.get_variable("e", [2], partitioner=lambda **kw: None)
    assert tw.global_variables() == []


def test_bad_variable_scope_calls():
    with pytest.raises(errors.InvalidArgumentError, match="name_or_scope is required"):
        tw.variable_scope(None)
    with pytest.raises(errors.InvalidArgumentError, match="reuse"):
        tw.variable_scope("x", reuse="yes")
    with pytest.raises(errors.InvalidArgumentError, match="reuse=True cannot be used without"):
        tw.variable_scope(None, default_name="d", reuse=True)


def test_trainable_and_collections():
    v = tw.get_variable("v", [1], trainable=False)
    w = tw.get_variable("w", [1], collections=[tw.GraphKeys.LOCAL_VARIABLES])
    assert v in tw.global_variables() and v not in tw.trainable_variables()
    assert w in tw.local_variables() and w in tw.trainable_variables() and w not in tw.global_variables()


def test_scope_state_is_per_graph_and_restored_after_errors():
    g = tw.Graph()
    with tw.variable_scope("outer"):
        with g.as_default():
            assert tw.get_variable_scope().name == ""
            v = tw.get_variable("v", [1])
        with pytest.raises(errors.InvalidArgumentError):
            with tw.variable_scope("inner", reuse=True):
                tw.get_variable("missing", [1])
        assert tw.get_variable_scope().name == "outer"
    assert v.name == "v:0" and v.graph is g
    assert tw.get_variable_scope().name == ""


def test_scope_is_per_thread():
    seen = []

    def other():
        seen.append(tw.get_variable_scope().name)

    with tw.variable_scope("main_thread_scope"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == [""]


def test_variables_from_get_variable_train():
    with tw.variable_scope("lin"):
        w = tw.get_variable("w", [2], dtype=tw.float64, initializer=tw.zeros_initializer())
    loss = tw.reduce_sum(tw.square(w - tw.constant([1.0, -1.0], tw.float64)))
    train = tw.train.GradientDescentOptimizer(0.25).minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        for _ in range(30):
            s.run(train)
        np.testing.assert_allclose(s.run(w), [1.0, -1.0], atol=1e-6)
