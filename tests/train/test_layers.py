"""tw.layers: output shapes, values, variable creation and sharing."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors


def _needs_nn(*names):
    missing = [n for n in names if not hasattr(tw.nn, n)]
    return pytest.mark.skipif(bool(missing), reason=f"tw.nn lacks {missing} (being added)")


def _trainable_names():
    return [v.name for v in tw.trainable_variables()]


@_needs_nn("bias_add")
def test_dense_shapes_and_variables():
    x = tw.placeholder(tw.float32, [None, 3])
    y = tw.layers.dense(x, 4)
    assert y.shape.as_list() == [None, 4] and y.dtype is tw.float32
    y2 = tw.layers.dense(y, 2, activation=tw.nn.relu)
    assert y2.shape.as_list() == [None, 2]
    assert _trainable_names() == ["dense/kernel:0", "dense/bias:0", "dense_1/kernel:0", "dense_1/bias:0"]
    kernel = tw.trainable_variables()[0]
    assert kernel.shape.as_list() == [3, 4]


@_needs_nn("bias_add")
def test_dense_values():
    x = np.array([[1.0, 2.0], [-1.0, 0.5]])
    k = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]])
    y = tw.layers.dense(tw.constant(x), 3, kernel_initializer=tw.constant_initializer(k),
                        bias_initializer=tw.constant_initializer([0.1, 0.2, 0.3]), activation=tw.nn.relu)
    assert y.dtype is tw.float64
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        np.testing.assert_allclose(s.run(y), np.maximum(x @ k + [0.1, 0.2, 0.3], 0), rtol=1e-12)


def test_dense_without_bias():
    y = tw.layers.dense(tw.ones([2, 3]), 5, use_bias=False, name="nobias")
    assert y.shape.as_list() == [2, 5]
    assert _trainable_names() == ["nobias/kernel:0"]


@_needs_nn("bias_add")
def test_dense_on_rank_3_inputs():
    x = tw.placeholder(tw.float32, [None, 5, 3])
    y = tw.layers.dense(x, 4, kernel_initializer=tw.ones_initializer())
    assert y.shape.as_list() == [None, 5, 4]
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        out = s.run(y, {x: np.ones((2, 5, 3), np.float32)})
    np.testing.assert_allclose(out, np.full((2, 5, 4), 3.0))


@_needs_nn("bias_add")
def test_dense_reuse_by_name():
    x = tw.placeholder(tw.float32, [None, 3])
    a = tw.layers.dense(x, 2, name="fc")
    b = tw.layers.dense(x, 2, name="fc", reuse=True)
    assert _trainable_names() == ["fc/kernel:0", "fc/bias:0"]
    with pytest.raises(errors.InvalidArgumentError, match="fc/kernel already exists"):
        tw.layers.dense(x, 2, name="fc")
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        xv = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
        va, vb = s.run([a, b], {x: xv})
    np.testing.assert_array_equal(va, vb)


@_needs_nn("bias_add")
def test_unnamed_layers_are_shared_by_reentering_the_enclosing_scope():
    x = tw.placeholder(tw.float32, [None, 3])
    with tw.variable_scope("model"):
        tw.layers.dense(tw.layers.dense(x, 4), 1)
    with tw.variable_scope("model", reuse=True):
        tw.layers.dense(tw.layers.dense(x, 4), 1)
    assert _trainable_names() == ["model/dense/kernel:0", "model/dense/bias:0",
                                  "model/dense_1/kernel:0", "model/dense_1/bias:0"]


def test_dense_bad_inputs():
    with pytest.raises(errors.InvalidArgumentError, match="last dimension"):
        tw.layers.dense(tw.placeholder(tw.float32, [None, None]), 2)
    with pytest.raises(errors.InvalidArgumentError, match="rank at least 2"):
        tw.layers.dense(tw.ones([3]), 2)
    with pytest.raises(errors.InvalidArgumentError, match="units"):
        tw.layers.dense(tw.ones([2, 3]), 0)
    with pytest.raises(errors.InvalidArgumentError, match="floating-point"):
        tw.layers.dense(tw.ones([2, 3], tw.int32), 2)


@_needs_nn("bias_add")
def test_dense_trains():
    rng = np.random.default_rng(1)
    xv = rng.normal(size=(32, 3)).astype(np.float32)
    yv = (xv @ np.array([[1.0], [-2.0], [0.5]]) + 0.3).astype(np.float32)
    x, y = tw.placeholder(tw.float32, [None, 3]), tw.placeholder(tw.float32, [None, 1])
    pred = tw.layers.dense(x, 1)
    loss = tw.reduce_sum(tw.square(pred - y)) * (1.0 / 32)
    train = tw.train.AdamOptimizer(0.1).minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        start = s.run(loss, {x: xv, y: yv})
        for _ in range(150):
            s.run(train, {x: xv, y: yv})
        assert s.run(loss, {x: xv, y: yv}) < 1e-3 * start


@_needs_nn("conv2d", "bias_add")
@pytest.mark.parametrize("padding,strides,want", [("valid", (1, 1), [None, 6, 6, 4]),
                                                   ("same", (1, 1), [None, 8, 8, 4]),
                                                   ("same", (2, 2), [None, 4, 4, 4]),
                                                   ("valid", 2, [None, 3, 3, 4])])
def test_conv2d_shapes(padding, strides, want):
    x = tw.placeholder(tw.float32, [None, 8, 8, 3])
    y = tw.layers.conv2d(x, 4, 3, strides=strides, padding=padding, activation=tw.nn.relu)
    assert y.shape.as_list() == want
    assert _trainable_names() == ["conv2d/kernel:0", "conv2d/bias:0"]
    assert tw.trainable_variables()[0].shape.as_list() == [3, 3, 3, 4]


@_needs_nn("conv2d", "bias_add")
def test_conv2d_values():
    x = np.arange(2 * 4 * 4 * 1, dtype=np.float32).reshape(2, 4, 4, 1)
    y = tw.layers.conv2d(tw.constant(x), 2, (2, 2), kernel_initializer=tw.ones_initializer(),
                         bias_initializer=tw.constant_initializer([0.0, 1.0]))
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        out = s.run(y)
    want = x[:, :-1, :-1, 0] + x[:, 1:, :-1, 0] + x[:, :-1, 1:, 0] + x[:, 1:, 1:, 0]
    np.testing.assert_allclose(out[..., 0], want)
    np.testing.assert_allclose(out[..., 1], want + 1)


@_needs_nn("conv2d")
def test_conv2d_bad_arguments():
    x = tw.placeholder(tw.float32, [None, 8, 8, 3])
    with pytest.raises(errors.InvalidArgumentError, match="padding"):
        tw.layers.conv2d(x, 4, 3, padding="full")
    with pytest.raises(errors.InvalidArgumentError, match="kernel_size"):
        tw.layers.conv2d(x, 4, (3, 3, 3))
    with pytest.raises(errors.InvalidArgumentError, match="4-D"):
        tw.layers.conv2d(tw.placeholder(tw.float32, [None, 8, 3]), 4, 3)
    with pytest.raises(errors.UnimplementedError, match="channels_last"):
        tw.layers.conv2d(x, 4, 3, data_format="channels_first")


@_needs_nn("max_pool", "avg_pool")
def test_pooling():
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    mp = tw.layers.max_pooling2d(tw.constant(x), 2, 2)
    ap = tw.layers.average_pooling2d(tw.constant(x), (2, 2), (2, 2))
    same = tw.layers.max_pooling2d(tw.placeholder(tw.float32, [None, 5, 5, 3]), 2, 2, padding="same")
    assert mp.shape.as_list() == [1, 2, 2, 1] and same.shape.as_list() == [None, 3, 3, 3]
    with tw.Session() as s:
        vm, va = s.run([mp, ap])
    np.testing.assert_array_equal(vm[0, :, :, 0], [[5, 7], [13, 15]])
    np.testing.assert_allclose(va[0, :, :, 0], [[2.5, 4.5], [10.5, 12.5]])
    assert tw.trainable_variables() == []


def test_flatten():
    x = tw.placeholder(tw.float32, [None, 2, 3, 4])
    y = tw.layers.flatten(x)
    assert y.shape.as_list() == [None, 24]
    assert tw.layers.flatten(tw.placeholder(tw.float32, [None, None, 3])).shape.as_list() == [None, None]
    assert tw.layers.flatten(tw.ones([5])).shape.as_list() == [5, 1]
    xv = np.arange(48, dtype=np.float32).reshape(2, 2, 3, 4)
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(y, {x: xv}), xv.reshape(2, 24))
    assert tw.trainable_variables() == []


def test_flatten_dynamic_shape_runs():
    p = tw.placeholder(tw.float32, [None, None, 3])
    z = tw.layers.flatten(p)
    with tw.Session() as s:
        out = s.run(z, {p: np.ones((2, 5, 3), np.float32)})
    assert out.shape == (2, 15)


@_needs_nn("dropout")
def test_dropout_python_bool():
    x = tw.ones([100, 100])
    off = tw.layers.dropout(x, 0.4)
    on = tw.layers.dropout(x, 0.4, training=True, seed=1)
    with tw.Session() as s:
        v_off, v_on = s.run([off, on])
    np.testing.assert_array_equal(v_off, np.ones((100, 100)))
    kept = v_on != 0
    assert 0.55 < kept.mean() < 0.65
    np.testing.assert_allclose(v_on[kept], 1 / 0.6, rtol=1e-6)


@_needs_nn("dropout")
def test_dropout_training_tensor():
    x = tw.ones([50, 50])
    training = tw.placeholder(tw.bool, [], name="training")
    y = tw.layers.dropout(x, 0.5, training=training, seed=2)
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(y, {training: False}), np.ones((50, 50)))
        v = s.run(y, {training: True})
    assert 0.4 < (v != 0).mean() < 0.6
    assert set(np.unique(v)) <= {0.0, 2.0}


@_needs_nn("dropout")
def test_dropout_rate_tensor_and_bad_rate():
    x = tw.ones([40, 40])
    rate = tw.placeholder_with_default(tw.constant(0.0), [])
    y = tw.layers.dropout(x, rate, training=True, seed=3)
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(y), np.ones((40, 40)))
        assert 0.15 < (s.run(y, {rate: 0.8}) != 0).mean() < 0.25
    with pytest.raises(errors.InvalidArgumentError, match="rate"):
        tw.layers.dropout(x, 1.0, training=True)
    with pytest.raises(errors.InvalidArgumentError, match="training"):
        tw.layers.dropout(x, 0.5, training="yes")


@_needs_nn("conv2d", "max_pool", "bias_add")
def test_small_convnet_builds_and_trains_with_expected_variables():
    x = tw.placeholder(tw.float32, [None, 8, 8, 1])
    labels = tw.placeholder(tw.float32, [None, 2])
    h = tw.layers.conv2d(x, 4, 3, padding="same", activation=tw.nn.relu)
    h = tw.layers.max_pooling2d(h, 2, 2)
    h = tw.layers.flatten(h)
    assert h.shape.as_list() == [None, 64]
    logits = tw.layers.dense(h, 2)
    assert _trainable_names() == ["conv2d/kernel:0", "conv2d/bias:0", "dense/kernel:0", "dense/bias:0"]
    loss = tw.reduce_sum(tw.square(logits - labels)) * (1.0 / 16)
    train = tw.train.GradientDescentOptimizer(0.05).minimize(loss)
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(8, 8, 8, 1)).astype(np.float32)
    lv = rng.normal(size=(8, 2)).astype(np.float32)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        start = s.run(loss, {x: xv, labels: lv})
        for _ in range(20):
            s.run(train, {x: xv, labels: lv})
        assert s.run(loss, {x: xv, labels: lv}) < start
