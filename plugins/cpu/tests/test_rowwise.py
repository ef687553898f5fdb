"""The row-wise sparse softmax cross-entropy (tensorweave_cpu/rowwise.py): the compiled loop for
small logits, NumPy row blocks over the cores for large ones, and the plain NumPy path without
numba all agree with a float64 reference, propagate NaN like NumPy, and are what the kernel runs."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cpu import rowwise


def _reference(x, labels):
    s = x.astype(np.float64)
    s = s - s.max(axis=1, keepdims=True)
    e = np.exp(s)
    total = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(x))
    loss = np.log(total[:, 0]) - s[rows, labels]
    back = e / total
    back[rows, labels] -= 1
    return loss, back


SHAPES = [(1, 1), (3, 5), (64, 10), (40, 1700), (1030, 1024)]  # the last: row blocks over the cores


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
@pytest.mark.parametrize("label_type", [np.int32, np.int64])
def test_agrees_with_a_float64_reference(path, shape, dtype, tol, label_type):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    labels = rng.integers(0, shape[1], shape[0]).astype(label_type)
    loss, back = rowwise.sparse_xent(x, labels)
    want_loss, want_back = _reference(x, labels)
    assert loss.dtype == back.dtype == dtype and loss.shape == (shape[0],) and back.shape == shape
    np.testing.assert_allclose(loss, want_loss, rtol=tol, atol=tol)
    np.testing.assert_allclose(back, want_back, rtol=tol, atol=tol)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_a_nan_or_inf_in_a_row_makes_that_row_nan_only(path):
    x = np.array([[1, np.nan, 2], [np.inf, 1, 2], [0, 1, 2]], np.float32)
    loss, back = rowwise.sparse_xent(x, np.array([0, 1, 2], np.int32))
    assert np.isnan(loss[:2]).all() and np.isnan(back[:2]).all()
    assert np.isfinite(loss[2]) and np.isfinite(back[2]).all()


def test_the_kernel_runs_it_for_a_session(monkeypatch):
    calls = []
    real = rowwise.sparse_xent
    monkeypatch.setattr(rowwise, "sparse_xent", lambda x, y: calls.append(x.shape) or real(x, y))
    g = tw.Graph()
    with g.as_default():
        logits = tw.placeholder(tw.float32, [None, 7])
        labels = tw.placeholder(tw.int64, [None])
        loss = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        grad, = tw.gradients(tw.reduce_sum(loss), [logits])
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    y = np.array([0, 6, 3, 3, 1])
    with tw.Session(graph=g) as s:
        got_loss, got_grad = s.run([loss, grad], {logits: x, labels: y})
    assert calls
    want_loss, want_back = _reference(x, y)
    np.testing.assert_allclose(got_loss, want_loss, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got_grad, want_back, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("op,x_shape,y_shape", [
    ("Mul", (1100, 1000), (1100, 1)),        # the cross-entropy gradient's broadcast product
    ("Add", (1100, 1000), (1000,)),          # a bias: broadcast along the rows
    ("Sub", (1, 1000), (1100, 1000)),        # the first operand broadcast
    ("Maximum", (600, 40, 50), (600, 40, 50)),
])
def test_large_binary_ops_split_by_rows_give_the_same_values(op, x_shape, y_shape, monkeypatch):
    splits = []
    real = rowwise.split_rows
    monkeypatch.setattr(rowwise, "split_rows", lambda fn, n: splits.append(n) or real(fn, n))
    rng = np.random.default_rng(0)
    xv, yv = rng.normal(size=x_shape).astype(np.float32), rng.normal(size=y_shape).astype(np.float32)
    g = tw.Graph()
    with g.as_default():
        x, y = tw.placeholder(tw.float32, [None] * len(x_shape)), tw.placeholder(tw.float32, [None] * len(y_shape))
        z = {"Mul": tw.multiply, "Add": tw.add, "Sub": tw.subtract, "Maximum": tw.maximum}[op](x, y)
    with tw.Session(graph=g) as s:
        got = s.run(z, {x: xv, y: yv})
    ufunc = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Maximum": np.maximum}[op]
    assert splits, "the specialised plan did not split the product"
    assert got.tobytes() == ufunc(xv, yv).tobytes()
