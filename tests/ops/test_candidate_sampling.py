"""Candidate samplers: their distributions (frequencies over many fixed-seed samples within
6 standard errors), TF's expected-count formulas with and without replacement, distinct
candidates with ``unique=True``, seeds, the learned sampler's counts across steps, the fixed
sampler's weights (unigrams, vocab_file, distortion, reserved ids, shards), accidental hits,
and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors

LABELS = np.array([[0], [3], [7]], np.int64)


def log_uniform_p(k, range_max):
    k = np.asarray(k, np.float64)
    return (np.log(k + 2) - np.log(k + 1)) / np.log(range_max + 1)


def frequencies(sampler_out, runs, range_max, feed=None):
    counts = np.zeros(range_max)
    with tw.Session() as s:
        for _ in range(runs):
            sampled = s.run(sampler_out[0], feed)
            counts += np.bincount(sampled, minlength=range_max)
    return counts / counts.sum(), counts.sum()


def assert_distribution(freq, p, n):
    se = np.sqrt(p * (1 - p) / n)
    np.testing.assert_array_less(np.abs(freq - p), 6 * se + 1e-12)


# ---------------------------------------------------------------------------------------
# distributions and expected counts
def test_log_uniform_distribution_and_expected_counts():
    range_max, num_sampled = 20, 2000
    out = tw.nn.log_uniform_candidate_sampler(LABELS, 1, num_sampled, False, range_max, seed=1)
    assert [t.shape.as_list() for t in out] == [[num_sampled], [3, 1], [num_sampled]]
    assert [t.dtype for t in out] == [tw.int64, tw.float32, tw.float32]
    p = log_uniform_p(np.arange(range_max), range_max)
    assert abs(p.sum() - 1) < 1e-12
    freq, n = frequencies(out, 20, range_max)
    assert_distribution(freq, p, n)
    sampled, true_count, sampled_count = tw.Session().run(out)
    assert sampled.min() >= 0 and sampled.max() < range_max
    # with replacement the expected count is P(k) * num_sampled
    np.testing.assert_allclose(sampled_count, p[sampled] * num_sampled, rtol=1e-5)
    np.testing.assert_allclose(true_count, p[LABELS] * num_sampled, rtol=1e-5)


def test_uniform_distribution_and_expected_counts():
    range_max, num_sampled = 10, 3000
    out = tw.nn.uniform_candidate_sampler(LABELS, 1, num_sampled, False, range_max, seed=2)
    freq, n = frequencies(out, 10, range_max)
    assert_distribution(freq, np.full(range_max, 0.1), n)
    _, true_count, sampled_count = tw.Session().run(out)
    np.testing.assert_allclose(sampled_count, 300.0)
    np.testing.assert_allclose(true_count, [[300.0]] * 3)


@pytest.mark.parametrize("sampler", ["log_uniform", "uniform", "learned_unigram", "fixed_unigram"])
def test_unique_gives_distinct_candidates_and_tf_expected_counts(sampler):
    range_max, num_sampled = 30, 12
    kw = {"unigrams": np.arange(1.0, 31.0)} if sampler == "fixed_unigram" else {}
    fn = getattr(tw.nn, f"{sampler}_candidate_sampler")
    out = fn(LABELS, 1, num_sampled, True, range_max, seed=3, **kw)
    if sampler == "log_uniform":
        p = log_uniform_p(np.arange(range_max), range_max)
    elif sampler == "fixed_unigram":
        p = np.arange(1.0, 31.0) / np.arange(1.0, 31.0).sum()
    else:
        p = np.full(range_max, 1 / range_max)
    with tw.Session() as s:
        for _ in range(20):
            sampled, true_count, sampled_count = s.run(out)
            assert len(set(sampled.tolist())) == num_sampled
            if np.allclose(sampled_count, p[sampled] * num_sampled, rtol=1e-5):
                # no draw repeated (num_tries == num_sampled): TF's count is p * num_sampled
                np.testing.assert_allclose(true_count, p[LABELS] * num_sampled, rtol=1e-5)
            else:
                # 1 - (1 - p)^num_tries with one num_tries > num_sampled for the whole batch
                tries = np.log1p(-sampled_count.astype(np.float64)) / np.log1p(-p[sampled])
                num_tries = int(round(tries[0]))
                assert num_tries > num_sampled
                np.testing.assert_allclose(tries, num_tries, rtol=1e-4)
                np.testing.assert_allclose(true_count, 1 - (1 - p[LABELS]) ** num_tries, rtol=1e-4)
            if sampler == "learned_unigram":
                break  # its probabilities change after the first run


def test_unique_with_every_class_is_a_permutation():
    out = tw.nn.log_uniform_candidate_sampler(LABELS, 1, 8, True, 8, seed=4)
    sampled, true_count, sampled_count = tw.Session().run(out)
    assert sorted(sampled.tolist()) == list(range(8))
    assert np.all(sampled_count > 0) and np.all(sampled_count <= 1.0 + 1e-6)


def test_unique_log_uniform_inclusion_favours_small_ids():
    out = tw.nn.log_uniform_candidate_sampler(LABELS, 1, 5, True, 1000, seed=5)
    hits = np.zeros(1000)
    with tw.Session() as s:
        for _ in range(200):
            hits[s.run(out[0])] += 1
    # class 0 is in a sample of 5 distinct classes with probability >= 1 - (1 - 0.1)^5 = 0.41
    assert hits[0] > 50 and hits[:10].sum() > hits[500:].sum()


def test_all_candidate_sampler():
    sampled, true_count, sampled_count = tw.Session().run(tw.nn.all_candidate_sampler(LABELS, 1, 6, True))
    np.testing.assert_array_equal(sampled, np.arange(6))
    np.testing.assert_array_equal(true_count, np.ones((3, 1)))
    np.testing.assert_array_equal(sampled_count, np.ones(6))


# ---------------------------------------------------------------------------------------
# seeds and state
def test_seeds_repeat_across_sessions_and_advance_within_one():
    def build(graph_seed, op_seed):
        g = tw.Graph()
        with g.as_default():
            if graph_seed is not None:
                tw.set_random_seed(graph_seed)
            out = tw.nn.uniform_candidate_sampler(LABELS, 1, 50, False, 1000, seed=op_seed)
        with tw.Session(graph=g) as s:
            return s.run(out[0]), s.run(out[0])

    a1, a2 = build(7, 1)
    b1, b2 = build(7, 1)
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    assert not np.array_equal(a1, a2)
    c1, _ = build(7, 2)
    assert not np.array_equal(a1, c1)
    d1, _ = build(None, 1)  # op seed only: the default graph seed
    e1, _ = build(None, 1)
    np.testing.assert_array_equal(d1, e1)


def test_learned_unigram_counts_true_classes_across_steps():
    range_max, num_sampled = 10, 4
    labels = tw.placeholder(tw.int64, [None, 1])
    out = tw.nn.learned_unigram_candidate_sampler(labels, 1, num_sampled, False, range_max, seed=6)
    batch = np.full((5, 1), 7, np.int64)
    with tw.Session() as s:
        for step in range(6):
            _, true_count, _ = s.run(out, {labels: batch})
            # sampled before this step's update: class 7 has 1 + 5 * step counts of 10 + 5 * step
            p7 = (1 + 5 * step) / (range_max + 5 * step)
            np.testing.assert_allclose(true_count, p7 * num_sampled, rtol=1e-5)
        sampled = np.concatenate([s.run(out[0], {labels: batch[:0]}) for _ in range(500)])
    # now 31 of 40 counts are class 7's
    assert abs(np.mean(sampled == 7) - 31 / 40) < 6 * np.sqrt(0.775 * 0.225 / sampled.size)
    with tw.Session() as s:  # a new Session starts from one count per class again
        _, true_count, _ = s.run(out, {labels: batch})
        np.testing.assert_allclose(true_count, 0.1 * num_sampled, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# the fixed unigram sampler
def test_fixed_unigram_weights_distortion_and_reserved_ids():
    unigrams = [1.0, 4.0, 9.0, 16.0]
    out = tw.nn.fixed_unigram_candidate_sampler(LABELS[:, :1] % 6, 1, 4000, False, 6, distortion=0.5,
                                                num_reserved_ids=2, unigrams=unigrams, seed=8)
    w = np.array([0, 0, 1.0, 2.0, 3.0, 4.0])  # reserved ids first, weights ** 0.5
    p = w / w.sum()
    freq, n = frequencies(out, 5, 6)
    assert freq[0] == 0 and freq[1] == 0
    assert_distribution(freq, p, n)
    sampled, true_count, sampled_count = tw.Session().run(out)
    np.testing.assert_allclose(sampled_count, p[sampled] * 4000, rtol=1e-5)
    np.testing.assert_allclose(true_count, p[LABELS % 6] * 4000, rtol=1e-5)


def test_fixed_unigram_from_vocab_file_and_shards(tmp_path):
    vocab = tmp_path / "vocab.csv"
    vocab.write_text("".join(f"word{i},{i + 1}\n" for i in range(6)))
    labels = np.array([[0], [2]], np.int64)
    full = tw.nn.fixed_unigram_candidate_sampler(labels, 1, 3000, False, 6, vocab_file=str(vocab), seed=9)
    # shard 1 of 2 holds ids 1, 3, 5 (weights 2, 4, 6) as its classes 0, 1, 2
    shard = tw.nn.fixed_unigram_candidate_sampler(labels, 1, 3000, False, 3, vocab_file=str(vocab),
                                                  num_shards=2, shard=1, seed=9)
    with tw.Session() as s:
        (_, _, c_full), (_, t_shard, c_shard) = s.run([full, shard])
    freq, n = frequencies(full, 4, 6)
    assert_distribution(freq, np.arange(1.0, 7.0) / 21, n)
    freq, n = frequencies(shard, 4, 3)
    assert_distribution(freq, np.array([2.0, 4.0, 6.0]) / 12, n)
    np.testing.assert_allclose(t_shard, [[2 / 12 * 3000], [6 / 12 * 3000]], rtol=1e-5)


def test_fixed_unigram_bad_configuration():
    with pytest.raises(errors.InvalidArgumentError, match="FixedUnigramCandidateSampler.*exactly one"):
        tw.nn.fixed_unigram_candidate_sampler(LABELS, 1, 2, False, 8)
    out = tw.nn.fixed_unigram_candidate_sampler(LABELS, 1, 2, False, 8, unigrams=[1.0] * 5)
    with pytest.raises(errors.InvalidArgumentError, match="FixedUnigramCandidateSampler.*range_max is 8.*5"):
        tw.Session().run(out)
    missing = tw.nn.fixed_unigram_candidate_sampler(LABELS, 1, 2, False, 8, vocab_file="/nonexistent/vocab.csv")
    with pytest.raises(errors.NotFoundError, match="vocab"):
        tw.Session().run(missing)


# ---------------------------------------------------------------------------------------
# accidental hits
def reference_hits(true_classes, sampled):
    last = {c: i for i, c in enumerate(sampled.tolist())}
    rows, ids = [], []
    for r, row in enumerate(true_classes.tolist()):
        for c in row:
            if c in last:
                rows.append(r)
                ids.append(last[c])
    return rows, ids


def test_compute_accidental_hits():
    true_classes = np.array([[1, 5], [2, 2], [9, 0], [4, 3]], np.int64)
    sampled = np.array([5, 2, 7, 0, 2, 3], np.int64)  # 2 twice: reported at its last position
    indices, ids, weights = tw.Session().run(tw.nn.compute_accidental_hits(true_classes, sampled, num_true=2))
    rows, want_ids = reference_hits(true_classes, sampled)
    assert indices.dtype == np.int32 and ids.dtype == np.int64 and weights.dtype == np.float32
    np.testing.assert_array_equal(indices, rows)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(weights, np.full(len(rows), -np.finfo(np.float32).max))


def test_compute_accidental_hits_random_against_reference():
    rng = np.random.default_rng(10)
    true_classes = rng.integers(0, 20, size=(16, 3)).astype(np.int64)
    sampled = tw.nn.log_uniform_candidate_sampler(true_classes, 3, 10, True, 20, seed=11)[0]
    hits = tw.nn.compute_accidental_hits(true_classes, sampled, num_true=3)
    s, (indices, ids, _) = tw.Session().run([sampled, hits])
    rows, want_ids = reference_hits(true_classes, s)
    assert len(rows) > 0
    np.testing.assert_array_equal(indices, rows)
    np.testing.assert_array_equal(ids, want_ids)


# ---------------------------------------------------------------------------------------
# bad input
def test_bad_true_classes():
    with pytest.raises(errors.InvalidArgumentError, match="LogUniformCandidateSampler.*int64.*int32"):
        tw.nn.log_uniform_candidate_sampler(tw.constant([[1]], tw.int32), 1, 2, True, 10)
    with pytest.raises(errors.InvalidArgumentError, match="LogUniformCandidateSampler.*matrix"):
        tw.nn.log_uniform_candidate_sampler(np.array([1, 2], np.int64), 1, 2, True, 10)
    with pytest.raises(errors.InvalidArgumentError, match="UniformCandidateSampler.*num_true = 2"):
        tw.nn.uniform_candidate_sampler(LABELS, 2, 2, True, 10)
    with pytest.raises(errors.InvalidArgumentError, match="ComputeAccidentalHits.*int64"):
        tw.nn.compute_accidental_hits(tw.constant([[1]], tw.int32), np.array([1], np.int64), 1)
    labels = tw.placeholder(tw.int64)
    out = tw.nn.uniform_candidate_sampler(labels, 1, 2, True, 10)
    with tw.Session() as s:
        with pytest.raises(errors.InvalidArgumentError, match=r"UniformCandidateSampler.*true class 12.*\[0, 10\)"):
            s.run(out, {labels: [[1], [12]]})
        with pytest.raises(errors.InvalidArgumentError, match="UniformCandidateSampler.*num_true = 1"):
            s.run(out, {labels: [[1, 2]]})


def test_num_sampled_over_range_max_with_unique():
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"LogUniformCandidateSampler.*num_sampled = 11 distinct.*range_max = 10"):
        tw.nn.log_uniform_candidate_sampler(LABELS, 1, 11, True, 10)
    # with replacement it is fine
    sampled = tw.Session().run(tw.nn.log_uniform_candidate_sampler(LABELS, 1, 11, False, 10, seed=1)[0])
    assert sampled.shape == (11,)


def test_samplers_have_no_gradient():
    x = tw.placeholder(tw.float32, [3, 1])
    labels = tw.cast(x, tw.int64)
    _, true_count, sampled_count = tw.nn.uniform_candidate_sampler(labels, 1, 2, True, 10)
    assert tw.gradients(tw.reduce_sum(true_count) + tw.reduce_sum(sampled_count), [x]) == [None]
