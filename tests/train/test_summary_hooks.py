"""Training hooks that report (summaries, step rate, logged tensors, timelines) and
MonitoredTrainingSession's summary arguments and non-chief workers (issue 13). TensorBoard's
own EventAccumulator reads what the hooks wrote."""

from __future__ import annotations

import json
import logging
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _model(container=None):
    """A tiny regression with a loss summary; variables in ``container`` when given."""
    scope = tw.container(container) if container else _nullcontext()
    with scope:
        x = tw.constant(np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1))
        y = 3.0 * x + 1.0
        w = tw.Variable(tw.zeros([1, 1]), name="w")
        b = tw.Variable(tw.zeros([1]), name="b")
        loss = tw.reduce_mean(tw.square(tw.matmul(x, w) + b - y), name="mse")
        step = tw.train.get_or_create_global_step()
    tw.summary.scalar("loss", loss)
    train = tw.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return loss, train


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _scalars(logdir, tag):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def test_monitored_training_session_writes_summaries_and_step_rate(tmp_path):
    with tw.Graph().as_default():
        loss, train = _model()
        with tw.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_summaries_steps=2,
                                               log_step_count_steps=2, save_checkpoint_secs=None) as sess:
            losses = [sess.run([train, loss])[1] for _ in range(7)]
    tw.summary.FileWriterCache.clear()   # flushes and closes the cached writer
    written = _scalars(tmp_path, "loss")
    # the global step fetched with the train op is read after its increment here (TF1 leaves
    # the order open): the first run is written at step 0 or 1, then every second one
    first = written[0][0]
    assert first in (0, 1) and [s for s, _ in written] == [first + 2 * i for i in range(4)]
    # the summary is of the loss the run computed (before its own update)
    np.testing.assert_allclose([v for _, v in written], [losses[i] for i in (0, 2, 4, 6)], rtol=1e-6)
    rates = _scalars(tmp_path, "global_step/sec")
    assert rates and all(v > 0 for _, v in rates)


def test_summaries_off_and_summary_dir(tmp_path):
    with tw.Graph().as_default():
        loss, train = _model()
        with tw.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path / "ckpt"),
                                               summary_dir=str(tmp_path / "sum"), save_summaries_steps=1,
                                               log_step_count_steps=0, save_checkpoint_secs=None) as sess:
            for _ in range(3):
                sess.run(train)
    tw.summary.FileWriterCache.clear()
    steps = [s for s, _ in _scalars(tmp_path / "sum", "loss")]
    assert steps[0] in (0, 1) and steps == [steps[0] + i for i in range(3)]
    assert _scalars(tmp_path / "sum", "global_step/sec") == []
    assert not list((tmp_path / "ckpt").glob("events.out.tfevents.*"))


def test_logging_tensor_hook(caplog):
    with tw.Graph().as_default():
        loss, train = _model()
        hook = tw.train.LoggingTensorHook({"the loss": loss}, every_n_iter=2, at_end=True)
        with caplog.at_level(logging.INFO, logger="tensorweave.train.summary_hooks"):
            with tw.train.MonitoredTrainingSession(hooks=[hook], save_checkpoint_secs=None) as sess:
                for _ in range(5):
                    sess.run(train)
    lines = [r.getMessage() for r in caplog.records if r.name == "tensorweave.train.summary_hooks"]
    assert len([m for m in lines if m.startswith("the loss = ")]) == 3 + 1   # iterations 0, 2, 4 and the end
    with pytest.raises(errors.InvalidArgumentError):
        tw.train.LoggingTensorHook({"l": 1.0}, every_n_iter=2, every_n_secs=1)


def test_profiler_hook_writes_chrome_traces(tmp_path):
    with tw.Graph().as_default():
        loss, train = _model()
        hook = tw.train.ProfilerHook(save_steps=3, output_dir=str(tmp_path))
        with tw.train.MonitoredTrainingSession(hooks=[hook], save_checkpoint_secs=None) as sess:
            for _ in range(7):
                sess.run(train)
    steps = sorted(int(p.stem.split("-")[1]) for p in tmp_path.glob("timeline-*.json"))
    assert steps[0] in (0, 1) and steps == [steps[0] + 3 * i for i in range(3)]   # runs 1, 4 and 7
    trace = json.loads((tmp_path / f"timeline-{steps[1]}.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("ph") == "X" and "MatMul" in json.dumps(e) for e in events)


def test_a_non_chief_worker_waits_for_the_chiefs_initialization():
    # Two graphs of one model whose variables live in a named container: process-wide, so the
    # worker's session sees what the chief's initialized (as tasks of a cluster share a ps).
    container = "test_non_chief_shared"
    tw.Session.reset("", [container])
    results, failures = {}, []
    worker_graph = tw.Graph()
    with worker_graph.as_default():
        w_loss, w_train = _model(container)
    waiting = threading.Event()

    def worker():
        try:
            with worker_graph.as_default():
                waiting.set()
                with tw.train.MonitoredTrainingSession(is_chief=False, max_wait_secs=60) as sess:
                    results["worker"] = sess.run(w_loss)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            failures.append(e)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    assert waiting.wait(30)
    with tw.Graph().as_default():
        c_loss, c_train = _model(container)
        with tw.train.MonitoredTrainingSession(is_chief=True, save_checkpoint_secs=None,
                                               log_step_count_steps=0) as sess:
            results["chief"] = sess.run(c_loss)
            t.join(60)
    assert not t.is_alive() and not failures, failures
    assert results["worker"] == pytest.approx(results["chief"])
    tw.Session.reset("", [container])


def test_a_non_chief_worker_without_a_chief_times_out():
    container = "test_non_chief_alone"
    tw.Session.reset("", [container])
    with tw.Graph().as_default():
        _model(container)
        with pytest.raises(errors.DeadlineExceededError, match="did not initialize"):
            tw.train.MonitoredTrainingSession(is_chief=False, max_wait_secs=0.3)
    tw.Session.reset("", [container])
