"""tw.layers added for TF1 programs: conv1d, conv2d_transpose, max/average_pooling1d,
against NumPy references; their variables, shapes, gradients and bad input."""

import numpy as np
import pytest

import tensorweave as tw

rng = np.random.RandomState(1)


def _var(name):
    return tw.get_default_graph().get_tensor_by_name(name + ":0")


def _conv1d_ref(x, k, stride, pad_before, out_len):
    xp = np.pad(x, [(0, 0), (pad_before, max(0, (out_len - 1) * stride + k.shape[0] - x.shape[1] - pad_before)),
                    (0, 0)])
    return np.stack([np.einsum("bkc,kcf->bf", xp[:, i * stride:i * stride + k.shape[0]], k)
                     for i in range(out_len)], 1)


@pytest.mark.parametrize("padding,stride,out_len,pad_before", [("valid", 1, 8, 0), ("same", 1, 10, 1),
                                                                ("valid", 2, 4, 0), ("same", 2, 5, 0)])
def test_conv1d_matches_numpy(padding, stride, out_len, pad_before, sess):
    x = rng.randn(2, 10, 3).astype(np.float32)
    y = tw.layers.conv1d(tw.constant(x), 4, 3, strides=stride, padding=padding,
                         bias_initializer=tw.constant_initializer(0.5))
    assert y.shape.as_list() == [2, out_len, 4]
    sess.run(tw.global_variables_initializer())
    k = sess.run(_var("conv1d/kernel"))
    assert k.shape == (3, 3, 4)                        # [width, in_channels, filters], as TF
    np.testing.assert_allclose(sess.run(y), _conv1d_ref(x, k, stride, pad_before, out_len) + 0.5, rtol=1e-5,
                               atol=1e-5)


def test_conv1d_dilation(sess):
    x = rng.randn(1, 9, 2).astype(np.float32)
    y = tw.layers.conv1d(tw.constant(x), 1, 3, dilation_rate=2, use_bias=False)
    sess.run(tw.global_variables_initializer())
    k = sess.run(_var("conv1d/kernel"))
    ref = np.stack([np.einsum("bkc,kcf->bf", x[:, [i, i + 2, i + 4]], k) for i in range(5)], 1)
    np.testing.assert_allclose(sess.run(y), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding,strides,kernel,expected_hw", [
    ("same", 2, 3, (10, 12)), ("valid", 2, 3, (11, 13)), ("valid", (1, 3), (2, 2), (6, 18)), ("valid", 3, 2, (15, 18)),
])
def test_conv2d_transpose_shapes_and_values(padding, strides, kernel, expected_hw, sess):
    x = rng.randn(2, 5, 6, 3).astype(np.float32)
    y = tw.layers.conv2d_transpose(tw.constant(x), 4, kernel, strides=strides, padding=padding)
    assert y.shape.as_list() == [2, *expected_hw, 4]
    sess.run(tw.global_variables_initializer())
    k = sess.run(_var("conv2d_transpose/kernel"))
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    assert k.shape == (kh, kw, 4, 3)                   # [kh, kw, filters, in_channels], as TF
    # The transposed convolution is the adjoint of the convolution with the same kernel:
    # <conv_transpose(x), z> == <x, conv(z)> for any z of the output's shape.
    z = rng.randn(2, *expected_hw, 4).astype(np.float32)
    sh, sw = (strides, strides) if isinstance(strides, int) else strides
    conv = tw.nn.conv2d(tw.constant(z), tw.constant(k), [1, sh, sw, 1], padding.upper())
    out, back = sess.run([y, conv])
    # Both sides are sums of float32 products that largely cancel: the rounding to allow is
    # relative to the size of the terms, not to the (possibly small) sum.
    lhs, rhs = (out.astype(np.float64) * z).sum(), (x.astype(np.float64) * back).sum()
    assert abs(lhs - rhs) <= 1e-5 * np.abs(out.astype(np.float64) * z).sum(), (lhs, rhs)


def test_conv2d_transpose_with_an_unknown_batch_trains(sess):
    x = tw.placeholder(tw.float32, [None, 4, 4, 2])
    y = tw.layers.conv2d_transpose(x, 1, 3, strides=2, padding="same", activation=tw.nn.relu)
    assert y.shape.as_list() == [None, 8, 8, 1]
    target = np.ones((3, 8, 8, 1), np.float32)
    loss = tw.reduce_mean(tw.square(y - target))
    step = tw.train.AdamOptimizer(0.05).minimize(loss)
    sess.run(tw.global_variables_initializer())
    feed = {x: rng.rand(3, 4, 4, 2).astype(np.float32)}
    first = sess.run(loss, feed)
    for _ in range(30):
        sess.run(step, feed)
    assert sess.run(loss, feed) < 0.5 * first


@pytest.mark.parametrize("layer,ref", [(tw.layers.max_pooling1d, np.max), (tw.layers.average_pooling1d, np.mean)])
def test_pooling1d_matches_numpy(layer, ref, sess):
    x = rng.randn(2, 7, 3).astype(np.float32)
    valid = layer(tw.constant(x), 2, 2)
    same = layer(tw.constant(x), 3, 2, padding="same")
    assert valid.shape.as_list() == [2, 3, 3] and same.shape.as_list() == [2, 4, 3]
    v, s = sess.run([valid, same])
    np.testing.assert_allclose(v, np.stack([ref(x[:, 2 * i:2 * i + 2], 1) for i in range(3)], 1), rtol=1e-6)
    # SAME: windows centred with the padding after (total 2: 1 before, 1 after); padding is ignored
    np.testing.assert_allclose(s, np.stack([ref(x[:, max(0, 2 * i - 1):2 * i + 2], 1) for i in range(4)], 1),
                               rtol=1e-6)


def test_average_pooling2d_is_exported():
    y = tw.layers.average_pooling2d(tw.ones([1, 4, 4, 1]), 2, 2)
    assert y.shape.as_list() == [1, 2, 2, 1]


def test_bad_input_names_the_layer_and_what_it_expects():
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"conv1d: inputs must be 3-D \[batch, width, channels\]"):
        tw.layers.conv1d(tw.ones([2, 3, 4, 5]), 2, 3)
    with pytest.raises(tw.errors.InvalidArgumentError, match="conv1d: kernel_size must be a positive int"):
        tw.layers.conv1d(tw.ones([2, 3, 4]), 2, (3, 3))
    with pytest.raises(tw.errors.InvalidArgumentError, match="conv2d_transpose: inputs must be 4-D"):
        tw.layers.conv2d_transpose(tw.ones([2, 3, 4]), 2, 3)
    with pytest.raises(tw.errors.InvalidArgumentError, match="conv2d_transpose: filters must be a positive int"):
        tw.layers.conv2d_transpose(tw.ones([1, 3, 3, 1]), 0, 3)
    with pytest.raises(tw.errors.InvalidArgumentError, match="max_pooling1d: padding must be 'valid' or 'same'"):
        tw.layers.max_pooling1d(tw.ones([1, 4, 1]), 2, 2, padding="full")
    with pytest.raises(tw.errors.UnimplementedError, match="channels_last"):
        tw.layers.conv1d(tw.ones([1, 4, 1]), 2, 2, data_format="channels_first")
