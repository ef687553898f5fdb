"""tw.CriticalSection and the mutex ops: executions of one section never overlap across
concurrent steps (a waiting step holds no thread), a failed or cancelled step gives the mutex
back, and misuse is refused with a clear error."""

import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.runtime import mutex as mutex_rt


def _mutex_of(sess, name):
    return mutex_rt.lookup_or_create(sess._resources, "", name)


def _wait_until(cond, what, deadline=30.0):
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)  # polling our own state with a deadline, not waiting for a server


def test_a_second_step_waits_for_the_first_to_leave_the_section():
    v = tw.Variable(0.0, name="v")
    q = tw.FIFOQueue(1, [tw.float32], shapes=[[]])
    cs = tw.CriticalSection(shared_name="cs_order")
    # Step 1 reads v and then blocks (inside the section) until a value is enqueued.
    slow = cs.execute(lambda: v.assign(v.read_value() * 10.0 + q.dequeue()))
    fast = cs.execute(lambda: v.assign_add(1.0))
    feed = q.enqueue([5.0])
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=4)) as sess:
        sess.run(v.initializer)
        m = _mutex_of(sess, "cs_order")
        results = {}
        t1 = threading.Thread(target=lambda: results.__setitem__("slow", sess.run(slow)))
        t1.start()
        _wait_until(lambda: m.held, "step 1 holds the mutex")
        t2 = threading.Thread(target=lambda: results.__setitem__("fast", sess.run(fast)))
        t2.start()
        _wait_until(lambda: m.waiting == 1, "step 2 waits for the mutex")
        assert sess.run(v) == 0.0  # step 2 has not run its body
        sess.run(feed)
        t1.join(30)
        t2.join(30)
        # serialized: (0 * 10 + 5) then + 1; overlapping would give 15 or a lost update
        assert results == {"slow": 5.0, "fast": 6.0}
        assert not m.held and m.waiting == 0


def test_concurrent_read_modify_writes_are_not_lost():
    v = tw.Variable(0.0, name="counter")
    cs = tw.CriticalSection()
    bump = cs.execute(lambda: v.assign(v.read_value() + 1.0))
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=4)) as sess:
        sess.run(v.initializer)

        def work():
            for _ in range(40):
                sess.run(bump)
        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sess.run(v) == 240.0


def test_a_failing_body_releases_the_mutex():
    x = tw.placeholder(tw.float32, [None, None], name="x")
    cs = tw.CriticalSection(shared_name="cs_fail")
    out = cs.execute(lambda: tw.matmul(x, x))
    with tw.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match="MatMul"):
            sess.run(out, {x: np.ones((2, 3))})
        assert not _mutex_of(sess, "cs_fail").held
        np.testing.assert_array_equal(sess.run(out, {x: np.ones((2, 2))}), np.full((2, 2), 2.0))


def test_fetching_inside_the_section_still_releases_at_the_end_of_the_step():
    v = tw.Variable(1.0, name="v")
    cs = tw.CriticalSection(shared_name="cs_inner")
    inner = []

    def body():
        inner.append(v.read_value() * 2.0)
        return inner[0] + 1.0
    out = cs.execute(body)
    with tw.Session() as sess:
        sess.run(v.initializer)
        assert sess.run(inner[0]) == 2.0  # the lock ran, the release did not
        assert not _mutex_of(sess, "cs_inner").held  # given back when the step ended
        assert sess.run(out) == 3.0


def test_misuse_is_refused():
    cs = tw.CriticalSection()
    with pytest.raises(errors.InvalidArgumentError, match="inside its own fn"):
        cs.execute(lambda: cs.execute(lambda: tw.constant(1.0)))
    with pytest.raises(errors.InvalidArgumentError, match="must return tensors or ops"):
        cs.execute(lambda: 3)
    other = tw.Graph()
    with other.as_default(), pytest.raises(errors.InvalidArgumentError, match="another graph"):
        cs.execute(lambda: tw.constant(1.0))
    # structures come back as given; an op comes back as an op that runs after the release
    v = tw.Variable(0.0)
    got = cs.execute(lambda: {"a": tw.constant(2.0), "b": (v.assign_add(1.0).op, tw.constant(3))})
    with tw.Session() as sess:
        sess.run(v.initializer)
        r = sess.run(got)
        assert r == {"a": 2.0, "b": (None, 3)} and sess.run(v) == 1.0
