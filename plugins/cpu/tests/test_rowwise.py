"""The row-wise sparse softmax cross-entropy (tensorweave_cpu/rowwise.py): the compiled loop for
small logits, NumPy row blocks over the cores for large ones, and the plain NumPy path without
numba all agree with a float64 reference, propagate NaN like NumPy, and are what the kernel runs."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave_cpu import fusion, rowwise

needs_fusion = pytest.mark.skipif(not fusion.numba_available(), reason="numba is not installed (the fusion extra)")


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


def _count_splits(monkeypatch):
    splits = []
    real = rowwise.split_rows
    monkeypatch.setattr(rowwise, "split_rows", lambda fn, n: splits.append(n) or real(fn, n))
    return splits


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_a_large_relu_gradient_splits_by_rows_with_the_same_bits(monkeypatch):
    splits = _count_splits(monkeypatch)
    rng = np.random.default_rng(1)
    gv, fv = rng.normal(size=(64, 30, 30, 20)).astype(np.float32), rng.normal(size=(64, 30, 30, 20)).astype(np.float32)
    gv[0, 0, 0, :4] = [np.inf, -np.inf, np.nan, np.inf]
    fv[0, 0, 0, :4] = [-1, 2, 3, 0]                     # inf * 0 is NaN, as TF's multiply gives
    g = tw.Graph()
    with g.as_default():
        gp, fp = tw.placeholder(tw.float32, [None, 30, 30, 20]), tw.placeholder(tw.float32, [None, 30, 30, 20])
        dx = apply_op("ReluGrad", [gp, fp])
    with tw.Session(graph=g) as s:
        got = s.run(dx, {gp: gv, fp: fv})
    assert splits == [64]
    assert got.tobytes() == (gv * (fv > 0)).tobytes()


@needs_fusion
def test_a_large_fused_node_splits_by_rows_with_the_same_bits(monkeypatch):
    splits = _count_splits(monkeypatch)
    rng = np.random.default_rng(2)
    xv = rng.normal(size=(128, 28, 28, 32)).astype(np.float32)
    bv = rng.normal(size=32).astype(np.float32)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 28, 28, 32])
        y = tw.nn.relu(x * 1.5 + tw.constant(bv))         # one fused node: bias broadcast along the rows
    with tw.Session(graph=g) as s:
        for _ in range(2):                               # the node compiles at its second run
            s.run(y, {x: xv})
        splits.clear()
        got = s.run(y, {x: xv})
    assert splits == [128]                               # one split: the fused node's, not Mul's and Add's
    want = np.maximum(xv * np.float32(1.5) + bv, np.float32(0))
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape,axes,keep", [
    ((128, 10, 10, 32), [0, 1, 2], False),   # a bias gradient over a convolution's activations
    ((4096, 20), [0], True),
    ((70000, 3), [0], False),
    ((300, 400, 2), [0, 1], False),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_over_leading_axes_add_whole_rows_with_the_same_bits(path, shape, axes, keep, dtype):
    xv = np.random.default_rng(3).normal(size=shape).astype(dtype)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(dtype, [None] * len(shape))
        s_ = tw.reduce_sum(x, axis=axes, keepdims=keep)
        bias = tw.placeholder(dtype, [shape[-1]])
        (db,) = tw.gradients(tw.nn.bias_add(x, bias), [bias], grad_ys=x)   # BiasAddGrad
    with tw.Session(graph=g) as s:
        got, got_db = s.run([s_, db], {x: xv, bias: np.zeros(shape[-1], dtype)})
    assert rowwise.sum_leading(xv, len(axes)) is not None   # the compiled loop, or einsum without numba
    want = np.add.reduce(xv, axis=tuple(axes), keepdims=keep)
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
    want_db = np.add.reduce(xv, axis=tuple(range(len(shape) - 1)))
    assert got_db.tobytes() == want_db.tobytes()


@pytest.mark.parametrize("shape,axes", [
    ((64, 128), [0]),        # the mlp's first bias gradient
    ((64, 10), [0]),
    ((3, 4, 5), [0, 1]),
    ((1, 7), [0]),
    ((6, 1), [0]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_sums_over_leading_axes_have_numpys_bits_on_both_paths(path, shape, axes, dtype):
    xv = np.random.default_rng(4).normal(size=shape).astype(dtype)
    xv.reshape(-1)[::3] = -0.0   # NumPy's reduction starts from +0.0: a column of -0.0 sums to +0.0
    xv.reshape(-1)[1] = np.nan
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(dtype, [None] * len(shape))
        s_ = tw.reduce_sum(x, axis=axes)
        bias = tw.placeholder(dtype, [shape[-1]])
        (db,) = tw.gradients(tw.nn.bias_add(x, bias), [bias], grad_ys=x)   # BiasAddGrad
    with tw.Session(graph=g) as s:
        got, got_db = s.run([s_, db], {x: xv, bias: np.zeros(shape[-1], dtype)})
    assert (rowwise.sum_leading(xv, len(axes)) is not None) == (path == "compiled")
    want = np.add.reduce(xv, axis=tuple(axes))
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
    assert got_db.tobytes() == np.add.reduce(xv, axis=tuple(range(len(shape) - 1))).tobytes()
    if shape == (1, 7):
        assert not np.signbit(got[0]) and np.signbit(xv[0, 0])


def test_an_empty_sum_over_leading_axes_is_numpys_zeros():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 3])
        s_ = tw.reduce_sum(x, axis=[0])
    with tw.Session(graph=g) as s:
        got = s.run(s_, {x: np.zeros((0, 3), np.float32)})
    assert got.shape == (3,) and not got.any()


@pytest.mark.parametrize("shape", [(5, 7), (1030, 1024)])   # compiled (with numba) and NumPy rows
@pytest.mark.parametrize("bad", [7, -1])
def test_a_label_outside_the_classes_fails_the_step_naming_it(path, shape, bad):
    from tensorweave.framework import errors

    g = tw.Graph()
    with g.as_default():
        logits = tw.placeholder(tw.float32, [None, shape[1]])
        labels = tw.placeholder(tw.int32, [None])
        loss = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    x = np.zeros(shape, np.float32)
    y = np.zeros(shape[0], np.int32)
    y[3] = bad if bad < 0 else shape[1]
    with tw.Session(graph=g) as s:
        with pytest.raises(errors.InvalidArgumentError,
                           match=rf"label value of {y[3]} which is outside the valid range of \[0, {shape[1]}\)"):
            s.run(loss, {logits: x, labels: y})
        y[3] = shape[1] - 1
        assert s.run(loss, {logits: x, labels: y}).shape == (shape[0],)   # the session goes on
