"""Queues (whitepaper 4.6): FIFO order, batches, closing, cancellation and timeouts without
losing elements, many producers and consumers, shuffle statistics and seeds, shape/dtype
checks, shared queues."""

from __future__ import annotations

import collections
import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.runtime import queues

T = 10.0  # seconds: an upper bound for anything that should finish at once


def opts(ms=int(T * 1000)):
    return tw.RunOptions(timeout_in_ms=ms)


def start(fn, *args):
    box = {}

    def body():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - checked by the test
            box["error"] = e
    th = threading.Thread(target=body, daemon=True)
    th.start()
    return th, box


def finish(th, box):
    th.join(T)
    assert not th.is_alive(), "thread did not finish in time"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def wait_parked(sess, q, enqueues=0, dequeues=0):
    """Poll (with a deadline) until the queue has these attempts parked."""
    obj = queues.lookup(sess._resources, sess.run(q.queue_ref))
    deadline = time.monotonic() + T
    while obj.waiting() != (enqueues, dequeues):
        assert time.monotonic() < deadline, f"queue waiters {obj.waiting()}"
        time.sleep(0.002)


# ---------------------------------------------------------------------------------------
# basics
def test_fifo_order_size_and_static_shapes(sess):
    q = tw.FIFOQueue(10, [tw.float32, tw.int32], shapes=[[2], []])
    x = tw.placeholder(tw.float32, [2])
    i = tw.placeholder(tw.int32, [])
    enq = q.enqueue([x, i])
    a, b = q.dequeue()
    assert (a.dtype, a.shape.as_list(), b.dtype, b.shape.as_list()) == (tw.float32, [2], tw.int32, [])
    assert q.dtypes == [tw.float32, tw.int32] and q.name == "fifo_queue"
    assert q.queue_ref.dtype == tw.string and q.queue_ref.shape.as_list() == []
    for k in range(5):
        sess.run(enq, {x: [k, -k], i: k})
    assert sess.run(q.size()) == 5
    for k in range(5):
        va, vb = sess.run([a, b], options=opts())
        assert va.tolist() == [k, -k] and vb == k
    assert sess.run(q.size()) == 0


def test_handle_is_plain_data(sess):
    q = tw.FIFOQueue(3, tw.int32, shared_name="items")
    with tw.container("c1"):
        q2 = tw.FIFOQueue(3, tw.int32)
    handle = sess.run(q.queue_ref)
    assert type(handle) is bytes and handle == b":items"
    assert queues.parse_handle(sess.run(q2.queue_ref)) == ("c1", "fifo_queue_1")
    tw.Session.reset("", ["c1"])


def test_enqueue_many_dequeue_many_up_to(sess):
    q = tw.FIFOQueue(100, [tw.int32, tw.string], shapes=[[3], []])
    enq = q.enqueue_many([np.arange(30, dtype=np.int32).reshape(10, 3), [f"s{k}" for k in range(10)]])
    n, s = q.dequeue_many(4)
    assert n.shape.as_list() == [4, 3] and s.shape.as_list() == [4]
    u, _ = q.dequeue_up_to(4)
    assert u.shape.as_list() == [None, 3]
    sess.run(enq)
    vn, vs = sess.run([n, s], options=opts())
    assert vn.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert list(vs) == [b"s0", b"s1", b"s2", b"s3"]
    assert sess.run(q.dequeue_many(0))[0].shape == (0, 3)
    sess.run(q.dequeue_many(4))
    sess.run(q.close())
    # Closed with 2 left: dequeue_many(4) fails and keeps them; dequeue_up_to returns them.
    with pytest.raises(errors.OutOfRangeError, match="fifo_queue.*insufficient"):
        sess.run(n, options=opts())
    assert sess.run(q.size()) == 2
    vu = sess.run(u, options=opts())
    assert vu.tolist() == [[24, 25, 26], [27, 28, 29]]
    with pytest.raises(errors.OutOfRangeError):
        sess.run(u, options=opts())


def test_names_dict(sess):
    q = tw.FIFOQueue(5, [tw.int32, tw.float32], shapes=[[], []], names=["label", "x"])
    sess.run(q.enqueue({"label": 3, "x": 1.5}))
    out = q.dequeue()
    assert set(out) == {"label", "x"}
    assert sess.run(out, options=opts()) == {"label": 3, "x": 1.5}
    with pytest.raises(errors.InvalidArgumentError, match="dict keyed by"):
        q.enqueue([1, 2.0])


# ---------------------------------------------------------------------------------------
# closing
def test_closed_empty_queue_dequeue_is_out_of_range(sess):
    q = tw.FIFOQueue(3, tw.float32)
    sess.run(q.close())
    assert sess.run(q.is_closed())
    with pytest.raises(errors.OutOfRangeError, match="FIFOQueue 'fifo_queue' is closed"):
        sess.run(q.dequeue(), options=opts())


def test_enqueue_on_closed_queue_is_cancelled(sess):
    q = tw.FIFOQueue(3, tw.float32)
    sess.run(q.close())
    with pytest.raises(errors.CancelledError, match="fifo_queue.*closed"):
        sess.run(q.enqueue(1.0), options=opts())


def test_close_wakes_blocked_dequeue_with_out_of_range(sess):
    q = tw.FIFOQueue(3, tw.float32)
    d = q.dequeue()
    th, box = start(sess.run, d)
    wait_parked(sess, q, dequeues=1)  # parked in the queue, holding no executor thread
    sess.run(q.close())
    with pytest.raises(errors.OutOfRangeError):
        finish(th, box)


def test_close_with_cancel_pending_enqueues(sess):
    q = tw.FIFOQueue(1, tw.int32)
    sess.run(q.enqueue(1))
    th, box = start(sess.run, q.enqueue(2))   # blocks: full
    wait_parked(sess, q, enqueues=1)
    sess.run(q.close(cancel_pending_enqueues=True))
    with pytest.raises(errors.CancelledError, match="cancel_pending_enqueues"):
        finish(th, box)
    assert sess.run(q.dequeue(), options=opts()) == 1
    with pytest.raises(errors.OutOfRangeError):
        sess.run(q.dequeue(), options=opts())


def test_pending_enqueue_survives_plain_close(sess):
    q = tw.FIFOQueue(1, tw.int32)
    sess.run(q.enqueue(1))
    th, box = start(sess.run, q.enqueue(2))
    wait_parked(sess, q, enqueues=1)
    sess.run(q.close())  # without cancel: the waiting enqueue still gets in once there is room
    assert sess.run(q.dequeue(), options=opts()) == 1
    finish(th, box)
    assert sess.run(q.dequeue(), options=opts()) == 2


# ---------------------------------------------------------------------------------------
# timeouts and cancellation
def test_timeout_is_deadline_exceeded_and_no_element_is_lost(sess):
    q = tw.FIFOQueue(3, tw.int32)
    d = q.dequeue()
    t0 = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match="fifo_queue_Dequeue"):
        sess.run(d, options=tw.RunOptions(timeout_in_ms=100))
    assert time.monotonic() - t0 < 2.0
    sess.run(q.enqueue(7))
    # The timed-out dequeue must not have left a waiter behind that swallows the element.
    assert sess.run(q.size()) == 1
    assert sess.run(d, options=opts()) == 7


def test_timed_out_dequeue_many_puts_taken_elements_back(sess):
    q = tw.FIFOQueue(10, tw.int32, shapes=[[]])
    sess.run(q.enqueue_many([[1, 2]]))
    with pytest.raises(errors.DeadlineExceededError):
        sess.run(q.dequeue_many(3), options=tw.RunOptions(timeout_in_ms=50))
    assert sess.run(q.size()) == 2
    sess.run(q.enqueue(3))
    assert sess.run(q.dequeue_many(3), options=opts()).tolist() == [1, 2, 3]


def test_timed_out_enqueue_on_full_queue(sess):
    q = tw.FIFOQueue(1, tw.int32)
    sess.run(q.enqueue(1))
    with pytest.raises(errors.DeadlineExceededError):
        sess.run(q.enqueue(2), options=tw.RunOptions(timeout_in_ms=50))
    assert sess.run(q.dequeue(), options=opts()) == 1
    assert sess.run(q.size()) == 0  # the timed-out enqueue did not sneak in later


def test_operation_timeout_in_config():
    q = tw.FIFOQueue(1, tw.int32)
    with tw.Session(config=tw.ConfigProto(operation_timeout_in_ms=50)) as s:
        with pytest.raises(errors.DeadlineExceededError):
            s.run(q.dequeue())


def test_failure_elsewhere_in_step_releases_parked_dequeue(sess):
    q = tw.FIFOQueue(3, tw.int32)
    p = tw.placeholder(tw.float32, [None])
    bad = tw.reshape(p, [3])
    with pytest.raises(errors.InvalidArgumentError):
        sess.run([q.dequeue(), bad], {p: [1.0, 2.0]}, options=opts())
    sess.run(q.enqueue(5))
    assert sess.run(q.dequeue(), options=opts()) == 5


def test_session_close_releases_blocked_dequeue():
    q = tw.FIFOQueue(3, tw.int32)
    d = q.dequeue()
    s = tw.Session()
    s.run(q.queue_ref)
    th, box = start(s.run, d)
    wait_parked(s, q, dequeues=1)
    s.close()
    with pytest.raises(errors.CancelledError):
        finish(th, box)


# ---------------------------------------------------------------------------------------
# many threads
def test_producers_consumers_no_lost_or_duplicated_elements(sess):
    producers, per_producer, consumers = 4, 250, 3
    q = tw.FIFOQueue(10, tw.int32, shapes=[[]])   # small: producers and consumers both wait
    v = tw.placeholder(tw.int32, [])
    enq, deq, close = q.enqueue(v), q.dequeue(), q.close()
    got: list[list[int]] = [[] for _ in range(consumers)]

    def produce(k):
        for j in range(per_producer):
            sess.run(enq, {v: k * per_producer + j}, options=opts())

    def consume(k):
        while True:
            try:
                got[k].append(int(sess.run(deq, options=opts())))
            except errors.OutOfRangeError:
                return

    cs = [start(consume, k) for k in range(consumers)]
    ps = [start(produce, k) for k in range(producers)]
    for th, box in ps:
        finish(th, box)
    sess.run(close)
    for th, box in cs:
        finish(th, box)
    every = sorted(x for g in got for x in g)
    assert every == list(range(producers * per_producer))
    assert all(len(g) > 0 for g in got)
    # FIFO per producer: each consumer sees one producer's elements in increasing order.
    for g in got:
        for k in range(producers):
            mine = [x for x in g if x // per_producer == k]
            assert mine == sorted(mine)


def test_dequeue_many_consumers_with_enqueue_many_producers(sess):
    q = tw.FIFOQueue(16, tw.int64, shapes=[[]])
    b = tw.placeholder(tw.int64, [None])
    enq, deq = q.enqueue_many([b]), q.dequeue_up_to(7)
    got = []
    lock = threading.Lock()

    def produce(k):
        for j in range(20):
            sess.run(enq, {b: np.arange(10) + 1000 * k + 10 * j}, options=opts())

    def consume():
        while True:
            try:
                vals = sess.run(deq, options=opts())
            except errors.OutOfRangeError:
                return
            with lock:
                got.extend(vals.tolist())

    cs = [start(consume) for _ in range(2)]
    ps = [start(produce, k) for k in range(3)]
    for t in ps:
        finish(*t)
    sess.run(q.close())
    for t in cs:
        finish(*t)
    assert sorted(got) == sorted(1000 * k + x for k in range(3) for x in range(200))


# ---------------------------------------------------------------------------------------
# RandomShuffleQueue
def _ranks(x):
    r = np.empty(len(x))
    r[np.argsort(x)] = np.arange(len(x))
    return r


def test_shuffle_queue_order_is_a_shuffle(sess):
    n = 1000
    q = tw.RandomShuffleQueue(n, 0, tw.int32, shapes=[[]], seed=42)
    sess.run(q.enqueue_many([np.arange(n, dtype=np.int32)]))
    sess.run(q.close())
    out = sess.run(q.dequeue_many(n), options=opts())
    assert sorted(out.tolist()) == list(range(n))
    # Spearman rank correlation between value and output position: ~N(0, 1/sqrt(n)).
    rho = np.corrcoef(_ranks(out), np.arange(n))[0, 1]
    assert abs(rho) < 4 / np.sqrt(n)
    assert out.tolist() != list(range(n))


def test_shuffle_queue_first_element_is_uniform(sess):
    k, rounds = 10, 600
    q = tw.RandomShuffleQueue(k, 0, tw.int32, shapes=[[]], seed=7)
    enq, deq = q.enqueue_many([np.arange(k, dtype=np.int32)]), q.dequeue_many(k)
    first = collections.Counter()
    for _ in range(rounds):
        sess.run(enq)
        first[int(sess.run(deq)[0])] += 1
    expected = rounds / k
    chi2 = sum((first[i] - expected) ** 2 / expected for i in range(k))
    assert chi2 < 27.9  # 9 degrees of freedom, p = 0.001


def test_shuffle_queue_respects_min_after_dequeue(sess):
    q = tw.RandomShuffleQueue(10, 5, tw.int32, shapes=[[]], seed=1)
    sess.run(q.enqueue_many([np.arange(5, dtype=np.int32)]))
    with pytest.raises(errors.DeadlineExceededError):
        sess.run(q.dequeue(), options=tw.RunOptions(timeout_in_ms=50))
    assert sess.run(q.size()) == 5
    sess.run(q.enqueue(5))
    x = sess.run(q.dequeue(), options=opts())
    assert 0 <= x <= 5 and sess.run(q.size()) == 5
    sess.run(q.close())  # once closed, min_after_dequeue no longer holds elements back
    rest = sess.run(q.dequeue_many(5), options=opts()).tolist()
    assert sorted(rest + [x]) == list(range(6))


def test_shuffle_queue_seeds_repeat():
    def order(seed, graph_seed=None):
        g = tw.Graph()
        with g.as_default():
            if graph_seed is not None:
                tw.set_random_seed(graph_seed)
            q = tw.RandomShuffleQueue(100, 0, tw.int32, shapes=[[]], seed=seed)
            enq, deq = q.enqueue_many([np.arange(100, dtype=np.int32)]), q.dequeue_many(100)
        outs = []
        for _ in range(2):
            with tw.Session(graph=g) as s:
                s.run(enq)
                outs.append(s.run(deq).tolist())
        return outs

    a1, a2 = order(5)
    assert a1 == a2                      # a new session replays the sequence
    assert order(5)[0] == a1             # so does a new graph
    assert order(6)[0] != a1
    g1, g2 = order(None, graph_seed=3)
    assert g1 == g2


def test_shuffle_queue_min_after_dequeue_must_be_below_capacity():
    with pytest.raises(errors.InvalidArgumentError, match="min_after_dequeue"):
        tw.RandomShuffleQueue(5, 5, tw.int32)


# ---------------------------------------------------------------------------------------
# checks
def test_enqueue_shape_mismatch_names_queue_and_component():
    q = tw.FIFOQueue(3, [tw.int32, tw.float32], shapes=[[], [2]], name="examples")
    with pytest.raises(errors.InvalidArgumentError, match=r"'examples'.*component 1.*shape \(3,\).*expects \(2,\)"):
        q.enqueue([1, [1.0, 2.0, 3.0]])
    with pytest.raises(errors.InvalidArgumentError, match=r"'examples'.*component 1.*per element"):
        q.enqueue_many([[1, 2], [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]])


def test_enqueue_dtype_mismatch_names_queue_and_component():
    q = tw.FIFOQueue(3, [tw.int32, tw.float32], name="examples")
    with pytest.raises(errors.InvalidArgumentError, match=r"'examples'.*component 0.*float32.*int32"):
        q.enqueue([tw.constant(1.0), 2.0])
    with pytest.raises(errors.InvalidArgumentError, match=r"'examples'.*component 0"):
        q.enqueue([1.5, 2.0])


def test_runtime_shape_mismatch_of_fed_value(sess):
    q = tw.FIFOQueue(3, tw.float32, shapes=[[2]], name="examples")
    p = tw.placeholder(tw.float32, None)
    enq = q.enqueue(p)
    with pytest.raises(errors.InvalidArgumentError, match=r"'examples'.*component 0.*shape \(3,\).*\(2,\)"):
        sess.run(enq, {p: [1.0, 2.0, 3.0]}, options=opts())
    assert sess.run(q.size()) == 0


def test_dequeue_many_needs_shapes(sess):
    q = tw.FIFOQueue(3, tw.float32)
    sess.run(q.enqueue(1.0))
    with pytest.raises(errors.InvalidArgumentError, match="fully defined shapes"):
        sess.run(q.dequeue_many(1), options=opts())
    assert sess.run(q.size()) == 1


# ---------------------------------------------------------------------------------------
# sharing
def test_shared_queue_in_named_container_across_sessions():
    with tw.container("shared_q_test"):
        q = tw.FIFOQueue(5, tw.int32, shared_name="work")
    try:
        with tw.Session() as a, tw.Session() as b:
            a.run(q.enqueue(11))
            assert b.run(q.dequeue(), options=opts()) == 11
        with tw.Session() as a, tw.Session() as b:  # default container: one queue per session
            q2 = tw.FIFOQueue(5, tw.int32)
            a.run(q2.enqueue(1))
            assert b.run(q2.size()) == 0
    finally:
        tw.Session.reset("", ["shared_q_test"])


def test_shared_name_with_different_spec_is_rejected(sess):
    q1 = tw.FIFOQueue(5, tw.int32, shared_name="same")
    q2 = tw.FIFOQueue(5, tw.float32, shared_name="same")
    sess.run(q1.queue_ref)
    with pytest.raises(errors.InvalidArgumentError, match="shared queue 'same'"):
        sess.run(q2.queue_ref)


def test_queue_graph_round_trips_through_graph_def():
    q = tw.FIFOQueue(5, tw.int32, shapes=[[]])
    q.enqueue_many([[1, 2, 3]], name="fill")
    q.dequeue_many(3, name="take")
    gd = tw.get_default_graph().as_graph_def()
    g2 = tw.Graph()
    with g2.as_default():
        tw.import_graph_def(gd, name="")
    with tw.Session(graph=g2) as s:
        s.run("fill")
        assert s.run("take:0", options=opts()).tolist() == [1, 2, 3]
