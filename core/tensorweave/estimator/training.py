"""``tw.estimator.train_and_evaluate`` with ``TrainSpec`` and ``EvalSpec`` (TF1's ``training.py``).

Locally (no cluster in ``TW_CONFIG``/``TF_CONFIG``), training runs to ``TrainSpec.max_steps``
(or the end of the input) and evaluation follows new checkpoints: after each checkpoint
saved during training, at most once every ``EvalSpec.throttle_secs`` seconds, and always
after the last one. Returns ``(eval_result, export_results)`` as TF 1.14 does;
``export_results`` is None (SavedModel exporters are not provided).

On a cluster each process runs its task's role, read from its ``RunConfig``:

- ``ps``: starts this task's ``tw.train.Server`` and serves until it is stopped (the call
  does not return);
- ``chief`` / ``worker`` (and the legacy ``master``): starts this task's server, waits for
  the ps tasks to answer, then trains against them (variables on the ps tasks through
  ``replica_device_setter``; the chief initializes, saves checkpoints and summaries, workers
  wait for it), and stops its server when training is done (no other task's session uses
  it: see ``estimator.session_cluster``); returns ``(None, None)``;
- ``evaluator``: waits ``start_delay_secs``, then evaluates each new checkpoint in
  ``model_dir`` (at most every ``throttle_secs``) until one reaches ``max_steps``; returns
  the last ``(eval_result, None)``.

TF1 delays non-chief workers by a few seconds each so the chief can initialize first; here
they do not wait by the clock: ``WorkerSessionCreator`` polls until the chief has
initialized the variables.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time

from tensorweave.distributed.server import Server
from tensorweave.distributed.transport import get_transport
from tensorweave.estimator.estimator import Estimator, _global_step_of, session_cluster
from tensorweave.estimator.run_config import TaskType
from tensorweave.framework import errors
from tensorweave.train import saver as saver_lib
from tensorweave.train.hooks import CheckpointSaverListener, SecondOrStepTimer, SessionRunHook
from tensorweave.train.monitored_session import wait_for_tasks

__all__ = ["TrainSpec", "EvalSpec", "train_and_evaluate"]

log = logging.getLogger("tensorweave.estimator")
_E = errors.InvalidArgumentError


def _hooks(hooks, who):
    hooks = tuple(hooks or ())
    for h in hooks:
        if not isinstance(h, SessionRunHook):
            raise TypeError(f"{who}: hooks must be tw.train.SessionRunHook instances, given: {h!r}")
    return hooks


class TrainSpec(collections.namedtuple("TrainSpec", ["input_fn", "max_steps", "hooks"])):
    """What to train on: ``input_fn``, up to global step ``max_steps`` (None: until the input
    ends), with ``hooks``."""

    def __new__(cls, input_fn, max_steps=None, hooks=None):
        if not callable(input_fn):
            raise TypeError(f"TrainSpec: input_fn must be callable, given: {input_fn!r}")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps <= 0):
            raise _E(f"TrainSpec: max_steps must be a positive int or None, given: {max_steps!r}")
        return super().__new__(cls, input_fn, max_steps, _hooks(hooks, "TrainSpec"))


class EvalSpec(collections.namedtuple("EvalSpec", ["input_fn", "steps", "name", "hooks", "exporters",
                                                   "start_delay_secs", "throttle_secs"])):
    """How to evaluate: ``input_fn`` for ``steps`` batches (None: until the input ends), the
    evaluation's ``name`` (its summaries go to ``model_dir/eval_<name>``), ``hooks``; an
    evaluator task waits ``start_delay_secs`` before the first evaluation and
    ``throttle_secs`` at least between two."""

    def __new__(cls, input_fn, steps=100, name=None, hooks=None, exporters=None, start_delay_secs=120,
                throttle_secs=600):
        if not callable(input_fn):
            raise TypeError(f"EvalSpec: input_fn must be callable, given: {input_fn!r}")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
            raise _E(f"EvalSpec: steps must be a positive int or None, given: {steps!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"EvalSpec: name must be a string, given: {name!r}")
        if exporters:
            raise errors.UnimplementedError("EvalSpec: exporters (SavedModel export) are not provided")
        for what, v in (("start_delay_secs", start_delay_secs), ("throttle_secs", throttle_secs)):
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise _E(f"EvalSpec: {what} must be a number >= 0, given: {v!r}")
        return super().__new__(cls, input_fn, steps, name, _hooks(hooks, "EvalSpec"), (), start_delay_secs,
                               throttle_secs)


class _EvaluateOnNewCheckpoint(CheckpointSaverListener):
    """Evaluates after checkpoints saved during training (not the one of the step training
    started from), throttled, and after the last one."""

    def __init__(self, estimator, eval_spec):
        self._estimator, self._spec = estimator, eval_spec
        self._timer = SecondOrStepTimer(every_secs=eval_spec.throttle_secs)
        self.eval_result = None
        self._start_step = None
        self._evaluated_step = None

    def begin(self):
        latest = self._estimator.latest_checkpoint()
        self._start_step = _global_step_of(latest) if latest is not None else 0

    def after_save(self, session, global_step_value):
        if global_step_value <= self._start_step:
            return False   # nothing trained since the run started
        if not self._timer.should_trigger_for_step(global_step_value):
            log.info("Skipping the evaluation of the checkpoint of step %d (throttle_secs=%s)", global_step_value,
                     self._spec.throttle_secs)
            return False
        self._timer.update_last_triggered_step(global_step_value)
        self._evaluate(global_step_value)
        return False

    def end(self, session, global_step_value):
        if global_step_value != self._evaluated_step:
            self._evaluate(global_step_value)

    def _evaluate(self, step):
        self.eval_result = self._estimator.evaluate(self._spec.input_fn, steps=self._spec.steps,
                                                    hooks=self._spec.hooks, name=self._spec.name)
        self._evaluated_step = step


def train_and_evaluate(estimator, train_spec, eval_spec):
    """Train and evaluate ``estimator`` (see the module docstring); returns
    ``(eval_result, export_results)``."""
    if not isinstance(estimator, Estimator):
        raise TypeError(f"train_and_evaluate: estimator must be a tw.estimator.Estimator, given {estimator!r}")
    if not isinstance(train_spec, TrainSpec):
        raise TypeError(f"train_and_evaluate: train_spec must be a tw.estimator.TrainSpec, given {train_spec!r}")
    if not isinstance(eval_spec, EvalSpec):
        raise TypeError(f"train_and_evaluate: eval_spec must be a tw.estimator.EvalSpec, given {eval_spec!r}")
    config = estimator.config
    if not config.cluster_spec and config.task_type != TaskType.EVALUATOR:
        log.info("Running training and evaluation locally (non-distributed).")
        return _run_local(estimator, train_spec, eval_spec)
    role = config.task_type
    log.info("Running the %r task %d of the cluster.", role, config.task_id)
    if role == TaskType.PS:
        return _run_ps(config, estimator.model_dir)
    if role in (TaskType.CHIEF, TaskType.WORKER, TaskType.MASTER):
        return _run_trainer(estimator, train_spec, config)
    if role == TaskType.EVALUATOR:
        return _run_evaluator(estimator, train_spec, eval_spec)
    raise _E(f"train_and_evaluate: task type {role!r} has no role; expected one of "
             f"{[TaskType.CHIEF, TaskType.WORKER, TaskType.PS, TaskType.EVALUATOR, TaskType.MASTER]}")


def _run_local(estimator, train_spec, eval_spec):
    if not (estimator.config.save_checkpoints_steps or estimator.config.save_checkpoints_secs):
        raise _E("train_and_evaluate: evaluation follows checkpoints; set RunConfig's save_checkpoints_steps or "
                 "save_checkpoints_secs")
    log.info("Start train and evaluate loop; evaluation follows each checkpoint (save_checkpoints_steps=%s, "
             "save_checkpoints_secs=%s, throttle_secs=%s).", estimator.config.save_checkpoints_steps,
             estimator.config.save_checkpoints_secs, eval_spec.throttle_secs)
    listener = _EvaluateOnNewCheckpoint(estimator, eval_spec)
    estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks), max_steps=train_spec.max_steps,
                    saving_listeners=[listener])
    if listener.eval_result is None:
        # Training was skipped (max_steps already reached): evaluate the checkpoint there is.
        listener.eval_result = estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, hooks=eval_spec.hooks,
                                                  name=eval_spec.name)
    return listener.eval_result, None


def _server(config, model_dir):
    """This task's server. Its ops write the checkpoints and summaries of ``model_dir`` for the
    chief's session, so the directory is one the task lets clients use files in (besides its
    config's ``[files] allow``, or its working directory)."""
    cc = config.cluster_config
    allow = cc.files_allow if cc.files_allow is not None else (os.getcwd(),)
    if model_dir:
        allow = (*allow, os.path.abspath(model_dir))
    return Server(dataclasses.replace(cc, files_allow=allow), job_name=config.task_type, task_index=config.task_id,
                  config=config.session_config)


def _run_ps(config, model_dir):
    server = _server(config, model_dir)
    log.info("ps task %d serving at %s", config.task_id, server.target)
    server.join()
    return None, None


def _wait_for_cluster(config):
    """Wait until the tasks this task's session uses answer (the ps tasks may still be starting)."""
    cc = session_cluster(config)
    tasks = {(j, i): a for j, i, a in cc.spec.all_tasks()}
    control = cc.control_transport  # what every task serves at its address
    deadline = time.monotonic() + config.session_creation_timeout_secs
    wait_for_tasks(tasks, get_transport(control), cc.security_for(role="client"), deadline)


def _run_trainer(estimator, train_spec, config):
    server = _server(config, estimator.model_dir)
    try:
        _wait_for_cluster(config)
        estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks), max_steps=train_spec.max_steps)
    finally:
        server.stop()
    return None, None


def _run_evaluator(estimator, train_spec, eval_spec):
    if eval_spec.start_delay_secs:
        log.info("Waiting %s secs before starting evaluation.", eval_spec.start_delay_secs)
        time.sleep(eval_spec.start_delay_secs)
    last_ckpt, result = None, None
    while True:
        started = time.monotonic()
        ckpt = saver_lib.latest_checkpoint(estimator.model_dir)
        if ckpt is not None and ckpt != last_ckpt:
            result = estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, hooks=eval_spec.hooks,
                                        checkpoint_path=ckpt, name=eval_spec.name)
            last_ckpt = ckpt
            if train_spec.max_steps is not None and result["global_step"] >= train_spec.max_steps:
                log.info("Exiting evaluation: global step %d reached max_steps %d", result["global_step"],
                         train_spec.max_steps)
                return result, None
        elif ckpt is None:
            log.info("No checkpoint in %s yet; waiting for the chief to save one", estimator.model_dir)
        # The evaluator polls model_dir for the chief's checkpoints, as TF1's does.
        time.sleep(max(0.0, eval_spec.throttle_secs - (time.monotonic() - started)) or 1.0)
