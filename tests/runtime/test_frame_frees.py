"""Values of a step with loops are dropped once nothing in the step needs them (runtime/
frames.py, as the flat executor does): a variable's read before a loop no longer holds the
variable's tensor when an update later in the step runs, so the update writes in place; and
a big intermediate consumed early does not live until the end of the step."""

from __future__ import annotations

import numpy as np

import tensorweave as tw


def _address(a):
    return a.__array_interface__["data"][0]


def test_a_read_used_by_a_loop_is_dropped_before_a_later_update():
    """(A compiled loop: a loop on the general path keeps its loop invariants until its frame
    retires, which may come after nodes its Exit made ready.)"""
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(np.ones((100, 8), np.float32), name="v")
        _, total = tw.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + tw.reduce_sum(v)),
                                 [tw.constant(0), tw.constant(0.0)])
        with tw.control_dependencies([total]):
            update = tw.scatter_sub(v, [1, 2], tw.ones([2, 8]))
    with tw.Session(graph=g) as sess:
        sess.run(v.initializer)
        sess.run(update.op)  # the first update copies the initializer's value once
        store = sess._resources.local.lookup("", "v")
        where = _address(store.value)
        for step in range(3):
            got, _ = sess.run([total, update.op])  # (the update's output would be the tensor itself)
            assert got == 3 * (800 - 16 * (step + 1))
            assert _address(store.value) == where, "the variable was copied: a read of it was still held"


def test_a_big_intermediate_before_a_loop_is_not_held_to_the_end_of_the_step():
    """[2048, 2048] float32 (16 MiB) made and reduced, a loop, then another made: the step's
    peak holds one such tensor, not two (the first is dropped after its consumer)."""
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 2048])
        big = tw.square(x + 1.0)
        first = tw.reduce_sum(big)
        _, out = tw.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s * 0.5), [tw.constant(0), first])
        again = tw.reduce_sum(tw.sqrt(tw.abs(x) + out))  # a second big tensor, after the loop
    xs = np.ones((2048, 2048), np.float32)
    with tw.Session(graph=g) as sess:
        sess.run(again, {x: xs})
        alloc = sess.devices[0].allocator
        start = alloc.bytes_in_use
        alloc.reset_peak()
        meta = tw.RunMetadata()
        sess.run(again, {x: xs}, run_metadata=meta)
        peak = meta.allocator_stats[sess.devices[0].name]["peak_bytes_in_use"] - start
    assert peak < 1.5 * xs.nbytes, f"peak {peak / 2**20:.0f} MiB: intermediates were held"
