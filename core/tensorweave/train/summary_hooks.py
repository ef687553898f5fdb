"""Hooks that report on training (TF1's ``basic_session_run_hooks``): summaries, step rate,
logged tensors and timelines, for ``MonitoredSession``/``MonitoredTrainingSession``.

- ``SummarySaverHook``: runs the summary op (default ``tw.summary.merge_all()``) every N steps or
  seconds and writes its result at the global step through a ``tw.summary.FileWriter``.
- ``StepCounterHook``: global steps per second between triggers, as the summary
  ``<global step name>/sec`` and a log line.
- ``LoggingTensorHook``: fetches tensors every N iterations or seconds (and/or at the end) and
  logs them through ``logging`` (logger ``tensorweave.train.summary_hooks``).
- ``ProfilerHook``: every N steps or seconds runs the step with ``FULL_TRACE`` and writes a
  Chrome trace (``timeline-<step>.json``) to its directory.

Summaries need the ``tensorboard`` package (``pip install 'tensorweave[tensorboard]'``): its
protos are imported where a summary is made, the one optional dependency of this module.
"""

from __future__ import annotations

import logging
import os

from tensorweave import summary as summary_lib
from tensorweave.client.timeline import Timeline
from tensorweave.framework import errors
from tensorweave.framework.graph import get_default_graph
from tensorweave.runtime.config import RunOptions
from tensorweave.train.hooks import SecondOrStepTimer, SessionRunArgs, SessionRunHook, _global_step_or_fail

__all__ = ["SummarySaverHook", "StepCounterHook", "LoggingTensorHook", "ProfilerHook"]

log = logging.getLogger(__name__)


def _writer(output_dir, summary_writer, who):
    if summary_writer is not None:
        return summary_writer
    if output_dir is None:
        raise errors.InvalidArgumentError(f"{who}: pass output_dir or summary_writer")
    return summary_lib.FileWriterCache.get(os.fspath(output_dir))


class SummarySaverHook(SessionRunHook):
    """Writes the summary op's result every ``save_steps`` steps or ``save_secs`` seconds."""

    def __init__(self, save_steps=None, save_secs=None, output_dir=None, summary_writer=None, scaffold=None,
                 summary_op=None):
        if (scaffold is None) == (summary_op is None) and summary_op is not None:
            raise errors.InvalidArgumentError("SummarySaverHook: pass scaffold or summary_op, not both")
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._output_dir, self._summary_writer = output_dir, summary_writer
        self._scaffold, self._summary_op = scaffold, summary_op
        self._writer = self._global_step = self._op = None
        self._next_step = None

    def begin(self):
        self._writer = _writer(self._output_dir, self._summary_writer, "SummarySaverHook")
        self._global_step = _global_step_or_fail("SummarySaverHook")
        self._op = self._summary_op
        if self._op is None and self._scaffold is not None:
            self._op = getattr(self._scaffold, "summary_op", None)
        if self._op is None:
            self._op = summary_lib.merge_all()   # None when the graph has no summaries
        self._next_step = None

    def before_run(self, run_context):
        fetches = {"step": self._global_step}
        self._triggered = self._op is not None and (
            self._next_step is None or self._timer.should_trigger_for_step(self._next_step))
        if self._triggered:
            fetches["summary"] = self._op
        return SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        step = int(run_values.results["step"])
        if self._next_step is None:   # the first run of this session
            self._writer.add_session_log(summary_lib.SessionLog(status=summary_lib.SessionLog.START), step)
        if self._triggered:
            self._timer.update_last_triggered_step(step)
            self._writer.add_summary(run_values.results["summary"], step)
        self._next_step = step + 1

    def end(self, session):
        if self._writer is not None:
            self._writer.flush()


class StepCounterHook(SessionRunHook):
    """Global steps per second, every ``every_n_steps`` steps or ``every_n_secs`` seconds."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None, summary_writer=None):
        if (every_n_steps is None) == (every_n_secs is None):
            raise errors.InvalidArgumentError("StepCounterHook: exactly one of every_n_steps and every_n_secs")
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self._output_dir, self._summary_writer = output_dir, summary_writer
        self._writer = None

    def begin(self):
        if self._summary_writer is not None or self._output_dir is not None:
            self._writer = _writer(self._output_dir, self._summary_writer, "StepCounterHook")
        self._global_step = _global_step_or_fail("StepCounterHook")
        self._tag = f"{self._global_step.op.name}/sec"

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if not self._timer.should_trigger_for_step(step):
            return
        seconds, steps = self._timer.update_last_triggered_step(step)
        if seconds and steps:
            rate = steps / seconds
            log.info("%s: %.4g", self._tag, rate)
            if self._writer is not None:
                self._writer.add_summary(summary_lib.scalar_value(self._tag, rate), step)


class LoggingTensorHook(SessionRunHook):
    """Logs ``tensors`` (a dict of tag -> tensor or name, or a list) every ``every_n_iter``
    runs or ``every_n_secs`` seconds, and/or once at the end (``at_end``)."""

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False, formatter=None):
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise errors.InvalidArgumentError(
                "LoggingTensorHook: exactly one of every_n_iter and every_n_secs (or at_end=True alone)")
        if every_n_iter is not None and every_n_iter <= 0:
            raise errors.InvalidArgumentError(f"LoggingTensorHook: every_n_iter must be > 0, got {every_n_iter}")
        if not isinstance(tensors, dict):
            tensors = {getattr(t, "name", t): t for t in tensors}
        self._tags, self._tensors = list(tensors), tensors
        self._timer = None if only_at_end else SecondOrStepTimer(every_secs=every_n_secs, every_steps=every_n_iter)
        self._at_end, self._formatter = at_end, formatter
        self._iter = 0

    def begin(self):
        g = get_default_graph()
        self._fetches = {tag: g.as_graph_element(t) if isinstance(t, str) else t for tag, t in self._tensors.items()}
        self._iter = 0

    def before_run(self, run_context):
        self._triggered = self._timer is not None and self._timer.should_trigger_for_step(self._iter)
        return SessionRunArgs(self._fetches) if self._triggered else None

    def after_run(self, run_context, run_values):
        if self._triggered:
            seconds, _ = self._timer.update_last_triggered_step(self._iter)
            self._log(run_values.results, seconds)
        self._iter += 1

    def end(self, session):
        if self._at_end:
            self._log(session.run(self._fetches), None)

    def _log(self, values, seconds):
        if self._formatter is not None:
            log.info("%s", self._formatter(values))
            return
        line = ", ".join(f"{tag} = {values[tag]}" for tag in self._tags)
        log.info("%s%s", line, f" ({seconds:.3f} sec)" if seconds else "")


class ProfilerHook(SessionRunHook):
    """Every ``save_steps`` steps or ``save_secs`` seconds, traces the step (``FULL_TRACE``)
    and writes its Chrome trace to ``output_dir/timeline-<step>.json`` (open it in Perfetto's
    UI or chrome://tracing)."""

    def __init__(self, save_steps=None, save_secs=None, output_dir="", show_dataflow=True, show_memory=False):
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._output_dir = os.fspath(output_dir)
        self._show_dataflow, self._show_memory = show_dataflow, show_memory
        self._next_step = None

    def begin(self):
        self._global_step = _global_step_or_fail("ProfilerHook")
        os.makedirs(self._output_dir or ".", exist_ok=True)
        self._next_step = None

    def before_run(self, run_context):
        self._requested = self._next_step is None or self._timer.should_trigger_for_step(self._next_step)
        options = RunOptions(trace_level=RunOptions.FULL_TRACE) if self._requested else None
        return SessionRunArgs(self._global_step, options=options)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        self._next_step = step + 1
        metadata = run_values.run_metadata
        if not self._requested or metadata is None:
            return
        self._timer.update_last_triggered_step(step)
        trace = Timeline(metadata.step_stats).generate_chrome_trace_format(
            show_dataflow=self._show_dataflow, show_memory=self._show_memory)
        path = os.path.join(self._output_dir, f"timeline-{step}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(trace)
        os.replace(tmp, path)   # a reader never sees half a trace
        log.info("ProfilerHook: wrote %s", path)
