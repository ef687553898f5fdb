"""The real TensorBoard server, on loopback, serves what a tensorweave run wrote: its
scalars route and its graph route (with each node's device and the traced step)."""

import json
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import tensorweave as tw

pytest.importorskip("tensorboard")

DEADLINE_S = 120  # starting TensorBoard imports a lot; on a loaded 2-core machine it can take a while


def _train_and_write(logdir):
    x = tw.placeholder(tw.float32, [None, 2], name="x")
    y = tw.placeholder(tw.float32, [None, 1], name="y")
    with tw.name_scope("model"):
        w = tw.Variable(tw.zeros([2, 1]), name="w")
        loss = tw.reduce_mean(tw.square(tw.matmul(x, w) - y))
    train = tw.train.GradientDescentOptimizer(0.01).minimize(loss)
    tw.summary.scalar("loss", loss)
    merged = tw.summary.merge_all()
    xs = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    ys = xs @ np.array([[0.5], [-0.25]], np.float32)
    losses = []
    with tw.Session() as sess, tw.summary.FileWriter(logdir) as writer:
        sess.run(tw.global_variables_initializer())
        md = tw.RunMetadata()
        for step in range(5):
            _, lv, s = sess.run([train, loss, merged], {x: xs, y: ys}, run_metadata=md,
                               options=tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE) if step == 4 else None)
            writer.add_summary(s, step)
            losses.append(float(lv))
        writer.add_graph(sess.graph, placement=md)
        writer.add_run_metadata(md, "last_step", 4)
    return losses


class _TensorBoard:
    """``tensorboard --logdir DIR --host 127.0.0.1 --port 0``: the OS picks a free port and
    TensorBoard prints the URL it serves on, which we read from its stderr."""

    def __init__(self, logdir):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", "0", "--load_fast", "false", "--reload_interval", "1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.seen = []
        # Drain stderr for the whole life of the process, so it never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def url(self, deadline):
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                pytest.fail(f"tensorboard exited ({self.proc.wait()}): {''.join(self.seen)}")
            self.seen.append(line)
            m = re.search(r"TensorBoard \S+ at (http://127\.0\.0\.1:\d+)/", line)
            if m:
                return m.group(1)
        pytest.fail(f"tensorboard printed no URL in {DEADLINE_S} s: {''.join(self.seen)}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


def _get_when_ready(url, deadline, ready):
    """GET ``url`` until ``ready(status, body)`` (TensorBoard loads the logdir in the
    background: routes answer 404 or empty until it has)."""
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                last = (r.status, r.read().decode())
        except urllib.error.HTTPError as e:
            last = (e.code, e.read().decode(errors="replace"))
        except urllib.error.URLError as e:
            last = (None, str(e))
        if ready(*last):
            return last[1]
        time.sleep(0.1)
    pytest.fail(f"{url}: not ready before the deadline; last answer {last}")


def test_tensorboard_serves_a_tensorweave_run(tmp_path):
    losses = _train_and_write(tmp_path)
    tb = _TensorBoard(tmp_path)
    try:
        deadline = time.monotonic() + DEADLINE_S
        base = tb.url(deadline)
        body = _get_when_ready(f"{base}/data/plugin/scalars/scalars?tag=loss&run=.", deadline,
                               lambda status, body: status == 200 and len(json.loads(body)) == 5)
        points = json.loads(body)  # [[wall_time, step, value], ...]
        assert [p[1] for p in points] == [0, 1, 2, 3, 4]
        assert [p[2] for p in points] == pytest.approx(losses)
        assert losses[-1] < losses[0]

        graph = _get_when_ready(f"{base}/data/plugin/graphs/graph?run=.", deadline,
                                lambda status, body: status == 200 and "node" in body)
        assert re.search(r'name: "model/MatMul"\s+op: "MatMul"\s+input: "x"\s+input: "model/w/read"\s+'
                         r'device: "/job:localhost/replica:0/task:0/device:CPU:0"', graph)
        assert 'key: "_output_shapes"' in graph and 'op: "ScalarSummary"' in graph

        info = json.loads(_get_when_ready(f"{base}/data/plugin/graphs/info", deadline,
                                          lambda status, body: status == 200 and "last_step" in body))
        assert info["."]["tags"]["last_step"]["profile"] is True
        md = _get_when_ready(f"{base}/data/plugin/graphs/run_metadata?run=.&tag=last_step", deadline,
                             lambda status, body: status == 200)
        assert 'node_name: "model/MatMul"' in md and "all_start_micros" in md
    finally:
        tb.close()
    assert tb.proc.poll() is not None
