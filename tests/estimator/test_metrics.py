"""tw.metrics: streaming metrics checked against NumPy over several batches, with weights,
the reset by local_variables_initializer, collections, and bad input."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import metrics

RNG = np.random.default_rng(7)
N, BATCH = 60, 13   # 13 does not divide 60: the last batch is smaller


def _stream(pairs, feeds):
    """Run every update op over the batches of ``feeds`` ({placeholder: array}) and return
    the final values, plus the update ops' results of the last batch."""
    with tw.Session() as sess:
        sess.run(tw.local_variables_initializer())
        last = None
        for i in range(0, N, BATCH):
            last = sess.run([u for _, u in pairs], {p: a[i:i + BATCH] for p, a in feeds.items()})
        return sess.run([v for v, _ in pairs]), last


@pytest.fixture
def data():
    labels = RNG.integers(0, 2, N)
    scores = RNG.random(N).astype(np.float32)
    weights = RNG.random(N).astype(np.float32) * (RNG.random(N) > 0.2)   # some zero weights
    lab = tw.placeholder(tw.int64, [None])
    p = tw.placeholder(tw.float32, [None])
    w = tw.placeholder(tw.float32, [None])
    return labels, scores, weights, lab, p, w


def test_mean_accuracy_and_errors_match_numpy(data):
    labels, scores, weights, lab, p, w = data
    target = RNG.standard_normal(N).astype(np.float32)
    t = tw.placeholder(tw.float32, [None])
    pred_ids = tw.cast(p > 0.5, tw.int64)
    pairs = [metrics.mean(p), metrics.mean(p, weights=w), metrics.accuracy(lab, pred_ids),
             metrics.accuracy(lab, pred_ids, weights=w), metrics.mean_squared_error(t, p),
             metrics.mean_squared_error(t, p, weights=w), metrics.root_mean_squared_error(t, p),
             metrics.mean_absolute_error(t, p, weights=w)]
    values, last_updates = _stream(pairs, {lab: labels, p: scores, w: weights, t: target})
    correct = ((scores > 0.5) == labels).astype(np.float64)
    expected = [scores.mean(), np.sum(scores * weights) / weights.sum(), correct.mean(),
                np.sum(correct * weights) / weights.sum(), np.mean((scores - target) ** 2),
                np.sum((scores - target) ** 2 * weights) / weights.sum(), np.sqrt(np.mean((scores - target) ** 2)),
                np.sum(np.abs(scores - target) * weights) / weights.sum()]
    np.testing.assert_allclose(values, expected, rtol=1e-5)
    # the update op returns the metric including its batch: after the last, the same values
    np.testing.assert_allclose(last_updates, expected, rtol=1e-5)


def test_confusion_counts_precision_recall_match_numpy(data):
    labels, scores, weights, lab, p, w = data
    pred = tw.cast(p > 0.4, tw.int64)
    pairs = [metrics.true_positives(lab, pred), metrics.false_positives(lab, pred), metrics.true_negatives(lab, pred),
             metrics.false_negatives(lab, pred, weights=w), metrics.precision(lab, pred), metrics.recall(lab, pred),
             metrics.precision(lab, pred, weights=w), metrics.recall(lab, pred, weights=w)]
    values, _ = _stream(pairs, {lab: labels, p: scores, w: weights})
    yp, yt = scores > 0.4, labels.astype(bool)
    tp, fp = np.sum(yp & yt), np.sum(yp & ~yt)
    tn, fn = np.sum(~yp & ~yt), np.sum(~yp & yt)
    wtp, wfp, wfn = np.sum(weights * (yp & yt)), np.sum(weights * (yp & ~yt)), np.sum(weights * (~yp & yt))
    np.testing.assert_allclose(values, [tp, fp, tn, wfn, tp / (tp + fp), tp / (tp + fn), wtp / (wtp + wfp),
                                        wtp / (wtp + wfn)], rtol=1e-5)


def _numpy_auc(labels, scores, weights, curve, num_thresholds=200):
    """The same trapezoidal sum over the same thresholds, in NumPy."""
    eps = 1e-7
    thr = np.array([-eps] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1 + eps])
    above = scores[None, :] > thr[:, None]
    pos = labels.astype(bool)[None, :]
    w = weights[None, :]
    tp = np.sum((above & pos) * w, 1)
    fp = np.sum((above & ~pos) * w, 1)
    fn = np.sum((~above & pos) * w, 1)
    tn = np.sum((~above & ~pos) * w, 1)
    e = 1e-6
    rec = (tp + e) / (tp + fn + e)
    if curve == "ROC":
        x, y = fp / (fp + tn + e), rec
    else:
        x, y = rec, (tp + e) / (tp + fp + e)
    return np.sum((x[:-1] - x[1:]) * (y[:-1] + y[1:]) / 2)


def _exact_roc_auc(labels, scores):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :]))


def test_auc_matches_numpy(data):
    labels, scores, weights, lab, p, w = data
    # informative scores, so the AUC is far from 0.5
    scores = np.clip(labels * 0.3 + scores * 0.7, 0, 1).astype(np.float32)
    pairs = [metrics.auc(lab, p), metrics.auc(lab, p, weights=w), metrics.auc(lab, p, curve="PR"),
             metrics.auc(lab, p, num_thresholds=1000, summation_method="minoring")]
    values, _ = _stream(pairs, {lab: labels, p: scores, w: weights})
    ones = np.ones(N)
    np.testing.assert_allclose(values[:3], [_numpy_auc(labels, scores, ones, "ROC"),
                                            _numpy_auc(labels, scores, weights, "ROC"),
                                            _numpy_auc(labels, scores, ones, "PR")], rtol=1e-4)
    exact = _exact_roc_auc(labels, scores)
    assert exact > 0.7
    assert abs(values[0] - exact) < 0.02 and values[3] <= exact + 1e-6


def test_auc_rejects_predictions_outside_unit_interval():
    lab, pred = tw.constant([1, 0]), tw.constant([0.5, 1.5])
    _, update = metrics.auc(lab, pred)
    with tw.Session() as sess:
        sess.run(tw.local_variables_initializer())
        with pytest.raises(tw.errors.InvalidArgumentError, match=r"predictions must be in \[0, 1\]"):
            sess.run(update)


def test_mean_per_class_accuracy_matches_numpy(data):
    labels, _, weights, lab, _, w = data
    labels3 = RNG.integers(0, 3, N)
    preds3 = np.where(RNG.random(N) < 0.6, labels3, RNG.integers(0, 3, N))
    p3 = tw.placeholder(tw.int64, [None])
    value, update = metrics.mean_per_class_accuracy(lab, p3, 3)
    with tw.Session() as sess:
        sess.run(tw.local_variables_initializer())
        for i in range(0, N, BATCH):
            per_class = sess.run(update, {lab: labels3[i:i + BATCH], p3: preds3[i:i + BATCH]})
        got = sess.run(value)
    expected_per_class = [np.mean(preds3[labels3 == c] == c) for c in range(3)]
    np.testing.assert_allclose(per_class, expected_per_class, rtol=1e-5)
    np.testing.assert_allclose(got, np.mean(expected_per_class), rtol=1e-5)


def test_state_is_local_reset_by_local_variables_initializer_and_not_saved():
    x = tw.placeholder(tw.float32, [None])
    value, update = metrics.mean(x, name="my_mean")
    names = sorted(v.op.name for v in tw.local_variables())
    assert names == ["my_mean/count", "my_mean/total"]
    assert tw.global_variables() == [] and tw.trainable_variables() == []
    assert sorted(v.op.name for v in tw.get_collection(metrics.METRIC_VARIABLES)) == names
    with tw.Session() as sess:
        sess.run(tw.local_variables_initializer())
        assert sess.run(value) == 0.0   # nothing seen: 0, not NaN
        sess.run(update, {x: [1.0, 3.0]})
        sess.run(update, {x: [5.0]})
        assert sess.run(value) == 3.0
        sess.run(tw.local_variables_initializer())
        assert sess.run(value) == 0.0
        assert sess.run(update, {x: [7.0]}) == 7.0


def test_collections_and_unique_scopes():
    x = tw.constant([1.0, 2.0])
    v1, u1 = metrics.mean(x, metrics_collections=["vals"], updates_collections=["ups"])
    v2, u2 = metrics.mean(x)
    assert tw.get_collection("vals") == [v1] and tw.get_collection("ups") == [u1]
    assert {v.op.name.split("/")[0] for v in tw.local_variables()} == {"mean", "mean_1"}


def test_labels_and_predictions_with_a_trailing_unit_dimension():
    value, update = metrics.accuracy(tw.constant([[1], [0], [1]]), tw.constant([1, 1, 1]))
    with tw.Session() as sess:
        sess.run(tw.local_variables_initializer())
        np.testing.assert_allclose(sess.run(update), 2 / 3, rtol=1e-6)


def test_bad_input():
    with pytest.raises(tw.errors.InvalidArgumentError, match="shape"):
        metrics.accuracy(tw.constant([1, 0, 1]), tw.constant([1, 0]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="num_thresholds must be an int > 1"):
        metrics.auc(tw.constant([1]), tw.constant([0.5]), num_thresholds=1)
    with pytest.raises(tw.errors.InvalidArgumentError, match="curve must be 'ROC' or 'PR'"):
        metrics.auc(tw.constant([1]), tw.constant([0.5]), curve="DET")
    with pytest.raises(tw.errors.InvalidArgumentError, match="labels is required"):
        metrics.mean_squared_error(None, tw.constant([1.0]))
