"""Fault tolerance (whitepaper 3.3) with real task processes on loopback.

Every test runs over every installed transport that crosses processes (grpc; ucx where
installed), with one ps and two worker processes from ``distributed.testing.LocalCluster``
(always reaped). A task killed (SIGKILL) or hung (SIGSTOP) while a step needs it fails the
step on every task within two health-check intervals, the client gets UnavailableError or
AbortedError, and the surviving tasks keep serving; ``MonitoredTrainingSession`` recovers
from a lost ps by restoring the latest checkpoint, ending exactly where an uninterrupted
run ends; a client with a wrong token is refused.
"""

from __future__ import annotations

import re
import signal
import sys
import threading
import time

import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed.testing import LocalCluster

INTERVAL = 0.5   # health_check_interval of the test clusters (seconds)
# Scheduling slack on a loaded 2-core machine on top of the two intervals the checker needs.
SLACK = 1.5


def _process_transports():
    return sorted(n for n, _ in plugins.registry().transports.items() if n != "inproc")


@pytest.fixture(scope="module", params=_process_transports())
def cluster(request):
    with LocalCluster({"ps": 1, "worker": 2}, request.param, health_check_interval=INTERVAL) as c:
        yield c


@pytest.fixture
def live(cluster):
    """The module's cluster with every task up; tasks a test killed are started again after it."""
    yield cluster
    for job, task in cluster.tasks:
        if cluster.running(job, task):
            cluster.send_signal(job, task, signal.SIGCONT)
    cluster.start()


def _in_thread(fn):
    """Run ``fn`` in a thread; returns (thread, box) where box gets "value" or "error"."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e
        box["at"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _poll(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def _running_steps(cluster, job, task):
    try:
        return cluster.health(job, task, timeout=1.0).get("running_steps")
    except errors.OpError:
        return None


def _blocked_step():
    """A step that needs worker 0 until it dies: worker 0 waits on an empty queue, worker 1
    and the ps wait on Recvs from it."""
    with tw.device("/job:worker/task:0"):
        q = tw.FIFOQueue(1, tw.float32, shapes=[[]], name="never_fed")
        blocked = q.dequeue()
    with tw.device("/job:worker/task:1"):
        y = blocked * 2.0
    with tw.device("/job:ps/task:0"):
        z = y + 1.0
    # What the survivors run afterwards: the ps and worker 1 only.
    with tw.device("/job:worker/task:1"):
        a = tw.constant([1.0, 2.0]) * 3.0
    with tw.device("/job:ps/task:0"):
        b = tw.reduce_sum(a)
    return z, b


def _fail_a_task_mid_step(cluster, sig):
    z, b = _blocked_step()
    with tw.Session(target=cluster.config) as sess:
        assert sess.run(b) == 9.0   # registers the survivors' plan while all is well
        t, box = _in_thread(lambda: sess.run(z, options=tw.RunOptions(timeout_in_ms=60000)))
        # The step is in flight on every task before the failure.
        for job, task in cluster.tasks:
            _poll(lambda job=job, task=task: _running_steps(cluster, job, task) == 1, 10,
                  f"the step to start on /job:{job}/task:{task} (client: {box})")
        failed_at = time.monotonic()
        cluster.send_signal("worker", 0, sig)
        t.join(2 * INTERVAL + SLACK + 5)
        assert not t.is_alive(), "the client hung"
        detected = box["at"] - failed_at
        assert isinstance(box.get("error"), errors.UnavailableError | errors.AbortedError), box
        assert re.search(r"/job:worker/(replica:0/)?task:0", str(box["error"])), box["error"]  # names the lost task
        assert detected < 2 * INTERVAL + SLACK, f"failure seen after {detected:.2f}s"
        # The step was aborted on the survivors: nothing is left running there ...
        for job, task in [("ps", 0), ("worker", 1)]:
            _poll(lambda job=job, task=task: _running_steps(cluster, job, task) == 0, 2 * INTERVAL + SLACK,
                  f"the step to end on /job:{job}/task:{task}")
        # ... and they answer the next step promptly.
        t0 = time.monotonic()
        assert sess.run(b, options=tw.RunOptions(timeout_in_ms=10000)) == 9.0
        assert time.monotonic() - t0 < 2.0
        # A step that needs the lost task fails fast instead of hanging.
        with pytest.raises((errors.UnavailableError, errors.AbortedError, errors.DeadlineExceededError)):
            sess.run(z, options=tw.RunOptions(timeout_in_ms=3 * int(1000 * INTERVAL) + 2000))
    return detected


def test_sigkill_of_a_worker_mid_step_fails_the_step_everywhere(live):
    detected = _fail_a_task_mid_step(live, signal.SIGKILL)
    print(f"SIGKILL detected after {detected * 1000:.0f} ms", file=sys.stderr)


def test_hung_worker_is_detected_by_health_checks(live):
    # SIGSTOP keeps its connections open: only the health checks can tell.
    try:
        detected = _fail_a_task_mid_step(live, signal.SIGSTOP)
    finally:
        live.kill("worker", 0)   # SIGCONT, then SIGKILL; the fixture starts it again
    assert detected > INTERVAL / 2  # not an RPC failure: the checker's verdict
    print(f"SIGSTOP detected after {detected * 1000:.0f} ms", file=sys.stderr)


def test_wrong_token_is_refused_through_session(monkeypatch):
    transport = _process_transports()[0]
    with LocalCluster({"worker": 2}, transport, token="right-token", health_check_interval=INTERVAL) as c:
        with tw.device("/job:worker/task:0"):
            x = tw.constant(2.0) * 3.0
        with tw.device("/job:worker/task:1"):
            y = x + 1.0
        with tw.Session(target=c.config) as sess:   # the config names the token file
            assert sess.run(y) == 7.0
        # tw.Session("grpc://...") takes the token from $TENSORWEAVE_TOKEN
        for token in ("wrong-token", None):
            if token is None:
                monkeypatch.delenv("TENSORWEAVE_TOKEN", raising=False)
            else:
                monkeypatch.setenv("TENSORWEAVE_TOKEN", token)
            with pytest.raises(errors.UnauthenticatedError, match="token"):
                tw.Session(c.target)
        monkeypatch.setenv("TENSORWEAVE_TOKEN", "right-token")
        with tw.Session(c.target) as sess:
            assert sess.run(y) == 7.0
