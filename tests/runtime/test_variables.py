"""Variables, Assign*, and containers (whitepaper 4.7)."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors


def test_uninitialised_read_names_the_variable(sess):
    v = tw.Variable(tw.constant([1.0, 2.0]), name="weights")
    with pytest.raises(errors.FailedPreconditionError, match="uninitialized value weights"):
        sess.run(v)
    with pytest.raises(errors.FailedPreconditionError, match="uninitialized value weights"):
        sess.run(v * 2.0)
    sess.run(v.initializer)
    np.testing.assert_array_equal(sess.run(v), [1.0, 2.0])


def test_assign_ops_and_read_after_control_dependency(sess):
    v = tw.Variable(np.float32(1.0), name="v")
    sess.run(tw.global_variables_initializer())
    assert sess.run(v.assign(5.0)) == 5.0
    assert sess.run(v.assign_add(2.0)) == 7.0
    assert sess.run(tw.assign_sub(v, 3.0)) == 4.0
    upd = v.assign(10.0)
    with tw.control_dependencies([upd]):
        after = v.read_value()  # a fresh read, made after the assign (TF1 semantics)
    assert sess.run(after) == 10.0
    assert sess.run(tw.is_variable_initialized(v))


def test_assign_shape_and_dtype_checks():
    v = tw.Variable(np.zeros(3, np.float32), name="v")
    with pytest.raises(errors.InvalidArgumentError, match="Assign node.*not compatible"):
        v.assign(np.zeros(4, np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="dtype"):
        v.assign(np.zeros(3, np.complex64))
    with pytest.raises(errors.InvalidArgumentError, match="input 'ref' must be a variable"):
        tw.assign(tw.constant(1.0), 2.0)


def test_fetched_values_do_not_change_when_the_variable_does(sess):
    v = tw.Variable(np.zeros(3, np.float32))
    sess.run(v.initializer)
    before = sess.run(v)
    sess.run(v.assign_add(np.ones(3, np.float32)))
    np.testing.assert_array_equal(before, [0, 0, 0])


def test_default_container_is_per_session():
    v = tw.Variable(1.0, name="v")
    inc = v.assign_add(1.0)
    with tw.Session() as s1, tw.Session() as s2:
        s1.run(v.initializer)
        s2.run(v.initializer)
        s1.run(inc)
        assert s1.run(v) == 2.0
        assert s2.run(v) == 1.0


def test_named_container_shares_state_across_graphs_and_resets():
    g1, g2 = tw.Graph(), tw.Graph()
    with g1.as_default(), tw.container("shared_test"):
        v1 = tw.Variable(np.float32(5.0), name="counter")
        inc = v1.assign_add(1.0)
    with g2.as_default(), tw.container("shared_test"):
        v2 = tw.Variable(np.float32(0.0), name="counter")
    with tw.Session(graph=g1) as s1, tw.Session(graph=g2) as s2:
        s1.run(v1.initializer)
        s1.run(inc)
        assert s2.run(v2) == 6.0  # graph 2 sees what graph 1 wrote, without initialising
        tw.Session.reset("", ["shared_test"])
        with pytest.raises(errors.FailedPreconditionError, match="uninitialized value counter"):
            s2.run(v2)
        s2.run(v2.initializer)
        assert s1.run(v1) == 0.0


def test_variable_from_callable_and_dtype():
    v = tw.Variable(lambda: np.arange(4), dtype=tw.int64, name="idx")
    assert v.dtype is tw.int64 and v.shape.as_list() == [4]
    with tw.Session() as s:
        s.run(tw.variables_initializer([v]))
        np.testing.assert_array_equal(s.run(v), np.arange(4))
        v.load(np.arange(4) * 2, s)
        np.testing.assert_array_equal(s.run(v), np.arange(4) * 2)


def test_variable_operators_read_the_value(sess):
    v = tw.Variable(np.float32(3.0))
    sess.run(v.initializer)
    assert sess.run(v + 1.0) == 4.0
    assert sess.run(2.0 * v) == 6.0
    assert sess.run(-v) == -3.0
