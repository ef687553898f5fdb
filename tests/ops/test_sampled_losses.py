"""tw.nn.nce_loss and tw.nn.sampled_softmax_loss: values against a NumPy reference of
TensorFlow's _compute_sampled_logits given fixed sampled_values (num_true 1 and 2, with and
without accidental-hit removal), sampled softmax against the full softmax when every class
is sampled, gradients against float64 finite differences (the weights' gradient is
IndexedSlices), a tiny model trained with each loss, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.testing.gradient_checker import check_gradients

FLT_MAX = float(np.finfo(np.float32).max)
NUM_CLASSES, DIM, BATCH = 12, 5, 4


def problem(num_true=1, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(NUM_CLASSES, DIM)).astype(dtype)
    b = rng.normal(size=NUM_CLASSES).astype(dtype)
    x = rng.normal(size=(BATCH, DIM)).astype(dtype)
    labels = np.stack([rng.choice(NUM_CLASSES, num_true, replace=False) for _ in range(BATCH)]).astype(np.int64)
    sampled = np.array([2, 7, 0, 9, 5, 11], np.int64)  # includes some of the labels: accidental hits
    true_ec = rng.uniform(0.2, 1.5, size=(BATCH, num_true)).astype(np.float32)
    sampled_ec = rng.uniform(0.2, 1.5, size=sampled.size).astype(np.float32)
    return w, b, x, labels, (sampled, true_ec, sampled_ec)


def reference_logits(w, b, x, labels, sampled_values, remove_accidental_hits):
    w, b, x = (np.asarray(a, np.float64) for a in (w, b, x))
    sampled, true_ec, sampled_ec = sampled_values
    num_true = labels.shape[1]
    true_logits = np.einsum("bd,btd->bt", x, w[labels]) + b[labels]
    sampled_logits = x @ w[sampled].T + b[sampled]
    if remove_accidental_hits:
        for r in range(labels.shape[0]):
            for j, c in enumerate(sampled):
                if c in labels[r]:
                    sampled_logits[r, j] += -FLT_MAX
    true_logits -= np.log(true_ec)
    sampled_logits -= np.log(sampled_ec)
    logits = np.concatenate([true_logits, sampled_logits], 1)
    targets = np.concatenate([np.full(true_logits.shape, 1 / num_true), np.zeros(sampled_logits.shape)], 1)
    return logits, targets


def reference_nce(*args):
    z, t = reference_logits(*args)
    return np.sum(np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z))), axis=1)


def reference_sampled_softmax(*args):
    z, t = reference_logits(*args)
    m = z.max(axis=1, keepdims=True)
    log_softmax = z - m - np.log(np.sum(np.exp(z - m), axis=1, keepdims=True))
    return -np.sum(t * log_softmax, axis=1)


def run(fetches, feed_dict=None):
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        return s.run(fetches, feed_dict)


# ---------------------------------------------------------------------------------------
# values
@pytest.mark.parametrize("num_true", [1, 2])
@pytest.mark.parametrize("remove_accidental_hits", [False, True])
def test_nce_loss_matches_reference(num_true, remove_accidental_hits):
    w, b, x, labels, sv = problem(num_true)
    loss = tw.nn.nce_loss(tw.Variable(w), tw.Variable(b), labels, x, num_sampled=6, num_classes=NUM_CLASSES,
                          num_true=num_true, sampled_values=sv, remove_accidental_hits=remove_accidental_hits)
    assert loss.shape.as_list() == [BATCH] and loss.dtype == tw.float32
    want = reference_nce(w, b, x, labels, sv, remove_accidental_hits)
    np.testing.assert_allclose(run(loss), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_true", [1, 2])
@pytest.mark.parametrize("remove_accidental_hits", [True, False])
def test_sampled_softmax_loss_matches_reference(num_true, remove_accidental_hits):
    w, b, x, labels, sv = problem(num_true, seed=1)
    loss = tw.nn.sampled_softmax_loss(tw.Variable(w), tw.Variable(b), labels, x, num_sampled=6,
                                      num_classes=NUM_CLASSES, num_true=num_true, sampled_values=sv,
                                      remove_accidental_hits=remove_accidental_hits)
    assert loss.shape.as_list() == [BATCH]
    want = reference_sampled_softmax(w, b, x, labels, sv, remove_accidental_hits)
    np.testing.assert_allclose(run(loss), want, rtol=1e-5, atol=1e-5)


def test_weights_as_a_list_of_one_shard_and_int32_labels():
    w, b, x, labels, sv = problem()
    loss = tw.nn.sampled_softmax_loss([tw.constant(w)], tw.constant(b), tw.constant(labels.astype(np.int32)), x,
                                      6, NUM_CLASSES, sampled_values=sv)
    np.testing.assert_allclose(run(loss), reference_sampled_softmax(w, b, x, labels, sv, True), rtol=1e-5)


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_weights_in_shards(strategy):
    w, b, x, labels, sv = problem(2, seed=7)
    if strategy == "mod":
        shards = [w[0::3], w[1::3], w[2::3]]
    else:
        shards = [w[:4], w[4:8], w[8:]]
    for fn, ref in ((tw.nn.nce_loss, reference_nce), (tw.nn.sampled_softmax_loss, reference_sampled_softmax)):
        loss = fn([tw.Variable(sh) for sh in shards], b, labels, x, 6, NUM_CLASSES, num_true=2, sampled_values=sv,
                  partition_strategy=strategy)
        np.testing.assert_allclose(run(loss), ref(w, b, x, labels, sv, fn is tw.nn.sampled_softmax_loss),
                                   rtol=1e-5, atol=1e-5)


def test_weights_as_a_partitioned_variable():
    w, b, x, labels, sv = problem(seed=8)
    pv = tw.get_variable("softmax_w", initializer=tw.constant(w), partitioner=tw.fixed_size_partitioner(2))
    assert len(list(pv)) == 2
    loss = tw.nn.sampled_softmax_loss(pv, b, labels, x, 6, NUM_CLASSES, sampled_values=sv,
                                      partition_strategy="div")
    np.testing.assert_allclose(run(loss), reference_sampled_softmax(w, b, x, labels, sv, True), rtol=1e-5)
    grads = tw.gradients(tw.reduce_sum(loss), list(pv))
    assert all(isinstance(g, tw.IndexedSlices) for g in grads)


def full_softmax_loss(w, b, x, labels):
    z = x.astype(np.float64) @ w.T + b
    z -= z.max(axis=1, keepdims=True)
    return np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(z)), labels[:, 0]]


def test_sampled_softmax_with_every_class_is_the_full_softmax():
    w, b, x, labels, _ = problem(seed=2)
    full = full_softmax_loss(w, b, x, labels)
    # every class, expected counts all 1 (AllCandidateSampler), hits removed: exactly the full softmax
    sv = tw.nn.all_candidate_sampler(labels, 1, NUM_CLASSES, True)
    exact = tw.nn.sampled_softmax_loss(w, b, labels, x, NUM_CLASSES, NUM_CLASSES, sampled_values=sv)
    # uniform without replacement over every class: one expected count for all, so log Q cancels
    sv = tw.nn.uniform_candidate_sampler(labels, 1, NUM_CLASSES, True, NUM_CLASSES, seed=1)
    uniform = tw.nn.sampled_softmax_loss(w, b, labels, x, NUM_CLASSES, NUM_CLASSES, sampled_values=sv)
    e, u = run([exact, uniform])
    np.testing.assert_allclose(e, full, rtol=1e-5)
    np.testing.assert_allclose(u, full, rtol=1e-5)


def test_sampled_softmax_approaches_full_softmax_as_num_sampled_grows():
    n = 50
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(n, DIM)).astype(np.float32), rng.normal(size=n).astype(np.float32)
    x = rng.normal(size=(8, DIM)).astype(np.float32)
    labels = rng.integers(0, n, size=(8, 1)).astype(np.int64)
    full = full_softmax_loss(w, b, x, labels)
    errs = {}
    for k in (5, 25, 50):
        loss = tw.nn.sampled_softmax_loss(w, b, labels, x, k, n, seed=4)
        with tw.Session() as s:
            errs[k] = np.mean([np.abs(s.run(loss) - full).mean() for _ in range(20)])
    assert errs[50] < errs[25] < errs[5]
    assert errs[50] < 0.05  # log-uniform without replacement takes every class with expected counts near 1


def test_default_sampler_uses_the_seed():
    w, b, x, labels, _ = problem()

    def losses(seed):
        g = tw.Graph()
        with g.as_default():
            loss = tw.nn.sampled_softmax_loss(w, b, labels, x, 4, NUM_CLASSES, seed=seed)
            with tw.Session() as s:
                return s.run(loss), s.run(loss)

    a, a2 = losses(5)
    b_, _ = losses(5)
    np.testing.assert_array_equal(a, b_)
    assert not np.array_equal(a, a2)


# ---------------------------------------------------------------------------------------
# gradients
@pytest.mark.parametrize("loss_fn", ["nce_loss", "sampled_softmax_loss"])
@pytest.mark.parametrize("num_true", [1, 2])
def test_gradients_against_finite_differences(loss_fn, num_true):
    w, b, x, labels, sv = problem(num_true, seed=5, dtype=np.float64)
    fn = getattr(tw.nn, loss_fn)

    def f(wt, bt, xt):
        return fn(wt, bt, labels, xt, 6, NUM_CLASSES, num_true=num_true, sampled_values=sv,
                  remove_accidental_hits=True)

    check_gradients(f, [w, b, x], rtol=1e-5, atol=1e-7)


def test_gradients_with_sharded_weights():
    w, b, x, labels, sv = problem(2, seed=9, dtype=np.float64)

    def f(w0, w1, bt, xt):
        return tw.nn.nce_loss([w0, w1], bt, labels, xt, 6, NUM_CLASSES, num_true=2, sampled_values=sv)

    check_gradients(f, [w[0::2], w[1::2], b, x], rtol=1e-5, atol=1e-7)


def test_weights_gradient_is_indexed_slices_of_the_looked_up_rows():
    w, b, x, labels, sv = problem()
    wv = tw.Variable(w)
    loss = tw.reduce_sum(tw.nn.nce_loss(wv, tw.Variable(b), labels, x, 6, NUM_CLASSES, sampled_values=sv))
    (gw,) = tw.gradients(loss, [wv])
    assert isinstance(gw, tw.IndexedSlices)
    v = run(gw)
    rows = set(np.asarray(v.indices).tolist())
    assert rows == set(labels.reshape(-1).tolist()) | set(sv[0].tolist())


# ---------------------------------------------------------------------------------------
# training
@pytest.mark.parametrize("loss_fn", ["nce_loss", "sampled_softmax_loss"])
def test_training_a_tiny_model_reduces_the_loss(loss_fn):
    vocab, dim = 40, 8
    rng = np.random.default_rng(6)
    tw.set_random_seed(7)
    emb = tw.Variable(rng.normal(scale=0.1, size=(vocab, dim)).astype(np.float32))
    out_w = tw.Variable(rng.normal(scale=0.1, size=(vocab, dim)).astype(np.float32))
    out_b = tw.Variable(np.zeros(vocab, np.float32))
    ids = tw.placeholder(tw.int64, [None])
    labels = tw.placeholder(tw.int64, [None, 1])
    inputs = tw.gather(emb, ids)
    loss = tw.reduce_mean(getattr(tw.nn, loss_fn)(out_w, out_b, labels, inputs, 8, vocab))
    train = tw.train.GradientDescentOptimizer(1.0).minimize(loss)
    data = rng.integers(0, vocab, size=2000)
    targets = (data * 7 + 3) % vocab  # a fixed permutation to learn
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        history = []
        for step in range(300):
            i = slice((step * 32) % 1968, (step * 32) % 1968 + 32)
            feed = {ids: data[i], labels: targets[i, None]}
            history.append(s.run([loss, train], feed)[0])
    first, last = np.mean(history[:20]), np.mean(history[-20:])
    assert last < 0.5 * first, (first, last)


# ---------------------------------------------------------------------------------------
# bad input
@pytest.mark.parametrize("loss_fn", ["nce_loss", "sampled_softmax_loss"])
def test_bad_labels_and_inputs(loss_fn):
    w, b, x, labels, sv = problem()
    fn = getattr(tw.nn, loss_fn)
    with pytest.raises(errors.InvalidArgumentError, match=f"{loss_fn}: labels must be an int64.*float32"):
        fn(w, b, labels.astype(np.float32), x, 6, NUM_CLASSES)
    with pytest.raises(errors.InvalidArgumentError, match=rf"{loss_fn}: labels must have shape \[batch_size, num_true = 1\]"):
        fn(w, b, labels[:, 0], x, 6, NUM_CLASSES)
    with pytest.raises(errors.InvalidArgumentError, match=rf"{loss_fn}: labels must have shape .*num_true = 2"):
        fn(w, b, labels, x, 6, NUM_CLASSES, num_true=2)
    with pytest.raises(errors.InvalidArgumentError, match=f"{loss_fn}: inputs must have shape"):
        fn(w, b, labels, x[0], 6, NUM_CLASSES)
    with pytest.raises(errors.InvalidArgumentError, match=f"{loss_fn}: labels .* same batch size"):
        fn(w, b, labels[:2], x, 6, NUM_CLASSES)
    with pytest.raises(errors.InvalidArgumentError, match="LogUniformCandidateSampler.*num_sampled = 13 distinct"):
        fn(w, b, labels, x, 13, NUM_CLASSES)
    with pytest.raises(errors.InvalidArgumentError, match="sampled_values"):
        fn(w, b, labels, x, 6, NUM_CLASSES, sampled_values=sv[:2])


def test_out_of_range_label_fails_at_run_time():
    w, b, x, labels, _ = problem()
    ph = tw.placeholder(tw.int64, [None, 1])
    loss = tw.nn.sampled_softmax_loss(w, b, ph, x, 4, NUM_CLASSES)
    with pytest.raises(errors.InvalidArgumentError, match=r"LogUniformCandidateSampler.*true class 12"):
        run(loss, {ph: np.array([[1], [2], [3], [12]])})
