"""Gradients of the neural-net ops against float64 central differences
(``check_gradients``), including the convolution and pooling backprops' own gradients."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.ops.nn_ops import check_numerics
from tensorweave.testing.gradient_checker import check_gradients


def rng(seed=0):
    return np.random.default_rng(seed)


def away_from(values, points, margin=0.05, seed=0):
    """Random values at least ``margin`` from each of ``points`` (kinks of the function)."""
    v = values.copy()
    for p in points:
        close = np.abs(v - p) < margin
        v[close] = p + margin * np.where(v[close] >= p, 2, -2)
    return v


def distinct(shape, seed=0):
    """Values whose differences are all >= 0.05: no ties for max pooling to break."""
    n = int(np.prod(shape))
    return (rng(seed).permutation(n) * 0.05 - n * 0.025).reshape(shape)


# ---------------------------------------------------------------------------------------
# activations
def test_activation_gradients():
    x = away_from(rng(1).uniform(-8, 8, (3, 4)), [0.0, 6.0])
    check_gradients(tw.nn.relu, [x])
    check_gradients(tw.nn.relu6, [x])
    check_gradients(tw.nn.elu, [x])
    check_gradients(tw.nn.softplus, [x])


def test_activation_second_derivatives():
    x = away_from(rng(2).uniform(-3, 3, (2, 3)), [0.0])

    def first(act):
        return lambda t: tw.gradients(tw.reduce_sum(act(t) * act(t)), [t])[0]

    for act in (tw.nn.relu, tw.nn.elu, tw.nn.softplus):
        check_gradients(first(act), [x])


# ---------------------------------------------------------------------------------------
# softmax and cross-entropies
def test_softmax_and_log_softmax_gradients():
    x = rng(3).normal(size=(2, 4)) * 2
    check_gradients(tw.nn.softmax, [x])
    check_gradients(tw.nn.log_softmax, [x])
    check_gradients(lambda t: tw.nn.softmax(t, axis=0), [x])


def test_softmax_cross_entropy_gradients():
    r = rng(4)
    logits = r.normal(size=(3, 4))
    labels = np.exp(r.normal(size=(3, 4)))
    labels /= labels.sum(1, keepdims=True)
    check_gradients(lambda lg: tw.nn.softmax_cross_entropy_with_logits(labels=labels, logits=lg), [logits])
    check_gradients(lambda lg, lb: tw.nn.softmax_cross_entropy_with_logits_v2(labels=lb, logits=lg),
                    [logits, labels])
    # the TF1 form stops gradients into labels
    lb = tw.placeholder(tw.float64, [3, 4])
    loss = tw.nn.softmax_cross_entropy_with_logits(labels=lb, logits=logits)
    assert tw.gradients(loss, [lb]) == [None]


def test_cross_entropy_backprop_output_gets_its_own_gradient():
    """Differentiating the op's second output (softmax - labels) too."""
    r = rng(5)
    logits = r.normal(size=(2, 3))
    labels = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])

    def both(lg):
        loss, backprop = apply_op("SoftmaxCrossEntropyWithLogits", [lg, tw.constant(labels)])
        return [loss, backprop]

    check_gradients(both, [logits])

    def sparse_both(lg):
        loss, backprop = apply_op("SparseSoftmaxCrossEntropyWithLogits", [lg, tw.constant([2, 0])])
        return [loss, backprop]

    check_gradients(sparse_both, [logits])


def test_sparse_and_sigmoid_cross_entropy_gradients():
    r = rng(6)
    logits = r.normal(size=(4, 3)) * 2
    labels = np.array([0, 2, 1, 2], np.int64)
    check_gradients(lambda lg: tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=lg), [logits])
    check_gradients(lambda lg: tw.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels.reshape(2, 2), logits=tw.reshape(lg, [2, 2, 3])), [logits])
    z = r.uniform(0, 1, (4, 3))
    x = away_from(r.normal(size=(4, 3)) * 4, [0.0])
    check_gradients(lambda lg: tw.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=lg), [x])


# ---------------------------------------------------------------------------------------
# convolution
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_gradients(stride, padding):
    r = rng(7)
    x, f = r.normal(size=(2, 5, 4, 2)), r.normal(size=(3, 2, 2, 2))
    check_gradients(lambda a, b: tw.nn.conv2d(a, b, [1, stride, stride, 1], padding), [x, f])


def test_conv2d_gradients_dilated_nchw_and_asymmetric_strides():
    r = rng(8)
    x, f = r.normal(size=(1, 6, 5, 2)), r.normal(size=(2, 2, 2, 1))
    check_gradients(lambda a, b: tw.nn.conv2d(a, b, [1, 1, 1, 1], "SAME", dilations=[1, 2, 2, 1]), [x, f])
    check_gradients(lambda a, b: tw.nn.conv2d(a, b, [1, 2, 1, 1], "VALID"), [x, f])
    xn = r.normal(size=(1, 2, 5, 4))
    check_gradients(lambda a, b: tw.nn.conv2d(a, b, [1, 1, 2, 2], "SAME", data_format="NCHW"), [xn, f])
    x5, f5 = r.normal(size=(1, 4, 5, 5)), r.normal(size=(2, 3, 5, 2))  # many channels: strided im2col
    check_gradients(lambda a, b: tw.nn.conv2d(a, b, [1, 2, 1, 1], "SAME", dilations=[1, 1, 2, 1]), [x5, f5])
    x1, f1 = r.normal(size=(1, 4, 4, 1)), r.normal(size=(3, 3, 1, 3))  # more out than in channels: col2im
    check_gradients(lambda a, b: tw.nn.conv2d(a, b, [1, 1, 1, 1], "SAME"), [x1, f1])


@pytest.mark.parametrize("stride, padding", [(2, "SAME"), (1, "VALID")])
def test_conv2d_backprop_gradients(stride, padding):
    """Second order: the backprop ops' own gradients (conv2d_transpose is Conv2DBackpropInput)."""
    r = rng(9)
    x, f = r.normal(size=(1, 4, 4, 2)), r.normal(size=(3, 3, 2, 2))
    s = [1, stride, stride, 1]
    w = r.normal(size=tw.nn.conv2d(x, f, s, padding).shape.as_list())
    tw.reset_default_graph()

    def input_grad(a, b):
        return tw.gradients(tw.reduce_sum(tw.nn.conv2d(a, b, s, padding) * w), [a])[0]

    def filter_grad(a, b):
        return tw.gradients(tw.reduce_sum(tw.nn.conv2d(a, b, s, padding) * w), [b])[0]

    check_gradients(lambda b, dy: tw.nn.conv2d_backprop_input(list(x.shape), b, dy, s, padding), [f, w])
    check_gradients(lambda a, dy: tw.nn.conv2d_backprop_filter(a, list(f.shape), dy, s, padding), [x, w])
    check_gradients(input_grad, [x, f])
    check_gradients(filter_grad, [x, f])


# ---------------------------------------------------------------------------------------
# pooling
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
def test_pool_gradients(stride, padding):
    x = distinct((2, 5, 4, 2), seed=stride)
    k, s = [1, 3, 2, 1], [1, stride, stride, 1]
    check_gradients(lambda a: tw.nn.max_pool(a, k, s, padding), [x])
    check_gradients(lambda a: tw.nn.avg_pool(a, k, s, padding), [x])


def test_pool_gradients_nchw_and_avg_pool_second_order():
    x = distinct((1, 2, 5, 5), seed=3)
    check_gradients(lambda a: tw.nn.max_pool(a, [1, 1, 2, 2], [1, 1, 2, 2], "SAME", data_format="NCHW"), [x])
    check_gradients(lambda a: tw.nn.avg_pool(a, [1, 1, 3, 3], [1, 1, 2, 2], "SAME", data_format="NCHW"), [x])
    g = rng(10).normal(size=(1, 3, 3, 2))
    check_gradients(lambda dy: apply_op("AvgPoolGrad", [tw.constant([1, 5, 5, 2]), dy],
                                        {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}), [g])


def test_max_pool_gradient_goes_to_the_first_maximum_only():
    x = tw.constant(np.array([[5.0, 5.0], [1.0, 5.0]]).reshape(1, 2, 2, 1))
    (g,) = tw.gradients(tw.nn.max_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], "VALID"), [x])
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(g).reshape(2, 2), [[1.0, 0.0], [0.0, 0.0]])


# ---------------------------------------------------------------------------------------
# bias, losses, checks
def test_bias_add_gradients():
    r = rng(11)
    check_gradients(tw.nn.bias_add, [r.normal(size=(2, 3, 4)), r.normal(size=4)])
    check_gradients(lambda v, b: tw.nn.bias_add(v, b, data_format="NCHW"),
                    [r.normal(size=(2, 3, 2, 2)), r.normal(size=3)])
    check_gradients(lambda g: apply_op("BiasAddGrad", [g]), [r.normal(size=(3, 2))])


def test_l2_loss_gradient():
    check_gradients(tw.nn.l2_loss, [rng(12).normal(size=(3, 2))])


def test_check_numerics_gradient_passes_and_checks_the_incoming_gradient():
    x = rng(13).normal(size=(2, 3))
    check_gradients(lambda a: check_numerics(a, "forward"), [x])
    a = tw.placeholder(tw.float64, [2])
    scale = tw.placeholder(tw.float64, [2])
    y = check_numerics(a, "layer 1") * scale
    (g,) = tw.gradients(tw.reduce_sum(y), [a])
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(g, {a: [1.0, 2.0], scale: [3.0, 4.0]}), [3.0, 4.0])
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"CheckNumerics.*detected in gradient\. layer 1 : Tensor had Inf values"):
            s.run(g, {a: [1.0, 2.0], scale: [np.inf, 4.0]})


def test_dropout_gradient_is_the_kept_mask_scaled():
    x = tw.constant(rng(14).normal(size=(20, 10)))
    y = tw.nn.dropout(x, 0.25)
    (g,) = tw.gradients(tw.reduce_sum(y), [x])
    with tw.Session() as s:
        yv, gv = s.run([y, g])  # one step: one mask for both
    np.testing.assert_array_equal(gv, np.where(yv != 0, 4.0, 0.0))


def test_moments_gradients():
    x = rng(15).normal(size=(3, 4))
    check_gradients(lambda t: list(tw.nn.moments(t, [0])), [x])
    check_gradients(lambda t: list(tw.nn.moments(t, [0, 1], keep_dims=True)), [x])
