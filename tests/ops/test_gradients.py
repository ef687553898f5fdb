"""The autodiff engine: paths, aggregation, unconnected inputs, stop_gradient, errors."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.testing.gradient_checker import check_gradients


def test_whitepaper_figure5_gradients(sess):
    b = tw.Variable(tw.zeros([4], dtype=tw.float64) if hasattr(tw, "zeros") else np.zeros(4))
    W = tw.Variable(np.random.default_rng(0).uniform(-1, 1, (3, 4)))
    x = tw.placeholder(tw.float64, [1, 3], name="x")
    C = tw.reduce_sum(tw.nn.relu(tw.matmul(x, W) + b))
    db, dW, dx = tw.gradients(C, [b, W, x])
    sess.run(tw.global_variables_initializer())
    xv = np.array([[0.5, -1.0, 2.0]])
    wv = sess.run(W)
    mask = (xv @ wv > 0).astype(np.float64)
    got_db, got_dw, got_dx = sess.run([db, dW, dx], {x: xv})
    np.testing.assert_allclose(got_db, mask[0])
    np.testing.assert_allclose(got_dw, xv.T @ mask)
    np.testing.assert_allclose(got_dx, mask @ wv.T)


def test_fan_out_gradients_are_summed(sess):
    x = tw.constant(3.0, dtype=tw.float64)
    y = x * x + x  # x is used three times
    (g,) = tw.gradients(y, [x])
    assert sess.run(g) == 7.0
    assert "AddN" in {op.type for op in tw.get_default_graph().get_operations()}


def test_unconnected_xs_get_none_and_stop_gradient_blocks():
    a = tw.constant(1.0)
    b = tw.constant(2.0)
    y = a * 3.0
    assert tw.gradients(y, [a, b])[1] is None
    z = tw.stop_gradient(a) * a
    (g,) = tw.gradients(z, [a])
    with tw.Session() as s:
        assert s.run(g) == 1.0  # only the un-stopped path contributes
    (g2,) = tw.gradients(a * a, [a], stop_gradients=[a])
    with tw.Session() as s:
        assert s.run(g2) == 2.0


def test_a_gradient_function_is_told_which_inputs_need_no_gradient(sess):
    """``op.skip_input_indices`` (TF2's attribute) while the op's gradient function runs: the
    inputs no path from the xs comes through; None before and after."""
    class Probe:
        @plugins.hookimpl
        def tensorweave_register_ops(self, registry):
            registry.op("SkipProbeTestOp", inputs=["a: float32", "b: float32", "c: float32"], outputs=["y: float32"])

        @plugins.hookimpl
        def tensorweave_register_kernels(self, registry):
            registry.register("SkipProbeTestOp", "CPU", lambda a, b, c: a + b + c)

    plugins.register_plugin(Probe(), name="skip-probe-test")
    from tensorweave.framework.graph import apply_op
    seen = []

    @tw.RegisterGradient("SkipProbeTestOp")
    def _grad(op, grad):
        seen.append(op.skip_input_indices)
        return [None if i in op.skip_input_indices else grad for i in range(3)]

    a, b = tw.constant(2.0), tw.constant(3.0)
    y = apply_op("SkipProbeTestOp", [a, b, a * b])
    (ga,) = tw.gradients(y, [a])
    (gb,) = tw.gradients(y, [b])
    assert seen == [(1,), (0,)]  # a*b depends on both: only the other constant is skipped
    assert y.op.skip_input_indices is None
    assert sess.run([ga, gb]) == [1.0 + 3.0, 1.0 + 2.0]


def test_grad_ys_scale_the_result_and_must_match(sess):
    x = tw.constant([1.0, 2.0])
    y = x * 2.0
    (g,) = tw.gradients(y, [x], grad_ys=[tw.constant([10.0, 100.0])])
    np.testing.assert_array_equal(sess.run(g), [20.0, 200.0])
    with pytest.raises(errors.InvalidArgumentError, match=r"grad_ys\[0\] has shape \(3,\).*shape \(2,\)"):
        tw.gradients(y, [x], grad_ys=[tw.constant([1.0, 2.0, 3.0])])


def test_non_float_ys_are_refused():
    i = tw.constant([1, 2])
    with pytest.raises(errors.InvalidArgumentError, match="cannot differentiate tensor 'Mul:0' of dtype int32"):
        tw.gradients(i * 2, [i])


def test_missing_gradient_names_the_op_and_how_to_register():
    class NoGradOp:
        @plugins.hookimpl
        def tensorweave_register_ops(self, registry):
            registry.op("NoGradTestOp", inputs=["x: float32"], outputs=["y: float32"])

        @plugins.hookimpl
        def tensorweave_register_kernels(self, registry):
            registry.register("NoGradTestOp", "CPU", lambda x: x)

    plugins.register_plugin(NoGradOp(), name="nograd-test")
    from tensorweave.framework.graph import apply_op

    x = tw.constant(1.0)
    y = apply_op("NoGradTestOp", [x])
    with pytest.raises(errors.NotFoundError, match=r"no gradient is registered for op type NoGradTestOp.*"
                                                   r"RegisterGradient\(\"NoGradTestOp\"\)"):
        tw.gradients(y, [x])

    @tw.RegisterGradient("NoGradTestOp")
    def _grad(op, grad):
        return [grad * 5.0]

    (g,) = tw.gradients(y, [x])
    with tw.Session() as s:
        assert s.run(g) == 5.0


def test_multi_output_op_unused_outputs_get_zero_gradients():
    class TwoOut:
        @plugins.hookimpl
        def tensorweave_register_ops(self, registry):
            registry.op("TwoOutTestOp", inputs=["x: float64"], outputs=["a: float64", "b: float64"],
                        shape_fn=lambda op: [op.inputs[0].shape] * 2)

            @registry.gradient("TwoOutTestOp")
            def _g(op, ga, gb):
                return [ga * 2.0 + gb * 3.0]

        @plugins.hookimpl
        def tensorweave_register_kernels(self, registry):
            registry.register("TwoOutTestOp", "CPU", lambda x: (2 * x, 3 * x))

    plugins.register_plugin(TwoOut(), name="twoout-test")
    from tensorweave.framework.graph import apply_op

    check_gradients(lambda x: apply_op("TwoOutTestOp", [x])[0], [np.array([1.0, 2.0])])
    check_gradients(lambda x: apply_op("TwoOutTestOp", [x])[1], [np.array([1.0, 2.0])])


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((2, 1), (1, 4)), ((1,), (2, 2)), ((), (3,))])
def test_broadcasting_binary_gradients(shapes):
    rng = np.random.default_rng(0)
    vals = [rng.standard_normal(s) for s in shapes]
    check_gradients(lambda a, b: a * b + a - b, vals)


def test_broadcast_gradient_with_unknown_batch_dimension(sess):
    x = tw.placeholder(tw.float64, [None, 3])
    b = tw.constant(np.zeros((1, 3)))
    y = x + b
    (g,) = tw.gradients(tw.reduce_sum(y * y), [b])
    np.testing.assert_allclose(sess.run(g, {x: np.ones((5, 3))}), np.full((1, 3), 10.0))
