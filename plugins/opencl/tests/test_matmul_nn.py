"""MatMul/BatchMatMul and the softmax family against NumPy and the CPU kernels."""

import numpy as np
import pytest

import tensorweave as tw

RNG = np.random.default_rng(2)


@pytest.fixture(params=["blocked", "tiled"])
def variant(request, monkeypatch):
    """Both MatMul kernels, whatever kind of device this is."""
    from tensorweave_opencl.kernels.matmul import MatMul

    monkeypatch.setattr(MatMul, "variant", request.param)
    return request.param


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 7, 3), (16, 16, 16), (33, 17, 40), (64, 128, 10), (3, 0, 4),
                                   (9, 5, 8), (2, 3, 17)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(ocl, variant, m, k, n, ta, tb):
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    got = ocl.on_opencl(lambda a, b: tw.matmul(a, b, transpose_a=ta, transpose_b=tb), {"a": a, "b": b})
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    ocl.assert_same(got, want.astype(np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64"])
def test_matmul_dtypes(ocl, variant, dtype):
    a = RNG.integers(-5, 5, (20, 30)).astype(dtype)
    b = RNG.integers(-5, 5, (30, 9)).astype(dtype)
    got = ocl.on_opencl(lambda a, b: tw.matmul(a, b), {"a": a, "b": b})
    ocl.assert_same(got, a @ b)


def test_matmul_shape_mismatch(ocl):
    with pytest.raises(tw.errors.InvalidArgumentError, match="incompatible"):
        g = tw.Graph()
        with g.as_default(), tw.device("/device:OPENCL:0"):
            a = tw.placeholder(tw.float32, None)
            c = tw.matmul(a, a)
        with tw.Session(graph=g) as s:
            s.run(c, {a: np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, True)])
def test_batch_matmul(ocl, variant, adj_x, adj_y):
    from tensorweave.framework.graph import apply_op

    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    y = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
    if adj_x:
        x = np.swapaxes(x, -1, -2).copy()
    if adj_y:
        y = np.swapaxes(y, -1, -2).copy()
    got, want = ocl.both(lambda x, y: apply_op("BatchMatMul", [x, y], {"adj_x": adj_x, "adj_y": adj_y}),
                         {"x": x, "y": y})
    ocl.assert_same(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 10), (3, 2, 7), (1, 1), (5, 300)])
def test_softmax_and_log_softmax(ocl, shape):
    x = (RNG.standard_normal(shape) * 10).astype(np.float32)
    got, want = ocl.both(lambda x: [tw.nn.softmax(x), tw.nn.log_softmax(x)], {"x": x})
    ocl.assert_same(got[0], want[0], rtol=1e-5, atol=1e-7)
    ocl.assert_same(got[1], want[1], rtol=1e-5, atol=1e-5)
    e = np.exp(x - x.max(-1, keepdims=True))
    ocl.assert_same(got[0], (e / e.sum(-1, keepdims=True)).astype(np.float32), rtol=1e-5, atol=1e-7)


def test_softmax_cross_entropy(ocl):
    from tensorweave.framework.graph import apply_op

    logits = (RNG.standard_normal((8, 10)) * 5).astype(np.float32)
    labels = RNG.dirichlet(np.ones(10), 8).astype(np.float32)
    got, want = ocl.both(lambda f, lab: apply_op("SoftmaxCrossEntropyWithLogits", [f, lab]),
                         {"f": logits, "lab": labels})
    for g, w in zip(got, want):
        ocl.assert_same(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("label_dtype", ["int32", "int64"])
def test_sparse_softmax_cross_entropy(ocl, label_dtype):
    from tensorweave.framework.graph import apply_op

    # Its own data (the module's RNG gives data that depend on which tests ran before): a row
    # whose label holds its largest logit has a loss near 0, known to float32's absolute error.
    rng = np.random.default_rng(85)
    logits = (rng.standard_normal((8, 10)) * 5).astype(np.float32)
    labels = rng.integers(0, 10, 8).astype(label_dtype)
    got, want = ocl.both(lambda f, lab: apply_op("SparseSoftmaxCrossEntropyWithLogits", [f, lab]),
                         {"f": logits, "lab": labels})
    for g, w in zip(got, want):
        ocl.assert_same(g, w, rtol=1e-5, atol=1e-6)
    # numpy reference
    s = logits - logits.max(1, keepdims=True)
    lse = np.log(np.exp(s).sum(1))
    np.testing.assert_allclose(got[0], lse - s[np.arange(8), labels], rtol=1e-5, atol=1e-6)


def test_sparse_cross_entropy_with_a_bad_label_gives_nan_rows(ocl):
    from tensorweave.framework.graph import apply_op

    logits = np.zeros((3, 4), np.float32)
    labels = np.array([1, 7, -1], np.int32)
    loss, backprop = ocl.on_opencl(lambda f, lab: apply_op("SparseSoftmaxCrossEntropyWithLogits", [f, lab]),
                                   {"f": logits, "lab": labels})
    assert np.isfinite(loss[0]) and np.isnan(loss[1:]).all()
    assert np.isfinite(backprop[0]).all() and np.isnan(backprop[1:]).all()
