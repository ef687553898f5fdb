"""Float ScatterAdd/ScatterSub on the CPU (kernels/rows.py): the compiled row loop gives the
bits of NumPy's paths (``ufunc.at`` for repeated rows) for every shape and float dtype,
writes into the variable in place, and leaves other dtypes to the core's kernels."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels import state
from tensorweave_cpu import jit
from tensorweave_cpu.kernels import rows


def _run(op, shape, dtype, indices, steps=3):
    rng = np.random.default_rng(len(shape))
    start = (rng.standard_normal(shape) * 3).astype(dtype)
    upd = (rng.standard_normal((len(indices),) + shape[1:]) * 2).astype(dtype)
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(start, name="v")
        update = op(v, tw.constant(np.asarray(indices, np.int64)), tw.constant(upd))
    with tw.Session(graph=g) as sess:
        sess.run(v.initializer)
        for _ in range(steps):
            sess.run(update.op)
        return sess.run(v)


INDICES = [3, 0, 3, 3, 7, 0, 9]  # repeats, out of order


@pytest.mark.parametrize("op", [tw.scatter_add, tw.scatter_sub])
@pytest.mark.parametrize("shape", [(10,), (10, 5), (10, 3, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_rows_give_numpys_bits(monkeypatch, op, shape, dtype):
    if not jit.numba_available():
        pytest.skip("numba is not installed (the fusion extra)")
    calls = []
    real = rows.CPURows.scatter
    monkeypatch.setattr(rows.CPURows, "scatter", lambda self, *a: calls.append(a[0]) or real(self, *a))
    numpy_calls = []
    real_numpy = type(state.NUMPY_ROWS).scatter
    monkeypatch.setattr(type(state.NUMPY_ROWS), "scatter", lambda self, *a: numpy_calls.append(1) or real_numpy(self, *a))
    monkeypatch.setitem(jit._state, "on", False)
    by_numpy = _run(op, shape, dtype, INDICES)
    assert len(numpy_calls) == 3
    monkeypatch.setitem(jit._state, "on", True)
    compiled = _run(op, shape, dtype, INDICES)
    assert len(numpy_calls) == 3  # the compiled loop, not NumPy's
    assert len(calls) == 6  # both runs went through the CPU's rows
    assert compiled.dtype == by_numpy.dtype == dtype
    assert compiled.tobytes() == by_numpy.tobytes()
    start = _run(op, shape, dtype, INDICES, steps=0)
    changed = np.flatnonzero((compiled != start).reshape(shape[0], -1).any(axis=1))
    assert changed.tolist() == sorted(set(INDICES))


def test_integer_scatters_stay_the_cores(monkeypatch):
    calls = []
    real = rows.CPURows.scatter
    monkeypatch.setattr(rows.CPURows, "scatter", lambda self, *a: calls.append(a[0]) or real(self, *a))
    got = _run(tw.scatter_add, (10, 2), np.int32, INDICES, steps=1)
    assert calls == []
    rng = np.random.default_rng(2)
    start = (rng.standard_normal((10, 2)) * 3).astype(np.int32)
    upd = (rng.standard_normal((len(INDICES), 2)) * 2).astype(np.int32)
    np.add.at(start, INDICES, upd)
    np.testing.assert_array_equal(got, start)


def test_the_update_writes_into_the_variable():
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(np.zeros((1000, 16), np.float32), name="v")
        update = tw.scatter_sub(v, [5, 5, 7], tw.ones([3, 16]))
    with tw.Session(graph=g) as sess:
        sess.run(v.initializer)
        sess.run(update.op)  # the first update copies the initializer's value once
        store = sess._resources.local.lookup("", "v")
        where = store.value.__array_interface__["data"][0]
        for _ in range(3):
            sess.run(update.op)
        assert store.value.__array_interface__["data"][0] == where
        got = sess.run(v)
    assert (got[5] == -8).all() and (got[7] == -4).all() and not got[:5].any()
