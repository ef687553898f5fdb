"""Traced steps in one process: RunOptions(trace_level=FULL_TRACE) fills RunMetadata.step_stats
(TF's StepStats: per device, per node, times on the wall clock, thread, outputs, memory, and
the transfers of Send/Recv), on every executor path: sequential, dynamic (thread pool),
multi-device and control flow."""

import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.runtime.config import StepStats
from tensorweave.testing.fake_device import register_fake_devices

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
FAKE0 = "/job:localhost/replica:0/task:0/device:FAKE:0"
FAKE1 = "/job:localhost/replica:0/task:0/device:FAKE:1"
FULL = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE)


@pytest.fixture
def fake_devices():
    register_fake_devices(count=2)
    yield
    plugins._reset_for_tests()


def _traced(sess, fetches, feeds=None, config_options=FULL):
    md = tw.RunMetadata()
    out = sess.run(fetches, feeds, options=config_options, run_metadata=md)
    return out, md.step_stats


def test_sequential_step_records_every_node_with_wall_clock_thread_and_outputs():
    x = tw.placeholder(tw.float32, [64, 32], name="x")
    w = tw.Variable(np.ones((32, 16), np.float32), name="w")
    y = tw.nn.relu(tw.matmul(x, w, name="mm"), name="act")
    with tw.Session(config=tw.ConfigProto(device_count={"OPENCL": 0})) as sess:
        sess.run(w.initializer)
        before = time.time_ns()
        _, stats = _traced(sess, y, {x: np.ones((64, 32), np.float32)})
        after = time.time_ns()
    assert isinstance(stats, StepStats)
    assert [ds.device for ds in stats.dev_stats] == [CPU]
    ds = stats.dev_stats[0]
    by_name = {n.node_name: n for n in ds.node_stats}
    assert {"mm", "act"} <= set(by_name)
    mm = by_name["mm"]
    assert mm.op == "MatMul" and mm.device == CPU
    assert before <= mm.all_start_nanos <= mm.all_end_nanos <= after
    assert mm.all_start_micros == mm.all_start_nanos // 1000
    assert 0 <= mm.op_start_rel_nanos <= mm.op_end_rel_nanos <= mm.all_end_rel_nanos
    assert mm.op_end_rel_micros == mm.op_end_rel_nanos // 1000
    # a sequential step runs in the caller's thread
    assert mm.thread_id == threading.get_native_id()
    assert ds.thread_names[mm.thread_id] == threading.current_thread().name
    (out,) = mm.output
    assert (out.slot, out.bytes, out.dtype, out.shape) == (0, 64 * 16 * 4, "float32", [64, 16])
    assert mm.output_bytes == 64 * 16 * 4
    assert mm.memory and mm.memory[0].allocator_bytes_in_use >= 0
    assert mm.timeline_label == "mm = MatMul()"
    # the nodes are in the order they ran
    starts = [n.all_start_nanos for n in ds.node_stats]
    assert starts == sorted(starts)


def test_legacy_keys_and_flat_iteration_still_work(sess):
    y = tw.matmul(tw.constant(np.ones((8, 8), np.float32)), tw.placeholder(tw.float32, [8, 8], name="p"))
    _, stats = _traced(sess, y, {"p:0": np.ones((8, 8), np.float32)})
    (s,) = [s for s in stats if s["op"] == "MatMul"]
    assert s["end"] >= s["start"] > 1e9  # seconds on the wall clock
    assert s["device"] == CPU and s["output_bytes"] == 256 and s.get("nope", 7) == 7
    assert len(stats) == len(list(stats))


def test_untraced_runs_leave_stats_empty_and_each_traced_run_replaces_them(sess):
    a = tw.placeholder(tw.float32, [2], name="a")
    b = a * 2.0
    md = tw.RunMetadata()
    sess.run(b, {a: [1, 2]}, run_metadata=md)
    assert len(md.step_stats) == 0 and md.placement
    sess.run(b, {a: [1, 2]}, options=FULL, run_metadata=md)
    first = len(md.step_stats)
    sess.run(b, {a: [1, 2]}, options=FULL, run_metadata=md)
    assert len(md.step_stats) == first > 0  # replaced, not appended


def test_stats_are_built_when_first_read_and_can_be_assigned():
    md = tw.RunMetadata()
    calls = []
    md.set_step_stats_builder(lambda: calls.append(1) or StepStats())
    assert not calls
    assert md.step_stats is md.step_stats
    assert calls == [1]
    md.set_step_stats_builder(lambda: 1 / 0)
    md.step_stats = StepStats()  # an assignment drops a pending builder
    assert len(md.step_stats) == 0


def test_parallel_steps_record_the_pool_threads_that_ran_them():
    # Two independent expensive products: the dynamic executor runs them on its pool.
    x = tw.constant(np.ones((400, 400), np.float32))
    a, b = tw.matmul(x, x, name="a"), tw.matmul(x + 1.0, x, name="b")
    with tw.Session(config=tw.ConfigProto(inter_op_parallelism_threads=2, device_count={"OPENCL": 0})) as sess:
        sess._devices[0].intra_op_threads = 1  # a single-threaded BLAS: parallel products pay off
        _, stats = _traced(sess, [a, b])
    ds = stats.dev_stats[0]
    nodes = {n.node_name: n for n in ds.node_stats}
    pool = [n for n in (nodes["a"], nodes["b"]) if ds.thread_names[n.thread_id].startswith("tw-interop")]
    assert pool, ds.thread_names  # at least one product ran on a pool thread, and says which
    assert all(n.thread_id in ds.thread_names for n in ds.node_stats)


def test_transfers_between_devices_record_send_and_recv_with_one_key(fake_devices):
    x = tw.placeholder(tw.float32, [16, 16], name="x")
    with tw.device("/device:FAKE:0"):
        y = tw.matmul(x, x, name="mm_fake")
    with tw.device("/device:CPU:0"):
        z = tw.reduce_sum(y, name="total")
    with tw.Session() as s:
        _, stats = _traced(s, z, {x: np.ones((16, 16), np.float32)})
    by_dev = {ds.device: ds for ds in stats.dev_stats}
    (send,) = [n for n in by_dev[FAKE0].node_stats if n.op == "_Send"]
    (recv,) = [n for n in by_dev[CPU].node_stats if n.op == "_Recv"]
    assert send.transfer.key == recv.transfer.key
    for n in (send, recv):
        t = n.transfer
        assert (t.tensor, t.bytes, t.src_device, t.dst_device, t.transport) == (
            "mm_fake:0", 16 * 16 * 4, FAKE0, CPU, "local")
    assert recv.output[0].bytes == 16 * 16 * 4
    # the Recv ends after the Send began (one process: one clock)
    assert recv.all_end_nanos >= send.all_start_nanos
    # transfers are not fed to the placer's cost model as if they were computations
    assert "mm_fake" in s._cost_model.measured and not any(k.startswith("_send") for k in s._cost_model.measured)


def test_while_loop_nodes_carry_their_frame_and_iteration(fake_devices):
    x = tw.placeholder(tw.float32, [2], name="x")
    with tw.device("/device:CPU:0"):
        a0 = tw.reduce_sum(x, name="a0")
    with tw.device("/device:FAKE:1"):
        r = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0), [tw.constant(0), a0])
    with tw.Session() as s:
        out, stats = _traced(s, r, {x: [0.5, 0.5]})
    assert out[1] == 8.0
    adds = [n for n in stats if n.op == "Add"]
    assert sorted(n.iteration for n in adds) == [0, 1, 2] and {n.frame for n in adds} == {"while"}
    # the loop's inputs came from the CPU: a Recv in the root frame of FAKE:1
    assert any(n.op == "_Recv" and n.device == FAKE1 and n.transfer.transport == "local" for n in stats)


def test_dict_form_round_trips_and_malformed_input_names_the_field(fake_devices):
    x = tw.placeholder(tw.float32, [4], name="x")
    with tw.device("/device:FAKE:0"):
        y = x * 3.0
    with tw.Session() as s:
        _, stats = _traced(s, y + 1.0, {x: np.ones(4, np.float32)})
    d = stats.to_dict()
    assert StepStats.from_dict(d) == stats
    d["dev_stats"][0]["node_stats"][0]["all_start_nanos"] = "soon"
    with pytest.raises(errors.InvalidArgumentError, match=r"dev_stats\[0\]\.node_stats\[0\]\.all_start_nanos"):
        StepStats.from_dict(d, "test")
    with pytest.raises(errors.InvalidArgumentError, match="dev_stats"):
        StepStats.from_dict({"dev_stats": 3})
