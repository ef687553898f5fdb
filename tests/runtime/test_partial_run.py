"""Session.partial_run_setup / partial_run (TF1 semantics): one step fed and fetched over
several calls; every node runs once; a fetch asked for before its feeds fails at once; bad
handles, undeclared or repeated feeds and fetches are clear errors; a failing node ends the
step with its error; closing the session ends open partial runs."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors


def test_the_tf_example_feeds_and_fetches_over_two_calls():
    a, b, c = (tw.placeholder(tw.float32, [], name=n) for n in "abc")
    r1 = tw.add(a, b, name="r1")
    r2 = tw.multiply(r1, c, name="r2")
    with tw.Session() as sess:
        h = sess.partial_run_setup([r1, r2], [a, b, c])
        res = sess.partial_run(h, r1, feed_dict={a: 1, b: 2})
        assert res == 3.0 and isinstance(res, np.float32)
        assert sess.partial_run(h, r2, feed_dict={c: res}) == 9.0
        # every fetch fetched: the step is over and the handle is gone
        with pytest.raises(errors.InvalidArgumentError, match="no open partial run"):
            sess.partial_run(h, r2, feed_dict={c: 1.0})
        # a second partial run of the same graph is a new step
        h2 = sess.partial_run_setup([r1, r2], [a, b, c])
        assert sess.partial_run(h2, [r1, r2], {a: 2, b: 2, c: 10}) == [4.0, 40.0]


def test_every_node_runs_once_in_a_partial_run():
    counter = tw.Variable(0.0, name="counter")
    a, c = tw.placeholder(tw.float32, [], name="a"), tw.placeholder(tw.float32, [], name="c")
    bumped = tw.assign_add(counter, 1.0, name="bump")   # stateful: must run once
    r1 = tw.add(bumped, a, name="r1")
    with tw.control_dependencies([bumped]):
        r2 = tw.multiply(r1, c, name="r2")             # needs r1 (fetched earlier) and bump again
    with tw.Session() as sess:
        sess.run(counter.initializer)
        h = sess.partial_run_setup({"r1": r1, "r2": r2}, [a, c])
        assert sess.partial_run(h, {"first": r1}, {a: 10.0}) == {"first": 11.0}
        assert sess.partial_run(h, (r2,), {c: 2.0}) == (22.0,)
        assert sess.run(counter) == 1.0  # Session.run of the same two would bump it twice


def test_a_fetch_whose_feeds_are_missing_fails_at_once():
    a, b = tw.placeholder(tw.float32, [], name="a"), tw.placeholder(tw.float32, [], name="b")
    s = tw.add(a, b, name="s")
    with tw.Session() as sess:
        h = sess.partial_run_setup([s, a], [a, b])
        with pytest.raises(errors.InvalidArgumentError, match=r"cannot fetch 's:0' yet: it depends on 'b:0'"):
            sess.partial_run(h, s, {a: 1.0})
        # nothing was fed by the refused call: a can still be fed, and fetched back
        assert sess.partial_run(h, a, {a: 4.0}) == 4.0
        assert sess.partial_run(h, s, {b: 1.0}) == 5.0


def test_undeclared_and_repeated_feeds_and_fetches():
    a, b = tw.placeholder(tw.float32, [], name="a"), tw.placeholder(tw.float32, [], name="b")
    x, y = tw.add(a, 1.0, name="x"), tw.add(b, 1.0, name="y")
    other = tw.multiply(a, 3.0, name="other")
    with tw.Session() as sess:
        h = sess.partial_run_setup([x, y], [a, b])
        with pytest.raises(errors.InvalidArgumentError, match="fetch 'other:0' was not declared"):
            sess.partial_run(h, other, {a: 1.0})
        with pytest.raises(errors.InvalidArgumentError, match="feed 'x:0' was not declared"):
            sess.partial_run(h, y, {x: 1.0, b: 1.0})
        assert sess.partial_run(h, x, {a: 1.0}) == 2.0
        with pytest.raises(errors.InvalidArgumentError, match="'a:0' has already been fed"):
            sess.partial_run(h, y, {a: 2.0, b: 1.0})
        with pytest.raises(errors.InvalidArgumentError, match="'x:0' has already been fetched"):
            sess.partial_run(h, x)
        with pytest.raises(errors.InvalidArgumentError, match="cannot feed value of shape"):
            sess.partial_run(h, y, {b: [1.0, 2.0]})
        assert sess.partial_run(h, y, {b: 5.0}) == 6.0
        with pytest.raises(errors.InvalidArgumentError, match="no open partial run with handle 'nope'"):
            sess.partial_run("nope", x)


def test_a_failing_node_ends_the_step_with_its_error():
    a = tw.placeholder(tw.float32, [None, None], name="a")
    b = tw.placeholder(tw.float32, [None, None], name="b")
    p = tw.matmul(a, b, name="p")
    q = tw.add(a, 1.0, name="q")
    with tw.Session() as sess:
        h = sess.partial_run_setup([q, p], [a, b])
        np.testing.assert_array_equal(sess.partial_run(h, q, {a: np.ones((2, 3))}), np.full((2, 3), 2.0))
        with pytest.raises(errors.InvalidArgumentError, match="MatMul node 'p'") as ei:
            sess.partial_run(h, p, {b: np.ones((2, 3))})
        assert ei.value.op is p.op  # the user's node, not the plan's copy
        with pytest.raises(errors.InvalidArgumentError, match="no open partial run"):
            sess.partial_run(h, p)


def test_partial_run_across_two_devices_and_fetching_an_op():
    v = tw.Variable(np.zeros(3, np.float32), name="v")
    a = tw.placeholder(tw.float32, [3], name="a")
    c = tw.placeholder(tw.float32, [], name="c")
    with tw.device("/device:CPU:1"):
        h1 = tw.multiply(a, 2.0, name="h1")
    with tw.device("/device:CPU:0"):
        out = tw.reduce_sum(h1 * c, name="out")
        update = tw.assign_add(v, h1, name="update").op
    with tw.Session(config=tw.ConfigProto(device_count={"CPU": 2})) as sess:
        sess.run(v.initializer)
        h = sess.partial_run_setup([h1, out, update], [a, c])
        np.testing.assert_array_equal(sess.partial_run(h, h1, {a: [1.0, 2.0, 3.0]}), [2.0, 4.0, 6.0])
        assert sess.partial_run(h, [update, out], {c: 0.5}) == [None, 6.0]
        np.testing.assert_array_equal(sess.run(v), [2.0, 4.0, 6.0])


def test_closing_the_session_ends_an_open_partial_run():
    a, b = tw.placeholder(tw.float32, [], name="a"), tw.placeholder(tw.float32, [], name="b")
    x, s = tw.add(a, 1.0, name="x"), tw.add(a, b, name="s")
    sess = tw.Session()
    h = sess.partial_run_setup([x, s], [a, b])
    assert sess.partial_run(h, x, {a: 1.0}) == 2.0
    sess.close()  # s still waits for b: the step is aborted, nothing hangs
    with pytest.raises(errors.FailedPreconditionError, match="closed Session"):
        sess.partial_run(h, s, {b: 1.0})
