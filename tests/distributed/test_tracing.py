"""Traced distributed steps: every task returns its partitions' stats with its RunGraph, the
master merges them onto its clock with an estimated offset per task, and the transfers show
as a Send on one task and the RecvTensor pull (a Recv naming its transport) on another. Real
task processes over grpc (LocalCluster, always reaped); the master service and the wire
checks in one process (inproc)."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed import wire
from tensorweave.distributed.master import CLOCK_DRIFT, ClockOffsets
from tensorweave.distributed.server import Server
from tensorweave.distributed.testing import LocalCluster
from tensorweave.tools.timeline import Timeline, check_chrome_trace

FULL = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE, timeout_in_ms=60000)
PS, W0, W1 = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"


def _graph():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 8], name="x")
        with tw.device("/job:ps/task:0"):
            w = tw.Variable(np.ones((8, 16), np.float32), name="w")
        with tw.device("/job:worker/task:0"):
            h = tw.nn.relu(tw.matmul(x, w, name="h_mm"), name="h")
        with tw.device("/job:worker/task:1"):
            y = tw.reduce_sum(h * h, name="y")
    return g, x, w, y


def _check_step(stats, transport):
    tasks = {ds.device.split("/device:")[0] for ds in stats.dev_stats}
    assert tasks == {PS, W0, W1}
    nodes = {(n.device.split("/device:")[0], n.node_name): n for n in stats}
    assert nodes[(W0, "h_mm")].op == "MatMul" and nodes[(W1, "y")].op == "Sum"
    sends = {n.transfer.key: n for n in stats if n.op == "_Send"}
    recvs = {n.transfer.key: n for n in stats if n.op == "_Recv"}
    # w: ps -> worker 0 (8 x 16 floats), h: worker 0 -> worker 1 (5 x 16 floats)
    for tensor, src, dst, nbytes in (("w/read:0", PS, W0, 8 * 16 * 4), ("h:0", W0, W1, 5 * 16 * 4)):
        (key,) = [k for k, n in sends.items() if n.transfer.tensor == tensor]
        send, recv = sends[key], recvs[key]
        assert send.device.startswith(src) and recv.device.startswith(dst)
        assert send.transfer.bytes == recv.transfer.bytes == recv.output[0].bytes == nbytes
        assert send.transfer.transport == "remote" and recv.transfer.transport == transport
        assert send.transfer.src_device.startswith(src) and send.transfer.dst_device.startswith(dst)
    assert set(stats.clock_offsets) == {PS, W0, W1}
    for task, c in stats.clock_offsets.items():
        # every task shares this machine's clock: the true offset, 0, lies within the bound
        assert 0 <= c["error_nanos"] < 5_000_000_000 and abs(c["offset_nanos"]) <= c["error_nanos"], (task, c)
    for ds in stats.dev_stats:
        assert all(n.thread_id in ds.thread_names for n in ds.node_stats)
    trace = check_chrome_trace(Timeline(stats).generate_chrome_trace_format(show_dataflow=True, show_memory=True))
    events = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {p.split("/device:")[0] for p in procs.values()} == {PS, W0, W1}
    flows = [e for e in events if e["ph"] == "s"]
    assert len(flows) >= 2
    cross = {(procs[s["pid"]].split("/device:")[0], procs[f["pid"]].split("/device:")[0])
             for s in flows for f in events if f["ph"] == "f" and f["id"] == s["id"]}
    assert {(PS, W0), (W0, W1)} <= cross


@pytest.mark.skipif("grpc" not in {n for n, _ in plugins.registry().transports.items()},
                    reason="the grpc transport is not installed")
def test_full_trace_over_grpc_has_every_task_and_the_transfers_between_them():
    xv = np.ones((5, 8), np.float32)
    with LocalCluster({"ps": 1, "worker": 2}, "grpc") as cluster:
        g, x, w, y = _graph()
        with tw.Session(cluster.target, graph=g) as sess:
            sess.run(w.initializer)
            md = tw.RunMetadata()
            assert sess.run(y, {x: xv}, options=FULL, run_metadata=md) == pytest.approx(5 * 16 * 64.0)
            _check_step(md.step_stats, "grpc")
            assert md.placement
            # an untraced step asks for nothing and returns no stats
            md2 = tw.RunMetadata()
            sess.run(y, {x: xv}, run_metadata=md2)
            assert len(md2.step_stats) == 0


@pytest.fixture
def inproc_cluster(request):
    name = f"inproc-trace-{request.node.name[-20:]}"
    cluster = {"ps": [f"{name}:1"], "worker": [f"{name}:2", f"{name}:3"]}
    servers = [Server(cluster, "ps", 0, transport="inproc"), Server(cluster, "worker", 0, transport="inproc"),
               Server(cluster, "worker", 1, transport="inproc")]
    yield servers
    for s in servers:
        s.stop()


@pytest.mark.parametrize("remote_master", [False, True])
def test_full_trace_through_either_master(inproc_cluster, remote_master):
    g, x, w, y = _graph()
    config = tw.ConfigProto(use_remote_master=remote_master)
    with tw.Session(inproc_cluster[1].target, graph=g, config=config) as sess:
        sess.run(w.initializer)
        md = tw.RunMetadata()
        sess.run(y, {x: np.ones((5, 8), np.float32)}, options=FULL, run_metadata=md)
    _check_step(md.step_stats, "inproc")
    if remote_master:
        assert all("via the master service" in c["source"] for c in md.step_stats.clock_offsets.values())


def test_step_stats_from_the_wire_are_checked():
    with pytest.raises(errors.InvalidArgumentError, match=r"task 3: dev_stats\[0\]\.device"):
        wire.decode_step_stats({"dev_stats": [{"device": 7}]}, "task 3")
    with pytest.raises(errors.InvalidArgumentError, match=r"transfer\.bytes"):
        wire.decode_step_stats({"dev_stats": [{"device": "d", "node_stats": [
            {"node_name": "n", "op": "_Recv", "all_start_nanos": 1, "transfer": {
                "key": "k", "tensor": "t", "bytes": "x", "src_device": "a", "dst_device": "b"}}]}]})
    ok = wire.decode_step_stats({"dev_stats": [{"device": "d", "node_stats": [
        {"node_name": "n", "op": "Add", "all_start_nanos": 5, "all_end_rel_nanos": 3}]}]})
    assert ok.dev_stats[0].node_stats[0].all_end_nanos == 8


def test_clock_offsets_follow_ntp_and_keep_the_tighter_recent_sample():
    clocks = ClockOffsets()
    # The task's clock runs 1 ms ahead; the request takes 100 us each way, 50 us to serve.
    sent, ahead = 10_000_000_000, 1_000_000
    received, replied = sent + 100_000 + ahead, sent + 150_000 + ahead
    answered = sent + 250_000
    offset, error, source = clocks.sample(("worker", 0), sent, answered, received, replied)
    assert (offset, error, source) == (ahead, 100_000, "Health")
    assert offset - error <= ahead <= offset + error
    # a slower RunGraph soon after: the stored Health sample (aged by the drift) is tighter
    later = answered + 1_000_000_000
    got = clocks.estimate(("worker", 0), later, later + 3_000_000, {"received_ns": later + 1_000_000 + ahead,
                                                                   "replied_ns": later + 1_500_000 + ahead}, "t")
    assert got == (ahead, 100_000 + int(1_003_000_000 * CLOCK_DRIFT), "Health")  # aged since it was taken
    with pytest.raises(errors.InvalidArgumentError, match="received_ns"):
        clocks.estimate(("worker", 0), 0, 1, {"received_ns": "x"}, "t")


def test_trace_dir_traces_the_clients_steps_only(inproc_cluster, tmp_path, monkeypatch):
    # The servers run in this process and see the variable too: the master service's own
    # session must not write the client's steps a second time.
    monkeypatch.setenv("TENSORWEAVE_TRACE_DIR", str(tmp_path))
    g, x, w, y = _graph()
    with tw.Session(inproc_cluster[1].target, graph=g, config=tw.ConfigProto(use_remote_master=True)) as sess:
        sess.run(w.initializer)
        sess.run(y, {x: np.ones((5, 8), np.float32)})
    files = sorted(tmp_path.glob("step_*.json"))
    assert len(files) == 2
    procs = {e["args"]["name"].split("/device:")[0] for e in check_chrome_trace(files[-1].read_text())["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {PS, W0, W1}
