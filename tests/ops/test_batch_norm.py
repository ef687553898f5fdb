"""Batch normalization: FusedBatchNorm(V3) training and inference against NumPy, its
gradient against float64 finite differences, tw.nn.batch_normalization, the
tw.layers.batch_normalization layer (moving statistics through UPDATE_OPS, training as a
bool or a tensor, fused and composite), tw.contrib.layers.batch_norm, a small conv net
with batch norm that trains, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.contrib import layers as contrib_layers
from tensorweave.framework.graph import apply_op
from tensorweave.testing.gradient_checker import check_gradients

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _fresh_graph():
    tw.reset_default_graph()
    yield
    tw.reset_default_graph()


def _ref(x, scale, offset, eps, axes, mean=None, var=None):
    m = x.mean(axes) if mean is None else mean
    v = x.var(axes) if var is None else var
    shape = [1] * 4
    c_axis = ({0, 1, 2, 3} - set(axes)).pop()
    shape[c_axis] = -1
    r = lambda a: np.reshape(a, shape)  # noqa: E731
    return (x - r(m)) / np.sqrt(r(v) + eps) * r(scale) + r(offset)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_batch_norm_training_and_inference(fmt, dtype):
    x = (RNG.standard_normal((3, 4, 5, 6)) * 2 + 1).astype(dtype)
    c = x.shape[3] if fmt == "NHWC" else x.shape[1]
    axes = (0, 1, 2) if fmt == "NHWC" else (0, 2, 3)
    scale, offset = RNG.uniform(0.5, 2, c).astype(dtype), RNG.standard_normal(c).astype(dtype)
    pm, pv = RNG.standard_normal(c).astype(dtype), RNG.uniform(0.5, 2, c).astype(dtype)
    y, m, v = tw.nn.fused_batch_norm(x, scale, offset, epsilon=0.01, data_format=fmt)
    yi, mi, vi = tw.nn.fused_batch_norm(x, scale, offset, mean=pm, variance=pv, epsilon=0.01, data_format=fmt,
                                        is_training=False)
    assert y.op.type == "FusedBatchNormV3" and y.shape.as_list() == list(x.shape) and m.shape.as_list() == [c]
    with tw.Session() as s:
        y_, m_, v_, yi_, mi_, vi_ = s.run([y, m, v, yi, mi, vi])
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y_, _ref(x, scale, offset, 0.01, axes), **tol)
    np.testing.assert_allclose(m_, x.mean(axes), **tol)
    np.testing.assert_allclose(v_, x.var(axes, ddof=1), **tol)  # Bessel-corrected, as TF
    np.testing.assert_allclose(yi_, _ref(x, scale, offset, 0.01, axes, pm, pv), **tol)
    np.testing.assert_array_equal(mi_, pm)
    np.testing.assert_array_equal(vi_, pv)


def test_fused_batch_norm_v1_outputs_and_epsilon_floor():
    x = RNG.standard_normal((2, 3, 3, 2)).astype(np.float32)
    outs = apply_op("FusedBatchNorm", [x, np.ones(2, np.float32), np.zeros(2, np.float32),
                                       np.zeros(0, np.float32), np.zeros(0, np.float32)], {"epsilon": 0.001})
    assert len(outs) == 5
    y, _, _ = tw.nn.fused_batch_norm(x, np.ones(2, np.float32), epsilon=0.0)
    assert y.op.get_attr("epsilon") == pytest.approx(1.001e-5)
    with tw.Session() as s:
        y1, m1, v1, r1, r2 = s.run(outs)
    np.testing.assert_allclose(r1, x.mean((0, 1, 2)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r2, x.var((0, 1, 2)), rtol=1e-5, atol=1e-6)   # the biased one
    np.testing.assert_allclose(v1, x.var((0, 1, 2), ddof=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("training", [True, False])
def test_fused_batch_norm_gradients(fmt, training):
    x = RNG.standard_normal((2, 3, 2, 3))  # 3 channels in either format
    c = 3
    scale, offset = RNG.uniform(0.5, 2, c), RNG.standard_normal(c)
    mean, var = RNG.standard_normal(c), RNG.uniform(0.5, 2, c)
    w = RNG.standard_normal(x.shape)

    def fn(x, scale, offset):
        kw = {} if training else {"mean": tw.constant(mean), "variance": tw.constant(var), "is_training": False}
        y, _, _ = tw.nn.fused_batch_norm(x, scale, offset, epsilon=0.01, data_format=fmt, **kw)
        return tw.reduce_sum(y * w)

    check_gradients(fn, [x, scale, offset], rtol=1e-5, atol=1e-6)


def test_batch_normalization_composite_and_gradients():
    x = RNG.standard_normal((4, 3))
    mean, var = RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
    offset, scale = RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
    y = tw.nn.batch_normalization(x, mean, var, offset, scale, 1e-3)
    y2 = tw.nn.batch_normalization(x, mean, var, None, None, 1e-3)
    with tw.Session() as s:
        a, b = s.run([y, y2])
    np.testing.assert_allclose(a, (x - mean) / np.sqrt(var + 1e-3) * scale + offset, rtol=1e-12)
    np.testing.assert_allclose(b, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-12)
    check_gradients(lambda x, m, v: tw.reduce_sum(tw.nn.batch_normalization(x, m, v, offset, scale, 1e-3) ** 2),
                    [x, mean, var])
    m, v = tw.nn.moments(tw.constant(x), [0])
    with tw.Session() as s:
        np.testing.assert_allclose(s.run([m, v]), [x.mean(0), x.var(0)], rtol=1e-12)


@pytest.mark.parametrize("fused", [None, False])
@pytest.mark.parametrize("training_kind", ["bool", "tensor"])
def test_layer_updates_moving_stats_and_infers_with_them(fused, training_kind):
    x = (RNG.standard_normal((8, 4, 4, 3)) * 3 + 2).astype(np.float32)
    xp = tw.placeholder(tw.float32, x.shape)
    training = tw.placeholder(tw.bool, []) if training_kind == "tensor" else True
    y = tw.layers.batch_normalization(xp, momentum=0.5, training=training, fused=fused)
    names = sorted(v.op.name for v in tw.global_variables())
    assert names == ["batch_normalization/beta", "batch_normalization/gamma", "batch_normalization/moving_mean",
                     "batch_normalization/moving_variance"]
    assert sorted(v.op.name for v in tw.trainable_variables()) == ["batch_normalization/beta",
                                                                   "batch_normalization/gamma"]
    updates = tw.get_collection(tw.GraphKeys.UPDATE_OPS)
    assert len(updates) == 2
    mm, mv = (v for v in tw.global_variables() if "moving" in v.op.name)
    feed = {xp: x}
    if training_kind == "tensor":
        feed[training] = True
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        with tw.control_dependencies(updates):
            train_y = tw.identity(y)
        out = s.run(train_y, feed)
        np.testing.assert_allclose(out, _ref(x, np.ones(3), np.zeros(3), 1e-3, (0, 1, 2)), rtol=1e-4, atol=1e-4)
        batch_var = x.var((0, 1, 2), ddof=1 if fused is None else 0)
        np.testing.assert_allclose(s.run(mm), 0.5 * x.mean((0, 1, 2)), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s.run(mv), 0.5 + 0.5 * batch_var, rtol=1e-5, atol=1e-5)
        if training_kind == "tensor":
            before = s.run([mm, mv])
            got = s.run([y] + updates, {xp: x, training: False})[0]
            np.testing.assert_allclose(s.run([mm, mv]), before)  # no movement when not training
            np.testing.assert_allclose(got, _ref(x, np.ones(3), np.zeros(3), 1e-3, (0, 1, 2), *before), rtol=1e-4,
                                       atol=1e-4)


def test_layer_inference_uses_moving_stats_and_reuse():
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    y = tw.layers.batch_normalization(x, axis=1, name="bn", training=False)
    y2 = tw.layers.batch_normalization(x, axis=1, name="bn", training=False, reuse=True)
    assert tw.get_collection(tw.GraphKeys.UPDATE_OPS) == []
    assert len(tw.global_variables()) == 4
    layer = tw.layers.BatchNormalization(axis=1, name="bn2", center=False)
    y3 = layer(x, training=True)
    assert layer.beta is None and layer.gamma is not None and len(layer.updates) == 2
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        a, b, c = s.run([y, y2, y3])
    np.testing.assert_allclose(a, x / np.sqrt(1 + 1e-3), rtol=1e-6)
    np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(c, (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-3),
                               rtol=1e-4, atol=1e-5)


def test_contrib_batch_norm():
    x = RNG.standard_normal((4, 3, 3, 2)).astype(np.float32)
    y = contrib_layers.batch_norm(x, decay=0.9, is_training=True)
    names = sorted(v.op.name for v in tw.global_variables())
    assert names == ["BatchNorm/beta", "BatchNorm/moving_mean", "BatchNorm/moving_variance"]  # scale=False
    assert len(tw.get_collection(tw.GraphKeys.MODEL_VARIABLES)) == 3
    assert len(tw.get_collection(tw.GraphKeys.UPDATE_OPS)) == 2
    y2 = contrib_layers.batch_norm(x, decay=0.9, scale=True, updates_collections=None, is_training=True,
                                   scope="bn2", activation_fn=tw.nn.relu)
    assert len(tw.get_collection(tw.GraphKeys.UPDATE_OPS)) == 2
    mm2 = tw.get_default_graph().get_tensor_by_name("bn2/moving_mean:0")
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        a, b = s.run([y, y2])
        np.testing.assert_allclose(s.run(mm2), 0.1 * x.mean((0, 1, 2)), rtol=1e-5, atol=1e-6)  # ran with y2
    ref = _ref(x, np.ones(2), np.zeros(2), 1e-3, (0, 1, 2))
    np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    # as a normalizer_fn of conv2d, with arg_scope-able defaults
    z = contrib_layers.conv2d(x, 4, 3, normalizer_fn=contrib_layers.batch_norm,
                              normalizer_params={"is_training": False}, scope="conv")
    assert z.shape.as_list() == [4, 3, 3, 4]
    assert "conv/biases" not in [v.op.name for v in tw.global_variables()]


def test_conv_net_with_batch_norm_trains():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6, 6, 1)).astype(np.float32)
    labels = (x[:, :3].sum((1, 2, 3)) > x[:, 3:].sum((1, 2, 3))).astype(np.int64)
    xp, yp = tw.placeholder(tw.float32, [None, 6, 6, 1]), tw.placeholder(tw.int64, [None])
    training = tw.placeholder_with_default(False, [])
    h = tw.layers.conv2d(xp, 4, 3, padding="same", use_bias=False)
    h = tw.nn.relu(tw.layers.batch_normalization(h, training=training, momentum=0.9))
    h = tw.layers.separable_conv2d(h, 4, 3, padding="same")
    logits = tw.layers.dense(tw.layers.flatten(h), 2)
    loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=yp, logits=logits))
    with tw.control_dependencies(tw.get_collection(tw.GraphKeys.UPDATE_OPS)):
        train = tw.train.AdamOptimizer(0.05).minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        first = s.run(loss, {xp: x, yp: labels, training: True})
        for _ in range(60):
            s.run(train, {xp: x, yp: labels, training: True})
        last = s.run(loss, {xp: x, yp: labels, training: True})
        infer = s.run(loss, {xp: x, yp: labels})
        mm = s.run(tw.get_default_graph().get_tensor_by_name("batch_normalization/moving_mean:0"))
    assert last < 0.5 * first, (first, last)
    assert infer < first and np.abs(mm).sum() > 0


def test_bad_input():
    x4 = tw.placeholder(tw.float32, [2, 3, 3, 4])
    with pytest.raises(errors.InvalidArgumentError, match=r"FusedBatchNormV3.*x must be 4-dimensional"):
        tw.nn.fused_batch_norm(tw.ones([2, 3, 4]), tw.ones([4]))
    with pytest.raises(errors.InvalidArgumentError, match=r"FusedBatchNormV3.*scale has 3 elements but x has 4"):
        tw.nn.fused_batch_norm(x4, tw.ones([3]))
    with pytest.raises(errors.InvalidArgumentError, match=r"offset has 5 elements"):
        tw.nn.fused_batch_norm(x4, tw.ones([4]), tw.ones([5]))
    with pytest.raises(errors.InvalidArgumentError, match="data_format must be 'NHWC' or 'NCHW'"):
        tw.nn.fused_batch_norm(x4, tw.ones([4]), data_format="NWHC")
    with pytest.raises(errors.InvalidArgumentError, match="mean and variance are required"):
        tw.nn.fused_batch_norm(x4, tw.ones([4]), is_training=False)
    with pytest.raises(errors.InvalidArgumentError, match=r"mean has 2 elements but x has 4"):
        tw.nn.fused_batch_norm(x4, tw.ones([4]), mean=tw.ones([2]), variance=tw.ones([4]), is_training=False)
    with pytest.raises(errors.InvalidArgumentError, match="fused=True needs 4-D inputs"):
        tw.layers.batch_normalization(tw.ones([2, 3]), fused=True)
    with pytest.raises(errors.InvalidArgumentError, match="training must be a Python bool or a bool scalar"):
        tw.layers.batch_normalization(tw.ones([2, 3]), training=tw.placeholder(tw.float32, [2]))
    # run-time shapes: the kernel names the node and what it expected
    xp = tw.placeholder(tw.float32)
    sp = tw.placeholder(tw.float32)
    y, _, _ = tw.nn.fused_batch_norm(xp, sp)
    with tw.Session() as s, pytest.raises(errors.InvalidArgumentError,
                                          match=r"FusedBatchNormV3 node .*scale must be a vector of 4 elements"):
        s.run(y, {xp: np.ones((2, 3, 3, 4), np.float32), sp: np.ones(3, np.float32)})
