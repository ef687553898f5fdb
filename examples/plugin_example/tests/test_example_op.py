"""The example op: values, shapes and errors at construction, gradient, registration."""

import numpy as np
import pytest
from tw_example_op import scaled_softsign

import tensorweave as tw
from tensorweave import plugins
from tensorweave.testing.gradient_checker import check_gradients


def reference(x, scale):
    return scale * x / (1 + np.abs(x))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_values_match_numpy(dtype):
    xv = np.linspace(-4, 4, 24).reshape(2, 3, 4).astype(dtype)
    x = tw.placeholder(tw.as_dtype(dtype), [None, 3, 4])
    y = scaled_softsign(x, scale=2.5)
    with tw.Session() as sess:
        out = sess.run(y, {x: xv})
    assert out.dtype == dtype and out.shape == (2, 3, 4)
    np.testing.assert_allclose(out, reference(xv.astype(np.float64), 2.5), rtol=2e-3 if dtype == np.float16 else 1e-6)


def test_python_values_and_default_scale():
    with tw.Session() as sess:
        out = sess.run(scaled_softsign([0.0, 1.0, -3.0]))
    np.testing.assert_allclose(out, [0.0, 0.5, -0.75])


def test_static_shape_is_inferred_at_construction():
    x = tw.placeholder(tw.float32, [None, 7])
    y = scaled_softsign(x, scale=3.0)
    assert y.shape.as_list() == [None, 7] and y.dtype == tw.float32
    assert y.op.type == "ScaledSoftsign" and y.op.get_attr("scale") == 3.0


def test_bad_input_fails_at_construction_naming_the_node():
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"ScaledSoftsign node 'squash'.*scale must not be 0"):
        scaled_softsign(tw.constant([1.0]), scale=0.0, name="squash")
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"int32 is not allowed"):
        scaled_softsign(tw.constant([1, 2]))


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    xv = rng.uniform(0.2, 3.0, (3, 4)) * rng.choice([-1, 1], (3, 4))  # away from the kink at 0
    check_gradients(lambda x: scaled_softsign(x, scale=1.7), [xv])
    check_gradients(lambda x: scaled_softsign(x * x, scale=-0.5), [xv])


def test_gradient_flows_through_a_small_model():
    x = tw.placeholder(tw.float32, [None, 2])
    w = tw.Variable(np.ones((2, 1), np.float32))
    loss = tw.reduce_sum(scaled_softsign(tw.matmul(x, w), scale=2.0))
    (g,) = tw.gradients(loss, [w])
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        gv = sess.run(g, {x: [[1.0, 1.0]]})
    np.testing.assert_allclose(gv, [[2.0 / 9.0], [2.0 / 9.0]], rtol=1e-6)   # s / (1 + |2|)^2


def test_the_plugin_is_registered():
    reg = plugins.registry()
    assert "ScaledSoftsign" in reg.ops
    assert reg.kernels.lookup("ScaledSoftsign", "CPU", {"T": tw.float32}) is not None
    info = next(p for p in reg.plugins if p.name == "example_op")
    assert info.status == "loaded" and "tensorweave-example-op" in info.distribution
