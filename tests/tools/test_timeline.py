"""Timelines of traced steps: Chrome trace-event JSON (checked against the format's rules by
``check_chrome_trace``), the TENSORWEAVE_TRACE_DIR switch, ``tensorweave trace SCRIPT.py``
and ``examples/digits.py --trace``."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.client import timeline as client_timeline
from tensorweave.runtime.config import DeviceStepStats, NodeExecStats, StepStats, TransferStats
from tensorweave.testing.fake_device import register_fake_devices
from tensorweave.tools import cli
from tensorweave.tools.timeline import Timeline, check_chrome_trace

ROOT = Path(__file__).resolve().parents[2]
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
FAKE0 = "/job:localhost/replica:0/task:0/device:FAKE:0"
FULL = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE)


@pytest.fixture
def fake_devices():
    register_fake_devices(count=2)
    yield
    plugins._reset_for_tests()


def _two_device_step():
    x = tw.placeholder(tw.float32, [32, 32], name="x")
    with tw.device("/device:FAKE:0"):
        y = tw.matmul(x, x, name="mm_fake")
    with tw.device("/device:CPU:0"):
        z = tw.reduce_sum(tw.matmul(y, x, name="mm_cpu"), name="total")
    md = tw.RunMetadata()
    with tw.Session() as s:
        s.run(z, {x: np.ones((32, 32), np.float32)}, options=FULL, run_metadata=md)
    return md.step_stats


@pytest.mark.parametrize("show_dataflow", [True, False])
@pytest.mark.parametrize("show_memory", [True, False])
def test_trace_of_a_two_device_step_follows_the_format(fake_devices, show_dataflow, show_memory):
    stats = _two_device_step()
    trace = check_chrome_trace(Timeline(stats).generate_chrome_trace_format(show_dataflow, show_memory))
    events = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs.values()) == sorted([CPU, FAKE0])
    xs = [e for e in events if e["ph"] == "X"]
    assert {e["args"]["name"] for e in xs} >= {"mm_fake", "mm_cpu", "total"}
    assert all(e["name"] == e["args"]["op"] for e in xs)  # TF's layout: the op type, the node in args
    mm = next(e for e in xs if e["args"]["name"] == "mm_fake")
    assert procs[mm["pid"]] == FAKE0 and mm["args"]["output_bytes"] == 32 * 32 * 4
    flows = [e for e in events if e["ph"] in "sf"]
    if show_dataflow:
        (s,), (f,) = [e for e in flows if e["ph"] == "s"], [e for e in flows if e["ph"] == "f"]
        assert s["id"] == f["id"] and procs[s["pid"]] == FAKE0 and procs[f["pid"]] == CPU
        recv = next(e for e in xs if e["name"] == "_Recv")
        assert recv["args"]["bytes"] == 32 * 32 * 4 and recv["args"]["transport"] == "local"
    else:
        assert not flows
    counters = [e for e in events if e["ph"] == "C"]
    assert bool(counters) == show_memory
    assert trace["otherData"]["step_start_micros"] == min(n.all_start_nanos for n in stats) // 1000


def test_overlapping_nodes_of_one_thread_get_rows_that_nest():
    # A Recv waits (started at 0, done at 50) while its thread runs two other nodes.
    def node(name, op, start, end, tid=7, transfer=None):
        return NodeExecStats(name, op, CPU, start, 0, end - start, end - start, tid, transfer=transfer)

    tr = TransferStats("k", "t:0", 4, FAKE0, CPU)
    stats = StepStats([DeviceStepStats(CPU, [node("r", "_Recv", 0, 50_000, transfer=tr), node("a", "Add", 10_000, 20_000),
                                             node("b", "Mul", 40_000, 60_000), node("c", "Neg", 45_000, 55_000)],
                                       {7: "worker"}),
                       DeviceStepStats(FAKE0, [node("s", "_Send", 0, 1_000, tid=8, transfer=tr)], {8: "other"})])
    trace = check_chrome_trace(Timeline(stats).generate_chrome_trace_format())
    xs = {e["args"]["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert xs["r"]["tid"] == xs["a"]["tid"] == 7  # "a" nests inside the Recv
    assert xs["b"]["tid"] != 7 and xs["c"]["tid"] == xs["b"]["tid"]  # "b" overlaps it partly; "c" nests in "b"
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[(xs["r"]["pid"], 7)] == "worker (tid 7)" and names[(xs["b"]["pid"], xs["b"]["tid"])] == "worker (tid 7) +1"


def test_the_checker_finds_what_breaks_a_trace():
    def trace(*events):
        meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}},
                {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}}]
        return {"traceEvents": meta + list(events)}

    ok = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10}
    check_chrome_trace(trace(ok))
    bad = [
        ({"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0}, "dur"),
        ({"ph": "X", "name": "a", "pid": 2, "tid": 1, "ts": 0, "dur": 1}, "pid 2 has no process_name"),
        ({"ph": "X", "name": "a", "pid": 1, "tid": 9, "ts": 0, "dur": 1}, "tid 9 has no thread_name"),
        ({"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10}, "without nesting"),
        ({"ph": "s", "name": "f", "cat": "c", "id": 1, "pid": 1, "tid": 1, "ts": 1}, "1 starts and 0 finishes"),
        ({"ph": "C", "name": "m", "pid": 1, "ts": 1, "args": {"x": "many"}}, "numeric"),
    ]
    for event, message in bad:
        with pytest.raises(ValueError, match=message):
            check_chrome_trace(trace(ok, event))
    with pytest.raises(ValueError, match="inside no slice"):
        check_chrome_trace(trace(ok, {"ph": "s", "cat": "c", "id": 1, "pid": 1, "tid": 1, "ts": 5},
                                 {"ph": "f", "bp": "e", "cat": "c", "id": 1, "pid": 1, "tid": 1, "ts": 50}))


def test_timeline_reads_the_dict_form_lists_inputs_with_a_graph_and_refuses_the_rest(sess):
    a = tw.placeholder(tw.float32, [3], name="a")
    b = tw.multiply(a, 2.0, name="b")
    md = tw.RunMetadata()
    sess.run(b, {a: [1, 2, 3]}, options=FULL, run_metadata=md)
    trace = json.loads(Timeline(md.step_stats.to_dict(), graph=tw.get_default_graph()).generate_chrome_trace_format())
    (x,) = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["args"]["name"] == "b"]
    assert x["args"]["inputs"][0] == "a:0"
    with pytest.raises(TypeError, match="StepStats"):
        Timeline([{"node": "x"}])
    assert Timeline is client_timeline.Timeline  # tools.timeline is the public name of the one implementation


def test_trace_dir_environment_traces_every_run_of_sessions_made_while_it_is_set(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("TENSORWEAVE_TRACE_DIR", str(first))
    a = tw.placeholder(tw.float32, [2], name="a")
    b = a + 1.0
    with tw.Session() as sess:
        monkeypatch.setenv("TENSORWEAVE_TRACE_DIR", str(second))  # read once, when the session was made
        md = tw.RunMetadata()
        sess.run(b, {a: [1, 2]}, run_metadata=md)  # the caller's metadata is filled too
        sess.run(b, {a: [3, 4]}, options=tw.RunOptions(timeout_in_ms=5000))
    assert len(md.step_stats) > 0
    files = sorted(first.glob("step_*.json"))
    assert len(files) == 2 and not second.exists()
    for f in files:
        check_chrome_trace(f.read_text())
    monkeypatch.delenv("TENSORWEAVE_TRACE_DIR")
    with tw.Session() as sess:
        sess.run(b, {a: [1, 2]})
    assert len(list(first.glob("step_*.json"))) == 2


SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorweave as tw

    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [4, 4], name="x")
        y = tw.reduce_sum(tw.matmul(x, x), name="y")
    with tw.Session(graph=g) as sess:
        for _ in range(int(sys.argv[1])):
            sess.run(y, {x: np.ones((4, 4), np.float32)})
    print("args", sys.argv[1:])
    sys.exit(int(sys.argv[2]))
""")


def test_trace_command_runs_a_script_with_every_step_traced(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "traces"
    assert cli.main(["trace", str(script), "3", "0", "--out", str(out)]) == 0
    files = sorted(out.glob("step_*.json"))
    assert len(files) == 3
    trace = check_chrome_trace(files[0].read_text())
    assert any(e["ph"] == "X" and e["args"]["name"] == "y" for e in trace["traceEvents"])
    captured = capsys.readouterr()
    assert "args ['3', '0']" in captured.out and "3 traced steps in" in captured.err
    assert "TENSORWEAVE_TRACE_DIR" not in os.environ  # put back as it was
    # --out before the script; the script's exit status is the command's
    assert cli.main(["trace", "--out", str(out), str(script), "1", "3"]) == 3
    assert len(list(out.glob("step_*.json"))) == 4
    assert cli.main(["trace", str(script), "1", "0"]) == 2
    assert "--out DIR" in capsys.readouterr().err
    assert cli.main(["trace", str(tmp_path / "missing.py"), "--out", str(out)]) == 2


def test_trace_command_from_the_console(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "tensorweave", "trace", str(script), "2", "0", "--out",
                           str(tmp_path / "t")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "t").glob("step_*.json"))) == 2


def test_digits_example_writes_a_timeline_of_one_training_step(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("digits_example", ROOT / "examples" / "digits.py")
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    digits.train("mlp", epochs=1, quiet=True, trace=str(tmp_path))
    trace = check_chrome_trace((tmp_path / "mlp_step.json").read_text())
    ops = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"MatMul", "ApplyAdam"} <= ops
    assert any(e["ph"] == "C" for e in trace["traceEvents"])


def test_trace_files_never_overwrite_each_other(tmp_path):
    stats = StepStats([DeviceStepStats(CPU, [NodeExecStats("n", "Add", CPU, 1_000, 0, 5, 5, 1)], {1: "main"})])
    for i in range(300):
        (tmp_path / f"step_{i}.json").write_text("taken")
    paths = {client_timeline.write_step_trace(str(tmp_path), stats) for _ in range(2)}
    assert len(paths) == 2
    for i in range(300):
        assert (tmp_path / f"step_{i}.json").read_text() == "taken"
    for p in paths:
        check_chrome_trace(Path(p).read_text())
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temporary left behind
