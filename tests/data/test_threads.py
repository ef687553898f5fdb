"""Where tw.data work runs: map(num_parallel_calls) runs calls at once on the session's
inter-op pool and keeps the order; prefetch produces ahead on its own thread, never more
than its buffer; no thread outlives its iterator (re-initialised, session closed, or the
session dropped). Evidence is counted, never timed: a probe op (conftest.py) records how
many calls run at once and can make a call wait for another one."""

from __future__ import annotations

import gc
import threading

import pytest

import tensorweave as tw
from tensorweave import data as tw_data

Dataset = tw_data.Dataset
WAIT = 10.0  # seconds: only ever reached when something is broken


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("tw-data-prefetch")]


def drain(sess, nxt):
    out = []
    while True:
        try:
            out.append(sess.run(nxt))
        except tw.errors.OutOfRangeError:
            return out


def test_parallel_map_runs_calls_at_once_and_keeps_order(probe):
    # Each even element's call waits until the next element's call has finished: with
    # calls one at a time this could never finish (the probe would fail after WAIT).
    probe.wait_for_next = True
    nxt = Dataset.range(12).map(probe, num_parallel_calls=2).make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        out = [int(v) for v in drain(sess, nxt)]
    assert out == list(range(12))                     # results in input order...
    assert probe.finished[:2] == [1, 0]               # ...although the calls finished out of order
    assert probe.max_in_flight == 2                   # two at once, never more than asked
    assert any(name.startswith("tw-interop") for name in probe.threads)  # on the session's pool


def test_parallel_map_bounded_by_num_parallel_calls(probe):
    nxt = Dataset.range(40).map(probe, num_parallel_calls=3).make_one_shot_iterator().get_next()
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=4)) as sess:
        assert [int(v) for v in drain(sess, nxt)] == list(range(40))
    assert probe.max_in_flight <= 3


def test_sequential_map_runs_one_call_at_a_time_in_the_caller(probe):
    nxt = Dataset.range(10).map(probe).make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        assert [int(v) for v in drain(sess, nxt)] == list(range(10))
    assert probe.max_in_flight == 1
    assert probe.threads == {threading.current_thread().name}


def counting_generator(n=100):
    state = {"produced": 0, "events": {}}

    def at(k):
        return state["events"].setdefault(k, threading.Event())

    def gen():
        for i in range(n):
            state["produced"] += 1
            at(state["produced"]).set()
            yield i
    return gen, state, at


def test_prefetch_produces_ahead_by_its_buffer():
    gen, state, at = counting_generator()
    nxt = Dataset.from_generator(gen, tw.int64, []).prefetch(3).make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        assert int(sess.run(nxt)) == 0
        # While this thread does nothing, the producer takes 3 more elements...
        assert at(4).wait(WAIT)
        # ...and no more: it waits for room before it takes one.
        assert state["produced"] == 4
        assert int(sess.run(nxt)) == 1
        assert at(5).wait(WAIT) and state["produced"] == 5
        assert len(prefetch_threads()) == 1
    assert prefetch_threads() == []  # closing the session joined the producer


def test_prefetch_thread_stops_when_the_iterator_is_reinitialised():
    gen, _, _ = counting_generator()
    it = Dataset.from_generator(gen, tw.int64, []).prefetch(2).make_initializable_iterator()
    nxt = it.get_next()
    with tw.Session() as sess:
        for _ in range(3):
            sess.run(it.initializer)
            assert int(sess.run(nxt)) == 0
            assert len(prefetch_threads()) == 1  # the previous pass's producer is gone
    assert prefetch_threads() == []


def test_prefetch_thread_stops_when_the_session_is_dropped():
    gen, _, _ = counting_generator()
    nxt = Dataset.from_generator(gen, tw.int64, []).prefetch(2).make_one_shot_iterator().get_next()
    sess = tw.Session()
    assert int(sess.run(nxt)) == 0
    assert len(prefetch_threads()) == 1
    del sess  # never closed: the iterator resource's finaliser stops its pipeline
    gc.collect()
    assert prefetch_threads() == []


def test_nested_prefetch_and_parallel_map_close_cleanly(probe):
    ds = (Dataset.range(1000).prefetch(5).map(probe, num_parallel_calls=2).prefetch(2)
          .interleave(lambda x: Dataset.from_tensors(x).repeat(2).prefetch(1), cycle_length=2))
    nxt = ds.make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        assert [int(sess.run(nxt)) for _ in range(6)] == [0, 1, 0, 1, 2, 3]
        assert len(prefetch_threads()) >= 2
    assert prefetch_threads() == []


def test_errors_in_the_producer_reach_the_consumer_in_order():
    def gen():
        yield 1
        yield 2
        raise ValueError("bad record")

    nxt = Dataset.from_generator(gen, tw.int64, []).prefetch(5).make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        assert [int(sess.run(nxt)), int(sess.run(nxt))] == [1, 2]
        with pytest.raises(tw.errors.InvalidArgumentError, match="GeneratorDataset.*ValueError: bad record"):
            sess.run(nxt)


def test_closing_the_session_while_a_consumer_waits_never_hangs():
    release = threading.Event()

    def gen():
        yield 0
        release.wait(WAIT)  # the producer is stuck until the test lets it go
        yield 1

    nxt = Dataset.from_generator(gen, tw.int64, []).prefetch(1).make_one_shot_iterator().get_next()
    sess = tw.Session()
    assert int(sess.run(nxt)) == 0
    box = {}

    def consume():
        try:
            box["value"] = sess.run(nxt)
        except tw.errors.OpError as e:
            box["error"] = e

    t = threading.Thread(target=consume)
    t.start()
    closer = threading.Thread(target=sess.close)
    closer.start()
    release.set()
    closer.join(WAIT)
    t.join(WAIT)
    assert not closer.is_alive() and not t.is_alive()
    # Waiting in the iterator, the consumer is woken with CancelledError; had it not got
    # there yet, the closed session refuses the step; either way nothing hangs.
    assert "value" in box or isinstance(box.get("error"), tw.errors.CancelledError | tw.errors.FailedPreconditionError)
    assert prefetch_threads() == []
