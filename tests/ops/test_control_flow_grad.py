"""Gradients through tw.cond and tw.while_loop, checked against central finite differences
(float64) with tensorweave.testing.gradient_checker, plus the structure TF1's scheme needs
(forward counter, stacks, backward loop)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.testing.gradient_checker import check_gradients

# A control-flow bug shows up as a step that never finishes: fail loudly instead of hanging.
pytestmark = pytest.mark.usefixtures("bounded_time")


def rng(seed=0):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------------------
# cond
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_gradient_only_from_the_taken_branch(sign):
    def fn(x, y):
        return tw.cond(tw.reduce_sum(x) * sign > 0, lambda: tw.sin(x) * y, lambda: tw.square(y) + x)
    check_gradients(fn, [rng().uniform(0.2, 1.0, (3,)), rng(1).standard_normal((3,))])


def test_cond_gradient_values_and_unused_branch_input():
    x = tw.placeholder(tw.float64, [])
    y = tw.placeholder(tw.float64, [])
    out = tw.cond(x > 0, lambda: x * 3.0, lambda: y * y)
    gx, gy = tw.gradients(out, [x, y])
    with tw.Session() as sess:
        assert sess.run([gx, gy], {x: 2.0, y: 5.0}) == [3.0, 0.0]
        assert sess.run([gx, gy], {x: -2.0, y: 5.0}) == [0.0, 10.0]


def test_nested_cond_gradient():
    def fn(x):
        def inner():
            return tw.cond(x[1] > 0, lambda: x * x, lambda: tw.exp(x))
        return tw.cond(x[0] > 0, inner, lambda: x * 2.0)
    for v in ([0.5, 0.3], [0.5, -0.3], [-0.5, 0.3]):
        check_gradients(fn, [np.array(v)])


def test_cond_gradient_with_several_outputs():
    def fn(x):
        a, b = tw.cond(tw.reduce_sum(x) > 0, lambda: (x * x, tw.sin(x)), lambda: (x, x * 3.0))
        return a + b * 2.0
    check_gradients(fn, [np.array([0.4, 0.9])])
    check_gradients(fn, [np.array([-0.4, -0.9])])


# ----------------------------------------------------------------------------------------
# while
def test_while_gradient_of_power():
    # x ** 3 by a loop: d/dx = 3 x ** 2
    def fn(x):
        return tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x), [0, tw.ones_like(x)])[1]
    check_gradients(fn, [rng().uniform(0.5, 2.0, (4,))])


def test_while_gradient_with_run_time_iteration_count():
    x = tw.placeholder(tw.float64, [2])
    n = tw.placeholder(tw.int32, [])
    out = tw.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, tw.sin(a) + x), [0, x])[1]
    (g,) = tw.gradients(tw.reduce_sum(out), [x])
    xv = np.array([0.3, -0.7])
    with tw.Session() as sess:
        for steps in (0, 1, 4):
            def f(v, steps=steps):
                a = v.copy()
                for _ in range(steps):
                    a = np.sin(a) + v
                return a.sum()
            num = np.array([(f(xv + e) - f(xv - e)) / 2e-6 for e in np.eye(2) * 1e-6])
            np.testing.assert_allclose(sess.run(g, {x: xv, n: steps}), num, rtol=1e-6)


def test_while_gradient_of_loop_invariant_and_initial_value():
    def fn(x, w):
        return tw.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, tw.tanh(a * w) + w), [0, x])[1]
    check_gradients(fn, [rng().standard_normal((3,)), rng(1).standard_normal((3,))])


def test_while_gradient_with_matmul_and_several_loop_vars():
    def fn(x, w):
        def body(i, h, s):
            h2 = tw.tanh(tw.matmul(h, w))
            return i + 1, h2, s + tw.reduce_sum(h2 * h2)
        _, h, s = tw.while_loop(lambda i, h, s: i < 3, body, [0, x, tw.constant(0.0, tw.float64)])
        return tw.reduce_sum(h) + s
    check_gradients(fn, [rng().standard_normal((2, 3)) * 0.5, rng(1).standard_normal((3, 3)) * 0.5])


def test_while_gradient_with_unused_and_independent_loop_vars():
    def fn(x):
        # b's next value does not depend on b; c is never used by the ys.
        _, a, b, c = tw.while_loop(lambda i, a, b, c: i < 3,
                                   lambda i, a, b, c: (i + 1, a * x, a + x, c * 2.0),
                                   [0, x, x, x])
        return a + b
    check_gradients(fn, [np.array([0.7, 1.3])])


def test_cond_inside_while_gradient():
    def fn(x):
        def body(i, a):
            a2 = tw.cond(tw.equal(tw.mod(i, 2), 0), lambda: a * x, lambda: tw.sin(a) + x)
            return i + 1, a2
        return tw.while_loop(lambda i, a: i < 5, body, [0, x])[1]
    check_gradients(fn, [np.array([0.4, -0.8, 1.1])])


def test_cond_inside_while_with_data_dependent_pred():
    def fn(x):
        def body(i, a):
            return i + 1, tw.cond(tw.reduce_sum(a) > 1.0, lambda: a * 0.5, lambda: a * x + 0.3)
        return tw.while_loop(lambda i, a: i < 6, body, [0, x])[1]
    check_gradients(fn, [np.array([0.9, 1.2])])


def test_nested_while_gradient():
    def fn(x, w):
        def outer(i, a):
            _, b = tw.while_loop(lambda j, b: j < i + 1, lambda j, b: (j + 1, tw.sin(b) * w), [0, a])
            return i + 1, b + a
        return tw.while_loop(lambda i, a: i < 3, outer, [0, x])[1]
    check_gradients(fn, [np.array([0.3, 0.6]), np.array([0.9, 1.1])])


def test_while_inside_cond_gradient():
    def fn(x):
        def looping():
            return tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x), [0, x])[1]
        return tw.cond(tw.reduce_sum(x) > 0, looping, lambda: tw.exp(x))
    check_gradients(fn, [np.array([0.5, 0.8])])
    check_gradients(fn, [np.array([-0.5, -0.8])])


@pytest.mark.parametrize("parallel", [1, 10])
def test_while_gradient_with_parallel_iterations(parallel):
    def fn(x):
        def body(i, a):
            return i + 1, a + tw.sin(x * tw.cast(i, tw.float64)) * tw.cos(a)
        return tw.while_loop(lambda i, a: i < 8, body, [0, x], parallel_iterations=parallel)[1]
    check_gradients(fn, [np.array([0.2, 0.5, 0.9])])


def test_while_gradient_with_unknown_shapes():
    def fn(x):
        h = tw.placeholder_with_default(x, [None])
        return tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * h), [0, h])[1]
    check_gradients(fn, [np.array([0.5, 1.5, -0.4])])


def test_while_gradient_with_maximum_iterations():
    def fn(x):
        return tw.while_loop(lambda a: tw.reduce_sum(a) < 100.0, lambda a: a * x, [x], maximum_iterations=3)
    check_gradients(fn, [np.array([1.5, 2.0])])


def test_gradient_through_loop_builds_stacks_and_a_backward_loop():
    with tw.Graph().as_default() as g:
        x = tw.placeholder(tw.float64, [])
        out = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * a), [0, x])[1]
        before = {op.type for op in g.get_operations()}
        tw.gradients(out, x)
        types = [op.type for op in g.get_operations()]
        assert "StackV2" not in before
        assert {"StackV2", "StackPushV2", "StackPopV2"} <= set(types)
        assert types.count("LoopCond") == 2  # the forward loop and the backward loop
        with tw.Session() as sess:
            assert sess.run(out, {x: 1.1}) == pytest.approx(1.1 ** 8)


@pytest.mark.parametrize("op", ["mul", "div", "matmul", "batch_matmul"])
def test_a_loop_value_read_only_by_an_unwanted_gradient_is_not_kept(op):
    """In ``a * c`` (c from outside the loop) only c's gradient reads a. Asked for x's
    gradient alone, tw.gradients does not build c's (``Operation.skip_input_indices``), so a
    is not pushed on a stack every iteration; asked for c's too, it is."""
    step = {"mul": lambda a, c: a * c, "div": lambda a, c: a / c, "matmul": lambda a, c: tw.matmul(a, c),
            "batch_matmul": lambda a, c: tw.reshape(tw.matmul(tw.reshape(a, [1, 1, 3]), c), [1, 3])}[op]
    x0 = np.array([[0.5, -1.2, 0.7]])
    c0 = np.array([[1.1, 0.2, -0.3], [0.4, 0.9, 0.1], [-0.2, 0.3, 1.2]]) if "matmul" in op else np.array(1.3)
    if op == "batch_matmul":
        c0 = c0[None]  # [1, 3, 3]: a rank-3 product is a BatchMatMul

    def fn(x, c):
        return tw.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, step(a, c) + 0.5), [0, x])[1]
    with tw.Graph().as_default() as g:
        x = tw.placeholder(tw.float64, [1, 3])
        c = tw.placeholder(tw.float64, c0.shape)
        out = tw.reduce_sum(fn(x, c))
        (dx,) = tw.gradients(out, x)
        assert "StackPushV2" not in {o.type for o in g.get_operations()}
        both = tw.gradients(out, [x, c])
        assert "StackPushV2" in {o.type for o in g.get_operations()}
        with tw.Session() as sess:
            a, b = sess.run([dx, both[0]], {x: x0, c: c0})
    np.testing.assert_allclose(a, b, rtol=1e-12)
    check_gradients(fn, [x0, c0])


def test_two_gradient_calls_on_one_loop():
    with tw.Graph().as_default():
        x = tw.placeholder(tw.float64, [])
        out = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x), [0, x])[1]
        (g1,) = tw.gradients(out, x)
        (g2,) = tw.gradients(out * 2.0, x)
        with tw.Session() as sess:
            assert sess.run([g1, g2], {x: 2.0}) == [32.0, 64.0]


def test_training_variable_through_a_loop():
    with tw.Graph().as_default():
        w = tw.Variable(0.5, dtype=tw.float64)
        target = 2.0
        out = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * w), [0, tw.constant(1.0, tw.float64)])[1]
        loss = tw.square(out - target)
        train = tw.train.GradientDescentOptimizer(0.02).minimize(loss)
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            for _ in range(200):
                sess.run(train)
            assert sess.run(out) == pytest.approx(target, rel=1e-3)


def test_back_prop_false_gives_no_gradient():
    with tw.Graph().as_default():
        x = tw.placeholder(tw.float64, [])
        out = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x), [0, x], back_prop=False)[1]
        (g,) = tw.gradients(out, x)
        assert g is None


def test_second_order_through_loop_is_refused():
    with tw.Graph().as_default():
        x = tw.placeholder(tw.float64, [])
        out = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x), [0, x])[1]
        (g,) = tw.gradients(out, x)
        with pytest.raises(errors.UnimplementedError, match="second-order"):
            tw.gradients(g, x)


def test_cond_in_while_passing_a_loop_value_through():
    # One branch returns the loop variable itself: its zeros on the other side are guarded.
    def fn(x):
        def body(i, a):
            return i + 1, tw.cond(tw.reduce_sum(a) > 2.0, lambda: a, lambda: a * x)
        return tw.while_loop(lambda i, a: i < 5, body, [0, x])[1]
    check_gradients(fn, [np.array([0.9, 1.2])])


def test_cond_in_while_with_unknown_shapes():
    # Zeros for the untaken side need the shape at run time: it is kept on a stack too.
    def fn(x):
        h = tw.placeholder_with_default(x, [None])

        def body(i, a):
            return i + 1, tw.cond(tw.reduce_sum(a) > 2.0, lambda: a, lambda: a * h)
        return tw.while_loop(lambda i, a: i < 5, body, [0, h])[1]
    check_gradients(fn, [np.array([0.9, 1.2])])


def test_multi_output_op_in_loop_with_unknown_shapes():
    def fn(x):
        h = tw.placeholder_with_default(x, [None])

        def body(i, a):
            p, q = tw.split(a, 2)
            return i + 1, tw.concat([q * p, p], 0)
        return tw.while_loop(lambda i, a: i < 3, body, [0, h])[1]
    check_gradients(fn, [np.array([0.9, 1.2])])


def test_cond_in_nested_while_with_outer_invariant():
    def fn(x, w):
        def outer(i, a):
            def inner(j, b):
                return j + 1, tw.cond(j > 0, lambda: b * w, lambda: tw.sin(b))
            return i + 1, tw.while_loop(lambda j, b: j < 2, inner, [0, a])[1] + a
        return tw.while_loop(lambda i, a: i < 2, outer, [0, x])[1]
    check_gradients(fn, [np.array([0.3, 0.6]), np.array([0.9, 1.1])])


def test_input_used_by_the_loop_predicate_too():
    def fn(x):
        return tw.while_loop(lambda i, a: tw.reduce_sum(a) < tw.reduce_sum(x) * 10,
                             lambda i, a: (i + 1, a * 1.5 + x), [0, x])[1]
    check_gradients(fn, [np.array([0.9, 1.2])])
