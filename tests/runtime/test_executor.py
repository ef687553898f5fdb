"""The executor: scheduling order, the thread-pool path, failures, memory accounting."""

import logging
import os
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors


def test_ready_ties_run_in_creation_order(sess):
    v = tw.Variable(np.float32(0.0))
    sess.run(v.initializer)
    # Two independent updates: with no edge between them, creation order decides.
    a = tw.assign(v, 1.0)
    b = tw.assign(v, 2.0)
    sess.run(tw.group(b, a))
    assert sess.run(v) == 2.0


def _independent_matmuls():
    rng = np.random.default_rng(1)
    mats = [rng.standard_normal((400, 400)).astype(np.float32) for _ in range(4)]  # 128 MFLOP each
    cs = [tw.constant(m) for m in mats]
    left = tw.matmul(cs[0], cs[1])
    right = tw.matmul(cs[2], cs[3])
    return mats, tw.add(left, right)


def test_thread_pool_path_gives_the_same_values():
    mats, y = _independent_matmuls()
    expect = mats[0] @ mats[1] + mats[2] @ mats[3]
    keep = tw.GraphOptions(enable_constant_folding=False)  # the matmuls must run, not fold
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=2, graph_options=keep)) as s:
        s._devices[0].intra_op_threads = 1  # one BLAS thread per call: two at once fit the cores
        plan_out = s.run(y)
        plan = next(iter(s._plans.values()))
        assert plan.dynamic  # two independent expensive nodes: the pool path was chosen
        np.testing.assert_allclose(plan_out, expect, rtol=1e-4, atol=2e-3)
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=2, graph_options=keep)) as s:
        s._devices[0].intra_op_threads = os.cpu_count() or 1  # each product takes every core
        np.testing.assert_allclose(s.run(y), expect, rtol=1e-4, atol=2e-3)
        assert not next(iter(s._plans.values())).dynamic  # one after the other: no oversubscription
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=1, graph_options=keep)) as s:
        np.testing.assert_allclose(s.run(y), expect, rtol=1e-4, atol=2e-3)
        assert not next(iter(s._plans.values())).dynamic


def test_thread_pool_path_reports_errors_without_hanging():
    p = tw.placeholder(tw.float32, None, name="p")
    big = tw.constant(np.ones((300, 300), np.float32))
    left = tw.matmul(big, big)
    right = tw.matmul(big, p)  # fails at run time: p is fed with the wrong shape
    out = tw.add(left, right)
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=2)) as s:
        with pytest.raises(errors.InvalidArgumentError, match="MatMul node 'MatMul_1'"):
            s.run(out, {p: np.ones((2, 2), np.float32)}, options=tw.RunOptions(timeout_in_ms=20000))
        # the session still works afterwards
        assert s.run(out, {p: np.ones((300, 300), np.float32)}).shape == (300, 300)


def test_plans_are_independent_of_python_threads():
    x = tw.placeholder(tw.float32, [4])
    y = x * 2.0 + 1.0
    results = {}
    with tw.Session() as s:
        def work(i):
            results[i] = [s.run(y, {x: np.full(4, i, np.float32)})[0] for _ in range(50)]
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert all(results[i] == [2.0 * i + 1] * 50 for i in range(4))


def test_allocator_reports_in_use_and_peak():
    x = tw.placeholder(tw.float32, [512, 512])
    y = tw.matmul(x, x) + 1.0
    with tw.Session() as s:
        dev = s.devices[0]
        dev.allocator.reset_peak()
        out = s.run(y, {x: np.ones((512, 512), np.float32)})
        stats = dev.allocator.stats()
        assert stats["peak_bytes_in_use"] >= 2 * 512 * 512 * 4  # matmul result and the sum at once
        assert stats["bytes_in_use"] >= out.nbytes  # the fetched result is still alive
        del out
        assert dev.allocator.bytes_in_use < stats["bytes_in_use"]


def test_log_device_placement(caplog):
    # logged through `logging` (logger "tensorweave.placement", INFO), as the library's other messages
    with caplog.at_level(logging.INFO, logger="tensorweave.placement"):
        with tw.Session(config=tw.ConfigProto(log_device_placement=True)) as s:
            s.run(tw.add(tw.constant(1.0), 2.0, name="the_add"))
    assert "the_add: (Add): /job:localhost/replica:0/task:0/device:CPU:0" in caplog.text


def test_device_constraint_that_matches_nothing():
    with tw.device("/device:GPU:0"):
        y = tw.constant(1.0) + 1.0
    with tw.Session() as s:
        with pytest.raises(errors.InvalidArgumentError, match="cannot assign a device for Const node 'Const': its device specification '/device:GPU:0' matches no device"):
            s.run(y)
    with tw.Session(config=tw.ConfigProto(allow_soft_placement=True)) as s:
        assert s.run(y) == 2.0


def test_single_element_list_outputs_are_unwrapped(sess):
    (piece,) = tw.split(tw.constant([1.0, 2.0]), 1)
    np.testing.assert_array_equal(sess.run(piece), [1.0, 2.0])
    np.testing.assert_array_equal(sess.run(tw.reshape(tw.constant([5]), [])), 5)
    assert tw.constant([], dtype=tw.int32).shape.as_list() == [0]


def test_an_identity_of_a_variable_runs_as_the_read():
    """``w/read`` is one step, the read itself, in a flat plan: no separate read and
    pass-through call; it still reads the value at its place in the step."""
    w = tw.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    y = tw.matmul(tw.ones([1, 2]), w)
    with tw.control_dependencies([y]):
        upd = tw.assign_add(w, tw.ones([2, 3]))
    with tw.Session() as s:
        s.run(w.initializer)
        got, _ = s.run([y, upd])
        np.testing.assert_array_equal(got, [[3, 5, 7]])   # the value before the update
        np.testing.assert_array_equal(s.run(y), [[5, 7, 9]])
        part = s._plan_for([y, upd], ()).partition
    names = [n[0].op.name for n in part._step_nodes if n is not None]
    assert names.count("w/read") == 1
    assert all(n[1] for n in part._step_nodes if n is not None and n[0].op.name == "w/read")


def test_an_uninitialised_variable_still_names_its_read():
    w = tw.Variable(np.float32(1.0), name="w")
    with tw.Session() as s:
        with pytest.raises(errors.FailedPreconditionError, match="w"):
            s.run(w * 2.0)


@pytest.mark.parametrize("traced", [False, True])
def test_kernels_run_without_floating_point_warnings_and_the_callers_state_comes_back(traced):
    """TF's kernels never warn about the inf or NaN they make: a step runs NumPy's kernels
    with its warnings off (runtime/step.py quiet_floats), and the caller's settings, whatever
    they are, hold again once the step has ended, or failed."""
    x = tw.placeholder(tw.float32, [None])
    y = (x / 0.0) * 0.0                                                  # divide by zero, invalid
    bad = tw.reshape(x, [5])
    options = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE) if traced else None
    with tw.Session() as s, np.errstate(all="raise"):
        got = s.run(y, {x: np.ones(3, np.float32)}, options=options, run_metadata=tw.RunMetadata())
        assert np.isnan(got).all()
        with pytest.raises(errors.InvalidArgumentError):
            s.run(bad, {x: np.ones(3, np.float32)}, options=options, run_metadata=tw.RunMetadata())
        assert np.geterr()["divide"] == "raise"
        with pytest.raises(FloatingPointError):
            np.float32(1) / np.float32(0)
