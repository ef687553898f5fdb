"""tw.estimator.inputs.numpy_input_fn: batches in order or shuffled per epoch, the smaller
last batch, the end of the input after num_epochs, structures of x and y, and bad input."""

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.estimator as est

X = np.arange(20, dtype=np.float32).reshape(10, 2)
Y = np.arange(10, dtype=np.int64) * 10


def _batches(input_fn, limit=100, seed=None):
    """Every batch the input_fn gives until its input ends (queue runners started by a
    MonitoredSession, as the Estimator does)."""
    g = tw.Graph()
    g.seed = seed
    with g.as_default():
        tensors = input_fn()
        out = []
        with tw.train.MonitoredSession() as sess:
            while not sess.should_stop() and len(out) < limit:
                out.append(sess.run(tensors))
    return out


def test_in_order_with_a_smaller_last_batch_then_the_end():
    batches = _batches(est.inputs.numpy_input_fn({"a": X, "b": X[:, 0]}, Y, batch_size=4, shuffle=False))
    assert [len(f["a"]) for f, _ in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([f["a"] for f, _ in batches]), X)
    np.testing.assert_array_equal(np.concatenate([f["b"] for f, _ in batches]), X[:, 0])
    np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), Y)
    assert batches[0][0]["b"].shape == (4,) and batches[0][1].dtype == np.int64


def test_epochs_run_back_to_back_and_shuffle_permutes_each_epoch():
    def run():
        return _batches(est.inputs.numpy_input_fn(X, Y, batch_size=3, num_epochs=3, shuffle=True), seed=5)
    batches = run()
    ys = np.concatenate([y for _, y in batches])
    assert len(ys) == 30 and [len(y) for _, y in batches][-1] == 3
    for epoch in range(3):
        assert sorted(ys[epoch * 10:(epoch + 1) * 10]) == list(Y)   # a permutation per epoch
    assert list(ys[:10]) != list(Y)
    xs = np.concatenate([x for x, _ in batches])
    np.testing.assert_array_equal(xs[:, 0] * 5, ys)   # rows stay together
    np.testing.assert_array_equal(np.concatenate([y for _, y in run()]), ys)   # the same with the same seed


def test_forever_gives_full_batches_and_y_may_be_absent_or_a_dict():
    batches = _batches(est.inputs.numpy_input_fn({"a": X}, batch_size=4, num_epochs=None, shuffle=False), limit=6)
    assert len(batches) == 6 and all(len(b["a"]) == 4 for b in batches)
    np.testing.assert_array_equal(batches[2]["a"], X[[8, 9, 0, 1]])
    (features, labels), = _batches(est.inputs.numpy_input_fn(X, {"y1": Y, "y2": -Y}, batch_size=10, shuffle=False))
    np.testing.assert_array_equal(features, X)
    np.testing.assert_array_equal(labels["y2"], -Y)


def test_bad_input_names_what_was_expected():
    with pytest.raises(tw.errors.InvalidArgumentError, match="shuffle must be provided and explicitly set as boolean"):
        est.inputs.numpy_input_fn({"a": X}, Y)
    with pytest.raises(ValueError, match="shuffle must be provided"):
        est.inputs.numpy_input_fn({"a": X}, Y, shuffle=1)
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=r"length of tensors in x and y is mismatched.*\{\"x\['a'\]\": 10, 'y': 9\}"):
        est.inputs.numpy_input_fn({"a": X}, Y[:9], shuffle=False)
    with pytest.raises(tw.errors.InvalidArgumentError, match="mismatched"):
        est.inputs.numpy_input_fn({"a": X, "b": X[:5]}, shuffle=False)
    with pytest.raises(tw.errors.InvalidArgumentError, match="1 duplicate keys are found in both x and y: \\['a'\\]"):
        est.inputs.numpy_input_fn({"a": X}, {"a": Y}, shuffle=False)
    with pytest.raises(TypeError, match="x must be a dict of arrays or an array"):
        est.inputs.numpy_input_fn(5, shuffle=False)
    with pytest.raises(tw.errors.InvalidArgumentError, match="batch_size must be a positive int"):
        est.inputs.numpy_input_fn(X, batch_size=0, shuffle=False)
    with pytest.raises(tw.errors.InvalidArgumentError, match="num_epochs must be a positive int or None"):
        est.inputs.numpy_input_fn(X, num_epochs=0, shuffle=False)
    with pytest.raises(tw.errors.InvalidArgumentError, match="must not be an empty dict"):
        est.inputs.numpy_input_fn({}, shuffle=False)
