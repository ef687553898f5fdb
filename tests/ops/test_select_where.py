"""tw.where / tw.select (TF1's Select and Where): element-wise and row-wise choice, the
coordinates of true elements, gradients against finite differences, and shape errors."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.testing.gradient_checker import check_gradients


def test_select_elementwise_rows_and_the_tf1_name():
    c = tw.constant([[True, False], [False, True]])
    t = tw.constant([[1.0, 2.0], [3.0, 4.0]])
    e = tw.constant([[10.0, 20.0], [30.0, 40.0]])
    rows = tw.where(tw.constant([False, True]), t, e)
    with tw.Session() as sess:
        np.testing.assert_array_equal(sess.run(tw.where(c, t, e)), [[1.0, 20.0], [30.0, 4.0]])
        np.testing.assert_array_equal(sess.run(tw.select(c, t, e)), [[1.0, 20.0], [30.0, 4.0]])
        np.testing.assert_array_equal(sess.run(rows), [[10.0, 20.0], [3.0, 4.0]])
        assert rows.shape.as_list() == [2, 2]


def test_where_alone_gives_coordinates():
    x = tw.placeholder(tw.bool, [None, 3])
    idx = tw.where(x)
    assert idx.dtype == tw.int64 and idx.shape.as_list() == [None, 2]
    with tw.Session() as sess:
        got = sess.run(idx, {x: [[True, False, True], [False, False, True]]})
    np.testing.assert_array_equal(got, [[0, 0], [0, 2], [1, 2]])


def test_select_gradient_goes_to_the_chosen_side():
    rng = np.random.default_rng(0)
    cond = rng.random((3, 4)) > 0.5
    tv, ev = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    check_gradients(lambda t, e: tw.where(tw.constant(cond), t * t, e * 3.0), [tv, ev])
    check_gradients(lambda t, e: tw.where(tw.constant(cond[:, 0]), t, e), [tv, ev])  # rows
    t, e = tw.constant(tv), tw.constant(ev)
    y = tw.where(tw.constant(cond), t * t, e * 3.0)
    gt, ge = tw.gradients(tw.reduce_sum(y), [t, e])
    with tw.Session() as sess:
        gt_v, ge_v = sess.run([gt, ge])
    assert (ge_v[cond] == 0).all() and (ge_v[~cond] == 3.0).all() and (gt_v[~cond] == 0).all()


def test_bad_shapes_and_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="t and e must have the same shape"):
        tw.where(tw.constant([True]), tw.constant([1.0]), tw.constant([1.0, 2.0]))
    with pytest.raises(errors.InvalidArgumentError, match="vector of their first dimension"):
        tw.where(tw.constant([True, False, True]), tw.zeros([2, 2]), tw.zeros([2, 2]))
    with pytest.raises(errors.InvalidArgumentError, match="give both x and y"):
        tw.where(tw.constant([True]), tw.constant([1.0]))
    c = tw.placeholder(tw.bool, None)
    out = tw.where(c, tw.zeros([2, 2]), tw.ones([2, 2]))
    with tw.Session() as sess, pytest.raises(errors.InvalidArgumentError, match="Select node"):
        sess.run(out, {c: [True, False, True]})
