"""Session.run: fetch structures, feeds, pruning, extend, errors, lifecycle."""

import collections
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors


def test_whitepaper_figure1_program_matches_numpy():
    import tensorweave as tf

    rng = np.random.default_rng(0)
    b = tf.Variable(tf.zeros([100]) if hasattr(tf, "zeros") else np.zeros(100, np.float32))
    w_init = rng.uniform(-1, 1, (784, 100)).astype(np.float32)
    W = tf.Variable(w_init)
    x = tf.placeholder(name="x")
    relu = tf.nn.relu(tf.matmul(x, W) + b)
    s = tf.Session()
    s.run(tf.global_variables_initializer())
    for _step in range(10):
        inp = rng.standard_normal((1, 784)).astype(np.float32)
        result = s.run(relu, feed_dict={x: inp})
        np.testing.assert_allclose(result, np.maximum(inp @ w_init + 0, 0), rtol=1e-5, atol=1e-5)
    s.close()


def test_fetch_structures(sess):
    a = tw.constant(1.0, name="a")
    b = tw.constant(2.0, name="b")
    noop = tw.no_op()
    Pair = collections.namedtuple("Pair", "x y")
    out = sess.run({"a": a, "pair": Pair(a, b), "list": [b, "a:0", (a,)], "op": noop})
    assert out["a"] == 1.0
    assert out["pair"] == Pair(1.0, 2.0)
    assert out["list"][0] == 2.0 and out["list"][1] == 1.0 and out["list"][2] == (1.0,)
    assert out["op"] is None
    assert sess.run("b:0") == 2.0
    assert sess.run(noop) is None


def test_scalar_fetches_are_numpy_scalars_and_bytes_as_in_tf1(sess):
    f = tw.constant(1.5)
    i = tw.constant(np.int64(7))
    b = tw.constant(True)
    s = tw.constant(b"ab\x00")
    v = tw.constant([1.0, 2.0])
    p = tw.placeholder(tw.float32, [])
    out = sess.run({"f": f, "i": i, "b": b, "s": s, "v": v, "p": p * 1.0, "fed": p}, {p: 2.5})
    assert type(out["f"]) is np.float32 and out["f"] == 1.5
    assert type(out["i"]) is np.int64 and out["i"] == 7
    assert type(out["b"]) is np.bool_ and out["b"]
    assert type(out["s"]) is bytes and out["s"] == b"ab\x00"
    assert type(out["v"]) is np.ndarray and out["v"].shape == (2,)
    assert type(out["p"]) is np.float32 and out["p"] == 2.5
    assert type(out["fed"]) is np.float32 and out["fed"] == 2.5  # a fed scalar fetched back
    empty = sess.run(tw.zeros([0]))  # rank >= 1 stays an array, even when empty
    assert type(empty) is np.ndarray and empty.shape == (0,)
    assert type(f.eval(session=sess)) is np.float32  # Tensor.eval goes through Session.run
    assert type(sess.make_callable(p, [p])(3.0)) is np.float32


def test_feeds_on_non_placeholders_cut_the_graph(sess):
    counter = tw.Variable(0, name="counter")
    sess.run(counter.initializer)
    bump = tw.assign_add(counter, 1)
    with tw.control_dependencies([bump]):
        upstream = tw.constant(10.0) * 2.0
    downstream = upstream + 1.0
    assert sess.run(downstream, {upstream: 5.0}) == 6.0
    assert sess.run(counter) == 0  # the fed tensor's producer (and its dependency) did not run
    assert sess.run(downstream) == 21.0
    assert sess.run(counter) == 1


def test_pruning_skips_unneeded_stateful_ops(sess):
    v = tw.Variable(0.0, name="v")
    sess.run(tw.global_variables_initializer())
    tw.assign_add(v, 100.0)  # never fetched
    y = tw.constant(3.0) + 1.0
    for _ in range(3):
        assert sess.run(y) == 4.0
    assert sess.run(v) == 0.0


def test_extend_after_runs(sess):
    a = tw.constant(2.0)
    assert sess.run(a * 3.0) == 6.0
    n_plans = len(sess._plans)
    b = a * 4.0  # new nodes after a run: the session sees them
    assert sess.run(b) == 8.0
    assert sess.run([a, b]) == [2.0, 8.0]
    assert n_plans >= 1


def test_plans_are_cached_per_signature(sess):
    x = tw.placeholder(tw.float32, [2])
    y = x * 2.0
    sess.run(y, {x: [1, 2]})
    plan = sess._plans[next(iter(sess._plans))]
    for _ in range(5):
        sess.run(y, {x: [3, 4]})
    assert len(sess._plans) == 1 and next(iter(sess._plans.values())) is plan


def test_feed_errors(sess):
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    i = tw.placeholder(tw.int32, [2], name="i")
    y = x * 2.0
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \(2,\) for tensor 'x:0', which has shape \(\?, 3\)"):
        sess.run(y, {x: np.ones(2)})
    with pytest.raises(errors.InvalidArgumentError, match="dtype float64 for tensor 'i:0' of dtype int32"):
        sess.run(i, {i: np.array([1.5, 2.5])})
    with pytest.raises(errors.InvalidArgumentError, match="dtype <U3"):
        sess.run(y, {x: [["abc"] * 3]})
    with pytest.raises(errors.InvalidArgumentError, match="must feed a value for placeholder tensor 'x:0'"):
        sess.run(y)
    with pytest.raises(errors.NotFoundError, match="no operation named 'nope'"):
        sess.run(y, {"nope:0": 1.0})
    with pytest.raises(errors.InvalidArgumentError, match="is a tw.Tensor"):
        sess.run(y, {x: y})
    # Python ints and float64 arrays are converted to a float32 placeholder's dtype.
    np.testing.assert_array_equal(sess.run(y, {x: [[1, 2, 3]]}), [[2, 4, 6]])
    assert sess.run(y, {x: np.ones((1, 3))}).dtype == np.float32


def test_fetch_errors(sess):
    other = tw.Graph()
    with other.as_default():
        foreign = tw.constant(1.0)
    with pytest.raises(errors.InvalidArgumentError, match="not an element of this graph"):
        sess.run(foreign)
    with pytest.raises(errors.NotFoundError):
        sess.run("missing:0")
    with pytest.raises(errors.InvalidArgumentError, match="fetch argument None"):
        sess.run([None])
    with pytest.raises(errors.InvalidArgumentError, match="cannot interpret"):
        sess.run(42)


def test_closed_session_refuses_to_run():
    s = tw.Session()
    s.close()
    with pytest.raises(errors.FailedPreconditionError, match="closed Session"):
        s.run(tw.constant(1.0))


def test_context_manager_sets_defaults():
    g = tw.Graph()
    with g.as_default():
        c = tw.constant(3.0)
    with tw.Session(graph=g) as s:
        assert tw.get_default_session() is s
        assert tw.get_default_graph() is g
        assert c.eval() == 3.0
    assert tw.get_default_session() is None
    with pytest.raises(errors.InvalidArgumentError, match="no default session"):
        c.eval()


def test_a_failed_run_keeps_updates_made_before_the_failing_node(sess):
    v = tw.Variable(np.float64(0.0), name="v")
    w = tw.Variable(np.float64(7.0), name="w")
    sess.run(tw.global_variables_initializer())
    first = tw.assign_add(v, 1.0)
    with tw.control_dependencies([first]):
        bad = tw.matmul(tw.constant(np.zeros((2, 3))), tw.placeholder(tw.float64, None, name="p"))
    with tw.control_dependencies([bad]):
        later = tw.assign(w, 100.0)
    with pytest.raises(errors.InvalidArgumentError, match="MatMul node 'MatMul'"):
        sess.run(later, {"p:0": np.zeros((4, 4))})
    assert sess.run(v) == 1.0  # ran before the failing node
    assert sess.run(w) == 7.0  # would have run after it: untouched


def test_run_metadata_traces_nodes_and_reports_memory(sess):
    x = tw.constant(np.ones((256, 256), np.float32))
    y = tw.matmul(x, x)
    opts = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE)
    md = tw.RunMetadata()
    sess.run(y, options=opts, run_metadata=md)
    assert any(s["op"] == "MatMul" and s["end"] >= s["start"] for s in md.step_stats)
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert md.placement[y.op.name] == cpu
    assert md.allocator_stats[cpu]["peak_bytes_in_use"] >= 256 * 256 * 4


def test_make_callable(sess):
    x = tw.placeholder(tw.float32, [])
    f = sess.make_callable(x * 2.0, [x])
    assert f(3.0) == 6.0


def test_close_cancels_a_step_blocked_in_another_thread():
    import threading

    with tw.container("close_test"):  # named: closing the session does not reset it
        q = tw.FIFOQueue(2, [tw.float32], shapes=[[]], shared_name="close_cancels")
    x = q.dequeue()
    sess = tw.Session()
    box = {}

    def run():
        try:
            sess.run(x)
        except errors.OpError as e:
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while not sess._active_steps and time.monotonic() < deadline:
        time.sleep(0.001)  # poll until the step is running (bounded)
    sess.close()
    t.join(10)
    assert not t.is_alive()
    assert isinstance(box.get("error"), errors.CancelledError)
    tw.Session.reset("", ["close_test"])
