"""Gradients of the array ops, checked against central finite differences in float64, and
the ops added for them (BroadcastTo, InvertPermutation, ListDiff, StridedSliceGrad).

``hide`` passes a tensor through ``placeholder_with_default`` with a less specific shape, so
that shapes, axes and sizes are unknown at graph construction and the gradient computes
them in the graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.testing.gradient_checker import check_gradients


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def hide(t, shape=None):
    return tw.placeholder_with_default(t, shape)


def op_types():
    return [op.type for op in tw.get_default_graph().get_operations()]


# ---------------------------------------------------------------------------------------
# identity-like and reshaping
def test_identity_placeholder_with_default_and_reshape():
    x = rand(2, 3)
    check_gradients(lambda t: tw.identity(t) * 2.0, [x])
    check_gradients(lambda t: tw.placeholder_with_default(t, [None, 3]) * t, [x])
    check_gradients(lambda t: tw.reshape(t, [3, 2]), [x])
    check_gradients(lambda t: tw.reshape(t, [-1]), [x])
    check_gradients(lambda t: tw.reshape(hide(t), [3, -1]), [x])
    check_gradients(lambda t: tw.reshape(t, hide(tw.constant([6, 1]), [None])), [x])


def test_expand_dims_and_squeeze():
    x = rand(2, 1, 3)
    for axis in (0, 1, -1):
        check_gradients(lambda t, axis=axis: tw.expand_dims(t, axis), [x])
    check_gradients(lambda t: tw.expand_dims(hide(t), 2), [x])
    check_gradients(tw.squeeze, [x])
    check_gradients(lambda t: tw.squeeze(t, axis=[-2]), [x])
    check_gradients(lambda t: tw.squeeze(hide(t), axis=[1]), [x])


def test_placeholder_with_default_fed_and_unfed(sess):
    d = tw.constant(np.ones((2, 3)))
    p = tw.placeholder_with_default(d, [None, 3])
    (g,) = tw.gradients(tw.reduce_sum(p * p), [d])
    np.testing.assert_array_equal(sess.run(g), np.full((2, 3), 2.0))


# ---------------------------------------------------------------------------------------
# joining and splitting
@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_concat_gradient(axis):
    a, b, c = rand(2, 3, seed=1), rand(2, 3, seed=2), rand(2, 3, seed=3)
    if axis in (0, -2):
        b = rand(1, 3, seed=2)
    else:
        c = rand(2, 1, seed=3)
    check_gradients(lambda x, y, z: tw.concat([x, y, z], axis), [a, b, c])
    check_gradients(lambda x, y, z: tw.concat([hide(x), y, hide(z, [None, None])], axis), [a, b, c])
    check_gradients(lambda x, y, z: tw.concat([x, y, z], hide(tw.constant(axis), [])), [a, b, c])


def test_concat_gradient_uses_one_split_when_static():
    a = tw.placeholder(tw.float64, [2, 3])
    b = tw.placeholder(tw.float64, [2, 5])
    tw.gradients(tw.concat([a, b], 1), [a, b])
    types = op_types()
    assert types.count("SplitV") == 1 and "Shape" not in types


def test_concat_gradient_with_unknown_batch(sess):
    x = tw.placeholder(tw.float64, [None, 3])
    w = tw.constant(np.array([[1.0, 2.0, 3.0, 4.0, 5.0]]))
    y = tw.concat([x, x[:, :2] * 10.0], 1) * w
    (g,) = tw.gradients(y, [x])
    for n in (1, 3):
        np.testing.assert_allclose(sess.run(g, {x: rand(n, 3)}), np.tile([41.0, 52.0, 3.0], (n, 1)))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_split_gradient_with_unused_outputs(axis):
    x = rand(6, 6)
    check_gradients(lambda t: tw.split(t, 3, axis=axis)[1] * 2.0, [x])
    check_gradients(lambda t: [tw.split(t, 3, axis=axis)[i] for i in (0, 2)], [x])
    check_gradients(lambda t: tw.split(hide(t), 2, axis=axis)[0], [x])


def test_split_v_gradient_with_unused_outputs():
    x = rand(3, 5)
    check_gradients(lambda t: tw.split(t, [1, -1, 2], axis=1)[1], [x])
    check_gradients(lambda t: tw.split(t, [2, 1], axis=0)[0] * 3.0, [x])
    parts = lambda t: tw.split(hide(t), hide(tw.constant([2, 3]), [None]), axis=-1, num=2)  # noqa: E731
    check_gradients(lambda t: parts(t)[1], [x])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_pack_and_unpack_gradients(axis):
    a, b = rand(2, 3, seed=1), rand(2, 3, seed=2)
    check_gradients(lambda x, y: tw.stack([x, y, x], axis=axis), [a, b])
    x = rand(3, 3)
    check_gradients(lambda t: tw.unstack(t, axis=axis)[2], [x])
    check_gradients(lambda t: tw.unstack(t, axis=axis)[:2], [x])
    check_gradients(lambda t: tw.unstack(hide(t), num=3, axis=axis)[0], [x])


# ---------------------------------------------------------------------------------------
# permuting and tiling
def test_transpose_gradient():
    x = rand(2, 3, 4)
    check_gradients(lambda t: tw.transpose(t, [2, 0, 1]), [x])
    check_gradients(tw.transpose, [x])
    check_gradients(lambda t: tw.transpose(t, hide(tw.constant([1, 2, 0]), [None])), [x])
    check_gradients(lambda t: tw.transpose(hide(t)), [x])


def test_tile_gradient():
    x = rand(2, 3)
    check_gradients(lambda t: tw.tile(t, [2, 3]), [x])
    check_gradients(lambda t: tw.tile(t, [1, 1]), [x])
    check_gradients(lambda t: tw.tile(t, [3, 1]), [x])
    check_gradients(lambda t: tw.tile(hide(t, [None, 3]), [2, 2]), [x])
    check_gradients(lambda t: tw.tile(hide(t), hide(tw.constant([2, 1]), [None])), [x])
    check_gradients(lambda t: tw.tile(t, tw.constant([1, 2], tw.int64)), [x])


def test_tile_gradient_with_unknown_batch(sess):
    x = tw.placeholder(tw.float64, [None, 2])
    (g,) = tw.gradients(tw.tile(x, [3, 2]) * tw.constant(np.arange(4.0)), [x])
    assert g.shape.as_list() == [None, 2]
    np.testing.assert_allclose(sess.run(g, {x: rand(2, 2)}), np.tile([6.0, 12.0], (2, 1)))


def test_broadcast_to_values_and_gradient(sess):
    b = tw.broadcast_to(tw.constant([1.0, 2.0]), [3, 2])
    assert b.shape.as_list() == [3, 2]
    np.testing.assert_array_equal(sess.run(b), [[1, 2]] * 3)
    assert tw.broadcast_to(tw.placeholder(tw.float32, [None, 1]), [4, 5]).shape.as_list() == [4, 5]
    assert tw.broadcast_to(tw.placeholder(tw.float32, [2, 1]), tw.placeholder(tw.int32, [3])).shape.as_list() == \
        [None, 2, None]
    with pytest.raises(errors.InvalidArgumentError, match="cannot broadcast"):
        tw.broadcast_to(tw.constant([1.0, 2.0]), [3, 3])
    with pytest.raises(errors.InvalidArgumentError, match="cannot broadcast"):
        sess.run(tw.broadcast_to(hide(tw.constant([1.0, 2.0])), [3, 3]))
    x = rand(2, 1)
    check_gradients(lambda t: tw.broadcast_to(t, [3, 2, 4]), [x])
    check_gradients(lambda t: tw.broadcast_to(hide(t), [2, 4]), [x])
    check_gradients(lambda t: tw.broadcast_to(t, hide(tw.constant([2, 2, 3]), [None])), [x])


# ---------------------------------------------------------------------------------------
# slicing
def test_slice_gradient():
    x = rand(3, 4)
    check_gradients(lambda t: tw.slice(t, [1, 0], [2, 3]), [x])
    check_gradients(lambda t: tw.slice(t, [0, 2], [-1, -1]), [x])
    check_gradients(lambda t: tw.slice(t, hide(tw.constant([1, 1]), [2]), [2, 2]), [x])
    check_gradients(lambda t: tw.slice(hide(t), [1, 0], [1, -1]), [x])
    check_gradients(lambda t: tw.slice(t, tw.constant([1, 1], tw.int64), tw.constant([1, 2], tw.int64)), [x])


@pytest.mark.parametrize("spec", [
    np.s_[1:], np.s_[::-1], np.s_[:, 1], np.s_[..., 0], np.s_[None, 1], np.s_[::2, 1:3], np.s_[2:0:-1, -1],
    np.s_[1, None, ::-2], np.s_[-2:, ...], np.s_[:0],
], ids=str)
def test_strided_slice_gradient(spec):
    x = rand(3, 4)
    check_gradients(lambda t: t[spec] * 1.0, [x])
    check_gradients(lambda t: hide(t)[spec] * 1.0, [x])


def test_strided_slice_gradient_with_tensor_bounds(sess):
    x = tw.placeholder(tw.float64, [None, 3])
    i = tw.placeholder(tw.int32, [])
    y = x[i:, 1]
    (g,) = tw.gradients(tw.reduce_sum(y * y), [x])
    xv = rand(4, 3)
    want = np.zeros((4, 3))
    want[2:, 1] = 2 * xv[2:, 1]
    np.testing.assert_allclose(sess.run(g, {x: xv, i: 2}), want)


def test_strided_slice_grad_op_and_its_gradient(sess):
    dy = tw.constant(np.array([[1.0, 2.0]]))
    g = apply_op("StridedSliceGrad", [tw.constant([3, 4]), tw.constant([1, 3]), tw.constant([2, 0]),
                                      tw.constant([1, -2]), dy])
    assert g.shape.as_list() == [3, 4]
    want = np.zeros((3, 4))
    want[1:2, 3:0:-2] = [[1.0, 2.0]]
    np.testing.assert_array_equal(sess.run(g), want)
    with pytest.raises(errors.InvalidArgumentError, match="cannot write a gradient"):
        sess.run(apply_op("StridedSliceGrad", [tw.constant([3, 4]), tw.constant([0, 0]), tw.constant([1, 1]),
                                               tw.constant([1, 1]), tw.constant(np.ones((2, 2)))]))
    # the gradient of a gradient: StridedSliceGrad is linear in dy
    check_gradients(lambda d: apply_op("StridedSliceGrad", [tw.constant([3, 4]), tw.constant([1, 3]),
                                                            tw.constant([2, 0]), tw.constant([1, -2]), d]),
                    [rand(1, 2)])
    x = tw.constant(rand(3, 4))
    (gx,) = tw.gradients(tw.reduce_sum(tw.square(x[1:, ::2])), [x])
    (hx,) = tw.gradients(tw.reduce_sum(gx * gx), [x])
    want = np.zeros((3, 4))
    want[1:, ::2] = 8 * sess.run(x)[1:, ::2]
    np.testing.assert_allclose(sess.run(hx), want)


# ---------------------------------------------------------------------------------------
# gathering
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_gather_gradient(axis):
    x = rand(3, 4, 2)
    n = x.shape[axis]
    idx = [n - 1, 0, n - 1]
    check_gradients(lambda t: tw.gather(t, idx, axis=axis), [x])
    idx2 = [[0, n - 1], [0, 0]]
    check_gradients(lambda t: tw.gather(t, idx2, axis=axis), [x])
    check_gradients(lambda t: tw.gather(hide(t), hide(tw.constant(idx2)), axis=hide(tw.constant(axis), [])), [x])
    check_gradients(lambda t: tw.gather(t, tw.constant(idx, tw.int64), axis=axis), [x])
    check_gradients(lambda t: tw.gather(t, 0, axis=axis), [x])  # a scalar index


def test_gather_v1_gradient_and_unknown_batch(sess):
    x = rand(4, 2)
    check_gradients(lambda t: apply_op("Gather", [t, tw.constant([3, 1, 3])]), [x])
    p = tw.placeholder(tw.float64, [None, 2])
    (g,) = tw.gradients(tw.gather(p, [0, 2, 0]) * tw.constant([1.0, 10.0], tw.float64), [p])
    assert isinstance(g, tw.IndexedSlices)  # densified below: the rows of a repeated index add up
    assert g.shape.as_list() == [None, 2]
    with pytest.warns(UserWarning, match="unknown shape"):
        g = tw.convert_to_tensor(g)
    assert g.shape.as_list() == [None, 2]
    np.testing.assert_array_equal(sess.run(g, {p: rand(3, 2)}), [[2, 20], [0, 0], [1, 10]])
    np.testing.assert_array_equal(sess.run(g, {p: rand(5, 2)}), [[2, 20], [0, 0], [1, 10], [0, 0], [0, 0]])


def test_gather_gradient_is_indexed_slices_densified_by_a_segment_sum():
    p = tw.placeholder(tw.float64, [5, 3])
    (g,) = tw.gradients(tw.gather(p, [1, 2]), [p])
    assert isinstance(g, tw.IndexedSlices) and "UnsortedSegmentSum" not in op_types()
    tw.convert_to_tensor(g)
    assert "UnsortedSegmentSum" in op_types()


# ---------------------------------------------------------------------------------------
# Fill, ZerosLike/OnesLike, OneHot
def test_fill_gradient():
    check_gradients(lambda v: tw.fill([2, 3], v), [np.array(1.5)])
    check_gradients(lambda v: tw.fill(hide(tw.constant([2, 2]), [None]), v) * v, [np.array(-0.5)])


def test_zeros_like_ones_like_have_no_gradient():
    x = tw.constant([1.0, 2.0])
    assert tw.gradients(tw.zeros_like(x), [x]) == [None]
    assert tw.gradients(tw.ones_like(x) * 3.0, [x]) == [None]


def test_one_hot_gradient(sess):
    idx = tw.constant([0, 2, -1])
    on = tw.constant(2.0, tw.float64)
    off = tw.constant(0.5, tw.float64)
    y = tw.one_hot(idx, 3, on_value=on, off_value=off) * tw.constant(np.arange(9.0).reshape(3, 3))
    g_idx, g_on, g_off = tw.gradients(y, [idx, on, off])
    assert g_idx is None
    assert sess.run([g_on, g_off]) == [0.0 + 5.0, 36.0 - 5.0]
    check_gradients(lambda a, b: tw.one_hot([1, 0], 2, on_value=a, off_value=b, axis=0), [np.array(1.0),
                                                                                         np.array(-1.0)])


# ---------------------------------------------------------------------------------------
# InvertPermutation, ListDiff
def test_invert_permutation(sess):
    p = tw.invert_permutation([2, 0, 1])
    assert p.shape.as_list() == [3]
    assert sess.run(p).tolist() == [1, 2, 0]
    assert sess.run(tw.invert_permutation(tw.constant([1, 0], tw.int64))).dtype == np.int64
    with pytest.raises(errors.InvalidArgumentError, match="not a permutation"):
        tw.invert_permutation([0, 0])
    with pytest.raises(errors.InvalidArgumentError, match="not a permutation"):
        sess.run(tw.invert_permutation(hide(tw.constant([0, 2]))))


def test_setdiff1d(sess):
    out, idx = tw.setdiff1d([5, 1, 4, 1, 3], [1, 3])
    assert out.shape.as_list() == [None] and idx.dtype is tw.int32
    assert [v.tolist() for v in sess.run([out, idx])] == [[5, 4], [0, 2]]
    out, idx = tw.setdiff1d(tw.constant([1.5, 2.5]), [], index_dtype=tw.int64)
    assert sess.run(out).tolist() == [1.5, 2.5] and sess.run(idx).dtype == np.int64


# ---------------------------------------------------------------------------------------
# a small model with an unknown batch dimension, against NumPy
def test_array_gradients_with_unknown_batch_match_numpy(sess):
    x = tw.placeholder(tw.float64, [None, 3])
    w = tw.constant(np.array([1.0, -2.0, 0.5]))
    a, b = tw.split(x, [1, 2], axis=1)
    y = tw.stack([tw.squeeze(a, 1), tw.reduce_sum(b * w[1:], 1)], axis=1)  # [None, 2]
    yt = tw.transpose(tw.expand_dims(y, 0), [2, 1, 0])  # [2, None, 1]
    loss = tw.reduce_sum(tw.square(tw.reshape(yt, [-1])))
    gx, gw = tw.gradients(loss, [x, w])
    assert gx.shape.as_list() == [None, 3] and gw.shape.as_list() == [3]
    for n in (1, 4):
        xv = rand(n, 3, seed=n)
        s = xv[:, 1] * -2.0 + xv[:, 2] * 0.5
        want_x = np.stack([2 * xv[:, 0], 2 * s * -2.0, 2 * s * 0.5], axis=1)
        want_w = np.array([0.0, (2 * s * xv[:, 1]).sum(), (2 * s * xv[:, 2]).sum()])
        got_x, got_w = sess.run([gx, gw], {x: xv})
        np.testing.assert_allclose(got_x, want_x)
        np.testing.assert_allclose(got_w, want_w)
