"""Executor-level control flow (whitepaper 4.4): frames, iterations, dead tensors, and
loops whose body runs on several devices. Graphs are built from the raw primitives here,
so these tests pin down the executor's semantics independently of tw.cond/tw.while_loop."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.framework.graph import apply_op
from tensorweave.testing.fake_device import register_fake_devices


def _loop(n, par=10, body_device=None, invariant_device=None, out_device=None):
    """sum(k * i for i in 1..n) with k = 2 a loop invariant, built from raw primitives:
    returns (n placeholder, sum Exit (maybe moved to out_device), counter Exit)."""
    n_ph = tw.placeholder(tw.int32, [], name="n")
    attrs = {"frame_name": "loop", "parallel_iterations": par}
    ei = apply_op("Enter", [tw.constant(1)], attrs)
    es = apply_op("Enter", [tw.constant(0.0)], attrs)
    with tw.device(invariant_device):
        k = apply_op("Enter", [tw.constant(2.0)], dict(attrs, is_constant=True))
    en = apply_op("Enter", [n_ph], dict(attrs, is_constant=True))
    mi, _ = apply_op("Merge", [[ei, ei]])
    ms, _ = apply_op("Merge", [[es, es]])
    cond = apply_op("LoopCond", [tw.less_equal(mi, en)])
    fi, ti = apply_op("Switch", [mi, cond])
    fs, ts = apply_op("Switch", [ms, cond])
    i, s = tw.identity(ti), tw.identity(ts)
    one = tw.constant(1)
    one.op._add_control_input(i.op)  # a constant inside the loop runs once per iteration
    with tw.device(body_device):
        body = tw.add(s, tw.multiply(tw.cast(i, tw.float32), k))
    ni = apply_op("NextIteration", [tw.add(i, one)])
    ns = apply_op("NextIteration", [body])
    mi.op._inputs = (ei, ni)  # close the back edges, as the while_loop builder does
    ms.op._inputs = (es, ns)
    xi, xs = apply_op("Exit", [fi]), apply_op("Exit", [fs])
    if out_device is not None:
        with tw.device(out_device):
            xs = tw.identity(xs)
    return n_ph, xs, xi


@pytest.mark.parametrize("par", [1, 2, 10])
def test_loop_sums_and_counts(par):
    n, s, i = _loop(10, par=par)
    with tw.Session() as sess:
        assert sess.run([s, i], {n: 10}) == [110.0, 11]
        assert sess.run([s, i], {n: 100}) == [10100.0, 101]
        assert sess.run([s, i], {n: 0}) == [0.0, 1]  # the body never runs


def test_many_tiny_iterations():
    n, s, i = _loop(0)
    with tw.Session() as sess:
        assert sess.run(s, {n: 2000}) == float(2000 * 2001)


def _cond(pred_value_ph, true_device=None):
    """Raw Switch/Merge: x * 3 if pred else x - 1, with a constant in each branch."""
    x = tw.placeholder(tw.float32, [], name="x")
    f, t = apply_op("Switch", [x, pred_value_ph])
    pivot_t, pivot_f = tw.identity(t), tw.identity(f)
    three, minus = tw.constant(3.0), tw.constant(1.0)
    three.op._add_control_input(pivot_t.op)
    minus.op._add_control_input(pivot_f.op)
    with tw.device(true_device):
        yt = tw.multiply(pivot_t, three)
    yf = tw.subtract(pivot_f, minus)
    out, index = apply_op("Merge", [[yf, yt]])
    return x, out, index, yt, yf


def test_switch_merge_take_one_branch_and_deadness_propagates():
    p = tw.placeholder(tw.bool, [], name="p")
    x, out, index, yt, yf = _cond(p)
    with tw.Session() as sess:
        assert sess.run([out, index], {x: 5.0, p: True}) == [15.0, 1]
        assert sess.run([out, index], {x: 5.0, p: False}) == [4.0, 0]
        with pytest.raises(errors.InvalidArgumentError, match="dead"):
            sess.run(yt, {x: 5.0, p: False})  # the untaken branch has no value


def test_untaken_branch_kernels_do_not_run():
    p = tw.placeholder(tw.bool, [], name="p")
    x = tw.placeholder(tw.float32, [None], name="x")
    f, t = apply_op("Switch", [x, p])
    bad = tw.check_numerics(tw.log(t - 10.0), "must not run")  # would fail on the false branch
    out, _ = apply_op("Merge", [[tw.identity(f), bad]])
    with tw.Session() as sess:
        np.testing.assert_allclose(sess.run(out, {x: [1.0], p: False}), [1.0])
        with pytest.raises(errors.InvalidArgumentError, match="must not run"):
            sess.run(out, {x: [1.0], p: True})


def test_loop_in_untaken_branch_is_dead_not_hung():
    """A whole loop behind a false Switch: every Enter is dead, the frame dies, and the Exit
    reports the deadness to the Merge, which takes the other branch."""
    p = tw.placeholder(tw.bool, [], name="p")
    n = tw.placeholder(tw.int32, [], name="n")
    nf, nt = apply_op("Switch", [n, p])
    attrs = {"frame_name": "inner", "parallel_iterations": 10}
    e = apply_op("Enter", [nt], attrs)
    m, _ = apply_op("Merge", [[e, e]])
    cond = apply_op("LoopCond", [tw.greater(m, 0)])
    f, t = apply_op("Switch", [m, cond])
    one = tw.constant(1)
    body = tw.identity(t)
    one.op._add_control_input(body.op)
    nxt = apply_op("NextIteration", [tw.subtract(body, one)])
    m.op._inputs = (e, nxt)
    loop_out = apply_op("Exit", [f])
    out, idx = apply_op("Merge", [[tw.identity(nf), loop_out]])
    with tw.Session() as sess:
        assert sess.run([out, idx], {p: True, n: 7}, options=tw.RunOptions(timeout_in_ms=20000)) == [0, 1]
        assert sess.run([out, idx], {p: False, n: 7}, options=tw.RunOptions(timeout_in_ms=20000)) == [7, 0]


@pytest.fixture
def fake_devices():
    register_fake_devices(count=2)
    yield
    plugins._reset_for_tests()


FAKE0 = "/device:FAKE:0"


@pytest.mark.parametrize("where", ["body", "invariant", "both", "exit"])
def test_loop_whose_body_runs_on_two_devices(fake_devices, where):
    """The partitioner sends the loop predicate to the other device every iteration; that
    partition drives the frame itself. FAKE tensors are wrappers: a missing transfer fails."""
    kw = {"body": dict(body_device=FAKE0), "invariant": dict(invariant_device=FAKE0),
          "both": dict(body_device=FAKE0, invariant_device=FAKE0),
          "exit": dict(body_device=FAKE0, out_device=FAKE0)}[where]
    n, s, i = _loop(10, **kw)
    with tw.Session() as sess:
        placement = sess.placement([s, i], {n: 0})
        assert len(set(placement.values())) >= 2
        opts = tw.RunOptions(timeout_in_ms=20000)
        assert sess.run([s, i], {n: 10}, options=opts) == [110.0, 11]
        assert sess.run([s, i], {n: 0}, options=opts) == [0.0, 1]
        assert sess.run(s, {n: 300}, options=opts) == float(300 * 301)


def test_loop_on_two_devices_with_one_iteration_at_a_time(fake_devices):
    n, s, i = _loop(10, par=1, body_device=FAKE0)
    with tw.Session() as sess:
        assert sess.run([s, i], {n: 50}, options=tw.RunOptions(timeout_in_ms=20000)) == [2550.0, 51]


def test_cond_across_devices(fake_devices):
    p = tw.placeholder(tw.bool, [], name="p")
    x, out, index, _, _ = _cond(p, true_device=FAKE0)
    with tw.Session() as sess:
        assert sess.run(out, {x: 5.0, p: True}, options=tw.RunOptions(timeout_in_ms=20000)) == 15.0
        assert sess.run(out, {x: 5.0, p: False}, options=tw.RunOptions(timeout_in_ms=20000)) == 4.0


def test_failure_inside_a_loop_ends_the_step_cleanly():
    n, s, i = _loop(0)
    g = tw.get_default_graph()
    with g.as_default():
        bad = tw.check_numerics(tw.log(tw.cast(n, tw.float32) - 5.0), "bad n")
    with tw.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match="bad n"):
            sess.run([s, bad], {n: 3}, options=tw.RunOptions(timeout_in_ms=20000))
        assert sess.run(s, {n: 10}) == 110.0  # the session keeps working


def test_endless_loop_is_stopped_by_the_step_timeout():
    i = tw.while_loop(lambda i: i >= 0, lambda i: i + 1, [tw.constant(0)])
    with tw.Session() as sess:
        with pytest.raises(errors.DeadlineExceededError, match="timed out"):
            sess.run(i, options=tw.RunOptions(timeout_in_ms=300))
    cfg = tw.ConfigProto(operation_timeout_in_ms=300)
    with tw.Session(config=cfg) as sess:
        with pytest.raises(errors.DeadlineExceededError):
            sess.run(i)


def test_control_trigger_runs_in_a_dead_branch():
    p = tw.placeholder(tw.bool, [], name="p")
    x = tw.placeholder(tw.float32, [], name="x")
    f, t = apply_op("Switch", [x, p])
    with tw.control_dependencies([tw.identity(t).op]):
        trigger = apply_op("ControlTrigger", [])
    with tw.control_dependencies([trigger]):
        after = tw.identity(x)
    with tw.Session() as sess:
        assert sess.run(after, {x: 2.0, p: False}) == 2.0  # live although its trigger's input is dead


@pytest.mark.parametrize("parallel_iterations", [1, 10])
def test_while_loop_body_on_two_devices_and_its_gradient(fake_devices, parallel_iterations):
    """tw.while_loop with part of the body on another device, and tw.gradients through it."""
    x = tw.placeholder(tw.float32, [3], name="x")
    w = tw.constant(np.array([0.5, -1.0, 2.0], np.float32))

    def body(i, a):
        with tw.device(FAKE0):
            a = a * 0.9 + x * w
        return i + 1, a

    _, a = tw.while_loop(lambda i, a: i < 20, body, [tw.constant(0), tw.zeros([3])],
                         parallel_iterations=parallel_iterations)
    loss = tw.reduce_sum(a * a)
    (g,) = tw.gradients(loss, [x])
    xv = np.array([1.0, 2.0, -1.0], np.float32)
    ref_a = np.zeros(3)
    for _ in range(20):
        ref_a = ref_a * 0.9 + xv * np.array([0.5, -1.0, 2.0])
    coef = sum(0.9 ** k for k in range(20))  # a = coef * x * w
    with tw.Session() as sess:
        opts = tw.RunOptions(timeout_in_ms=30000)
        placement = sess.placement([a, g], {x: xv})
        assert "FAKE" in " ".join(placement.values()) and "CPU" in " ".join(placement.values())
        av, gv = sess.run([a, g], {x: xv}, options=opts)
        np.testing.assert_allclose(av, ref_a, rtol=1e-5)
        np.testing.assert_allclose(gv, 2 * ref_a * coef * np.array([0.5, -1.0, 2.0]), rtol=1e-4)


def test_cond_inside_while_on_two_devices(fake_devices):
    def body(i, s):
        with tw.device(FAKE0):
            s = tw.cond(tw.equal(i % 2, 0), lambda: s + tw.cast(i, tw.float32), lambda: s - 1.0)
        return i + 1, s

    _, s = tw.while_loop(lambda i, s: i < 10, body, [tw.constant(0), tw.constant(0.0)])
    with tw.Session() as sess:
        assert sess.run(s, options=tw.RunOptions(timeout_in_ms=30000)) == float(0 + 2 + 4 + 6 + 8 - 5)


def test_nested_loops_on_two_devices(fake_devices):
    def outer(i, total):
        def inner(j, t):
            with tw.device(FAKE0):
                t = t + tw.cast(i * j, tw.float32)
            return j + 1, t
        _, total = tw.while_loop(lambda j, t: j < i, inner, [tw.constant(0), total])
        return i + 1, total

    _, total = tw.while_loop(lambda i, t: i < 6, outer, [tw.constant(0), tw.constant(0.0)])
    expect = sum(i * j for i in range(6) for j in range(i))
    with tw.Session() as sess:
        assert sess.run(total, options=tw.RunOptions(timeout_in_ms=30000)) == float(expect)


def test_a_finished_step_leaves_no_reference_cycles():
    """A step with loops (a while loop and its gradient) leaves nothing for the garbage
    collector: its values are freed when the step returns. (The root frame and its iteration
    referred to each other, and that cycle held every value of the step until the collector
    ran, well into the next step: an LSTM language model's process grew to 3.6 GB.)"""
    import gc

    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 8])
        w = tw.Variable(np.full((8, 8), 0.1, np.float32))
        _, h = tw.while_loop(lambda i, h: i < 5, lambda i, h: (i + 1, tw.tanh(tw.matmul(h, w))), [tw.constant(0), x])
        (dw,) = tw.gradients(tw.reduce_sum(h), [w])
        init = tw.global_variables_initializer()
    feed = {x: np.ones((4, 8), np.float32)}
    with tw.Session(graph=g) as s:
        s.run(init)
        want = s.run(dw, feed)                       # builds and warms the plan
        gc.collect()
        gc.disable()
        try:
            got = s.run(dw, feed)
            assert gc.collect() == 0
        finally:
            gc.enable()
    np.testing.assert_array_equal(got, want)
