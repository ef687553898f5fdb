"""Random ops: ranges and (loosely bounded) statistics, dtypes and shapes, and TF1 seed
semantics: determinism across Sessions and graphs, fresh values on every run."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.ops import random_ops

N = 20000  # samples for statistics; bounds below are > 6 standard errors wide


def run(fetches, feed_dict=None):
    with tw.Session() as s:
        return s.run(fetches, feed_dict)


# ---------------------------------------------------------------------------------------
# distributions
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_uniform_float(dtype):
    t = tw.random_uniform([N], dtype=dtype)
    u = tw.random_uniform([100, 200], minval=-3, maxval=5, dtype=dtype)
    assert t.dtype == tw.as_dtype(dtype) and t.shape.as_list() == [N]
    v, w = run([t, u])
    assert v.dtype == np.dtype(dtype) and v.shape == (N,)
    assert v.min() >= 0 and v.max() < 1
    assert abs(v.mean() - 0.5) < 0.02 and abs(v.std() - np.sqrt(1 / 12)) < 0.02
    assert w.shape == (100, 200) and w.dtype == np.dtype(dtype)
    assert w.min() >= -3 and w.max() <= 5  # float16 rounding may reach maxval exactly
    assert abs(w.astype(np.float64).mean() - 1) < 0.1


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_uniform_int(dtype):
    t = tw.random_uniform([N], minval=-2, maxval=3, dtype=dtype)
    assert t.op.type == "RandomUniformInt" and t.dtype == tw.as_dtype(dtype)
    v = run(t)
    assert v.dtype == np.dtype(dtype) and v.shape == (N,)
    assert set(np.unique(v).tolist()) == {-2, -1, 0, 1, 2}
    assert abs(v.mean()) < 0.1
    with pytest.raises(errors.InvalidArgumentError, match="maxval"):
        tw.random_uniform([2], dtype=dtype)
    with pytest.raises(errors.InvalidArgumentError, match="minval < maxval"):
        tw.random_uniform([2], 3, 3, dtype=dtype)
    lo = tw.placeholder(tw.as_dtype(dtype), [])
    dyn = tw.random_uniform([2], lo, 3, dtype=dtype)
    with pytest.raises(errors.InvalidArgumentError, match="minval < maxval"):
        run(dyn, {lo: 5})


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_normal(dtype):
    t = tw.random_normal([N], mean=2.0, stddev=3.0, dtype=dtype)
    v = run(t).astype(np.float64)
    assert run(t).dtype == np.dtype(dtype)
    assert abs(v.mean() - 2) < 0.15 and abs(v.std() - 3) < 0.15
    assert v.min() < -4 and v.max() > 8  # tails exist: values beyond 2 standard deviations


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_truncated_normal(dtype):
    t = tw.truncated_normal([N], mean=-1.0, stddev=0.5, dtype=dtype)
    v = run(t).astype(np.float64)
    assert run(t).dtype == np.dtype(dtype)
    assert np.all(np.abs(v + 1) <= 2 * 0.5 + 1e-3)
    assert abs(v.mean() + 1) < 0.03
    assert abs(v.std() - 0.5 * 0.8796) < 0.03  # the std of a standard normal truncated at +-2


def test_shuffle_is_a_permutation():
    v = np.arange(50 * 3).reshape(50, 3)
    t = tw.random_shuffle(tw.constant(v))
    assert t.shape.as_list() == [50, 3]
    a, b = run([t, t])  # one step: the same value fetched twice
    np.testing.assert_array_equal(a, b)
    with tw.Session() as s:
        x, y = s.run(t), s.run(t)
    for out in (x, y):
        assert out.dtype == v.dtype and out.shape == v.shape
        assert sorted(map(tuple, out)) == sorted(map(tuple, v))  # rows stay intact
    assert not np.array_equal(x, y)
    assert not np.array_equal(x, v)
    strings = tw.random_shuffle(tw.constant(["a", "b", "c", "d"]))
    assert sorted(run(strings).tolist()) == [b"a", b"b", b"c", b"d"]
    check_scalar = run(tw.random_shuffle(tw.constant(7)))
    assert check_scalar == 7


def test_dynamic_shape():
    n = tw.placeholder(tw.int32, [])
    t = tw.random_normal([n, 3])
    assert t.shape.as_list() == [None, 3]
    assert run(t, {n: 4}).shape == (4, 3)
    s = tw.placeholder(tw.int64, [2])
    u = tw.random_uniform(s)
    assert u.shape.as_list() == [None, None]
    assert run(u, {s: [2, 5]}).shape == (2, 5)
    assert run(tw.random_uniform([])).shape == ()
    assert run(tw.random_uniform(tw.TensorShape([2, 0]))).shape == (2, 0)
    with pytest.raises(errors.InvalidArgumentError, match="negative"):
        run(u, {s: [2, -5]})


def test_errors_at_construction():
    with pytest.raises(errors.InvalidArgumentError, match="negative"):
        tw.random_uniform([-1, 2])
    with pytest.raises(errors.InvalidArgumentError, match="dtype"):
        tw.random_normal([2], dtype=tw.int32)
    with pytest.raises(errors.InvalidArgumentError, match="dtype"):
        tw.random_uniform([2], dtype=tw.bool)
    with pytest.raises(errors.InvalidArgumentError):
        tw.random_uniform([2.5])


# ---------------------------------------------------------------------------------------
# seeds
def _build(op_seed=None, graph_seed=None):
    g = tw.Graph()
    with g.as_default():
        if graph_seed is not None:
            tw.set_random_seed(graph_seed)
        ts = [tw.random_uniform([5], seed=op_seed), tw.random_normal([5], seed=op_seed),
              tw.truncated_normal([5], seed=op_seed), tw.random_uniform([5], 0, 100, tw.int32, seed=op_seed),
              tw.random_shuffle(tw.range(20), seed=op_seed)]
    return g, ts


def _values(g, ts, runs=2):
    with tw.Session(graph=g) as s:
        return [s.run(ts) for _ in range(runs)]


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("op_seed,graph_seed", [(None, 1), (3, None), (3, 1), (0, 0), (None, 0)])
def test_seeded_ops_repeat_across_sessions_and_graphs(op_seed, graph_seed):
    g, ts = _build(op_seed, graph_seed)
    first = _values(g, ts)
    again = _values(g, ts)
    g2, ts2 = _build(op_seed, graph_seed)
    rebuilt = _values(g2, ts2)
    for a, b in ((first, again), (first, rebuilt)):
        assert _same(a[0], b[0]) and _same(a[1], b[1])
    # Successive runs in one Session continue the sequence.
    assert not any(np.array_equal(x, y) for x, y in zip(first[0][:4], first[1][:4], strict=True))


def test_unseeded_ops_are_nondeterministic():
    g, ts = _build()
    a, b = _values(g, ts, runs=1)[0], _values(g, ts, runs=1)[0]
    assert not np.array_equal(a[0], b[0]) and not np.array_equal(a[1], b[1])


def test_seed_semantics():
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(5)
        a, b = tw.random_uniform([4]), tw.random_uniform([4])
        c, d = tw.random_uniform([4], seed=9), tw.random_uniform([4], seed=9)
        seeds = [(op.get_attr("seed"), op.get_attr("seed2")) for op in g.get_operations() if op.type == "RandomUniform"]
        assert seeds == [(5, 1), (5, 2), (5, 9), (5, 9)]
    va, vb, vc, vd = _values(g, [a, b, c, d], runs=1)[0]
    assert not np.array_equal(va, vb)  # derived op seeds differ
    np.testing.assert_array_equal(vc, vd)  # the same explicit seeds give the same sequence
    # The graph seed changes derived and explicit op seeds' sequences alike.
    g2 = tw.Graph()
    with g2.as_default():
        tw.set_random_seed(6)
        a2, c2 = tw.random_uniform([4]), tw.random_uniform([4], seed=9)
    va2, vc2 = _values(g2, [a2, c2], runs=1)[0]
    assert not np.array_equal(va, va2) and not np.array_equal(vc, vc2)
    # An op seed without a graph seed uses TF's default graph seed.
    with tw.Graph().as_default():
        assert random_ops.get_seed(4) == (random_ops.DEFAULT_GRAPH_SEED, 4)
        assert random_ops.get_seed(None) == (None, None)
        tw.set_random_seed(0)
        assert random_ops.get_seed(0) == (0, 2**31 - 1)


def test_random_ops_are_stateful_and_named():
    t = tw.random_normal([2], name="noise")
    assert t.name == "noise:0"
    assert tw.get_default_graph().get_operation_by_name("noise/RandomStandardNormal").op_def.stateful
    with tw.Session() as s:
        assert not np.array_equal(s.run(t), s.run(t))
