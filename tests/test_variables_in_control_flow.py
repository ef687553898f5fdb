"""Variables created inside a ``tw.while_loop`` body or a ``tw.cond`` branch (issue 12).

A variable exists once per graph: ``tw.Variable``/``tw.get_variable`` called while a loop
body or branch is being built create the variable, its initializer and its snapshot outside
any control flow (TF's ``init_scope``), so ``tw.global_variables_initializer()`` initialises
it and the body or branch reads it (through the usual capture). An initial value that was
built inside the loop or branch is an error that says so.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors

rnn_cell = tw.nn.rnn_cell


# A control-flow bug shows up as a step that never finishes: fail loudly instead of hanging.
pytestmark = pytest.mark.usefixtures("bounded_time")


def outside(op) -> bool:
    return op._control_flow_context is None


def check_outside_control_flow(v):
    """The variable, its initializer (and what it reads) and its snapshot are top-level ops
    with no control inputs from the loop or cond."""
    assert outside(v.op) and outside(v.initializer) and outside(v.value().op), v.name
    for t in v.initializer.inputs:
        assert outside(t.op), t.name
    assert not v.initializer.control_inputs


def test_get_variable_in_while_body_created_once_and_read_every_iteration():
    x0 = tw.placeholder(tw.float32, [2])
    made = []

    def body(i, x):
        with tw.variable_scope("layer"):
            w = tw.get_variable("w", [2], initializer=tw.constant_initializer([1.0, 2.0]))
        made.append(w)
        return i + 1, x + w

    _, y = tw.while_loop(lambda i, x: i < 4, body, [tw.constant(0), x0])
    assert len(made) == 1  # the body is built once
    (w,) = tw.global_variables()
    assert w is made[0] and w.op.name == "layer/w"  # TF1's name: no loop prefix
    assert tw.trainable_variables() == [w]
    check_outside_control_flow(w)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        np.testing.assert_allclose(sess.run(y, {x0: [0.0, 1.0]}), [4.0, 9.0])
        sess.run(w.assign([0.5, -1.0]))  # the next step reads the new value in every iteration
        np.testing.assert_allclose(sess.run(y, {x0: [0.0, 1.0]}), [2.0, -3.0])


def test_variable_and_control_dependencies_in_loop_body():
    """tw.Variable in a body under control dependencies of the body: the initializer waits
    for none of them (it must run once, before the loop)."""
    def body(i, x):
        with tw.control_dependencies([tw.identity(x)]):
            v = tw.Variable(3.0, name="v")
            return i + 1, x * v

    _, y = tw.while_loop(lambda i, x: i < 3, body, [tw.constant(0), tw.constant(1.0)])
    (v,) = tw.global_variables()
    check_outside_control_flow(v)
    assert v.op.name == "while/v"  # tw.Variable keeps the caller's name scope, as in TF1
    with tw.Session() as sess:
        sess.run(v.initializer)
        assert sess.run(y) == pytest.approx(27.0)


def test_get_variable_in_cond_branches_with_reuse():
    p = tw.placeholder(tw.bool, [])
    x = tw.placeholder(tw.float32, [3])

    def true_fn():
        with tw.variable_scope("shared", reuse=tw.AUTO_REUSE):
            return x * tw.get_variable("scale", [], initializer=tw.constant_initializer(2.0))

    def false_fn():
        with tw.variable_scope("shared", reuse=tw.AUTO_REUSE):
            s = tw.get_variable("scale", [])  # the same variable
        with tw.variable_scope("false_only"):
            b = tw.get_variable("bias", [3], initializer=tw.ones_initializer())
        return x / s + b

    y = tw.cond(p, true_fn, false_fn)
    names = sorted(v.op.name for v in tw.global_variables())
    assert names == ["false_only/bias", "shared/scale"]
    for v in tw.global_variables():
        check_outside_control_flow(v)
    with tw.variable_scope("shared", reuse=True):  # reuse after the cond
        assert tw.get_variable("scale", []).op.name == "shared/scale"
    xv = np.array([1.0, 2.0, 4.0], np.float32)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        np.testing.assert_allclose(sess.run(y, {p: True, x: xv}), 2 * xv)
        np.testing.assert_allclose(sess.run(y, {p: False, x: xv}), xv / 2 + 1)


def test_variable_scope_reuse_inside_loop_and_after_it():
    def body(i, h):
        with tw.variable_scope("cell"):
            w = tw.get_variable("w", [2, 2], initializer=tw.constant_initializer(0.5))
        with tw.variable_scope("cell", reuse=True):
            w_again = tw.get_variable("w", [2, 2])
        assert w_again is w
        with tw.variable_scope("cell", reuse=True), pytest.raises(errors.InvalidArgumentError, match="does not exist"):
            tw.get_variable("missing", [2])
        return i + 1, tw.matmul(h, w_again)

    _, y = tw.while_loop(lambda i, h: i < 2, body, [tw.constant(0), tw.ones([1, 2])])
    with tw.variable_scope("cell", reuse=True):
        w = tw.get_variable("w", [2, 2])
    assert [v.op.name for v in tw.global_variables()] == ["cell/w"]
    with pytest.raises(errors.InvalidArgumentError, match="already exists"):
        tw.get_variable("cell/w", [2, 2])
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        np.testing.assert_allclose(sess.run(y), np.ones((1, 2)) @ sess.run(w) @ sess.run(w))


def test_variable_in_cond_inside_while_loop_and_nested_loops():
    def inner_body(j, h):
        v = tw.get_variable("inner_v", [], tw.float64, initializer=tw.constant_initializer(0.5))
        return j + 1, h + v

    def body(i, h):
        h = tw.cond(i < 2, lambda: h + tw.get_variable("cond_v", [], tw.float64,
                                                       initializer=tw.constant_initializer(10.0)),
                    lambda: h)
        _, h = tw.while_loop(lambda j, h: j < 3, inner_body, [tw.constant(0), h])
        return i + 1, h

    _, y = tw.while_loop(lambda i, h: i < 4, body, [tw.constant(0), tw.constant(0.0, tw.float64)])
    assert sorted(v.op.name for v in tw.global_variables()) == ["cond_v", "inner_v"]
    for v in tw.global_variables():
        check_outside_control_flow(v)
    grads = tw.gradients(y, tw.trainable_variables())
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        out, g = sess.run([y, grads])
    assert out == pytest.approx(2 * 10.0 + 4 * 3 * 0.5)
    by_name = dict(zip([v.op.name for v in tw.trainable_variables()], g))
    assert by_name["cond_v"] == pytest.approx(2.0) and by_name["inner_v"] == pytest.approx(12.0)


def test_gradients_wrt_variables_created_in_loop_match_unrolled_and_finite_differences():
    rng = np.random.default_rng(0)
    x = tw.constant(rng.standard_normal((3, 4)))
    w_init, b_init = rng.standard_normal((4, 4)) * 0.5, rng.standard_normal(4) * 0.1

    def step(h):
        with tw.variable_scope("rec", reuse=tw.AUTO_REUSE):
            w = tw.get_variable("w", initializer=tw.constant_initializer(w_init), shape=[4, 4], dtype=tw.float64)
            b = tw.get_variable("b", initializer=tw.constant_initializer(b_init), shape=[4], dtype=tw.float64)
        return tw.tanh(tw.matmul(h, w) + b)

    _, y_loop = tw.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, step(h)), [tw.constant(0), x])
    y_unrolled = step(step(step(x)))  # the same variables, outside any loop
    assert len(tw.global_variables()) == 2
    w, b = tw.trainable_variables()
    loss_l, loss_u = tw.reduce_sum(tw.sin(y_loop)), tw.reduce_sum(tw.sin(y_unrolled))
    g_l, g_u = tw.gradients(loss_l, [w, b]), tw.gradients(loss_u, [w, b])
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        yl, yu, gl, gu = sess.run([y_loop, y_unrolled, g_l, g_u])
        np.testing.assert_allclose(yl, yu, rtol=1e-12)
        for p, q in zip(gl, gu):
            np.testing.assert_allclose(p, q, rtol=1e-10, atol=1e-12)

        # central differences on a few entries of w and b
        eps = 1e-6
        for var, grad, idx in ((w, gl[0], [(0, 1), (3, 2)]), (b, gl[1], [(0,), (3,)])):
            base = sess.run(var)
            for i in idx:
                num = 0.0
                for sign in (1, -1):
                    v = base.copy()
                    v[i] += sign * eps
                    sess.run(var.assign(v))
                    num += sign * sess.run(loss_l) / (2 * eps)
                sess.run(var.assign(base))
                assert grad[i] == pytest.approx(num, rel=1e-6, abs=1e-9)


def test_optimizer_trains_variable_created_in_loop():
    x = tw.constant(np.ones((1, 2), np.float32))

    def body(i, h):
        w = tw.get_variable("w", [2, 2], initializer=tw.constant_initializer(0.1))
        return i + 1, tw.matmul(h, w)

    _, y = tw.while_loop(lambda i, h: i < 2, body, [tw.constant(0), x])
    loss = tw.reduce_sum(tw.square(y - 1.0))
    train = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        first = sess.run(loss)
        for _ in range(20):
            sess.run(train)
        assert sess.run(loss) < 0.1 * first


def test_regularizer_and_partitioned_variable_created_in_loop():
    def body(i, h):
        w = tw.get_variable("pw", [4, 2], tw.float64, initializer=tw.constant_initializer(0.5),
                            regularizer=lambda v: tw.reduce_sum(v * v), partitioner=tw.fixed_size_partitioner(2))
        return i + 1, h + tw.reduce_sum(w)

    _, y = tw.while_loop(lambda i, h: i < 3, body, [tw.constant(0), tw.constant(0.0, tw.float64)])
    assert sorted(v.op.name for v in tw.global_variables()) == ["pw/part_0", "pw/part_1"]
    for v in tw.global_variables():
        check_outside_control_flow(v)
    regs = tw.get_collection(tw.GraphKeys.REGULARIZATION_LOSSES)  # one per shard
    assert len(regs) == 2 and all(outside(r.op) for r in regs)  # usable in a loss built after the loop
    reg = tw.losses.get_regularization_loss()
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert sess.run([y, reg]) == pytest.approx([3 * 8 * 0.5, 8 * 0.25])


def test_initial_value_built_inside_loop_or_branch_is_an_error():
    def run_body(make):
        def body(i, h):
            return i + 1, h + make(h)
        tw.while_loop(lambda i, h: i < 3, body, [tw.constant(0), tw.constant([1.0, 2.0])], name="loop")

    with pytest.raises(errors.InvalidArgumentError,
                       match=r"initial value of variable 'loop/v' is 'loop/Mul:0', which was built inside "
                             r"the body of tw.while_loop 'loop'"):
        run_body(lambda h: tw.Variable(h * 2.0, name="v"))
    with pytest.raises(errors.InvalidArgumentError, match=r"initial value of variable 'loop_1/v' uses 'loop_1/"
                                                          r".*the body of tw.while_loop 'loop_1'.*pass a callable"):
        run_body(lambda h: tw.Variable(lambda: h * 2.0, name="v"))
    with pytest.raises(errors.InvalidArgumentError, match=r"initial value of variable 'gv'.*tw.while_loop 'loop_2'"):
        run_body(lambda h: tw.get_variable("gv", initializer=h * 2.0))
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"initial value of partitioned variable 'pv'.*tw.while_loop 'loop_3'"):
        run_body(lambda h: tw.get_variable("pv", initializer=lambda: h * 2.0,
                                           partitioner=tw.fixed_size_partitioner(2)))
    p = tw.placeholder(tw.bool, [])
    x = tw.constant(1.0)
    with pytest.raises(errors.InvalidArgumentError, match=r"the true branch of tw.cond 'c'"):
        tw.cond(p, lambda: tw.Variable(x + 1.0), lambda: x, name="c")
    assert not [v for v in tw.global_variables() if v.op.name in ("gv", "pv")]

    # a value from outside the loop (or a callable building one there) is fine
    outer = tw.constant([3.0, 4.0])
    made = []
    run_body(lambda h: made.append(tw.Variable(lambda: outer * 2.0, name="ok")) or made[-1])
    run_body(lambda h: made.append(tw.Variable(outer, name="ok")) or made[-1])
    with tw.Session() as sess:
        sess.run([v.initializer for v in made])
        np.testing.assert_allclose(sess.run(made), [[6.0, 8.0], [3.0, 4.0]])


@pytest.mark.parametrize("make", [lambda: rnn_cell.BasicLSTMCell(4),
                                  lambda: rnn_cell.MultiRNNCell([rnn_cell.LSTMCell(4, use_peepholes=True),
                                                                 rnn_cell.GRUCell(3)])],
                         ids=["basic_lstm", "multi_lstm_gru"])
def test_dynamic_rnn_fresh_cell_matches_static_rnn(make):
    """The cell's variables are created on its first call, inside dynamic_rnn's loop: they
    are created outside it, initialised by global_variables_initializer, and static_rnn with
    the same cell (the same weights) gives the same outputs, state and gradients."""
    x = tw.placeholder(tw.float64, [3, 5, 2])
    cell = make()
    outs_d, st_d = tw.nn.dynamic_rnn(cell, x, dtype=tw.float64)
    variables = tw.global_variables()
    assert variables and all(v.op.name.startswith("rnn/") for v in variables)
    assert "rnn/basic_lstm_cell/kernel" in [v.op.name for v in variables] or \
        "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel" in [v.op.name for v in variables]
    for v in variables:
        check_outside_control_flow(v)
    outs_s, st_s = tw.nn.static_rnn(cell, tw.unstack(x, axis=1), dtype=tw.float64)
    assert tw.global_variables() == variables  # static_rnn reused them
    outs_s = tw.stack(outs_s, 1)

    def loss(o, s):
        return tw.reduce_sum(tw.sin(o)) + sum(tw.reduce_sum(tw.square(p)) for p in rnn_cell.flatten(s))

    wrt = [x] + tw.trainable_variables()
    g_d, g_s = tw.gradients(loss(outs_d, st_d), wrt), tw.gradients(loss(outs_s, st_s), wrt)
    xv = np.random.default_rng(1).standard_normal((3, 5, 2))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        od, os_, sd, ss, gd, gs = sess.run([outs_d, outs_s, rnn_cell.flatten(st_d), rnn_cell.flatten(st_s),
                                            g_d, g_s], {x: xv})
    np.testing.assert_allclose(od, os_, rtol=1e-6, atol=1e-9)
    for p, q in zip(sd, ss):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-9)
    for p, q in zip(gd, gs):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-9)


def test_layers_dense_in_loop_body_with_auto_reuse():
    def body(i, h):
        return i + 1, tw.layers.dense(h, 2, activation=tw.tanh, name="d", reuse=tw.AUTO_REUSE)

    _, y = tw.while_loop(lambda i, h: i < 3, body, [tw.constant(0), tw.ones([1, 2], tw.float64)])
    assert sorted(v.op.name for v in tw.global_variables()) == ["d/bias", "d/kernel"]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        k, b = sess.run(tw.trainable_variables()[0]), sess.run(tw.trainable_variables()[1])
        h = np.ones((1, 2))
        for _ in range(3):
            h = np.tanh(h @ k + b)
        np.testing.assert_allclose(sess.run(y), h, rtol=1e-12)
