"""Coordinator, QueueRunner and the input helpers built on them: threads stop cleanly
(join returns, none left alive), exceptions reach coord.join, epochs are counted, batches
keep every example exactly once."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors

T = 10.0  # seconds: an upper bound for anything that should finish at once


@pytest.fixture(autouse=True)
def _no_runner_thread_left():
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith("QueueRunner")]
    assert not left, f"threads left running: {left}"


def opts():
    return tw.RunOptions(timeout_in_ms=int(T * 1000))


def assert_all_ended(threads):
    assert threads and not any(t.is_alive() for t in threads)


def drain(sess, fetch):
    out = []
    while True:
        try:
            out.append(sess.run(fetch, options=opts()))
        except errors.OutOfRangeError:
            return out


# ---------------------------------------------------------------------------------------
# Coordinator
def test_coordinator_stop_and_join():
    coord = tw.train.Coordinator()
    ticks = collections.Counter()

    def body(k):
        while not coord.should_stop():
            ticks[k] += 1
            if ticks[k] == 5 and k == 0:
                coord.request_stop()
            coord.wait_for_stop(0.001)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    coord.join(threads, stop_grace_period_secs=T)
    assert_all_ended(threads)
    assert coord.should_stop() and coord.joined


def test_coordinator_join_reraises_first_exception():
    coord = tw.train.Coordinator()

    def failing():
        with coord.stop_on_exception():
            raise ValueError("first")

    def later():
        coord.wait_for_stop(T)
        coord.request_stop(RuntimeError("second"))  # after the stop: ignored

    threads = [threading.Thread(target=failing), threading.Thread(target=later)]
    for t in threads:
        t.start()
    with pytest.raises(ValueError, match="first"):
        coord.join(threads, stop_grace_period_secs=T)
    assert_all_ended(threads)


def test_coordinator_out_of_range_is_a_clean_stop():
    coord = tw.train.Coordinator()
    coord.request_stop(errors.OutOfRangeError("input exhausted"))
    coord.join([], stop_grace_period_secs=1)
    coord.clear_stop()
    assert not coord.should_stop()


def test_coordinator_reports_stragglers():
    coord = tw.train.Coordinator()
    release = threading.Event()
    t = threading.Thread(target=release.wait, args=(T,))
    t.start()
    coord.request_stop()
    try:
        with pytest.raises(RuntimeError, match="still running"):
            coord.join([t], stop_grace_period_secs=0.05)
    finally:
        release.set()
        t.join(T)
    assert not t.is_alive()


def test_looper_thread():
    coord = tw.train.Coordinator()
    n = collections.Counter()

    def tick():
        n["x"] += 1
        if n["x"] >= 3:
            coord.request_stop()

    tw.train.LooperThread(coord, None, target=tick).start()
    coord.join(stop_grace_period_secs=T)
    assert n["x"] >= 3


# ---------------------------------------------------------------------------------------
# QueueRunner
def test_queue_runner_threads_stop_cleanly_when_queue_is_full(sess):
    counter = tw.Variable(0, dtype=tw.int32)
    q = tw.FIFOQueue(4, tw.int32, shapes=[[]])
    qr = tw.train.QueueRunner(q, [q.enqueue(tw.assign_add(counter, 1))] * 3)
    tw.train.add_queue_runner(qr)
    assert tw.get_default_graph().get_collection(tw.GraphKeys.QUEUE_RUNNERS) == [qr]
    sess.run(tw.global_variables_initializer())
    coord = tw.train.Coordinator()
    threads = tw.train.start_queue_runners(sess, coord)
    assert len(threads) == 4  # three enqueue threads and the one that cancels on stop
    got = [int(sess.run(q.dequeue(), options=opts())) for _ in range(20)]
    assert len(set(got)) == 20
    # The queue is full again and the enqueue threads wait; stopping must end them.
    coord.request_stop()
    coord.join(threads, stop_grace_period_secs=T)
    assert_all_ended(threads)
    assert qr.exceptions_raised == []


def test_queue_runner_exception_propagates_through_join(sess):
    v = tw.Variable(1.0)   # never initialised: the enqueue fails in the runner thread
    q = tw.FIFOQueue(4, tw.float32)
    qr = tw.train.QueueRunner(q, [q.enqueue(v + 0)])
    coord = tw.train.Coordinator()
    threads = qr.create_threads(sess, coord=coord, start=True)
    with pytest.raises(errors.FailedPreconditionError, match="uninitialized"):
        coord.join(threads, stop_grace_period_secs=T)
    assert_all_ended(threads)


def test_queue_runner_without_coordinator_records_exceptions(sess):
    v = tw.Variable(1.0)
    q = tw.FIFOQueue(4, tw.float32)
    qr = tw.train.QueueRunner(q, [q.enqueue(v + 0)])
    threads = qr.create_threads(sess, start=True)
    for t in threads:
        t.join(T)
    assert_all_ended(threads)
    assert len(qr.exceptions_raised) == 1
    assert isinstance(qr.exceptions_raised[0], errors.FailedPreconditionError)


def test_queue_runner_closes_queue_when_input_ends(sess):
    # An enqueue that fails with OutOfRangeError (input exhausted) ends its thread normally;
    # the last one closes the queue so the consumer drains it and then gets OutOfRangeError.
    q = tw.FIFOQueue(100, tw.int32, shapes=[[]])
    data = tw.train.limit_epochs(tw.constant([1, 2, 3]), num_epochs=2)
    qr = tw.train.QueueRunner(q, [q.enqueue_many([data])] * 2)
    sess.run(tw.local_variables_initializer())
    coord = tw.train.Coordinator()
    threads = qr.create_threads(sess, coord=coord, start=True)
    got = sorted(int(x) for x in drain(sess, q.dequeue()))
    assert got == [1, 1, 2, 2, 3, 3]
    coord.request_stop()
    coord.join(threads, stop_grace_period_secs=T)
    assert_all_ended(threads)


def test_create_threads_twice_returns_nothing_while_running(sess):
    q = tw.FIFOQueue(2, tw.int32)
    qr = tw.train.QueueRunner(q, [q.enqueue(1)])
    coord = tw.train.Coordinator()
    threads = qr.create_threads(sess, coord=coord, start=True)
    assert qr.create_threads(sess, coord=coord) == []
    coord.request_stop()
    coord.join(threads, stop_grace_period_secs=T)
    assert_all_ended(threads)


# ---------------------------------------------------------------------------------------
# input helpers
def _run_pipeline(fetch, init_locals=True):
    with tw.Session() as s:
        if init_locals:
            s.run(tw.local_variables_initializer())
        coord = tw.train.Coordinator()
        threads = tw.train.start_queue_runners(s, coord)
        try:
            out = drain(s, fetch)
        finally:
            coord.request_stop()
            coord.join(threads, stop_grace_period_secs=T)
        assert_all_ended(threads)
        return out


def test_string_input_producer_epochs():
    names = [b"a", b"b", b"c", b"d"]
    q = tw.train.string_input_producer(names, num_epochs=3, shuffle=True, seed=4)
    got = _run_pipeline(q.dequeue())
    assert all(type(x) is bytes for x in got)  # a scalar string is fetched as bytes (TF1)
    assert len(got) == 12
    for e in range(3):  # every epoch is a permutation of the names
        assert sorted(got[4 * e:4 * e + 4]) == names
    unshuffled = tw.train.string_input_producer(names, num_epochs=1, shuffle=False)
    assert _run_pipeline(unshuffled.dequeue()) == names


def test_string_input_producer_rejects_empty():
    with pytest.raises(errors.InvalidArgumentError, match="empty"):
        tw.train.string_input_producer(tw.constant([], dtype=tw.string))


def test_range_and_slice_input_producer():
    q = tw.train.range_input_producer(5, num_epochs=2, shuffle=False)
    assert [int(x) for x in _run_pipeline(q.dequeue())] == [0, 1, 2, 3, 4] * 2
    tw.reset_default_graph()
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.int64) * 10
    xs, ys = tw.train.slice_input_producer([x, y], num_epochs=2, shuffle=True, seed=1)
    assert xs.shape.as_list() == [2] and ys.shape.as_list() == []
    pairs = _run_pipeline([xs, ys])
    assert len(pairs) == 12
    for a, b in pairs:
        assert a.tolist() == [b / 5, b / 5 + 1]
    assert collections.Counter(int(b) for _, b in pairs) == {10 * k: 2 for k in range(6)}


def test_batch_in_order_with_smaller_final_batch():
    q = tw.train.range_input_producer(10, num_epochs=1, shuffle=False)
    i = q.dequeue()
    b = tw.train.batch([i, tw.cast(i, tw.float32) * 2], batch_size=4, allow_smaller_final_batch=True)
    assert b[0].shape.as_list() == [None]
    got = _run_pipeline(b)
    assert [v[0].tolist() for v in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert got[0][1].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_batch_dict_and_enqueue_many():
    data = {"x": tw.constant(np.arange(8, dtype=np.int32).reshape(4, 2)), "y": tw.constant([0, 1, 2, 3])}
    out = tw.train.batch(data, batch_size=2, enqueue_many=True, capacity=4)
    assert set(out) == {"x", "y"} and out["x"].shape.as_list() == [2, 2]
    with tw.Session() as s:
        coord = tw.train.Coordinator()
        threads = tw.train.start_queue_runners(s, coord)
        v = s.run(out, options=opts())
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=T)
    assert_all_ended(threads)
    assert v["x"].tolist() == [[0, 1], [2, 3]] and v["y"].tolist() == [0, 1]


def test_batch_needs_fully_defined_shapes():
    p = tw.placeholder(tw.float32, [None])
    with pytest.raises(errors.InvalidArgumentError, match="fully defined"):
        tw.train.batch([p], batch_size=2)


def test_shuffle_batch_keeps_every_example_once_and_shuffles():
    n = 200
    xs = tw.train.slice_input_producer([np.arange(n, dtype=np.int32)], num_epochs=1, shuffle=False)
    b = tw.train.shuffle_batch(xs, batch_size=10, capacity=60, min_after_dequeue=30, num_threads=3, seed=2,
                               allow_smaller_final_batch=True)
    got = np.concatenate(_run_pipeline(b)).tolist()
    assert sorted(got) == list(range(n))
    displacement = np.abs(np.array(got) - np.arange(n)).mean()
    assert displacement > 5  # a window of >= 30 examples is mixed


def test_shuffle_batch_without_smaller_final_batch_drops_the_rest():
    xs = tw.train.slice_input_producer([np.arange(25, dtype=np.int32)], num_epochs=1, shuffle=False)
    b = tw.train.shuffle_batch(xs, batch_size=10, capacity=20, min_after_dequeue=5, seed=2)
    assert b.shape.as_list() == [10]
    got = _run_pipeline(b)
    assert len(got) == 2 and len(set(np.concatenate(got).tolist())) == 20
