"""tw.losses against NumPy (TF1's formulas, weights and reductions), the LOSSES and
REGULARIZATION_LOSSES collections, and regularizers on get_variable, variable_scope and layers."""

import numpy as np
import pytest

import tensorweave as tw

R = tw.losses.Reduction
rng = np.random.RandomState(0)
P = rng.randn(4, 3).astype(np.float32)
L = rng.randn(4, 3).astype(np.float32)
W = np.array([[1.0], [0.0], [2.0], [1.0]], np.float32)   # broadcast along the 3 columns


@pytest.mark.parametrize("reduction,expected", [
    (R.SUM_BY_NONZERO_WEIGHTS, lambda d: (d * W).sum() / 9),   # 3 of 4 rows have weight != 0
    (R.MEAN, lambda d: (d * W).sum() / (W.sum() * 3)),
    (R.SUM_OVER_BATCH_SIZE, lambda d: (d * W).sum() / 12),
    (R.SUM, lambda d: (d * W).sum()),
    (R.NONE, lambda d: d * W),
])
def test_reductions(reduction, expected, sess):
    loss = tw.losses.mean_squared_error(L, P, weights=W, reduction=reduction)
    np.testing.assert_allclose(sess.run(loss), expected((P - L) ** 2), rtol=1e-5)


def test_default_reduction_and_zero_weights_give_zero(sess):
    assert tw.losses.Reduction.SUM_OVER_NONZERO_WEIGHTS == R.SUM_BY_NONZERO_WEIGHTS
    mse = tw.losses.mean_squared_error(L, P)
    zero = tw.losses.mean_squared_error(L, P, weights=0.0)
    zero_t = tw.losses.absolute_difference(L, P, weights=tw.zeros([4, 1]))
    got = sess.run([mse, zero, zero_t])
    np.testing.assert_allclose(got[0], ((P - L) ** 2).mean(), rtol=1e-6)
    assert got[1] == 0.0 and got[2] == 0.0   # 0/0 is 0, as TF's div_no_nan


def test_regression_losses(sess):
    d = P - L
    a = np.abs(d)
    q = np.minimum(a, 0.5)
    prob = 1 / (1 + np.exp(-P))
    z = (L > 0).astype(np.float32)
    got = sess.run([tw.losses.absolute_difference(L, P), tw.losses.huber_loss(L, P, delta=0.5),
                    tw.losses.log_loss(z, prob), tw.losses.hinge_loss(z, P),
                    tw.losses.cosine_distance(L, P, axis=1)])
    np.testing.assert_allclose(got[0], a.mean(), rtol=1e-6)
    np.testing.assert_allclose(got[1], (0.5 * q ** 2 + 0.5 * (a - q)).mean(), rtol=1e-6)
    eps = 1e-7
    np.testing.assert_allclose(got[2], (-z * np.log(prob + eps) - (1 - z) * np.log(1 - prob + eps)).mean(), rtol=1e-5)
    np.testing.assert_allclose(got[3], np.maximum(0, 1 - (2 * z - 1) * P).mean(), rtol=1e-6)
    np.testing.assert_allclose(got[4], (1 - (P * L).sum(1)).mean(), rtol=1e-5)


def _log_softmax(x):
    return x - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)) - x.max(1, keepdims=True)


def test_classification_losses_and_label_smoothing(sess):
    logits = rng.randn(4, 5).astype(np.float32)
    y = np.array([0, 3, 4, 1])
    onehot = np.eye(5, dtype=np.float32)[y]
    w = np.array([1.0, 1.0, 0.0, 2.0], np.float32)
    got = sess.run([
        tw.losses.softmax_cross_entropy(onehot, logits),
        tw.losses.softmax_cross_entropy(onehot, logits, label_smoothing=0.1),
        tw.losses.sparse_softmax_cross_entropy(y, logits, weights=w),
        tw.losses.sparse_softmax_cross_entropy(y[:, None].astype(np.int32), logits),   # [batch, 1] labels
        tw.losses.sigmoid_cross_entropy(onehot, logits),
        tw.losses.sigmoid_cross_entropy(onehot, logits, label_smoothing=0.2),
    ])
    lsm = _log_softmax(logits)
    per_row = -lsm[np.arange(4), y]
    np.testing.assert_allclose(got[0], per_row.mean(), rtol=1e-5)
    smooth = onehot * 0.9 + 0.1 / 5
    np.testing.assert_allclose(got[1], -(smooth * lsm).sum(1).mean(), rtol=1e-5)
    np.testing.assert_allclose(got[2], (per_row * w).sum() / 3, rtol=1e-5)
    np.testing.assert_allclose(got[3], per_row.mean(), rtol=1e-5)

    def bce(z, x):
        return np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))
    np.testing.assert_allclose(got[4], bce(onehot, logits).mean(), rtol=1e-5)
    np.testing.assert_allclose(got[5], bce(onehot * 0.8 + 0.1, logits).mean(), rtol=1e-5)


def test_label_smoothing_stops_gradients_into_labels_and_trains_logits():
    labels = tw.constant(np.eye(3, dtype=np.float32))
    logits = tw.Variable(np.zeros((3, 3), np.float32))
    loss = tw.losses.softmax_cross_entropy(labels, logits, label_smoothing=0.1)
    g_logits, g_labels = tw.gradients(loss, [logits, labels])
    assert g_logits is not None and g_labels is None


def test_float64_losses_stay_float64(sess):
    loss = tw.losses.mean_squared_error(L.astype(np.float64), P.astype(np.float64))
    assert loss.dtype == tw.float64
    np.testing.assert_allclose(sess.run(loss), ((P.astype(np.float64) - L) ** 2).mean(), rtol=1e-12)


def test_bad_input_names_what_was_expected():
    with pytest.raises(tw.errors.InvalidArgumentError, match="predictions and labels must have the same shape"):
        tw.losses.mean_squared_error(tw.zeros([4, 3]), tw.zeros([4, 2]))
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"weights of shape \(4,\) cannot be broadcast"):
        tw.losses.mean_squared_error(L, P, weights=np.ones(4, np.float32))
    with pytest.raises(tw.errors.InvalidArgumentError, match="cannot be broadcast"):
        tw.losses.mean_squared_error(L, P, weights=np.ones((2, 3), np.float32))
    with pytest.raises(tw.errors.InvalidArgumentError, match="invalid reduction"):
        tw.losses.mean_squared_error(L, P, reduction="mean")
    with pytest.raises(tw.errors.InvalidArgumentError, match="labels must not be None"):
        tw.losses.absolute_difference(None, P)
    with pytest.raises(tw.errors.InvalidArgumentError, match="label_smoothing must be a number in"):
        tw.losses.softmax_cross_entropy(L, P, label_smoothing=2)
    with pytest.raises(tw.errors.InvalidArgumentError, match="labels must be int32 or int64"):
        tw.losses.sparse_softmax_cross_entropy(L, P)
    with pytest.raises(tw.errors.InvalidArgumentError, match="you must specify axis"):
        tw.losses.cosine_distance(L, P)
    with pytest.raises(ValueError, match="no losses found"):   # InvalidArgumentError is a ValueError, as TF's
        tw.losses.get_total_loss()


def test_loss_collections_and_total_loss(sess):
    a = tw.losses.mean_squared_error(L, P)
    b = tw.losses.absolute_difference(L, P, loss_collection=None)   # not collected
    c = tw.losses.absolute_difference(L, P, loss_collection="mine")
    tw.losses.add_loss(tw.constant(1.0))
    assert tw.losses.get_losses()[0] is a and len(tw.losses.get_losses()) == 2
    assert tw.losses.get_losses(loss_collection="mine") == [c] and b not in tw.losses.get_losses()
    assert tw.losses.get_losses(scope="mean_squared") == [a]
    assert sess.run(tw.losses.get_regularization_loss()) == 0.0
    total = tw.losses.get_total_loss()
    assert total.op.name == "total_loss"
    np.testing.assert_allclose(sess.run(total), ((P - L) ** 2).mean() + 1.0, rtol=1e-6)


def test_get_variable_regularizer_adds_one_loss_per_new_variable(sess):
    reg = tw.contrib.layers.l2_regularizer(0.5)
    with tw.variable_scope("m"):
        w = tw.get_variable("w", initializer=np.array([1.0, 2.0], np.float32), regularizer=reg)
    with tw.variable_scope("m", reuse=True):
        assert tw.get_variable("w", regularizer=reg) is w       # reuse adds nothing
    (loss,) = tw.losses.get_regularization_losses()
    assert loss.op.name.startswith("m/w/Regularizer/")
    sess.run(tw.global_variables_initializer())
    assert sess.run(loss) == pytest.approx(0.5 * (1 + 4) / 2)
    assert sess.run(tw.losses.get_regularization_loss()) == pytest.approx(1.25)
    with pytest.raises(tw.errors.InvalidArgumentError, match="regularizer must be a callable"):
        tw.get_variable("v", [1], regularizer=0.1)


def test_variable_scope_regularizer_is_the_default_inside(sess):
    with tw.variable_scope("net", regularizer=tw.contrib.layers.l1_regularizer(0.1)) as scope:
        assert scope.regularizer is not None
        tw.get_variable("a", initializer=np.array([-1.0, 2.0], np.float32))
        with tw.variable_scope("inner"):
            tw.get_variable("b", initializer=np.array([3.0], np.float32))
        tw.get_variable("c", initializer=np.array([5.0], np.float32), regularizer=lambda v: None)  # opts out
    tw.get_variable("outside", [1])
    losses = tw.losses.get_regularization_losses()
    assert [x.op.name.split("/Regularizer")[0] for x in losses] == ["net/a", "net/inner/b"]
    sess.run(tw.global_variables_initializer())
    np.testing.assert_allclose(sess.run(losses), [0.3, 0.3], rtol=1e-6)


def test_layer_regularizers(sess):
    x = tw.constant(np.ones((2, 3), np.float32))
    img = tw.constant(np.ones((1, 4, 4, 1), np.float32))
    l2 = tw.contrib.layers.l2_regularizer(0.01)
    tw.layers.dense(x, 4, kernel_regularizer=l2, bias_regularizer=l2, activity_regularizer=l2, name="d")
    tw.layers.conv2d(img, 2, 3, kernel_regularizer=l2, name="c")
    tw.layers.conv2d_transpose(img, 2, 3, kernel_regularizer=l2, name="ct")
    tw.layers.conv1d(tw.ones([1, 5, 2]), 2, 3, kernel_regularizer=l2, name="c1")
    names = [x.op.name for x in tw.losses.get_regularization_losses()]
    assert [n.split("/")[1] for n in names] == ["kernel", "bias", "ActivityRegularizer", "kernel", "kernel", "kernel"]
    sess.run(tw.global_variables_initializer())
    kernel = sess.run(tw.get_default_graph().get_tensor_by_name("d/kernel:0"))
    np.testing.assert_allclose(sess.run(tw.losses.get_regularization_losses()[0]), 0.01 * (kernel ** 2).sum() / 2,
                               rtol=1e-5)
    with pytest.raises(tw.errors.InvalidArgumentError, match="kernel_regularizer must be a callable"):
        tw.layers.dense(x, 2, kernel_regularizer="l2")
    with pytest.raises(tw.errors.UnimplementedError, match="kernel_constraint is not supported"):
        tw.layers.dense(x, 2, kernel_constraint=lambda w: w)


def test_a_regularized_model_trains_towards_smaller_weights(sess):
    x = tw.constant(rng.randn(16, 3).astype(np.float32))
    y = tw.constant(rng.randn(16, 1).astype(np.float32))
    pred = tw.layers.dense(x, 1, kernel_regularizer=tw.contrib.layers.l2_regularizer(10.0))
    tw.losses.mean_squared_error(y, pred)
    total = tw.losses.get_total_loss()
    reg = tw.losses.get_regularization_loss()
    step = tw.train.GradientDescentOptimizer(0.05).minimize(total)
    sess.run(tw.global_variables_initializer())
    before = sess.run(reg)
    for _ in range(30):
        sess.run(step)
    assert sess.run(reg) < 0.1 * before
