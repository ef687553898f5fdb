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

import numpy as np
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
def cluster(request, tmp_path_factory):
    # The tasks save checkpoints into the tests' tmp_path: allow it ([files] allow).
    allow = {"files": {"allow": [str(tmp_path_factory.getbasetemp())]}}
    with LocalCluster({"ps": 1, "worker": 2}, request.param, health_check_interval=INTERVAL, extra=allow) as c:
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
        closing = time.monotonic()
    # Closing does not wait on the lost task (a hung one never answers its CleanupStep).
    assert time.monotonic() - closing < 3.0
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


# --- recovery: MonitoredTrainingSession restores the latest checkpoint after a lost task ---------

STEPS, BATCH, SAVE_EVERY = 150, 64, 20


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[d.target]
    n_train = 1500
    nb = n_train // BATCH
    xb = x[:nb * BATCH].reshape(nb, BATCH, 64)
    yb = y[:nb * BATCH].reshape(nb, BATCH, 10)
    return xb, yb, x[n_train:], d.target[n_train:]


def _build_model(distributed: bool):
    """Softmax regression on the digits, parameters on the ps, each worker one half of every
    batch (in-graph replication). The batch is picked in the graph from the global step, so
    training is a pure function of the variables: a step retried after a restore computes
    exactly what it would have computed."""
    import contextlib

    dev = tw.device if distributed else (lambda _: contextlib.nullcontext())
    xb, yb, _, _ = _digits()
    half = BATCH // 2
    with dev("/job:ps/task:0"):
        step = tw.train.get_or_create_global_step()
        w = tw.Variable(np.zeros((64, 10), np.float32), name="w")
        b = tw.Variable(np.zeros((10,), np.float32), name="b")
        idx = tw.mod(step, xb.shape[0])
    opt = tw.train.GradientDescentOptimizer(0.5)
    grads = []
    for i in range(2):
        with dev(f"/job:worker/task:{i}"):
            x = tw.gather(tw.constant(xb[:, i * half:(i + 1) * half]), idx)
            y = tw.gather(tw.constant(yb[:, i * half:(i + 1) * half]), idx)
            logits = tw.matmul(x, w) + b
            loss = tw.reduce_mean(tw.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads.append(opt.compute_gradients(loss, [w, b]))
    with dev("/job:ps/task:0"):
        avg = [((g0 + g1) * 0.5, v) for (g0, v), (g1, _) in zip(*grads)]
        train = opt.apply_gradients(avg, global_step=step)
    return train, step


def _accuracy(w, b):
    _, _, xt, yt = _digits()
    return float(np.mean(np.argmax(xt @ w + b, axis=1) == yt))


def _reference_run():
    """The same training, uninterrupted, in one process."""
    with tw.Graph().as_default():
        train, step = _build_model(distributed=False)
        w, b = (v for v in tw.global_variables() if v.op.name in ("w", "b"))
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            for _ in range(STEPS):
                sess.run(train)
            return sess.run([w, b])


class _KillAt(tw.train.SessionRunHook):
    """After global step ``at``, SIGKILL a task from another thread while steps go on, then
    start it again (the training loop is not told)."""

    def __init__(self, cluster, job, task, at):
        self.cluster, self.job, self.task, self.at = cluster, job, task, at
        self.thread = None

    def before_run(self, run_context):
        return tw.train.SessionRunArgs(tw.train.get_global_step())

    def after_run(self, run_context, run_values):
        if self.thread is None and run_values.results >= self.at:
            def kill_and_restart():
                self.cluster.kill(self.job, self.task)
                self.cluster.start_task(self.job, self.task, wait=False)
            self.thread = threading.Thread(target=kill_and_restart, daemon=True)
            self.thread.start()


def test_training_recovers_from_lost_ps_and_worker_to_the_same_result(live, tmp_path):
    ref_w, ref_b = _reference_run()
    train, step = _build_model(distributed=True)
    killers = [_KillAt(live, "ps", 0, at=STEPS // 3), _KillAt(live, "worker", 1, at=2 * STEPS // 3)]
    t0 = time.monotonic()
    with tw.train.MonitoredTrainingSession(
            master=live.config, is_chief=True, checkpoint_dir=str(tmp_path), save_checkpoint_steps=SAVE_EVERY,
            hooks=[tw.train.StopAtStepHook(last_step=STEPS), *killers], max_wait_secs=60) as sess:
        runs = 0
        while not sess.should_stop():
            sess.run(train)
            runs += 1
        recoveries = sess.recoveries
    elapsed = time.monotonic() - t0
    for k in killers:
        k.thread.join(30)
    assert recoveries >= 2, recoveries        # the ps and the worker were lost once each
    assert runs > STEPS                        # steps after a checkpoint were done again ...
    assert tw.train.load_variable(str(tmp_path), "global_step") == STEPS   # ... to the same total
    w = tw.train.load_variable(str(tmp_path), "w")
    b = tw.train.load_variable(str(tmp_path), "b")
    np.testing.assert_array_equal(w, ref_w)   # deterministic: exactly the uninterrupted result
    np.testing.assert_array_equal(b, ref_b)
    acc = _accuracy(w, b)
    assert acc > 0.85, acc
    print(f"recovered {recoveries}x in {elapsed:.1f}s, {runs} runs for {STEPS} steps, accuracy {acc:.3f}",
          file=sys.stderr)
