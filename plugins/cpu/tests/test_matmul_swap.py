"""``a @ b.T`` with few rows in ``a`` runs as ``(b @ a.T).T`` (tensorweave_cpu/blas.py): the
same values as the direct product, a row-major result, and only where it pays. (OpenBLAS's
path: oneDNN's products are off here; tests/test_onednn.py has theirs.)"""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cpu import blas

pytestmark = pytest.mark.usefixtures("without_onednn")


@pytest.mark.parametrize("m,k,n", [(1, 64, 7), (8, 400, 800), (32, 800, 400), (128, 512, 129)])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-14)])
def test_swapped_product_agrees_and_is_row_major(m, k, n, dtype, tol, monkeypatch):
    rng = np.random.default_rng(m + n)
    a, w = rng.normal(size=(m, k)).astype(dtype), rng.normal(size=(n, k)).astype(dtype)
    calls = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda x, y, **kw: calls.append((x.shape, y.shape)) or real(x, y, **kw))
    got = blas.matmul(a, w.T)
    assert calls == [((n, k), (k, m))]  # computed the other way round
    assert got.flags.c_contiguous and got.shape == (m, n) and got.dtype == dtype
    want = a.astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("a_shape,b", [
    ((300, 20), "transposed"),   # many rows: direct
    ((32, 20), "contiguous"),    # b not a transposed view: direct
    ((32, 20), "narrow"),        # as many output columns as rows or fewer: direct
    ((32, 20), "transposed"),    # an inner dimension short against the rows: direct
    ((128, 10), "wide"),         # the convnet's dense-layer input gradient: direct
])
def test_direct_product_where_the_swap_does_not_pay(a_shape, b, monkeypatch):
    rng = np.random.default_rng(0)
    a = rng.normal(size=a_shape).astype(np.float32)
    bm = {"transposed": rng.normal(size=(64, 20)).astype(np.float32).T,
          "contiguous": rng.normal(size=(20, 64)).astype(np.float32),
          "narrow": rng.normal(size=(16, 20)).astype(np.float32).T,
          "wide": rng.normal(size=(3136, 10)).astype(np.float32).T}[b]
    calls = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda x, y, **kw: calls.append((x.shape, y.shape)) or real(x, y, **kw))
    blas.matmul(a, bm)
    assert calls == [(a.shape, bm.shape)]


def test_a_session_matmul_with_transpose_b_gives_the_product():
    g = tw.Graph()
    with g.as_default():
        x, y = tw.placeholder(tw.float32, [None, 800]), tw.placeholder(tw.float32, [400, 800])
        prod = tw.matmul(x, y, transpose_b=True)
    a = np.random.default_rng(1).normal(size=(32, 800)).astype(np.float32)
    w = np.random.default_rng(2).normal(size=(400, 800)).astype(np.float32)
    with tw.Session(graph=g) as s:
        got = s.run(prod, {x: a, y: w})
    np.testing.assert_allclose(got, a.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-4)
