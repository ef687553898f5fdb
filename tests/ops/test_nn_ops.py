"""Neural-net ops against NumPy references: activations, softmax and cross-entropies,
convolution and pooling (checked against naive loop implementations on small inputs),
bias, L2 loss, dropout, InTopK, moments, CheckNumerics; static shapes against run-time
shapes; construction-time and run-time errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.ops.nn_ops import add_check_numerics_ops, check_numerics

_E = errors.InvalidArgumentError


def run(fetches, feed_dict=None):
    with tw.Session() as s:
        return s.run(fetches, feed_dict)


def check(t, value, expected, rtol=1e-6, atol=1e-6):
    """``value`` matches ``expected``; static shape and dtype of ``t`` match the run-time ones."""
    value = np.asarray(value)
    assert value.dtype == t.dtype.np_dtype, (value.dtype, t.dtype)
    assert t.shape.is_compatible_with(value.shape), f"static shape {t.shape} vs runtime {value.shape}"
    assert value.shape == np.shape(expected), (value.shape, np.shape(expected))
    np.testing.assert_allclose(value, expected, rtol=rtol, atol=atol)


def rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------
# NumPy references (float64, naive loops: small inputs only)
def ref_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def tf_padding(size, k, s, d, padding):
    """Output size and padding before, written out from TensorFlow's documentation."""
    eff = (k - 1) * d + 1
    if padding == "VALID":
        return math.ceil((size - eff + 1) / s), 0
    out = math.ceil(size / s)
    return out, max((out - 1) * s + eff - size, 0) // 2


def ref_conv2d(x, f, strides, padding, dilations=(1, 1)):
    n, h, w, c = x.shape
    kh, kw, _, co = f.shape
    (sh, sw), (dh, dw) = strides, dilations
    oh, pt = tf_padding(h, kh, sh, dh, padding)
    ow, pl = tf_padding(w, kw, sw, dw, padding)
    out = np.zeros((n, oh, ow, co))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    r, s = i * sh + a * dh - pt, j * sw + b * dw - pl
                    if 0 <= r < h and 0 <= s < w:
                        out[:, i, j, :] += x[:, r, s, :] @ f[a, b]
    return out


def ref_pool(x, k, strides, padding, kind):
    n, h, w, c = x.shape
    (kh, kw), (sh, sw) = k, strides
    oh, pt = tf_padding(h, kh, sh, 1, padding)
    ow, pl = tf_padding(w, kw, sw, 1, padding)
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, s0 = i * sh - pt, j * sw - pl
            win = x[:, max(r0, 0):min(r0 + kh, h), max(s0, 0):min(s0 + kw, w), :]
            out[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return out


# ---------------------------------------------------------------------------------------
# activations
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_activations_against_numpy(dtype):
    x = np.array([[-100.0, -3.0, -0.5, 0.0], [0.5, 3.0, 7.0, 100.0]], dtype)
    t = tw.constant(x)
    outs = [tw.nn.relu(t), tw.nn.relu6(t), tw.nn.elu(t), tw.nn.softplus(t)]
    vals = run(outs)
    x64 = x.astype(np.float64)
    expected = [np.maximum(x64, 0), np.clip(x64, 0, 6), np.where(x64 < 0, np.expm1(x64), x64),
                np.log1p(np.exp(-np.abs(x64))) + np.maximum(x64, 0)]
    for o, v, e in zip(outs, vals, expected):
        check(o, v, e, rtol=1e-6)
    assert vals[3][0, 0] > 0 and vals[3][1, 3] == 100  # softplus neither underflows to 0 nor overflows


def test_relu_on_integers_and_static_shapes():
    x = tw.placeholder(tw.int32, [None, 3])
    y = tw.nn.relu6(x)
    assert y.dtype is tw.int32 and y.shape.as_list() == [None, 3]
    check(y, run(y, {x: [[-2, 3, 9]]}), [[0, 3, 6]])


# ---------------------------------------------------------------------------------------
# softmax
def test_softmax_and_log_softmax_are_stable():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]])
    for dtype in ("float32", "float64"):
        t = tw.constant(x.astype(dtype))
        sm, lsm = run([tw.nn.softmax(t), tw.nn.log_softmax(t)])
        assert np.all(np.isfinite(sm)) and np.all(np.isfinite(lsm[0]))
        np.testing.assert_allclose(sm, ref_softmax(x), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(lsm[0], ref_log_softmax(x)[0], rtol=1e-6)


def test_softmax_axis_and_dim():
    x = rng().normal(size=(2, 3, 4))
    t = tw.constant(x)
    outs = [tw.nn.softmax(t), tw.nn.softmax(t, axis=0), tw.nn.softmax(t, dim=1), tw.nn.log_softmax(t, axis=1)]
    vals = run(outs)
    for o, v, e in zip(outs, vals, [ref_softmax(x), ref_softmax(x, 0), ref_softmax(x, 1), ref_log_softmax(x, 1)]):
        check(o, v, e, rtol=1e-12)
    with pytest.raises(_E, match="scalar"):
        tw.nn.softmax(tw.constant(1.0))
    with pytest.raises(_E, match="out of range"):
        tw.nn.softmax(t, axis=3)


# ---------------------------------------------------------------------------------------
# cross-entropies
def test_softmax_cross_entropy_values_and_backprop():
    r = rng(1)
    logits = r.normal(size=(4, 5)) * 3
    labels = ref_softmax(r.normal(size=(4, 5)))
    loss, backprop = apply_op("SoftmaxCrossEntropyWithLogits", [tw.constant(logits), tw.constant(labels)])
    assert loss.shape.as_list() == [4] and backprop.shape.as_list() == [4, 5]
    lv, bv = run([loss, backprop])
    check(loss, lv, -(labels * ref_log_softmax(logits)).sum(1), rtol=1e-12)
    check(backprop, bv, ref_softmax(logits) - labels, rtol=1e-12, atol=1e-14)
    wrapped = tw.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    check(wrapped, run(wrapped), lv, rtol=1e-12)


def test_softmax_cross_entropy_is_stable_and_handles_rank_and_dim():
    logits = np.array([[1e4, 0.0, -1e4]], np.float32)
    labels = np.array([[0.0, 0.0, 1.0]], np.float32)
    v = run(tw.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    np.testing.assert_allclose(v, [2e4], rtol=1e-6)
    x = rng(2).normal(size=(2, 3, 4))
    lab = ref_softmax(rng(3).normal(size=(2, 3, 4)))
    t3 = tw.nn.softmax_cross_entropy_with_logits(labels=lab, logits=x)
    t0 = tw.nn.softmax_cross_entropy_with_logits(labels=lab, logits=x, dim=0)
    t1 = tw.nn.softmax_cross_entropy_with_logits_v2(labels=lab[0, 0], logits=x[0, 0])
    v3, v0, v1 = run([t3, t0, t1])
    check(t3, v3, -(lab * ref_log_softmax(x)).sum(-1), rtol=1e-12)
    check(t0, v0, -(lab * ref_log_softmax(x, 0)).sum(0), rtol=1e-12)
    check(t1, v1, -(lab[0, 0] * ref_log_softmax(x[0, 0])).sum(), rtol=1e-12)


def test_cross_entropy_argument_errors():
    logits = tw.constant(np.zeros((2, 3)))
    with pytest.raises(_E, match="named arguments"):
        tw.nn.softmax_cross_entropy_with_logits(np.zeros((2, 3)), logits)
    with pytest.raises(_E, match="both labels and logits"):
        tw.nn.softmax_cross_entropy_with_logits(logits=logits)
    with pytest.raises(_E, match="named arguments"):
        tw.nn.sparse_softmax_cross_entropy_with_logits([0, 1], logits)
    with pytest.raises(_E, match="same shape"):
        tw.nn.softmax_cross_entropy_with_logits(labels=np.zeros((2, 4)), logits=logits)
    with pytest.raises(_E, match="same shape"):
        tw.nn.sigmoid_cross_entropy_with_logits(labels=np.zeros((3, 2)), logits=logits)
    with pytest.raises(_E, match="rank mismatch"):
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.constant([[0], [1]]), logits=logits)
    with pytest.raises(_E, match="shape mismatch"):
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.constant([0, 1, 2]), logits=logits)
    with pytest.raises(_E, match="int32 or int64"):
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.constant([0.0, 1.0]), logits=logits)
    with pytest.raises(_E, match="2-dimensional"):
        apply_op("SoftmaxCrossEntropyWithLogits", [tw.constant(np.zeros(3)), tw.constant(np.zeros(3))])


@pytest.mark.parametrize("label_dtype", [tw.int32, tw.int64])
def test_sparse_softmax_cross_entropy(label_dtype):
    logits = rng(4).normal(size=(5, 4)) * 4
    labels = np.array([0, 3, 1, 2, 3])
    lt = tw.constant(labels, dtype=label_dtype)
    loss, backprop = apply_op("SparseSoftmaxCrossEntropyWithLogits", [tw.constant(logits), lt])
    lv, bv = run([loss, backprop])
    onehot = np.eye(4)[labels]
    check(loss, lv, -(onehot * ref_log_softmax(logits)).sum(1), rtol=1e-12)
    check(backprop, bv, ref_softmax(logits) - onehot, rtol=1e-12, atol=1e-14)
    x3 = logits.reshape(5, 1, 4)
    t3 = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels.reshape(5, 1), logits=x3)
    check(t3, run(t3), lv.reshape(5, 1), rtol=1e-12)


def test_sparse_label_out_of_range_fails_at_run_time_naming_the_node():
    labels = tw.placeholder(tw.int32, [None])
    loss = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=np.zeros((2, 3)), name="xent")
    with tw.Session() as s:
        assert s.run(loss, {labels: [0, 2]}).shape == (2,)
        with pytest.raises(_E, match=r"node 'xent'.*label value of 3 .*\[0, 3\)"):
            s.run(loss, {labels: [0, 3]})
        with pytest.raises(_E, match="label value of -1"):
            s.run(loss, {labels: [-1, 0]})


def test_sigmoid_cross_entropy_matches_the_stable_formula():
    x = np.array([-200.0, -20.0, -1.0, 0.0, 0.5, 20.0, 200.0])
    z = np.array([0.0, 1.0, 0.3, 0.5, 1.0, 0.0, 1.0])
    expected = np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))
    for dtype, tolerance in (("float64", 1e-12), ("float32", 1e-6)):
        t = tw.nn.sigmoid_cross_entropy_with_logits(labels=z.astype(dtype), logits=x.astype(dtype))
        v = run(t)
        assert np.all(np.isfinite(v))
        check(t, v, expected, rtol=tolerance, atol=1e-30)


# ---------------------------------------------------------------------------------------
# convolution
CONV_CASES = [
    # input NHWC, filter HWIO, strides, dilations
    ((2, 5, 5, 3), (3, 3, 3, 4), (1, 1), (1, 1)),
    ((1, 6, 7, 2), (3, 2, 2, 3), (2, 2), (1, 1)),
    ((1, 7, 6, 1), (2, 3, 1, 2), (2, 1), (1, 1)),
    ((2, 4, 4, 2), (1, 1, 2, 3), (1, 1), (1, 1)),
    ((1, 7, 7, 2), (3, 3, 2, 2), (1, 1), (2, 2)),
    ((1, 8, 8, 1), (5, 5, 1, 2), (3, 3), (1, 1)),
    # enough channels for the strided-copy im2col rather than the gather
    ((2, 5, 6, 5), (3, 3, 5, 2), (2, 1), (1, 1)),
    ((1, 7, 6, 4), (2, 3, 4, 3), (1, 2), (2, 1)),
]


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("xs, fs, strides, dilations", CONV_CASES)
def test_conv2d_against_naive_loops(xs, fs, strides, dilations, padding):
    r = rng(5)
    x, f = r.normal(size=xs), r.normal(size=fs)
    y = tw.nn.conv2d(x, f, [1, *strides, 1], padding, dilations=[1, *dilations, 1])
    check(y, run(y), ref_conv2d(x, f, strides, padding, dilations), rtol=1e-10, atol=1e-12)


def test_conv2d_same_padding_puts_the_odd_pad_after():
    x = np.arange(1.0, 5.0).reshape(1, 1, 4, 1)  # 4 wide, 3-wide window, stride 2: pad 0 before, 1 after
    y = tw.nn.conv2d(x, np.ones((1, 3, 1, 1)), [1, 1, 2, 1], "SAME")
    np.testing.assert_array_equal(run(y).reshape(-1), [1 + 2 + 3, 3 + 4])


def test_conv2d_float32_nchw_and_unknown_batch():
    r = rng(6)
    x, f = r.normal(size=(3, 6, 6, 2)).astype(np.float32), r.normal(size=(3, 3, 2, 4)).astype(np.float32)
    xp = tw.placeholder(tw.float32, [None, 6, 6, 2])
    y = tw.nn.conv2d(xp, f, [1, 2, 2, 1], "SAME")
    assert y.shape.as_list() == [None, 3, 3, 4]
    ync = tw.nn.conv2d(np.transpose(x, (0, 3, 1, 2)), f, [1, 1, 2, 2], "SAME", data_format="NCHW")
    assert ync.shape.as_list() == [3, 4, 3, 3]
    v, vnc = run([y, ync], {xp: x})
    check(y, v, ref_conv2d(x.astype(np.float64), f.astype(np.float64), (2, 2), "SAME"), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.transpose(vnc, (0, 2, 3, 1)), v, rtol=1e-5, atol=1e-5)


def test_conv2d_backprops_are_adjoints_and_transpose_has_its_shape():
    r = rng(7)
    x = r.normal(size=(2, 7, 6, 3))
    for fs, strides, padding in (((3, 2, 3, 4), (2, 2), "SAME"), ((3, 2, 3, 4), (2, 3), "VALID"),
                                 ((3, 2, 3, 4), (1, 1), "SAME"), ((3, 3, 3, 8), (1, 1), "SAME"),
                                 ((2, 3, 3, 2), (1, 1), "VALID")):
        f = r.normal(size=fs)
        s4 = [1, *strides, 1]
        y = tw.nn.conv2d(x, f, s4, padding)
        dy = r.normal(size=y.shape.as_list())
        dx = tw.nn.conv2d_backprop_input(list(x.shape), f, dy, s4, padding)
        df = tw.nn.conv2d_backprop_filter(x, list(f.shape), dy, s4, padding)
        assert dx.shape.as_list() == list(x.shape) and df.shape.as_list() == list(f.shape)
        yv, dxv, dfv = run([y, dx, df])
        # <conv(x, f), dy> is bilinear: its gradients are <x, dx> and <f, df>.
        np.testing.assert_allclose(np.sum(yv * dy), np.sum(x * dxv), rtol=1e-10)
        np.testing.assert_allclose(np.sum(yv * dy), np.sum(f * dfv), rtol=1e-10)
    t = tw.nn.conv2d_transpose(np.ones((1, 2, 2, 3)), np.ones((3, 3, 5, 3)), [1, 4, 4, 5], [1, 2, 2, 1])
    assert t.shape.as_list() == [1, 4, 4, 5]
    assert run(t).shape == (1, 4, 4, 5)


def test_conv2d_construction_errors():
    x = tw.placeholder(tw.float32, [1, 5, 5, 3])
    f = tw.placeholder(tw.float32, [3, 3, 3, 2])
    with pytest.raises(_E, match="input must be 4-dimensional"):
        tw.nn.conv2d(tw.placeholder(tw.float32, [5, 5, 3]), f, [1, 1, 1, 1], "SAME")
    with pytest.raises(_E, match="filter must be 4-dimensional"):
        tw.nn.conv2d(x, tw.placeholder(tw.float32, [3, 3, 3]), [1, 1, 1, 1], "SAME")
    with pytest.raises(_E, match="'FULL' is not one of"):
        tw.nn.conv2d(x, f, [1, 1, 1, 1], "FULL")
    with pytest.raises(_E, match="input depth 3 does not match the filter's in_channels 4"):
        tw.nn.conv2d(x, tw.placeholder(tw.float32, [3, 3, 4, 2]), [1, 1, 1, 1], "SAME")
    with pytest.raises(_E, match="batch or channel"):
        tw.nn.conv2d(x, f, [2, 1, 1, 1], "SAME")
    with pytest.raises(_E, match="4 elements"):
        tw.nn.conv2d(x, f, [1, 1], "SAME")
    with pytest.raises(_E, match="larger than the input"):
        tw.nn.conv2d(x, tw.placeholder(tw.float32, [6, 1, 3, 2]), [1, 1, 1, 1], "VALID")
    with pytest.raises(_E, match="dtype int32 is not allowed"):
        tw.nn.conv2d(tw.placeholder(tw.int32, [1, 5, 5, 3]), tw.placeholder(tw.int32, [3, 3, 3, 2]),
                     [1, 1, 1, 1], "SAME")
    assert not [op for op in tw.get_default_graph().get_operations() if op.type == "Conv2D"]  # none left behind


def test_conv2d_and_pools_with_unknown_sizes_and_an_empty_batch():
    r = rng(14)
    for c in (1, 5):  # the gathering and the strided-copy im2col
        tw.reset_default_graph()
        x = tw.placeholder(tw.float64, [None, None, None, c])
        f = r.normal(size=(3, 2, c, 2))
        y = tw.nn.conv2d(x, f, [1, 2, 1, 1], "SAME")
        p = tw.nn.max_pool(y, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        (dx,) = tw.gradients(tw.reduce_sum(p), [x])
        assert y.shape.as_list() == [None, None, None, 2]
        with tw.Session() as s:
            for shape in ((2, 6, 6, c), (1, 5, 7, c), (0, 4, 4, c)):
                xv = r.normal(size=shape)
                yv, pv, dxv = s.run([y, p, dx], {x: xv})
                np.testing.assert_allclose(yv, ref_conv2d(xv, f, (2, 1), "SAME"), rtol=1e-10, atol=1e-12)
                np.testing.assert_allclose(pv, ref_pool(yv, (2, 2), (2, 2), "SAME", "max"))
                assert dxv.shape == shape


def test_conv2d_run_time_channel_mismatch_names_the_node():
    x = tw.placeholder(tw.float64, [None, None, None, None])
    y = tw.nn.conv2d(x, np.ones((3, 3, 2, 1)), [1, 1, 1, 1], "VALID", name="myconv")
    with tw.Session() as s:
        with pytest.raises(_E, match=r"myconv.*input depth 3 does not match"):
            s.run(y, {x: np.ones((1, 4, 4, 3))})
        with pytest.raises(_E, match=r"myconv.*larger than the input"):
            s.run(y, {x: np.ones((1, 2, 4, 2))})


# ---------------------------------------------------------------------------------------
# pooling
POOL_CASES = [
    ((2, 6, 6, 3), (2, 2), (2, 2)),
    ((1, 5, 7, 2), (3, 3), (2, 2)),
    ((1, 5, 5, 2), (3, 2), (1, 1)),
    ((2, 4, 5, 1), (2, 3), (1, 2)),
]


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("xs, k, strides", POOL_CASES)
def test_pools_against_naive_loops(xs, k, strides, padding):
    x = rng(8).normal(size=xs)
    mp = tw.nn.max_pool(x, [1, *k, 1], [1, *strides, 1], padding)
    ap = tw.nn.avg_pool(x, [1, *k, 1], [1, *strides, 1], padding)
    mv, av = run([mp, ap])
    check(mp, mv, ref_pool(x, k, strides, padding, "max"), rtol=0, atol=0)
    check(ap, av, ref_pool(x, k, strides, padding, "avg"), rtol=1e-12)


def test_avg_pool_same_padding_averages_only_real_elements_and_nchw():
    x = np.arange(9.0).reshape(1, 3, 3, 1)
    y = run(tw.nn.avg_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"))
    np.testing.assert_allclose(y.reshape(2, 2), [[(0 + 1 + 3 + 4) / 4, (2 + 5) / 2], [(6 + 7) / 2, 8]])
    xn = rng(9).normal(size=(2, 3, 5, 5)).astype(np.float32)
    for fn in (tw.nn.max_pool, tw.nn.avg_pool):
        a = fn(xn, [1, 1, 3, 3], [1, 1, 2, 2], "SAME", data_format="NCHW")
        b = fn(np.transpose(xn, (0, 2, 3, 1)), [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
        assert a.shape.as_list() == [2, 3, 3, 3]
        av, bv = run([a, b])
        np.testing.assert_allclose(np.transpose(av, (0, 2, 3, 1)), bv, rtol=1e-6)


def test_max_pool_integers_and_errors():
    x = np.array([[1, -5], [7, 3]], np.int32).reshape(1, 2, 2, 1)
    y = tw.nn.max_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], "SAME")
    check(y, run(y), np.array([7, 3, 7, 3]).reshape(1, 2, 2, 1))
    p = tw.placeholder(tw.float32, [1, 4, 4, 2])
    with pytest.raises(_E, match="batch or channel"):
        tw.nn.max_pool(p, [1, 2, 2, 2], [1, 2, 2, 1], "VALID")
    with pytest.raises(_E, match="4 elements"):
        tw.nn.avg_pool(p, [2, 2], [1, 2, 2, 1], "VALID")
    with pytest.raises(_E, match="must be 4-dimensional"):
        tw.nn.avg_pool(tw.placeholder(tw.float32, [4, 4, 2]), [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    with pytest.raises(_E, match="is not one of"):
        tw.nn.max_pool(p, [1, 2, 2, 1], [1, 2, 2, 1], "same")
    with pytest.raises(_E, match="larger than the input"):
        tw.nn.max_pool(p, [1, 5, 1, 1], [1, 1, 1, 1], "VALID")


# ---------------------------------------------------------------------------------------
# bias, losses, metrics
def test_bias_add_both_formats_and_errors():
    r = rng(10)
    v, b = r.normal(size=(2, 3, 4, 5)), r.normal(size=5)
    y = tw.nn.bias_add(v, b)
    ync = tw.nn.bias_add(v, r.normal(size=3)[:3] * 0 + b[:3], data_format="NCHW")
    yv, ynv = run([y, ync])
    check(y, yv, v + b, rtol=1e-12)
    check(ync, ynv, v + b[:3].reshape(3, 1, 1), rtol=1e-12)
    grad = apply_op("BiasAddGrad", [tw.constant(v)])
    check(grad, run(grad), v.sum(axis=(0, 1, 2)), rtol=1e-12)
    with pytest.raises(_E, match="bias has 4 elements but value .* has 5 channels"):
        tw.nn.bias_add(v, np.zeros(4))
    with pytest.raises(_E, match="bias must be 1-D"):
        tw.nn.bias_add(v, np.zeros((1, 5)))
    with pytest.raises(_E, match="rank at least 2"):
        tw.nn.bias_add(np.zeros(5), np.zeros(5))
    xw = tw.nn.xw_plus_b(v[0, 0], r.normal(size=(5, 2)), np.array([1.0, -1.0]))
    assert xw.shape.as_list() == [4, 2]


def test_l2_loss():
    x = rng(11).normal(size=(3, 4)).astype(np.float32)
    t = tw.nn.l2_loss(x)
    assert t.shape.as_list() == [] and t.dtype is tw.float32
    check(t, run(t), (x.astype(np.float64) ** 2).sum() / 2, rtol=1e-6)


def test_in_top_k_and_moments():
    pred = np.array([[0.1, 0.9, 0.5, 0.5], [0.3, 0.3, 0.3, 0.1], [np.nan, 1, 2, 3]], np.float32)
    for k, targets, expected in ((1, [1, 0, 0], [True, True, False]), (2, [2, 3, 3], [True, False, True]),
                                 (2, [3, 4, -1], [True, False, False])):
        t = tw.nn.in_top_k(pred, np.array(targets, np.int32), k)
        check(t, run(t), np.array(expected))
    x = rng(12).normal(size=(4, 3, 2))
    mean, var = tw.nn.moments(tw.constant(x), [0, 1])
    mv, vv = run([mean, var])
    check(mean, mv, x.mean(axis=(0, 1)), rtol=1e-12)
    check(var, vv, x.var(axis=(0, 1)), rtol=1e-12)


# ---------------------------------------------------------------------------------------
# dropout
def test_dropout_keeps_and_scales():
    x = np.ones((200, 50), np.float32)
    y = tw.nn.dropout(x, 0.3, seed=1)
    assert y.shape.as_list() == [200, 50] and y.dtype is tw.float32
    v = run(y)
    assert set(np.unique(v).tolist()) <= {0.0, np.float32(1 / 0.3)}
    assert abs((v != 0).mean() - 0.3) < 0.03
    assert tw.nn.dropout(tw.constant(x), 1.0).op.type == "Const"


def test_dropout_noise_shape_seed_and_tensor_keep_prob():
    x = rng(13).normal(size=(6, 40))
    kp = tw.placeholder(tw.float64, [])
    y = tw.nn.dropout(x, kp, noise_shape=[1, 40])
    v = run(y, {kp: 0.5})
    dropped = v == 0
    assert np.all(dropped == dropped[0]) and 0 < dropped[0].sum() < 40  # whole columns together
    np.testing.assert_allclose(v[:, ~dropped[0]], x[:, ~dropped[0]] * 2)
    np.testing.assert_allclose(run(y, {kp: 1.0}), x)
    tw.set_random_seed(3)
    a = run(tw.nn.dropout(x, 0.5, seed=7))
    b = run(tw.nn.dropout(x, 0.5, seed=7))
    np.testing.assert_array_equal(a == 0, b == 0)


def test_dropout_rejects_bad_keep_prob():
    x = tw.constant(np.ones((2, 2)))
    for bad in (0, 0.0, -0.5, 1.5):
        with pytest.raises(_E, match=r"keep_prob must be a scalar float in the range \(0, 1\]"):
            tw.nn.dropout(x, bad)
    with pytest.raises(_E, match=r"range \(0, 1\]"):
        tw.nn.dropout(x, tw.constant(2.0, dtype=tw.float64))
    with pytest.raises(_E, match="keep_prob must be a scalar"):
        tw.nn.dropout(x, tw.constant([0.5, 0.5], dtype=tw.float64))
    with pytest.raises(_E, match="floating-point"):
        tw.nn.dropout(tw.constant([1, 2]), 0.5)


# ---------------------------------------------------------------------------------------
# CheckNumerics
def test_check_numerics_passes_finite_values_and_names_op_and_message():
    x = tw.placeholder(tw.float32, [None])
    y = check_numerics(x, "activations of layer 3", name="guard")
    assert y.shape.as_list() == [None]
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(y, {x: [1.0, 2.0]}), [1.0, 2.0])
        with pytest.raises(_E, match=r"CheckNumerics node 'guard'.*activations of layer 3 : Tensor had NaN values"):
            s.run(y, {x: [1.0, np.nan]})
        with pytest.raises(_E, match=r"'guard'.*Tensor had Inf values"):
            s.run(y, {x: [-np.inf, 2.0]})
        with pytest.raises(_E, match="Inf and NaN"):
            s.run(y, {x: [np.inf, np.nan]})


def test_add_check_numerics_ops_finds_the_first_non_finite_tensor():
    x = tw.placeholder(tw.float64, [2], name="x")
    logx = tw.log(x, name="logx")
    out = tw.reduce_sum(tw.nn.relu(logx), name="out")
    v = tw.Variable(np.zeros(2), name="v")
    tw.assign_add(v, logx, name="update")  # an update op: must not run just because it is checked
    check_all = add_check_numerics_ops()
    assert check_all.type == "NoOp"
    with tw.Session() as s:
        s.run(v.initializer)
        assert s.run([out, check_all], {x: [1.0, 2.0]})[0] == pytest.approx(np.log(2.0))
        with pytest.raises(_E, match=r"logx:0 : Tensor had Inf values"):
            s.run([out, check_all], {x: [0.0, 2.0]})
        np.testing.assert_array_equal(s.run(v), [0.0, 0.0])


def test_composite_wrappers_name_their_result_after_their_scope():
    logits = tw.constant(np.zeros((2, 3)))
    assert tw.nn.sigmoid_cross_entropy_with_logits(labels=np.ones((2, 3)), logits=logits).op.name == "logistic_loss"
    assert tw.nn.softmax_cross_entropy_with_logits(labels=np.ones((2, 3)), logits=logits, name="xe").op.name == "xe"
    assert tw.nn.softmax_cross_entropy_with_logits(labels=np.ones(3), logits=np.zeros(3), name="v").op.name == "v"
    assert tw.nn.dropout(logits, 0.5).op.name == "dropout"
    assert tw.nn.xw_plus_b(logits, np.ones((3, 1)), np.ones(1)).op.name == "xw_plus_b"
