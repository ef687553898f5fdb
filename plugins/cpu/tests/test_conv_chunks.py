"""The CPU's own convolutions (oneDNN's off) do their im2col in chunks of the batch
(tensorweave_cpu/kernels/nn.py: ``_CHUNK_BYTES``): with chunks of one or a few images, Conv2D
and both its gradients give what the whole-batch computation gives."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cpu.kernels import nn


def _conv_and_grads(x, f, strides, padding, dilations):
    g = tw.Graph()
    with g.as_default():
        xt, ft = tw.constant(x), tw.constant(f)
        y = tw.nn.conv2d(xt, ft, strides=strides, padding=padding, dilations=dilations)
        dy = tw.constant(np.random.default_rng(5).standard_normal(y.shape.as_list()).astype(np.float32))
        dx, df = tw.gradients(y, [xt, ft], grad_ys=dy)
        with tw.Session(graph=g) as s:
            return s.run([y, dx, df])


@pytest.mark.parametrize("channels", [1, 6])        # 1: the gather path, 6: the strided copies
@pytest.mark.parametrize("strides,padding,dilations", [
    ([1, 1, 1, 1], "SAME", [1, 1, 1, 1]),
    ([1, 2, 2, 1], "VALID", [1, 1, 1, 1]),
    ([1, 1, 1, 1], "VALID", [1, 2, 2, 1]),
])
def test_chunked_batches_give_the_whole_batch_values(channels, strides, padding, dilations, monkeypatch,
                                                    without_onednn):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 9, 8, channels)).astype(np.float32)
    f = rng.standard_normal((3, 3, channels, 4)).astype(np.float32)
    whole = _conv_and_grads(x, f, strides, padding, dilations)
    row_bytes = 9 * 8 * 9 * channels * 4                # one image's windows (at most)
    monkeypatch.setattr(nn, "_CHUNK_BYTES", 2 * row_bytes)  # chunks of ~2 images, the last shorter
    assert nn._chunks(7, 9 * 8, 9 * channels, 4) < 7
    chunked = _conv_and_grads(x, f, strides, padding, dilations)
    for a, b in zip(whole, chunked):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strides,padding,dilations,channels,out", [
    ([1, 1, 1, 1], "SAME", [1, 1, 1, 1], 6, 4),
    ([1, 2, 2, 1], "SAME", [1, 1, 1, 1], 3, 8),
    ([1, 2, 1, 1], "VALID", [1, 1, 1, 1], 2, 5),
    ([1, 1, 1, 1], "SAME", [1, 2, 2, 1], 4, 4),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_input_gradient_by_compiled_col2im_matches_a_reference(path, strides, padding, dilations, channels, out,
                                                                   dtype, monkeypatch):
    """Conv2DBackpropInput with numba (GEMM per chunk of images + the compiled col2im) and
    without (correlation or strided adds) against the gradient taken by definition: each
    output's gradient times the filter, added at the inputs under its window."""
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((5, 9, 8, channels)).astype(dtype)
    f = rng.standard_normal((3, 3, channels, out)).astype(dtype)
    monkeypatch.setattr(nn, "_CHUNK_BYTES", 2 * 9 * 8 * 9 * channels * 8)  # a few images per chunk
    calls = []
    loop = nn._col2im_loop
    monkeypatch.setattr(nn, "_col2im_loop", lambda *a: calls.append(1) or loop(*a))
    g = tw.Graph()
    with g.as_default():
        xt = tw.constant(x)
        y = tw.nn.conv2d(xt, tw.constant(f), strides=strides, padding=padding, dilations=dilations)
        dy = rng.standard_normal(y.shape.as_list()).astype(dtype)
        (dx,) = tw.gradients(y, [xt], grad_ys=tw.constant(dy))
        with tw.Session(graph=g) as s:
            got = s.run(dx)
    # the reference: dx = sum over windows of dy[b, oy, ox, :] @ f[i, j].T at the input under (i, j)
    sh, sw, dh, dw = strides[1], strides[2], dilations[1], dilations[2]
    n, oh, ow, _ = dy.shape
    eh, ew = (3 - 1) * dh + 1, (3 - 1) * dw + 1
    ph = max(0, (oh - 1) * sh + eh - 9) if padding == "SAME" else 0
    pw = max(0, (ow - 1) * sw + ew - 8) if padding == "SAME" else 0
    want = np.zeros((n, 9 + ph, 8 + pw, channels))
    for i in range(3):
        for j in range(3):
            want[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw, :] += \
                dy.astype(np.float64) @ f[i, j].T.astype(np.float64)
    want = want[:, ph // 2:ph // 2 + 9, pw // 2:pw // 2 + 8, :]
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4 if dtype == np.float32 else 1e-10)
    assert bool(calls) == (path == "compiled")
