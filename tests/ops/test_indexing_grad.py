"""Gradients of the indexing ops (ops/indexing_grad.py), checked against central finite
differences in float64, plus the tie rules checked on exact values.

``hide`` passes a tensor through ``placeholder_with_default`` with a less specific shape, so
that shapes are unknown at graph construction and the gradient computes them in the graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave.testing.gradient_checker import check_gradients


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def hide(t, shape=None):
    return tw.placeholder_with_default(t, shape)


def weights(*shape, seed=1):
    """A fixed random weighting, so every output element matters differently."""
    return tw.constant(rand(*shape, seed=seed))


def grads_of(y, xs, grad_ys=None):
    with tw.Session() as sess:
        return sess.run(tw.gradients(y, xs, grad_ys=grad_ys))


# ---------------------------------------------------------------------------------------
def test_gather_nd_and_scatter_nd_with_duplicate_indices():
    x = rand(3, 4, 2)
    check_gradients(lambda t: tw.gather_nd(t, [[0, 1], [2, 3], [0, 1]]), [x])  # a repeated pair
    check_gradients(lambda t: tw.gather_nd(t, [[1], [1], [0]]), [x])
    check_gradients(lambda t: tw.gather_nd(t, [[[2, 0, 1]]]), [x])
    check_gradients(lambda t: tw.gather_nd(hide(t), tw.constant([[0, 3]], tw.int64)), [x])
    u = rand(4, 2)
    check_gradients(lambda t: tw.scatter_nd([[1], [3], [1], [0]], t, [5, 2]), [u])
    check_gradients(lambda t: tw.scatter_nd(tw.constant([[0, 1], [0, 1]], tw.int64), t, [2, 2]), [rand(2)])
    check_gradients(lambda t: tw.scatter_nd([[1], [1]], hide(t), [3, 2]), [rand(2, 2)])


def test_gather_nd_of_whole_rows_has_a_sparse_gradient():
    params = tw.constant(rand(100, 3))
    (g,) = tw.gradients(tw.reduce_sum(tw.gather_nd(params, [[7], [2], [7]])), [params])
    assert isinstance(g, tw.IndexedSlices)
    with tw.Session() as sess:
        v = sess.run(g)
    assert v.values.shape == (3, 3) and v.indices.tolist() == [7, 2, 7]
    assert v.dense_shape.tolist() == [100, 3]


def test_unsorted_segment_max_and_min():
    x = rand(5, 3)
    ids = [2, 0, 2, -1, 0]  # a dropped row and an empty segment
    check_gradients(lambda t: tw.unsorted_segment_max(t, ids, 4), [x])
    check_gradients(lambda t: tw.unsorted_segment_min(t, tw.constant(ids, tw.int64), 4), [x])
    check_gradients(lambda t: tw.unsorted_segment_max(hide(t), [[0, 1], [1, 0]], 2), [rand(2, 2, 3)])


def test_segment_ops():
    x = rand(6, 2)
    ids = [0, 0, 1, 3, 3, 3]
    for f in (tw.segment_sum, tw.segment_mean, tw.segment_max, tw.segment_min):
        check_gradients(lambda t, f=f: f(t, ids), [x])
    check_gradients(lambda t: tw.segment_mean(hide(t), hide(tw.constant(ids))), [x])
    check_gradients(lambda t: tw.segment_max(t, ids), [rand(6)])


def test_max_and_min_gradients_split_between_ties_as_tf():
    data = tw.constant([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    (g,) = grads_of(tw.segment_max(tw.reshape(data, [6]), [0, 0, 0, 1, 1, 1]), [data])
    np.testing.assert_allclose(g, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    (g,) = grads_of(tw.unsorted_segment_min(tw.reshape(data, [6]), [0, 0, 0, 1, -1, 1], 2), [data])
    np.testing.assert_allclose(g, [[1, 0, 0], [0.5, 0, 0.5]])


def test_dynamic_partition():
    x = rand(5, 2)
    check_gradients(lambda t: tw.dynamic_partition(t, [1, 0, 2, 1, 1], 3), [x])
    check_gradients(lambda t: tw.dynamic_partition(t, [[0, 3], [0, 1]], 4), [rand(2, 2, 3)])  # one empty
    check_gradients(lambda t: tw.dynamic_partition(hide(t), hide(tw.constant([1, 0, 1, 1, 0]), [None]), 2), [x])


def test_dynamic_stitch_sends_repeated_indices_gradient_to_the_last_writer():
    a, b = rand(2, 3), rand(2, 2, 3)
    idx = [[0, 4], [[1, 4], [3, 0]]]
    check_gradients(lambda s, t: tw.dynamic_stitch(idx, [s, t]), [a, b])
    check_gradients(lambda s, t: tw.parallel_dynamic_stitch(idx, [s, t]), [a, b])
    check_gradients(lambda s: tw.dynamic_stitch([hide(tw.constant([2, 0, 2]))], [hide(s)]), [rand(3)])
    s = tw.constant([1.0, 2.0, 3.0])
    (g,) = grads_of(tw.dynamic_stitch([[0, 1, 0]], [s]), [s])
    np.testing.assert_array_equal(g, [0.0, 1.0, 1.0])  # s[0] was overwritten by s[2]


def test_dynamic_partition_and_stitch_compose():
    x = rand(6, 2)
    parts = [2, 0, 1, 2, 0, 0]

    def f(t):
        pos = tw.dynamic_partition(tw.range(6), parts, 3)
        vals = tw.dynamic_partition(t, parts, 3)
        return tw.dynamic_stitch(pos, [v * (k + 1.0) for k, v in enumerate(vals)])
    check_gradients(f, [x])


def test_sparse_to_dense():
    check_gradients(lambda v, d: tw.sparse_to_dense([[0, 1], [2, 0]], [3, 3], v, d), [rand(2), np.array(0.5)])
    check_gradients(lambda v, d: tw.sparse_to_dense([1, 3], [5], v, d), [np.array(1.5), np.array(-0.5)])
    check_gradients(lambda v, d: tw.sparse_to_dense(2, [4], v, d), [rand(1), np.array(0.0)])


def test_reverse():
    x = rand(2, 3, 4)
    for axes in ([0], [1, -1], []):
        check_gradients(lambda t, axes=axes: tw.reverse(t, axes) * weights(2, 3, 4), [x])
    check_gradients(lambda t: tw.reverse_v2(hide(t), hide(tw.constant([2]))) * weights(2, 3, 4), [x])


@pytest.mark.parametrize("mode", ["CONSTANT", "REFLECT", "symmetric"])
def test_pad(mode):
    x = rand(3, 4)
    pads = [[2, 1], [1, 3]] if mode != "CONSTANT" else [[1, 0], [4, 2]]
    out_shape = (3 + sum(pads[0]), 4 + sum(pads[1]))
    check_gradients(lambda t: tw.pad(t, pads, mode) * weights(*out_shape), [x])
    check_gradients(lambda t: tw.pad(hide(t), tw.constant(pads, tw.int64), mode) * weights(*out_shape), [x])


def test_pad_v2_constant_values_get_the_padding_gradient():
    check_gradients(lambda t, c: tw.pad(t, [[1, 1], [0, 2]], constant_values=c) * weights(4, 5), [rand(2, 3), np.array(0.7)])


def test_mirror_pad_grad_is_differentiable():
    for mode in ("REFLECT", "SYMMETRIC"):
        check_gradients(lambda g, mode=mode: apply_op("MirrorPadGrad", [g, np.array([[2, 1], [1, 2]], np.int32)],
                                                      {"mode": mode}) * weights(3, 4), [rand(6, 7)])


def test_top_k():
    x = rand(3, 5)
    check_gradients(lambda t: tw.nn.top_k(t, 2).values * weights(3, 2), [x])
    check_gradients(lambda t: tw.nn.top_k(hide(t), 3).values, [rand(2, 2, 4)])
    check_gradients(lambda t: tw.nn.top_k(t, 4).values, [rand(4)])
    check_gradients(lambda t: tw.nn.top_k(t, 0).values, [rand(3)])
    # a tie: the index that top_k picked (the lower one) gets the gradient
    v = tw.constant([[1.0, 3.0, 3.0, 2.0]])
    (g,) = grads_of(tw.nn.top_k(v, 1).values, [v])
    np.testing.assert_array_equal(g, [[0, 1, 0, 0]])


def test_boolean_mask():
    x = rand(3, 4, 2)
    m = np.random.default_rng(2).random((3, 4)) < 0.5
    check_gradients(lambda t: tw.boolean_mask(t, [True, False, True]), [x])
    check_gradients(lambda t: tw.boolean_mask(t, m), [x])
    check_gradients(lambda t: tw.boolean_mask(t, [False, True, True, False], axis=1), [x])


def test_unique_is_not_differentiable():
    x = tw.constant([1.0, 2.0, 1.0])
    y, _ = tw.unique(x)
    assert tw.gradients(tw.reduce_sum(y), [x]) == [None]
