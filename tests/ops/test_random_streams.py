"""The Philox4x32-10 random streams (``tensorweave.kernels.random``) behind the CPU's random
kernels: the published known answers, the documented mapping from words to values (checked
with an independent pure-Python Philox), per-run advance and replay across sessions, TF1's
seed semantics, and the distributions (moments and Kolmogorov-Smirnov bounds at fixed seeds).
The other devices are checked against these values in their plugins' tests."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave.kernels import random as philox

_M32 = 0xFFFFFFFF


def ref_philox(ctr, key):
    """Philox4x32-10 (Salmon et al., SC 2011) on Python ints, one block at a time."""
    c, (k0, k1) = list(ctr), key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & _M32, p1 & _M32, ((p0 >> 32) ^ c[3] ^ k1) & _M32, p0 & _M32]
    return c


def ref_words(seed, seed2, first, nblocks):
    key = [seed & _M32, (seed >> 32) & _M32]
    return [ref_philox([(b & _M32), (b >> 32) & _M32, seed2 & _M32, (seed2 >> 32) & _M32], key)
            for b in range(first, first + nblocks)]


# Random123's kat_vectors for philox4x32_10: (counter, key, output).
KAT = [([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
       ([_M32] * 4, [_M32, _M32], [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
       ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]


@pytest.mark.parametrize("ctr, key, want", KAT)
def test_known_answers(ctr, key, want):
    assert ref_philox(ctr, key) == want
    block = np.array([ctr[1] << 32 | ctr[0]], np.uint64)
    got = philox.philox4x32_10(key[1] << 32 | key[0], ctr[3] << 32 | ctr[2], block)
    assert got.dtype == np.uint32 and got[0].tolist() == want


def test_vectorised_philox_matches_the_reference_and_wraps():
    s = philox.PhiloxStream((7 << 33) + 5, (3 << 40) + 1)
    first = (1 << 64) - 3  # the block number wraps mod 2^64
    got = s.words(first, 6)
    want = [ref_philox([b & _M32, b >> 32, s.stream & _M32, s.stream >> 32], [s.key & _M32, s.key >> 32])
            for b in [(first + i) % (1 << 64) for i in range(6)]]
    assert got.tolist() == want
    big = s.words(12345, 70000)  # several chunks of the NumPy implementation
    assert big[[0, 32767, 32768, 69999]].tolist() == [ref_words(s.key, s.stream, 12345 + i, 1)[0]
                                                     for i in (0, 32767, 32768, 69999)]


def _session_values(op, shape, dtype=tw.float32, seed=5, seed2=9, runs=2, extra=(), device="/device:CPU:0"):
    g = tw.Graph()
    with g.as_default(), tw.device(device):
        if op == "RandomUniformInt":
            out = apply_op(op, [tw.constant(shape)] + [tw.constant(v) for v in extra], {"seed": seed, "seed2": seed2})
        else:
            out = apply_op(op, [tw.constant(shape)], {"seed": seed, "seed2": seed2, "dtype": dtype})
    with tw.Session(graph=g) as s:
        return [s.run(out) for _ in range(runs)]


def test_uniform_float32_is_the_documented_stream():
    """Key = seed, counter words 2-3 = seed2, words 0-1 = the block number, continuing from run
    to run (a run of 15 values takes 4 blocks): value = (word >> 8) * 2^-24."""
    seed, seed2 = (1 << 40) + 7, 3
    first, second = _session_values("RandomUniform", [3, 5], seed=seed, seed2=seed2)
    words = [w for blk in ref_words(seed, seed2, 0, 8) for w in blk]
    want = np.array([w >> 8 for w in words], np.float64) * 2.0**-24
    assert first.dtype == np.float32 and first.shape == (3, 5)
    np.testing.assert_array_equal(first.reshape(-1), want[:15].astype(np.float32))
    np.testing.assert_array_equal(second.reshape(-1), want[16:31].astype(np.float32))


def test_uniform_float64_float16_and_ints_follow_the_words():
    words = [w for blk in ref_words(5, 9, 0, 4) for w in blk]
    w64 = [(words[2 * i] << 32) | words[2 * i + 1] for i in range(8)]
    (u64,) = _session_values("RandomUniform", [7], tw.float64, runs=1)
    np.testing.assert_array_equal(u64, np.array([w >> 11 for w in w64[:7]], np.float64) * 2.0**-53)
    (u16,) = _session_values("RandomUniform", [7], tw.float16, runs=1)
    np.testing.assert_array_equal(u16, (np.array([w >> 21 for w in words[:7]]) * 2.0**-11).astype(np.float16))
    (i32,) = _session_values("RandomUniformInt", [7], runs=1, extra=(np.int32(-5), np.int32(1000)))
    np.testing.assert_array_equal(i32, [-5 + w % 1005 for w in words[:7]])
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    (i64,) = _session_values("RandomUniformInt", [7], runs=1, extra=(np.int64(lo), np.int64(hi)))
    want = [((lo + w % (hi - lo)) + (1 << 63)) % (1 << 64) - (1 << 63) for w in w64[:7]]
    np.testing.assert_array_equal(i64, np.array(want, np.int64))


def test_normal_is_box_muller_of_the_words():
    words = [w for blk in ref_words(5, 9, 0, 2) for w in blk]
    want = []
    for a, b in zip(words[0::2], words[1::2]):
        u1, u2 = ((a >> 8) + 1) * 2.0**-24, (b >> 8) * 2.0**-24
        r = math.sqrt(-2 * math.log(u1))
        want += [r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)]
    (z,) = _session_values("RandomStandardNormal", [8], runs=1)
    np.testing.assert_allclose(z, want, rtol=2e-6, atol=1e-6)  # float32 arithmetic vs float64
    words = [w for blk in ref_words(5, 9, 0, 2) for w in blk]
    want = []
    for blk in range(2):
        a = (words[4 * blk] << 32 | words[4 * blk + 1]) >> 11
        b = (words[4 * blk + 2] << 32 | words[4 * blk + 3]) >> 11
        u1, u2 = (a + 1) * 2.0**-53, b * 2.0**-53
        r = math.sqrt(-2 * math.log(u1))
        want += [r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)]
    (z64,) = _session_values("RandomStandardNormal", [4], tw.float64, runs=1)
    np.testing.assert_allclose(z64, want, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_truncated_normal_follows_the_rejection_schedule(dtype):
    """Block t's values are the in-range normals of blocks first + r * nb + t, in order: a
    one-block-at-a-time reading of the schedule gives the vectorised kernel's values."""
    n = 4001
    s = philox.PhiloxStream(21, 4)
    got = philox.truncated_normal(s, dtype, n)
    assert s.offset == philox.blocks_for("TruncatedNormal", dtype, n)
    per = philox.VALUES_PER_BLOCK[np.dtype(dtype).name]
    nb = -(-n // per)
    want = []
    for t in range(nb):
        kept = []
        for r in range(philox.TRUNC_ROUNDS):
            z = philox.normal(s, dtype, per, first=r * nb + t)
            kept += [v for v in z if abs(v) <= 2]
            if len(kept) >= per:
                break
        want += kept[:per]
    np.testing.assert_array_equal(got, np.array(want[:n], dtype))
    refilled = sum(1 for t in range(nb) if not (np.abs(philox.normal(s, dtype, per, first=t)) <= 2).all())
    assert refilled > 0.05 * nb  # the refill path ran (9% of blocks for float64, 17% for float32)


def test_runs_continue_and_sessions_replay():
    a1, a2 = _session_values("RandomStandardNormal", [7, 3])
    b1, b2 = _session_values("RandomStandardNormal", [7, 3])
    assert not np.array_equal(a1, a2)
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    (c1,) = _session_values("RandomStandardNormal", [7, 3], seed2=10, runs=1)
    (d1,) = _session_values("RandomStandardNormal", [7, 3], seed=6, runs=1)
    assert not np.array_equal(a1, c1) and not np.array_equal(a1, d1)
    n1, n2 = (_session_values("RandomStandardNormal", [7, 3], seed=0, seed2=0, runs=1)[0] for _ in range(2))
    assert not np.array_equal(n1, n2)  # (0, 0): nondeterministic
    # A run's offset is its block count: a second run of 21 values starts at block 6.
    s = philox.PhiloxStream(5, 9)
    np.testing.assert_array_equal(a2.reshape(-1), philox.normal(s, np.float32, 21, first=6))


def test_graph_and_op_seeds():
    def build(graph_seed, op_seeds):
        g = tw.Graph()
        with g.as_default():
            if graph_seed is not None:
                tw.set_random_seed(graph_seed)
            outs = [tw.random_uniform([5], seed=sd) for sd in op_seeds]
            outs.append(tw.random_normal([5]))
            outs.append(tw.truncated_normal([5], seed=op_seeds[0]))
        with tw.Session(graph=g) as s:
            return s.run(outs)

    a, b = build(3, [None, None]), build(3, [None, None])
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)  # graph seed: each op's seed from construction order
    assert not np.array_equal(a[0], a[1])  # ... and different ops differ
    c, d = build(None, [1, 2]), build(None, [1, 2])
    np.testing.assert_array_equal(c[0], d[0])  # op seed only: graph seed is the default
    assert not np.array_equal(c[0], c[1])
    assert not np.array_equal(c[2], d[2])  # neither: nondeterministic
    e = build(4, [1, 2])
    assert not np.array_equal(c[0], e[0])  # the graph seed is part of the key


def test_session_wrappers_scale_and_shift():
    g = tw.Graph()
    with g.as_default():
        u = tw.random_uniform([1000], -2.0, 3.0, seed=1)
        z = tw.random_normal([1000], mean=5.0, stddev=0.5, seed=1)
        t = tw.truncated_normal([1000], mean=-1.0, stddev=0.25, dtype=tw.float64, seed=1)
        i = tw.random_uniform([1000], 3, 7, dtype=tw.int64, seed=1)
    with tw.Session(graph=g) as s:
        uv, zv, tv, iv = s.run([u, z, t, i])
    assert (uv >= -2).all() and (uv < 3).all()
    assert abs(zv.mean() - 5) < 0.1 and abs(zv.std() - 0.5) < 0.05
    assert tv.dtype == np.float64 and (np.abs(tv + 1) <= 0.5).all()
    assert iv.dtype == np.int64 and set(np.unique(iv)) == {3, 4, 5, 6}


# ---------------------------------------------------------------------------------------
# distributions (fixed seeds, so the bounds are deterministic checks)
def _ks(x, cdf):
    """The Kolmogorov-Smirnov statistic of sample ``x`` against ``cdf``."""
    x = np.sort(np.asarray(x, np.float64))
    f = cdf(x)
    n = len(x)
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


_erf = np.vectorize(math.erf)


def _phi(x):
    return 0.5 * (1 + _erf(x / math.sqrt(2)))


_KS_1PCT = 1.63  # the 1% critical value of sqrt(n) * D


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_uniform_distribution(dtype):
    n = 200_000
    u = philox.uniform(philox.PhiloxStream(11, 12), dtype, n)
    assert u.dtype == dtype and u.shape == (n,)
    assert (u >= 0).all() and (u < 1).all()
    assert abs(u.astype(np.float64).mean() - 0.5) < 3e-3 and abs(u.astype(np.float64).var() - 1 / 12) < 2e-3
    if dtype != np.float16:  # float16's 2048 levels are too coarse for a KS bound at this n
        assert _ks(u, lambda x: x) * math.sqrt(n) < _KS_1PCT


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_normal_distribution(dtype):
    n = 200_000
    z = philox.normal(philox.PhiloxStream(11, 13), dtype, n).astype(np.float64)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 1e-2 and abs(z.var() - 1) < 1e-2
    assert abs(np.mean(z**3)) < 3e-2 and abs(np.mean(z**4) - 3) < 6e-2  # skew 0, kurtosis 3
    if dtype != np.float16:
        assert _ks(z[:50_000], _phi) * math.sqrt(50_000) < _KS_1PCT


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_truncated_normal_distribution(dtype):
    n = 200_001  # not a multiple of the values per block
    t = philox.truncated_normal(philox.PhiloxStream(11, 14), dtype, n).astype(np.float64)
    assert t.shape == (n,) and (np.abs(t) <= 2).all()
    assert abs(t.mean()) < 1e-2 and abs(t.std() - 0.8796) < 5e-3  # N(0, 1) truncated to [-2, 2]
    assert np.count_nonzero(t == 0) < 3  # no slot left unfilled
    if dtype != np.float16:
        z2 = _phi(np.float64(2))
        cdf = lambda x: (_phi(x) - (1 - z2)) / (2 * z2 - 1)  # noqa: E731
        assert _ks(t[:50_000], cdf) * math.sqrt(50_000) < _KS_1PCT


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_uniform_int_range(dtype):
    (v,) = _session_values("RandomUniformInt", [100_000], runs=1, extra=(dtype(-3), dtype(9)))
    assert v.dtype == dtype and v.min() == -3 and v.max() == 8
    counts = np.bincount(v + 3, minlength=12)
    assert counts.min() > 0.95 * len(v) / 12 and counts.max() < 1.05 * len(v) / 12
    big = np.iinfo(dtype)
    (w,) = _session_values("RandomUniformInt", [1000], runs=1, extra=(dtype(big.min), dtype(big.max)))
    assert (w < big.max).all() and w.astype(np.float64).std() > big.max / 4  # the full range, no overflow


def test_empty_and_odd_shapes():
    for op in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal"):
        (e,) = _session_values(op, [0, 3], runs=1)
        assert e.shape == (0, 3) and e.dtype == np.float32
        (o,) = _session_values(op, [1, 3, 1], tw.float64, runs=1)
        assert o.shape == (1, 3, 1)
    (ei,) = _session_values("RandomUniformInt", [0], runs=1, extra=(np.int32(0), np.int32(2)))
    assert ei.shape == (0,) and ei.dtype == np.int32


def test_dropout_mask_is_seeded():
    def run():
        g = tw.Graph()
        with g.as_default():
            tw.set_random_seed(8)
            y = tw.nn.dropout(tw.ones([50, 40]), keep_prob=0.6)
        with tw.Session(graph=g) as s:
            return s.run(y)
    a, b = run(), run()
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a).tolist()) <= {0.0, np.float32(1 / 0.6)}
    assert abs(np.mean(a != 0) - 0.6) < 0.03
