"""tw.IndexedSlices: the class, fetching and feeding, densifying (tw.convert_to_tensor and its
warnings), Gather's sparse gradient and its aggregation in tw.gradients, and the clip ops."""

import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.testing.gradient_checker import check_gradients


def _dense(value, shape):
    out = np.zeros(shape)
    np.add.at(out, value.indices, value.values)
    return out


def op_types():
    return [op.type for op in tw.get_default_graph()._nodes]


# ---------------------------------------------------------------------------------------
# the class
def test_properties_and_static_shape():
    values = tw.placeholder(tw.float32, [None, 3], name="vals")
    indices = tw.placeholder(tw.int64, [None], name="idx")
    s = tw.IndexedSlices(values, indices, tw.constant([10, 3], tw.int64))
    assert s.values is values and s.indices is indices
    assert s.dtype is tw.float32 and s.name == "vals:0" and s.op is values.op and s.graph is values.graph
    assert s.shape.as_list() == [10, 3] and s.get_shape().as_list() == [10, 3]
    assert tw.IndexedSlices(values, indices).shape.as_list() == [None, 3]
    assert "IndexedSlices(indices=idx:0, values=vals:0" in repr(s)
    neg = -s
    assert isinstance(neg, tw.IndexedSlices) and neg.indices is indices


def test_bad_construction():
    v = tw.zeros([2, 3])
    with pytest.raises(errors.InvalidArgumentError, match="int32 or int64"):
        tw.IndexedSlices(v, tw.constant([0.0, 1.0]))
    with pytest.raises(errors.InvalidArgumentError, match="must be a vector"):
        tw.IndexedSlices(v, tw.constant([[0, 1]]))
    with pytest.raises(errors.InvalidArgumentError, match="2 slices in values .* but 3 indices"):
        tw.IndexedSlices(v, tw.constant([0, 1, 2]))
    with pytest.raises(errors.InvalidArgumentError, match="must be a tw.Tensor"):
        tw.IndexedSlices(np.zeros((2, 3)), tw.constant([0, 1]))


def test_fetch_and_feed(sess):
    values = tw.placeholder(tw.float64, [None, 2])
    indices = tw.placeholder(tw.int32, [None])
    s = tw.IndexedSlices(values * 2.0, indices + 1, tw.constant([5, 2], tw.int64))
    v = sess.run(s, {values: [[1.0, 2.0]], indices: [3]})
    assert isinstance(v, tw.IndexedSlicesValue)
    np.testing.assert_array_equal(v.values, [[2.0, 4.0]])
    np.testing.assert_array_equal(v.indices, [4])
    np.testing.assert_array_equal(v.dense_shape, [5, 2])
    # nested in a structure, and without a dense_shape
    out = sess.run({"s": tw.IndexedSlices(values, indices), "n": tw.constant(1)}, {values: [[1.0, 1.0]], indices: [0]})
    assert out["s"].dense_shape is None and out["n"] == 1
    # fed: an IndexedSlicesValue or a tuple stands for the three tensors
    fed = tw.IndexedSlices(tw.placeholder(tw.float64, [None, 2]), tw.placeholder(tw.int32, [None]),
                           tw.placeholder(tw.int64, [2]))
    total = tw.reduce_sum(fed.values) + tw.cast(tw.reduce_sum(fed.indices), tw.float64)
    assert sess.run(total, {fed: tw.IndexedSlicesValue(np.ones((2, 2)), np.array([1, 2], np.int32), [4, 2])}) == 7.0
    assert sess.run(total, {fed: (np.ones((1, 2)), np.array([3], np.int32), [4, 2])}) == 5.0
    with pytest.raises(errors.InvalidArgumentError, match="IndexedSlicesValue"):
        sess.run(total, {fed: np.ones(3)})


def test_eval(sess):
    s = tw.IndexedSlices(tw.constant([[1.0]]), tw.constant([0]), tw.constant([3, 1]))
    with sess.as_default():
        assert s.eval().indices.tolist() == [0]


def test_convert_to_tensor_densifies_summing_repeated_rows(sess):
    s = tw.IndexedSlices(tw.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tw.constant([2, 0, 2]),
                         tw.constant([4, 2]))
    d = tw.convert_to_tensor(s)
    assert isinstance(d, tw.Tensor) and d.shape.as_list() == [4, 2]
    np.testing.assert_array_equal(sess.run(d), [[3, 4], [0, 0], [6, 8], [0, 0]])
    # an op given an IndexedSlices gets it densified
    np.testing.assert_array_equal(sess.run(tw.reduce_sum(s, axis=1)), [7, 0, 14, 0])
    assert tw.convert_to_tensor_or_indexed_slices(s) is s
    with pytest.raises(errors.InvalidArgumentError, match="float64"):
        tw.convert_to_tensor(s, dtype=tw.float64)


def test_densify_warnings():
    rows = tw.placeholder(tw.float32, [None, 2])
    unknown = tw.IndexedSlices(rows, tw.constant([0]), tw.shape(tw.placeholder(tw.float32, [None, 2]), out_type=tw.int64))
    with pytest.warns(UserWarning, match="Converting sparse IndexedSlices to a dense Tensor of unknown shape. "
                                         "This may consume a large amount of memory."):
        tw.convert_to_tensor(unknown)
    huge = tw.IndexedSlices(rows, tw.constant([0]), tw.constant([200_000_000, 2], tw.int64))
    with pytest.warns(UserWarning, match="dense Tensor with 400000000 elements"):
        tw.convert_to_tensor(huge)
    small = tw.IndexedSlices(rows, tw.constant([0]), tw.constant([1000, 2], tw.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tw.convert_to_tensor(small)
    with pytest.raises(errors.InvalidArgumentError, match="no dense_shape"):
        tw.convert_to_tensor(tw.IndexedSlices(rows, tw.constant([0])))


# ---------------------------------------------------------------------------------------
# gradients
def test_gather_gradient_of_a_variable_is_indexed_slices(sess):
    table = np.arange(20.0).reshape(5, 4)
    v = tw.Variable(table)
    (g,) = tw.gradients(tw.reduce_sum(tw.gather(v, [3, 1, 3]) * 2.0), [v])
    assert isinstance(g, tw.IndexedSlices)
    assert g.shape.as_list() == [5, 4]
    assert "UnsortedSegmentSum" not in op_types()  # nothing of the table's size is built
    sess.run(tw.global_variables_initializer())
    val = sess.run(g)
    assert val.values.shape == (3, 4) and val.indices.tolist() == [3, 1, 3]
    np.testing.assert_array_equal(val.dense_shape, [5, 4])
    np.testing.assert_array_equal(_dense(val, (5, 4))[[1, 3]], [[2] * 4, [4] * 4])


def test_gather_v1_and_multi_dimensional_indices(sess):
    p = tw.placeholder(tw.float64, [6, 2])
    (g1,) = tw.gradients(apply_op("Gather", [p, tw.constant([5, 0])]), [p])
    (g2,) = tw.gradients(tw.gather(p, [[1, 2], [2, 3]]) * tw.constant([1.0, 10.0], tw.float64), [p])
    assert isinstance(g1, tw.IndexedSlices) and isinstance(g2, tw.IndexedSlices)
    v1, v2 = sess.run([g1, g2], {p: np.zeros((6, 2))})
    assert v2.indices.tolist() == [1, 2, 2, 3] and v2.values.shape == (4, 2)
    np.testing.assert_array_equal(_dense(v2, (6, 2)), [[0, 0], [1, 10], [2, 20], [1, 10], [0, 0], [0, 0]])
    np.testing.assert_array_equal(_dense(v1, (6, 2)), [[1, 1], [0] * 2, [0] * 2, [0] * 2, [0] * 2, [1, 1]])


def test_gather_unknown_row_shape(sess):
    p = tw.placeholder(tw.float64, [None, None])
    (g,) = tw.gradients(tw.gather(p, [[0], [2]]), [p])
    v = sess.run(g, {p: np.ones((3, 2))})
    assert v.values.shape == (2, 2) and v.indices.tolist() == [0, 2]
    np.testing.assert_array_equal(v.dense_shape, [3, 2])


def test_gather_along_another_axis_stays_dense():
    p = tw.placeholder(tw.float64, [3, 4])
    (g,) = tw.gradients(tw.gather(p, [1, 1], axis=1), [p])
    assert isinstance(g, tw.Tensor)


def test_several_gathers_aggregate_by_concatenation(sess):
    v = tw.Variable(np.ones((100, 3)))
    loss = tw.reduce_sum(tw.gather(v, [1, 2])) + 3.0 * tw.reduce_sum(tw.gather(v, [2, 7, 7]))
    (g,) = tw.gradients(loss, [v])
    assert isinstance(g, tw.IndexedSlices)
    assert "AddN" not in op_types()
    sess.run(tw.global_variables_initializer())
    val = sess.run(g)
    assert sorted(val.indices.tolist()) == [1, 2, 2, 7, 7]
    dense = _dense(val, (100, 3))
    np.testing.assert_array_equal(dense[[1, 2, 7]], [[1] * 3, [4] * 3, [6] * 3])
    assert dense.sum() == 33


def test_mixed_dense_and_sparse_parts_densify(sess):
    v = tw.Variable(np.ones((4, 2)))
    loss = tw.reduce_sum(tw.gather(v, [0, 0])) + tw.reduce_sum(v * 2.0)
    (g,) = tw.gradients(loss, [v])
    assert isinstance(g, tw.Tensor)
    sess.run(tw.global_variables_initializer())
    np.testing.assert_array_equal(sess.run(g), [[4, 4], [2, 2], [2, 2], [2, 2]])


def test_dense_consumer_gets_a_dense_gradient(sess):
    p = tw.placeholder(tw.float64, [4, 2])
    x = p * 3.0  # Mul's gradient function needs a dense gradient
    (g,) = tw.gradients(tw.reduce_sum(tw.gather(x, [1, 1, 3])), [p])
    assert isinstance(g, tw.Tensor)
    np.testing.assert_array_equal(sess.run(g, {p: np.zeros((4, 2))}), [[0, 0], [6, 6], [0, 0], [3, 3]])
    # through an Identity the gradient stays sparse
    (g2,) = tw.gradients(tw.reduce_sum(tw.gather(tw.identity(p), [0])), [p])
    assert isinstance(g2, tw.IndexedSlices)


def test_gather_in_a_while_loop(sess):
    p = tw.placeholder(tw.float64, [5, 2])

    def body(i, acc):
        return i + 1, acc + tw.reduce_sum(tw.gather(p, tw.stack([i, i])))

    _, out = tw.while_loop(lambda i, a: i < 3, body, [tw.constant(0), tw.constant(0.0, tw.float64)])
    (g,) = tw.gradients(out, [p])  # densified inside the backward loop, where Enter's gradient needs it
    np.testing.assert_array_equal(sess.run(g, {p: np.ones((5, 2))}), [[2, 2]] * 3 + [[0, 0]] * 2)


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_gradients_against_finite_differences(axis):
    x = np.random.RandomState(1).randn(4, 3)
    check_gradients(lambda t: tw.gather(t, [2, 0, 2, 2], axis=axis), [x])
    check_gradients(lambda t: tw.gather(t * t, [[1, 1], [0, 3]]), [x])
    check_gradients(lambda t: tw.reduce_sum(tw.gather(t, [1, 2]) * tw.gather(t, [2, 2])), [x])


# ---------------------------------------------------------------------------------------
# clipping
def _slices(values, indices, shape):
    return tw.IndexedSlices(tw.constant(values), tw.constant(indices), tw.constant(shape, tw.int64))


def test_clip_by_value(sess):
    t = tw.constant([[-2.0, 0.5], [3.0, 1.0]])
    np.testing.assert_array_equal(sess.run(tw.clip_by_value(t, -1.0, 1.0)), [[-1, 0.5], [1, 1]])
    s = tw.clip_by_value(_slices([[5.0, -5.0]], [3], [4, 2]), -1.0, 2.0)
    assert isinstance(s, tw.IndexedSlices)
    assert sess.run(s).values.tolist() == [[2.0, -1.0]]
    with pytest.raises(errors.InvalidArgumentError, match="greater than"):
        tw.clip_by_value(t, 2.0, 1.0)
    with pytest.raises(errors.InvalidArgumentError, match="must not change its shape"):
        tw.clip_by_value(tw.constant([1.0]), tw.zeros([3]), 1.0)


def test_clip_by_norm(sess):
    t = np.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(sess.run(tw.clip_by_norm(tw.constant(t), 1.0)), t / 5.0)
    np.testing.assert_allclose(sess.run(tw.clip_by_norm(tw.constant(t), 10.0)), t)
    np.testing.assert_allclose(sess.run(tw.clip_by_norm(tw.constant(t), 1.0, axes=[1])), [[0.6, 0.8], [0, 0]])
    s = tw.clip_by_norm(_slices(t[:1], [2], [5, 2]), 2.5)
    assert isinstance(s, tw.IndexedSlices)
    np.testing.assert_allclose(sess.run(s).values, [[1.5, 2.0]])
    # the gradient at a zero norm is finite
    p = tw.placeholder(tw.float64, [2])
    (g,) = tw.gradients(tw.reduce_sum(tw.clip_by_norm(p, 1.0)), [p])
    assert np.all(np.isfinite(sess.run(g, {p: [0.0, 0.0]})))


def test_global_norm_and_clip_by_global_norm(sess):
    a = np.array([3.0, 0.0])
    rows = np.array([[4.0, 0.0], [0.0, 12.0]])
    ts = [tw.constant(a), None, _slices(rows, [1, 1], [3, 2])]
    norm = np.sqrt(9 + 16 + 144)
    assert sess.run(tw.global_norm(ts)) == pytest.approx(norm)
    clipped, n = tw.clip_by_global_norm(ts, 6.5)
    assert clipped[1] is None and isinstance(clipped[2], tw.IndexedSlices)
    c0, c2, nv = sess.run([clipped[0], clipped[2], n])
    assert nv == pytest.approx(norm)
    np.testing.assert_allclose(c0, a * 6.5 / norm)
    np.testing.assert_allclose(c2.values, rows * 6.5 / norm)
    assert c2.indices.tolist() == [1, 1]
    unclipped, _ = tw.clip_by_global_norm([tw.constant(a)], 100.0)
    np.testing.assert_allclose(sess.run(unclipped[0]), a)
    nan, _ = tw.clip_by_global_norm([tw.constant([np.inf, 1.0])], 1.0)
    assert np.all(np.isnan(sess.run(nan[0])))
    given, _ = tw.clip_by_global_norm([tw.constant(a)], 1.0, use_norm=tw.constant(6.0, tw.float64))
    np.testing.assert_allclose(sess.run(given[0]), a / 6.0)
    with pytest.raises(TypeError, match="sequence"):
        tw.global_norm(tw.constant(a))
    with pytest.raises(errors.InvalidArgumentError, match="every entry is None"):
        tw.global_norm([None])


def test_clip_by_average_norm(sess):
    t = np.array([[3.0, 4.0]])
    # average norm 5 / 2 = 2.5
    np.testing.assert_allclose(sess.run(tw.clip_by_average_norm(tw.constant(t), 1.0)), t * 1.0 / 2.5)
    np.testing.assert_allclose(sess.run(tw.clip_by_average_norm(tw.constant(t), 10.0)), t)
    s = tw.clip_by_average_norm(_slices(t, [0], [5, 2]), 0.25)  # 10 elements: average norm 0.5
    np.testing.assert_allclose(sess.run(s).values, t * 0.25 / 0.5)


def test_optimize_loss_clips_a_sparse_gradient(sess):
    table = tw.Variable(np.ones((1000, 4), np.float32), name="table")
    loss = tw.reduce_sum(tw.square(tw.gather(table, [5, 9, 5])))
    train = tw.contrib.layers.optimize_loss(loss, tw.train.get_or_create_global_step(), 0.1, "SGD",
                                            clip_gradients=1.0, summaries=[])
    sess.run(tw.global_variables_initializer())
    sess.run(train)
    after = sess.run(table)
    # the gradient: three slices of 2 * ones (rows 5, 9, 5); as in TensorFlow the norm is the
    # values' (sqrt(3 * 4 * 2^2)), the repeated row counting twice
    scale = 1.0 / np.sqrt(48.0)
    np.testing.assert_allclose(after[5], 1 - 0.1 * 4 * scale, rtol=1e-6)
    np.testing.assert_allclose(after[9], 1 - 0.1 * 2 * scale, rtol=1e-6)
    assert np.all(np.delete(after, [5, 9], axis=0) == 1.0)


def test_variable_scatter_methods(sess):
    v = tw.Variable(np.zeros((4, 2)))
    delta = _slices(np.array([[1.0, 2.0], [3.0, 4.0]]), [1, 1], [4, 2])
    add, sub = v.scatter_add(delta), v.scatter_sub(delta)
    upd = v.scatter_update(_slices(np.array([[9.0, 9.0]]), [0], [4, 2]))
    nd = v.scatter_nd_update(tw.constant([[3, 1]]), tw.constant([7.0], tw.float64))
    nd_add = v.scatter_nd_add(tw.constant([[3, 1]]), tw.constant([1.0], tw.float64))
    sess.run(tw.global_variables_initializer())
    np.testing.assert_array_equal(sess.run(add)[1], [4, 6])
    np.testing.assert_array_equal(sess.run(sub)[1], [0, 0])
    np.testing.assert_array_equal(sess.run(upd)[0], [9, 9])
    assert sess.run(nd)[3, 1] == 7.0 and sess.run(nd_add)[3, 1] == 8.0
    with pytest.raises(TypeError, match="IndexedSlices"):
        v.scatter_add(tw.constant([1.0]))
