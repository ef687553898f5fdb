"""The CPU convolutions do their im2col in chunks of the batch (tensorweave_cpu/kernels/nn.py:
``_CHUNK_BYTES``): with chunks of one or a few images, Conv2D and both its gradients give what
the whole-batch computation gives."""

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
def test_chunked_batches_give_the_whole_batch_values(channels, strides, padding, dilations, monkeypatch):
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
