"""Compiled while loops (runtime/loops.py): a loop whose frame runs on one device becomes one
node with a flat per-iteration schedule. Each test compares it with the general tagged-token
path (frames.py), which GraphOptions(enable_loop_compilation=False) selects."""

import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.runtime import loops
from tensorweave.runtime.loops import K_MOVE, K_NEXT, K_PRED, LOOP_OP_TYPE, _next_iteration

GENERAL = tw.ConfigProto(graph_options=tw.GraphOptions(enable_loop_compilation=False))


def _loop_facts(sess):
    """(compiled loop nodes, {frame: why it kept the general path}) over the session's plans."""
    compiled, general = [], {}
    for plan in sess._plans.values():
        for part in plan.partitions or [plan.partition]:
            info = part.frame_info
            if info is None:
                continue
            compiled += [n for n in info.nodes if n.op.type == LOOP_OP_TYPE]
            general.update(info.general_loops)
    return compiled, general


def _simple():
    x = tw.placeholder(tw.float32, [None], name="x")
    _, y = tw.while_loop(lambda i, v: i < 50, lambda i, v: (i + 1, v * 1.01 + 0.5), [tw.constant(0), x])
    return x, [y, tw.gradients(tw.reduce_sum(y * y), x)[0]]


def _nested():
    x = tw.placeholder(tw.float32, [None], name="x")

    def outer(i, v):
        _, w = tw.while_loop(lambda j, w: j < i, lambda j, w: (j + 1, tw.sin(w) + w), [0, v])
        return i + 1, w
    _, y = tw.while_loop(lambda i, v: i < 4, outer, [0, x])
    return x, [y, tw.gradients(tw.reduce_sum(y), x)[0]]


def _tensor_array():
    x = tw.placeholder(tw.float32, [None], name="x")
    ta = tw.TensorArray(tw.float32, size=6)

    def body(i, v, ta):
        v = tw.tanh(v * 1.5 + tw.cast(i, tw.float32))
        return i + 1, v, ta.write(i, v)
    _, _, ta = tw.while_loop(lambda i, v, ta: i < 6, body, [0, x, ta])
    out = ta.stack()
    return x, [out, tw.gradients(tw.reduce_sum(out), x)[0]]


def _dynamic_rnn():
    x = tw.placeholder(tw.float32, [None, 7, 3], name="x")
    cell = tw.nn.rnn_cell.BasicLSTMCell(5)
    out, state = tw.nn.dynamic_rnn(cell, x, dtype=tw.float32, sequence_length=tw.constant([7, 4]))
    loss = tw.reduce_sum(out) + tw.reduce_sum(state.h)
    return x, [out, state.c, *tw.gradients(loss, [x, *tw.trainable_variables()])]


def _cond_inside():
    x = tw.placeholder(tw.float32, [None], name="x")
    _, y = tw.while_loop(lambda i, v: i < 9, lambda i, v: (
        i + 1, tw.cond(tw.equal(i % 2, 0), lambda: v * 2.0, lambda: v - 1.0)), [0, x])
    return x, [y, tw.gradients(tw.reduce_sum(y), x)[0]]


def _swap():
    """Loop variables that trade places every iteration: the hand-over must read them all
    before it writes any."""
    x = tw.placeholder(tw.float32, [None], name="x")
    _, a, b = tw.while_loop(lambda i, a, b: i < 5, lambda i, a, b: (i + 1, b, a + 1.0), [0, x, x * 2.0])
    return x, [a, b, tw.gradients(tw.reduce_sum(a * b), x)[0]]


GRAPHS = {"simple": (_simple, (2,)), "nested": (_nested, (3,)), "tensor_array": (_tensor_array, (4,)),
          "dynamic_rnn": (_dynamic_rnn, (2, 7, 3)), "cond_inside": (_cond_inside, (3,)), "swap": (_swap, (3,))}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_compiled_loop_gives_the_general_path_values_bit_for_bit(name):
    build, shape = GRAPHS[name]
    x0 = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    results = []
    for config in (None, GENERAL):
        g = tw.Graph()
        with g.as_default():
            tw.set_random_seed(1)
            x, fetches = build()
            init = tw.global_variables_initializer()
        with tw.Session(graph=g, config=config) as sess:
            sess.run(init)
            results.append(sess.run(fetches, {x: x0}))
            compiled, general = _loop_facts(sess)
            if config is None and name == "cond_inside":
                # A cond inside the body needs dead tensors: the loop keeps the general path,
                # saying why; the gradient loop has the same cond and stays general too.
                assert compiled == [] and general, general
                assert any("conditional inside the loop" in why for why in general.values()), general
            elif config is None:
                assert compiled and general == {}, general
            else:
                assert compiled == [] and general == {}
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_the_per_iteration_schedule_is_the_body_and_nothing_else():
    """The 1000-iteration benchmark loop: each iteration is its predicate, one test, the body's
    kernels and the hand-over to the next iteration: no Merge/Switch/Enter/Exit routing."""
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [4])
        _, y = tw.while_loop(lambda i, v: i < 1000, lambda i, v: (i + 1, v * 1.0001 + 0.5), [tw.constant(0), x])
    with tw.Session(graph=g) as sess:
        out = sess.run(y, {x: np.ones(4, np.float32)})
        (node,), _ = _loop_facts(sess)
    ref = np.ones(4, np.float32)
    for _ in range(1000):
        ref = ref * np.float32(1.0001) + np.float32(0.5)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    kinds = [s[3] for s in node.loop.steps]
    assert kinds.count(K_PRED) == 1 and kinds[-1] == K_MOVE  # plain copies: no variable is swapped
    types = [s[5].op.type for s in node.loop.steps if s[5] is not None and not isinstance(s[5], tuple)]
    assert not {"Merge", "Switch", "Enter", "Exit", "NextIteration", "LoopCond"} & set(types), types
    assert len(node.loop.steps) <= 14, types


def test_loop_variables_that_swap_are_read_before_they_are_written():
    g = tw.Graph()
    with g.as_default():
        x, fetches = _swap()
    with tw.Session(graph=g) as sess:
        a, b, _ = sess.run(fetches, {x: np.array([1.0, 2.0, 3.0], np.float32)})
        compiled, _ = _loop_facts(sess)
    # The gradient loop's two accumulated gradients trade places as a and b do: read first.
    backward = next(n for n in compiled if n.op.name.startswith("gradients"))
    assert backward.loop.steps[-1][3] == K_NEXT
    assert _next_iteration([7, 3], [3, 5])[3] == K_NEXT  # 3 is read after it is written
    assert _next_iteration([3, 7, 9], [3, 5, 6])[3:6:2] == (K_MOVE, ((7, 5), (9, 6)))
    ra, rb = np.array([1.0, 2.0, 3.0], np.float32), np.array([2.0, 4.0, 6.0], np.float32)
    for _ in range(5):
        ra, rb = rb, ra + np.float32(1.0)
    np.testing.assert_array_equal(a, ra)
    np.testing.assert_array_equal(b, rb)


def test_a_traced_step_records_every_iteration_of_a_compiled_loop():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [2])
        _, y = tw.while_loop(lambda i, v: i < 7, lambda i, v: (i + 1, tw.sin(v)), [0, x], name="w")
    with tw.Session(graph=g) as sess:
        md = tw.RunMetadata()
        sess.run(y, {x: np.ones(2, np.float32)}, options=tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE),
                 run_metadata=md)
        assert _loop_facts(sess)[0]
    sins = [ns for d in md.step_stats.dev_stats for ns in d.node_stats if ns.node_name == "w/Sin"]
    assert len(sins) == 7
    less = [ns for d in md.step_stats.dev_stats for ns in d.node_stats if ns.node_name == "w/Less"]
    assert len(less) == 8  # the predicate also runs in the last iteration, as in TF


def test_a_kernel_failing_inside_a_compiled_loop_names_its_node_and_the_session_goes_on():
    g = tw.Graph()
    with g.as_default():
        n = tw.placeholder(tw.int32, [])
        x = tw.placeholder(tw.float32, [None])
        # iteration i reshapes 6 elements to [2 * max(i - 2, 1), -1]: fails at i = 4 ([4, -1])
        _, y = tw.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tw.reshape(
            tw.reshape(v, tw.stack([tw.maximum(i - 2, 1) * 2, -1])), [-1]) * 1.0), [0, x], name="loop")
    with tw.Session(graph=g) as sess:
        ones = np.ones(6, np.float32)
        np.testing.assert_array_equal(sess.run(y, {x: ones, n: 3}), ones)
        assert _loop_facts(sess)[0]
        with pytest.raises(errors.InvalidArgumentError, match=r"loop/Reshape"):
            sess.run(y, {x: ones, n: 10})
        np.testing.assert_array_equal(sess.run(y, {x: ones, n: 2}), ones)


def test_closing_the_session_stops_an_endless_compiled_loop():
    g = tw.Graph()
    with g.as_default():
        _, y = tw.while_loop(lambda i, v: i >= 0, lambda i, v: (i * 0 + 1, v + 1.0), [0, 0.0])
    sess = tw.Session(graph=g)

    def running():
        deadline = time.monotonic() + 30
        while not sess._active_steps and time.monotonic() < deadline:
            time.sleep(0.001)  # polls for the step to be running, with a deadline
        return bool(sess._active_steps)
    caught = _close_while_it_runs(sess, y, running)
    assert isinstance(caught, errors.CancelledError | errors.FailedPreconditionError), caught


def _close_while_it_runs(sess, fetch, running):
    """Run ``fetch`` on a thread, close ``sess`` once ``running()`` says the step runs; the
    error the run raised (it must end, and raise)."""
    caught = []

    def run():
        try:
            sess.run(fetch)
        except errors.OpError as e:
            caught.append(e)
    t = threading.Thread(target=run)
    t.start()
    try:
        assert running(), "the step did not start"
    finally:
        sess.close()
        t.join(timeout=30)
    assert not t.is_alive(), "the loop kept running after Session.close()"
    assert caught, "the run ended without an error"
    return caught[0]


def test_a_dead_loop_in_an_untaken_branch_does_not_run():
    g = tw.Graph()
    with g.as_default():
        p = tw.placeholder(tw.bool, [])
        x = tw.placeholder(tw.float32, [2])
        z = tw.cond(p, lambda: tw.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v + 1.0), [0, x])[1],
                    lambda: x * 2.0)
    with tw.Session(graph=g) as sess:
        ones = np.ones(2, np.float32)
        np.testing.assert_array_equal(sess.run(z, {x: ones, p: False}), [2.0, 2.0])
        np.testing.assert_array_equal(sess.run(z, {x: ones, p: True}), [4.0, 4.0])
        assert _loop_facts(sess)[0]


def _two_layers():
    """A loop in two stages: layer b reads layer a of the same iteration; nothing of a reads b."""
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    wa = tw.Variable(np.random.default_rng(1).uniform(-1, 1, (3, 3)).astype(np.float32))
    wb = tw.Variable(np.random.default_rng(2).uniform(-1, 1, (3, 3)).astype(np.float32))
    ta = tw.TensorArray(tw.float32, size=7)

    def body(i, a, b, ta):
        a = tw.tanh(tw.matmul(a, wa) + tw.cast(i, tw.float32) * 0.1)
        b = tw.sigmoid(tw.matmul(a, wb) + b)
        return i + 1, a, b, ta.write(i, b)
    _, a, b, ta = tw.while_loop(lambda i, a, b, ta: i < 7, body, [0, x, x * 0.5, ta])
    loss = tw.reduce_sum(ta.stack()) + tw.reduce_sum(a * b)
    return x, [a, b, loss, *tw.gradients(loss, [x, wa, wb])]


def _stage_facts(sess):
    compiled, _ = _loop_facts(sess)
    return [n.loop.stages for n in compiled]


def test_a_loop_in_two_stages_gives_the_one_stage_values_bit_for_bit(monkeypatch):
    x0 = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
    results, staged = [], []
    for min_flops in (float("inf"), 0.0):
        monkeypatch.setattr(loops, "STAGE_MIN_US", min_flops)
        g = tw.Graph()
        with g.as_default():
            x, fetches = _two_layers()
            init = tw.global_variables_initializer()
        with tw.Session(graph=g) as sess:
            sess.run(init)
            results.append([sess.run(fetches, {x: x0}) for _ in range(3)])
            staged.append(_stage_facts(sess))
    assert all(st is None for st in staged[0])
    forward, backward = staged[1]
    assert forward is not None and backward is not None
    # the forward loop's second stage: layer b and the TensorArray write, not the counter
    side = {n.op.type for n in forward.side_nodes}
    assert {"Sigmoid", "TensorArrayWriteV3"} <= side and "Tanh" not in side, side
    for one, two in zip(*results):
        for u, v in zip(one, two):
            np.testing.assert_array_equal(u, v)


def test_a_second_stage_error_names_its_node_and_the_session_goes_on(monkeypatch):
    monkeypatch.setattr(loops, "STAGE_MIN_US", 0.0)
    g = tw.Graph()
    with g.as_default():
        table = tw.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
        n = tw.placeholder(tw.int32, [])

        def body(i, a, b):
            a = a * 1.5 + 1.0
            b = b + tw.gather(table, tw.reshape(i, [1]), name="bad_gather")  # row 4 does not exist
            return i + 1, a, b
        _, a, b = tw.while_loop(lambda i, a, b: i < n, body, [0, tw.ones([1, 3]), tw.zeros([1, 3])])
    with tw.Session(graph=g) as sess:
        with pytest.raises(errors.InvalidArgumentError, match="bad_gather"):
            sess.run([a, b], {n: 9})
        (stages,) = _stage_facts(sess)
        assert stages is not None and any(m.op.name.endswith("bad_gather") for m in stages.side_nodes)
        got_a, got_b = sess.run([a, b], {n: 4})
    np.testing.assert_array_equal(got_b, np.arange(12, dtype=np.float32).reshape(4, 3).sum(0, keepdims=True))
    ref = np.ones((1, 3), np.float32)
    for _ in range(4):
        ref = ref * np.float32(1.5) + np.float32(1.0)
    np.testing.assert_array_equal(got_a, ref)


def test_closing_the_session_stops_an_endless_loop_in_two_stages(monkeypatch):
    monkeypatch.setattr(loops, "STAGE_MIN_US", 0.0)
    g = tw.Graph()
    with g.as_default():
        _, _, y = tw.while_loop(lambda i, a, b: i >= 0, lambda i, a, b: (i * 0 + 1, a + 1.0, b + a * 2.0),
                                [0, 0.0, 0.0])
    sess = tw.Session(graph=g)
    handing_over = threading.Event()
    put = loops._SideStage.put

    def counted_put(self, *args):
        handing_over.set()
        return put(self, *args)
    monkeypatch.setattr(loops._SideStage, "put", counted_put)
    caught = _close_while_it_runs(sess, y, lambda: handing_over.wait(30))  # in its two stages
    assert isinstance(caught, errors.CancelledError), caught


def test_gradient_sums_over_iterations_add_in_place_from_the_second_iteration():
    """The backward loop's sums of the weights' gradients are K_ACC steps (K_ACC_MM where
    the addend is a product, on a device that adds products into their output): the first
    iteration adds into a new array (the initial zeros may be shared), later ones into that
    array. Step after step the values stay the general path's, bit for bit (products this
    small are not the device's to accumulate: the product, then the addition)."""
    x0 = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
    results = []
    for config in (GENERAL, None):
        g = tw.Graph()
        with g.as_default():
            x, fetches = _two_layers()
            init = tw.global_variables_initializer()
        with tw.Session(graph=g, config=config) as sess:
            sess.run(init)
            results.append([sess.run(fetches, {x: x0}) for _ in range(3)])
            compiled, _ = _loop_facts(sess)
    backward = next(n for n in compiled if n.op.name.startswith("gradients"))
    accumulations = [s for s in backward.loop.steps if s[3] in (loops.K_ACC, loops.K_ACC_MM)]
    assert len(accumulations) >= 2, [s[5].op.name for s in backward.loop.steps if s[5] is not None]
    for general, compiled_run in zip(*results):
        for u, v in zip(general, compiled_run):
            np.testing.assert_array_equal(u, v)


def test_a_product_summed_over_iterations_is_added_into_the_sum_by_the_device(monkeypatch):
    """A gradient sum over iterations of a MatMul read by nothing else is one K_ACC_MM step:
    the first iteration computes the product and adds it into a new array, later ones hand
    (sum, a, b) to ``Device.accumulate_product`` with the MatMul's transposes applied; where
    the device takes none, the product is added in place. Values: those of the product and
    the addition, against float64."""
    calls = []

    def accumulate(self, acc, a, b):
        calls.append((acc.shape, a.shape, b.shape, a.flags.c_contiguous))
        if len(calls) % 2:
            return False  # every other call: the device takes none
        np.add(acc, a @ b, out=acc)
        return True
    rng = np.random.default_rng(4)
    x0, w0 = rng.uniform(-1, 1, (5, 6)).astype(np.float32), rng.uniform(-1, 1, (6, 7)).astype(np.float32)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 6])
        w = tw.Variable(w0)
        _, total = tw.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s + tw.reduce_sum(tw.tanh(tw.matmul(x, w)))),
                                 [tw.constant(0), tw.constant(0.0)])
        (dw,) = tw.gradients(total, [w])
    with tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0})) as sess:
        monkeypatch.setattr(type(sess.devices[0]), "accumulate_product", accumulate)
        sess.run(w.initializer)
        got = sess.run(dw, {x: x0})
        compiled, _ = _loop_facts(sess)
    backward = next(n for n in compiled if n.op.name.startswith("gradients"))
    assert [s for s in backward.loop.steps if s[3] == loops.K_ACC_MM]
    # iterations 2..4 asked the device; x's transpose comes as a view (transpose_a)
    assert calls == [((6, 7), (6, 5), (5, 7), False)] * 3
    want = 4 * x0.T.astype(np.float64) @ (1 - np.tanh(x0.astype(np.float64) @ w0) ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
