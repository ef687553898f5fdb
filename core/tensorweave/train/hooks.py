"""Session run hooks (TF1 ``SessionRunHook``): code that runs around each ``run`` of a
``MonitoredSession``, plus the hooks for periodic checkpoints and stopping at a step.

The hook protocol, in the order a MonitoredSession calls it: ``begin()`` (the graph may
still change), ``after_create_session(session, coord)`` (variables are initialized or
restored), then per run ``before_run(run_context) -> SessionRunArgs | None`` (extra fetches
and feeds merged into the caller's run) and ``after_run(run_context, run_values)`` (their
results; ``run_context.request_stop()`` ends the loop), and ``end(session)`` when the
session closes without an error.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.graph import GraphKeys, get_default_graph
from tensorweave.train.saver import latest_checkpoint
from tensorweave.train.training_util import get_global_step

_log = logging.getLogger("tensorweave.train")

__all__ = [
    "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "SecondOrStepTimer",
    "CheckpointSaverHook", "CheckpointSaverListener", "StopAtStepHook",
]


class SessionRunHook:
    """Base class: every method does nothing."""

    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


@dataclasses.dataclass
class SessionRunArgs:
    """What a hook adds to a run: ``fetches`` (any fetch structure), ``feed_dict``, ``options``."""

    fetches: Any
    feed_dict: dict | None = None
    options: Any = None


@dataclasses.dataclass
class SessionRunValues:
    """The hook's fetched ``results`` (same structure as its SessionRunArgs.fetches)."""

    results: Any
    options: Any = None
    run_metadata: Any = None


class SessionRunContext:
    """The run in progress: the caller's ``original_args`` and the raw ``session``."""

    def __init__(self, original_args, session):
        self.original_args = original_args
        self.session = session
        self._stop_requested = False

    def request_stop(self):
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested


class SecondOrStepTimer:
    """Triggers every ``every_secs`` seconds or every ``every_steps`` steps (exactly one)."""

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise errors.InvalidArgumentError("exactly one of every_secs and every_steps must be given")
        if (every_secs is not None and every_secs < 0) or (every_steps is not None and every_steps <= 0):
            raise errors.InvalidArgumentError(
                f"every_secs must be >= 0 and every_steps > 0, got {every_secs} and {every_steps}")
        self._every_secs, self._every_steps = every_secs, every_steps
        self.reset()

    def reset(self):
        self._last_time = self._last_step = None

    def should_trigger_for_step(self, step) -> bool:
        if self._last_step is None:
            return True
        if step == self._last_step:
            return False
        if self._every_secs is not None:
            return time.time() >= self._last_time + self._every_secs
        return step >= self._last_step + self._every_steps

    def update_last_triggered_step(self, step):
        """Record a trigger; returns (seconds, steps) since the previous one (or Nones)."""
        now = time.time()
        elapsed = (None, None) if self._last_time is None else (now - self._last_time, step - self._last_step)
        self._last_time, self._last_step = now, step
        return elapsed

    def last_triggered_step(self):
        return self._last_step


class CheckpointSaverListener:
    """Called around each save of a CheckpointSaverHook; ``after_save`` returning True
    requests a stop."""

    def begin(self):
        pass

    def before_save(self, session, global_step_value):
        pass

    def after_save(self, session, global_step_value):
        pass

    def end(self, session, global_step_value):
        pass


def _global_step_or_fail(who):
    step = get_global_step()
    if step is None:
        raise errors.FailedPreconditionError(
            f"{who} needs a global step; create one with tw.train.get_or_create_global_step()")
    return step


class CheckpointSaverHook(SessionRunHook):
    """Saves a checkpoint every ``save_secs`` seconds or ``save_steps`` steps, when the
    session is created (unless the latest checkpoint is of this very step) and at its end."""

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None,
                 checkpoint_basename="model.ckpt", scaffold=None, listeners=None):
        if saver is not None and scaffold is not None:
            raise errors.InvalidArgumentError("CheckpointSaverHook: pass saver or scaffold, not both")
        self._checkpoint_dir = os.fspath(checkpoint_dir)
        self._save_path = os.path.join(self._checkpoint_dir, checkpoint_basename)
        self._saver, self._scaffold = saver, scaffold
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or [])
        self._global_step = None

    def begin(self):
        self._global_step = _global_step_or_fail("CheckpointSaverHook")
        os.makedirs(self._checkpoint_dir, exist_ok=True)
        for listener in self._listeners:
            listener.begin()

    def _get_saver(self):
        if self._saver is not None:
            return self._saver
        if self._scaffold is not None:
            return self._scaffold.saver

        savers = get_default_graph().get_collection(GraphKeys.SAVERS)
        if len(savers) != 1:
            raise errors.FailedPreconditionError(
                f"CheckpointSaverHook: expected one Saver in the SAVERS collection, found {len(savers)}; "
                "pass saver= or scaffold=")
        return savers[0]

    def after_create_session(self, session, coord):
        step = int(session.run(self._global_step))
        latest = latest_checkpoint(self._checkpoint_dir)
        if latest is None or os.path.abspath(latest) != os.path.abspath(f"{self._save_path}-{step}"):
            self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        stale = int(run_values.results)
        if self._timer.should_trigger_for_step(stale + 1):
            # the step fetched may predate this run's increment: read it again
            step = int(run_context.session.run(self._global_step))
            if self._timer.should_trigger_for_step(step):
                self._timer.update_last_triggered_step(step)
                if self._save(run_context.session, step):
                    run_context.request_stop()

    def end(self, session):
        step = int(session.run(self._global_step))
        if step != self._timer.last_triggered_step():
            self._save(session, step)
        for listener in self._listeners:
            listener.end(session, step)

    def _save(self, session, step) -> bool:
        for listener in self._listeners:
            listener.before_save(session, step)
        self._get_saver().save(session, self._save_path, global_step=step)
        stop = False
        for listener in self._listeners:
            stop = bool(listener.after_save(session, step)) or stop
        return stop


class StopAtStepHook(SessionRunHook):
    """Requests a stop after ``num_steps`` more steps, or once the global step reaches
    ``last_step`` (exactly one of them)."""

    def __init__(self, num_steps=None, last_step=None):
        if (num_steps is None) == (last_step is None):
            raise errors.InvalidArgumentError("StopAtStepHook: exactly one of num_steps and last_step must be given")
        if num_steps is not None and num_steps < 0:
            raise errors.InvalidArgumentError(f"StopAtStepHook: num_steps must be >= 0, got {num_steps}")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self):
        self._global_step = _global_step_or_fail("StopAtStepHook")

    def after_create_session(self, session, coord):
        step = int(session.run(self._global_step))
        if self._last_step is None:
            self._last_step = step + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results) + 1
        if step >= self._last_step:
            # the fetched value may predate this run's increment: confirm
            step = int(run_context.session.run(self._global_step))
            if step >= self._last_step:
                run_context.request_stop()


class NanLossDuringTrainingError(RuntimeError):
    """The loss became NaN during training (TF1's ``tf.train.NanLossDuringTrainingError``)."""

    def __str__(self):
        return "NaN loss during training."


class NanTensorHook(SessionRunHook):
    """Stops training with ``NanLossDuringTrainingError`` (or, with ``fail_on_nan_loss=False``,
    asks to stop) when ``loss_tensor`` is NaN."""

    def __init__(self, loss_tensor, fail_on_nan_loss=True):
        self._loss, self._fail = loss_tensor, fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        if np.isnan(run_values.results):
            if self._fail:
                _log.error("Model diverged with loss = NaN.")
                raise NanLossDuringTrainingError
            _log.warning("Model diverged with loss = NaN; stopping training.")
            run_context.request_stop()
