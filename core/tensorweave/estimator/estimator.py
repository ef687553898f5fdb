"""``tw.estimator.Estimator``: train, evaluate and predict with a ``model_fn``, keeping the
model in checkpoints under ``model_dir`` (TF1's ``estimator.py``).

Each call builds a fresh graph: ``input_fn`` gives the features and labels (tensors, dicts
of tensors, or a ``tw.data`` Dataset of them), ``model_fn(features, labels, mode, params,
config)`` (any subset of those arguments) builds the model for the mode and returns an
``EstimatorSpec``, and a ``tw.train.MonitoredSession`` runs it:

- ``train`` restores the latest checkpoint of ``model_dir`` (or initializes, warm-starting
  from ``warm_start_from`` when given), runs ``train_op`` until ``steps``/``max_steps`` or
  the end of the input (``OutOfRangeError``), saves checkpoints as ``RunConfig`` says and at
  the end, writes summaries and logs the loss and steps/sec every ``log_step_count_steps``
  steps (logger ``tensorweave.train.summary_hooks``; ``tw.logging.set_verbosity(INFO)``
  shows them). On a cluster (``TW_CONFIG``/``TF_CONFIG``, see ``run_config.py``) the model
  is built under ``replica_device_setter``, what the Estimator adds (Saver, summaries) on
  this task, and the session sees the ps tasks and this task only; only the chief
  initializes, saves and writes summaries.
- ``evaluate`` restores a checkpoint (the latest, unless ``checkpoint_path``), runs the
  metrics' update ops over the input (or ``steps`` batches) and returns their values, the
  mean ``loss`` over batches and the ``global_step``; the values are also written as
  summaries to ``model_dir/eval`` (``eval_<name>``).
- ``predict`` yields predictions (one example at a time, or batches).

Summaries need the optional ``tensorboard`` package; without it they are skipped (logged
once) and the step rate is only logged. SavedModel export is not provided.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import inspect
import logging
import os
import re
import tempfile

import numpy as np

from tensorweave import metrics as metrics_lib
from tensorweave import summary as summary_lib
from tensorweave.distributed.cluster import config_from_dict
from tensorweave.estimator.model_fn import EstimatorSpec, ModeKeys
from tensorweave.estimator.run_config import RunConfig, TaskType
from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.graph import Graph, GraphKeys, Tensor
from tensorweave.framework.op_def import flat_input_is_ref
from tensorweave.ops import summary_ops
from tensorweave.ops import variables as variables_mod
from tensorweave.passes.placement import colocation_classes
from tensorweave.train import device_setter
from tensorweave.train import saver as saver_lib
from tensorweave.train.hooks import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    NanTensorHook,
    SessionRunHook,
    StopAtStepHook,
)
from tensorweave.train.monitored_session import (
    ChiefSessionCreator,
    MonitoredSession,
    MonitoredTrainingSession,
    Scaffold,
)
from tensorweave.train.summary_hooks import LoggingTensorHook, StepCounterHook
from tensorweave.train.training_util import get_global_step, get_or_create_global_step

__all__ = ["Estimator", "WarmStartSettings"]

log = logging.getLogger("tensorweave.estimator")

_E = errors.InvalidArgumentError
_MODEL_FN_ARGS = ("features", "labels", "mode", "params", "config")


# ----------------------------------------------------------------------------------------
# small pieces
def fn_args(fn) -> tuple:
    """Names of the arguments ``fn`` can be called with (bound and partial ones removed)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    bound = set(fn.keywords or {}) if isinstance(fn, functools.partial) else set()
    return tuple(name for name, p in sig.parameters.items()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in bound)


def _required_args(fn) -> tuple:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    return tuple(name for name, p in sig.parameters.items()
                 if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


@functools.lru_cache(maxsize=1)
def summaries_available() -> bool:
    """Whether summaries can be written (the optional tensorboard protos import)."""
    try:
        summary_ops.tensorboard_protos("tw.estimator summaries")
        return True
    except errors.FailedPreconditionError as e:
        log.info("tw.estimator: not writing summaries: %s", e.message)
        return False


def _check_hooks(hooks, who):
    hooks = list(hooks or [])
    for h in hooks:
        if not isinstance(h, SessionRunHook):
            raise TypeError(f"{who}: hooks must be tw.train.SessionRunHook instances, given: {h!r}")
    return hooks


def _check_steps(value, what, who):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise _E(f"{who}: {what} must be an int > 0, given: {value!r}")
    return int(value)


class _StopAfterNEvalsHook(SessionRunHook):
    """Counts evaluation batches; asks to stop after ``num_evals`` (None: never)."""

    def __init__(self, num_evals, log_progress=True):
        self._num_evals, self._log = num_evals, log_progress
        self.evals_done = 0

    def after_run(self, run_context, run_values):
        self.evals_done += 1
        if self._log and self._num_evals and (self.evals_done % max(1, self._num_evals // 10) == 0
                                              or self.evals_done == self._num_evals):
            log.info("Evaluation [%d/%d]", self.evals_done, self._num_evals)
        if self._num_evals is not None and self.evals_done >= self._num_evals:
            run_context.request_stop()


class _FinalOpsHook(SessionRunHook):
    """Fetches ``final_ops`` when the session ends (also when the input ran out)."""

    def __init__(self, final_ops):
        self._final_ops = final_ops
        self.final_ops_values = None

    def end(self, session):
        self.final_ops_values = session.run(self._final_ops)


class _CheckpointLogger(CheckpointSaverListener):
    """Logs each save, as TF1's saver hook does."""

    def __init__(self, model_dir):
        self._model_dir = model_dir

    def before_save(self, session, global_step_value):
        log.info("Saving checkpoints for %d into %s.", global_step_value, os.path.join(self._model_dir, "model.ckpt"))


class WarmStartSettings(collections.namedtuple(
        "WarmStartSettings",
        ["ckpt_to_initialize_from", "vars_to_warm_start", "var_name_to_vocab_info", "var_name_to_prev_var_name"])):
    """Where to take initial values from when training starts without a checkpoint in
    ``model_dir``: ``ckpt_to_initialize_from`` (a checkpoint prefix or a directory),
    ``vars_to_warm_start`` (a regex over trainable variable names, default all of them, or a
    list of names/regexes over all global variables), and ``var_name_to_prev_var_name``
    (variables whose name in the checkpoint differs)."""

    def __new__(cls, ckpt_to_initialize_from, vars_to_warm_start=".*", var_name_to_vocab_info=None,
                var_name_to_prev_var_name=None):
        if not ckpt_to_initialize_from:
            raise _E("WarmStartSettings: ckpt_to_initialize_from is required")
        if var_name_to_vocab_info:
            raise errors.UnimplementedError("WarmStartSettings: var_name_to_vocab_info (vocabulary remapping) is "
                                            "not supported")
        return super().__new__(cls, os.fspath(ckpt_to_initialize_from), vars_to_warm_start,
                               var_name_to_vocab_info or {}, dict(var_name_to_prev_var_name or {}))


def _warm_start_saver(settings: WarmStartSettings):
    """A Saver restoring the variables the settings select from their checkpoint, and that
    checkpoint's path."""
    path = settings.ckpt_to_initialize_from
    if os.path.isdir(path):
        ckpt = saver_lib.latest_checkpoint(path)
        if ckpt is None:
            raise errors.NotFoundError(f"warm_start_from: no checkpoint in directory {path!r}")
    elif saver_lib.checkpoint_exists(path):
        ckpt = path
    else:
        raise errors.NotFoundError(f"warm_start_from: {path!r} is neither a directory nor a checkpoint")
    sel = settings.vars_to_warm_start
    if sel is None:
        return None, ckpt
    if isinstance(sel, str):
        candidates = [v for v in variables_mod.trainable_variables() if re.match(sel, v.op.name)]
    else:
        patterns = list(sel)
        candidates = [v for v in variables_mod.global_variables()
                      if any(p == v.op.name or re.match(p, v.op.name) for p in patterns)]
    if not candidates:
        log.warning("warm_start_from: no variable matches %r; nothing is warm-started", sel)
        return None, ckpt
    held = dict(saver_lib.list_variables(ckpt))
    var_list, missing = {}, []
    for v in candidates:
        prev = settings.var_name_to_prev_var_name.get(v.op.name, v.op.name)
        if prev not in held:
            missing.append(prev)
        var_list[prev] = v
    if missing:
        raise errors.NotFoundError(
            f"warm_start_from: checkpoint {ckpt} has no variables {missing} (selected by vars_to_warm_start="
            f"{sel!r}); narrow vars_to_warm_start or map names with var_name_to_prev_var_name")
    log.info("Warm-starting %d variables from %s", len(var_list), ckpt)
    return saver_lib.Saver(var_list=var_list, name="warm_start_saver"), ckpt


def _parse_input_fn_result(result, who):
    """(features, labels or None) from what an input_fn returned; a Dataset (anything with
    ``make_one_shot_iterator``) is iterated in the graph."""
    if hasattr(result, "make_one_shot_iterator"):
        result = result.make_one_shot_iterator().get_next()
    if isinstance(result, tuple | list):
        if len(result) != 2:
            raise _E(f"{who}: input_fn should return features or a (features, labels) pair, got a sequence of "
                     f"{len(result)}")
        return result[0], result[1]
    return result, None


def session_cluster(config):
    """The cluster a training session of this task sees: the ps tasks and the task itself
    (TF1's default device filters), so a worker never waits for, or places work on, the chief
    or another worker, and a task that finished and stopped its server disturbs no one."""
    cc = config.cluster_config
    tasks = {}
    for job, index, address in cc.spec.all_tasks():
        if job == TaskType.PS or (job, index) == (config.task_type, config.task_id):
            tasks.setdefault(job, {})[str(index)] = address
    return config_from_dict(dict(cc.to_dict(), cluster=tasks), source=cc.source)


def _on_this_task(task_device):
    """A device function for the ops an Estimator adds after the model on a cluster: this
    task's device, except for ops that take a variable by reference or are colocated with
    something (they must share a device with it, which the placer finds)."""
    task = DeviceSpec.from_string(task_device)

    def device_fn(op):
        if colocation_classes(op) or any(flat_input_is_ref(op)):
            return op.device
        return task.merge_from(DeviceSpec.from_string(op.device or "")).to_string()
    return device_fn


def _global_step_of(ckpt) -> int:
    try:
        return int(saver_lib.load_variable(ckpt, GraphKeys.GLOBAL_STEP))
    except errors.NotFoundError:
        return 0


# ----------------------------------------------------------------------------------------
class Estimator:
    """Trains, evaluates and predicts with the model ``model_fn`` builds (TF1 ``tf.estimator.Estimator``).

    ``model_fn(features, labels, mode, params, config)`` takes any subset of those arguments
    (``features`` is required) and returns an ``EstimatorSpec``. ``model_dir`` (or
    ``config.model_dir``) holds checkpoints and summaries; None uses a new temporary
    directory (logged). ``params`` is passed to model_fn (and input_fns that take it);
    ``warm_start_from`` (a checkpoint, a directory, or ``WarmStartSettings``) gives initial
    values when training starts from scratch.
    """

    def __init__(self, model_fn, model_dir=None, config=None, params=None, warm_start_from=None):
        if not callable(model_fn):
            raise TypeError(f"Estimator: model_fn must be callable, given: {model_fn!r}")
        if config is None:
            config = RunConfig()
        elif not isinstance(config, RunConfig):
            raise _E(f"Estimator: config must be a tw.estimator.RunConfig, given: {config!r}")
        if model_dir is not None:
            model_dir = os.fspath(model_dir)
            if config.model_dir and os.path.abspath(config.model_dir) != os.path.abspath(model_dir):
                raise _E(f"Estimator: model_dir is set both in the constructor ({model_dir!r}) and in RunConfig "
                         f"({config.model_dir!r}), with different values")
            config = config.replace(model_dir=model_dir)
        elif config.model_dir is None:
            model_dir = tempfile.mkdtemp(prefix="tw_estimator_")
            log.warning("Using temporary folder as model directory: %s", model_dir)
            config = config.replace(model_dir=model_dir)
        self._config = config
        self._model_dir = config.model_dir

        args = fn_args(model_fn)
        if "features" not in args:
            raise _E(f"Estimator: model_fn ({getattr(model_fn, '__name__', model_fn)}) must take a 'features' "
                     f"argument; its arguments are {list(args)}")
        if params is not None and "params" not in args:
            raise _E(f"Estimator: model_fn does not take a 'params' argument, but params ({params!r}) were given")
        if params is None and "params" in args:
            log.warning("Estimator's model_fn takes a params argument, but no params were given to the Estimator")
        unexpected = [a for a in _required_args(model_fn) if a not in _MODEL_FN_ARGS]
        if unexpected:
            raise _E(f"Estimator: model_fn has unexpected arguments {unexpected}; it may take "
                     f"{', '.join(_MODEL_FN_ARGS)}")
        self._model_fn = model_fn
        self._model_fn_args = args
        self._params = copy.deepcopy(params or {})
        if warm_start_from is not None and not isinstance(warm_start_from, WarmStartSettings):
            warm_start_from = WarmStartSettings(warm_start_from)
        self._warm_start = warm_start_from
        this_task = f"/job:{config.task_type}/task:{config.task_id}"
        if config.device_fn is not None:
            self._device_fn = config.device_fn
        elif config.num_ps_replicas > 0:
            self._device_fn = device_setter.replica_device_setter(
                ps_tasks=config.num_ps_replicas, worker_device=this_task, merge_devices=True,
                cluster=config.cluster_spec)
        else:
            self._device_fn = None
        self._local_device_fn = _on_this_task(this_task) if config.cluster_config is not None else None

    # -- properties --------------------------------------------------------------------------
    model_dir = property(lambda self: self._model_dir)
    config = property(lambda self: self._config)
    params = property(lambda self: copy.deepcopy(self._params))
    model_fn = property(lambda self: self._model_fn)

    def latest_checkpoint(self):
        """The newest checkpoint in ``model_dir``, or None."""
        return saver_lib.latest_checkpoint(self._model_dir)

    def eval_dir(self, name=None):
        """Where ``evaluate(name=name)`` writes its summaries."""
        return os.path.join(self._model_dir, "eval" if not name else "eval_" + name)

    def _require_checkpoint(self, what):
        ckpt = self.latest_checkpoint()
        if ckpt is None:
            raise _NoCheckpointError(
                f"{what}: could not find a trained model (no checkpoint) in model_dir {self._model_dir!r}; "
                "train first, or pass checkpoint_path")
        return ckpt

    def get_variable_names(self):
        """Names of the variables in the latest checkpoint."""
        return [name for name, _ in saver_lib.list_variables(self._require_checkpoint("get_variable_names"))]

    def get_variable_value(self, name):
        """The value (ndarray) of variable ``name`` in the latest checkpoint."""
        return saver_lib.load_variable(self._require_checkpoint("get_variable_value"), name)

    def export_saved_model(self, *args, **kwargs):
        raise errors.UnimplementedError("Estimator.export_saved_model: SavedModel export is not provided; the "
                                        "model's checkpoints are in model_dir")

    export_savedmodel = export_saved_model

    # -- building ----------------------------------------------------------------------------
    def _call_input_fn(self, input_fn, mode, who):
        if not callable(input_fn):
            raise TypeError(f"{who}: input_fn must be callable (a function returning features and labels), "
                            f"given: {input_fn!r}")
        args = fn_args(input_fn)
        kwargs = {}
        if "mode" in args:
            kwargs["mode"] = mode
        if "params" in args:
            kwargs["params"] = self.params
        if "config" in args:
            kwargs["config"] = self._config
        return _parse_input_fn_result(input_fn(**kwargs), who)

    def _call_model_fn(self, features, labels, mode, who):
        kwargs = {}
        if "labels" in self._model_fn_args:
            kwargs["labels"] = labels
        elif labels is not None:
            raise _E(f"{who}: model_fn does not take labels, but input_fn returns labels")
        if "mode" in self._model_fn_args:
            kwargs["mode"] = mode
        if "params" in self._model_fn_args:
            kwargs["params"] = self.params
        if "config" in self._model_fn_args:
            kwargs["config"] = self._config
        spec = self._model_fn(features=features, **kwargs)
        if not isinstance(spec, EstimatorSpec):
            raise _E(f"{who}: model_fn should return a tw.estimator.EstimatorSpec, it returned {spec!r}")
        if spec.mode != mode:
            raise _E(f"{who}: model_fn was called with mode={mode!r} but returned an EstimatorSpec for "
                     f"mode={spec.mode!r}")
        return spec

    def _new_graph(self):
        g = Graph()
        if self._config.tf_random_seed is not None:
            g.seed = self._config.tf_random_seed
        return g

    # -- train -------------------------------------------------------------------------------
    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        """Train until ``steps`` more steps, the global step ``max_steps``, or the end of the
        input; returns self."""
        who = "Estimator.train"
        hooks = _check_hooks(hooks, who)
        if steps is not None and max_steps is not None:
            raise _E(f"{who}: can not provide both steps and max_steps")
        steps = _check_steps(steps, "steps", who)
        max_steps = _check_steps(max_steps, "max_steps", who)
        listeners = list(saving_listeners or [])
        if max_steps is not None:
            latest = self.latest_checkpoint()
            if latest is not None and _global_step_of(latest) >= max_steps:
                log.info("Skipping training since max_steps has already saved.")
                return self
        loss = self._train_model(input_fn, hooks, steps, max_steps, listeners)
        log.info("Loss for final step: %s.", loss)
        return self

    def _train_model(self, input_fn, hooks, steps, max_steps, listeners):
        who = "Estimator.train"
        cfg = self._config
        g = self._new_graph()
        device_scope = g.device(self._device_fn) if self._device_fn is not None else contextlib.nullcontext()
        with g.as_default():
            with device_scope:
                global_step = get_or_create_global_step(g)
                features, labels = self._call_input_fn(input_fn, ModeKeys.TRAIN, who)
                spec = self._call_model_fn(features, labels, ModeKeys.TRAIN, who)
                global_step = get_global_step(g)
        # What is added after the model (the Saver, the ready check, summaries) runs on this
        # task, so this process writes and reads the checkpoints; ops that take a variable by
        # reference follow it to its ps task (see _on_this_task).
        local_scope = g.device(self._local_device_fn) if self._local_device_fn is not None \
            else contextlib.nullcontext()
        with g.as_default(), local_scope:
            with_summaries = summaries_available()
            if with_summaries and not any(s.op.name == "loss" for s in g.get_collection(GraphKeys.SUMMARIES)
                                          if isinstance(s, Tensor)):
                summary_lib.scalar("loss", spec.loss)

            worker_hooks = list(hooks) + list(spec.training_hooks)
            worker_hooks.append(NanTensorHook(spec.loss))
            if cfg.log_step_count_steps:
                worker_hooks.append(LoggingTensorHook({"loss": spec.loss, "step": global_step},
                                                      every_n_iter=cfg.log_step_count_steps))
                if not with_summaries:
                    worker_hooks.append(StepCounterHook(every_n_steps=cfg.log_step_count_steps))
            if steps is not None or max_steps is not None:
                worker_hooks.append(StopAtStepHook(num_steps=steps, last_step=max_steps))

            scaffold = spec.scaffold
            if scaffold.saver is None and not g.get_collection(GraphKeys.SAVERS):
                g.add_to_collection(GraphKeys.SAVERS, saver_lib.Saver(
                    sharded=True, max_to_keep=cfg.keep_checkpoint_max, allow_empty=True,
                    keep_checkpoint_every_n_hours=cfg.keep_checkpoint_every_n_hours, save_relative_paths=True))
            if self._warm_start is not None and cfg.is_chief and self.latest_checkpoint() is None:
                scaffold = self._warm_start_scaffold(scaffold)

            chief_hooks = list(spec.training_chief_hooks)
            saving = bool(cfg.save_checkpoints_secs or cfg.save_checkpoints_steps)
            if listeners and not saving:
                raise _E(f"{who}: saving_listeners need checkpoints to be saved; set RunConfig's "
                         "save_checkpoints_steps or save_checkpoints_secs")
            if saving and not any(isinstance(h, CheckpointSaverHook) for h in worker_hooks + chief_hooks):
                chief_hooks.append(CheckpointSaverHook(
                    os.path.abspath(self._model_dir), save_secs=cfg.save_checkpoints_secs or None,
                    save_steps=cfg.save_checkpoints_steps or None, scaffold=scaffold,
                    listeners=[_CheckpointLogger(self._model_dir)] + listeners))

            loss = None
            with MonitoredTrainingSession(
                    master=self._session_target(), is_chief=cfg.is_chief,
                    checkpoint_dir=os.path.abspath(self._model_dir),
                    scaffold=scaffold, hooks=worker_hooks, chief_only_hooks=chief_hooks,
                    save_checkpoint_secs=0, save_checkpoint_steps=None,
                    save_summaries_steps=cfg.save_summary_steps if with_summaries else 0, save_summaries_secs=None,
                    config=cfg.session_config,
                    log_step_count_steps=cfg.log_step_count_steps if with_summaries else 0,
                    max_wait_secs=cfg.session_creation_timeout_secs) as sess:
                # Warn once (as TF1 does) when the train_op leaves the global step alone:
                # steps/max_steps would then never be reached.
                last_step, warned = None, False
                while not sess.should_stop():
                    _, loss, step = sess.run([spec.train_op, spec.loss, global_step])
                    if not warned and last_step is not None and step == last_step and (steps or max_steps):
                        log.warning("The global step did not advance (still %d): pass global_step="
                                    "tw.train.get_global_step() to the optimizer's minimize() in the model_fn, "
                                    "or training never reaches steps/max_steps.", step)
                        warned = True
                    last_step = step
        return loss

    def _warm_start_scaffold(self, scaffold):
        warm_saver, ckpt = _warm_start_saver(self._warm_start)
        if warm_saver is None:
            return scaffold
        user_init_fn = scaffold.init_fn

        def init_fn(sc, session):
            warm_saver.restore(session, ckpt)
            if user_init_fn is not None:
                user_init_fn(sc, session)
        return Scaffold(init_fn=init_fn, copy_from_scaffold=scaffold)

    def _session_target(self):
        # The cluster config carries the transport, TLS and auth settings a bare address lacks.
        return session_cluster(self._config) if self._config.cluster_config is not None else self._config.master

    # -- evaluate ----------------------------------------------------------------------------
    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None):
        """Evaluate the model of a checkpoint (the latest in model_dir unless
        ``checkpoint_path``) on the input, until it ends or for ``steps`` batches; returns a
        dict of the eval metrics, ``loss`` and ``global_step``."""
        who = "Estimator.evaluate"
        hooks = _check_hooks(hooks, who)
        steps = _check_steps(steps, "steps", who)
        if checkpoint_path is None:
            checkpoint_path = self._require_checkpoint(who)
        elif os.path.isdir(checkpoint_path):
            found = saver_lib.latest_checkpoint(checkpoint_path)
            if found is None:
                raise _NoCheckpointError(f"{who}: no checkpoint in directory {checkpoint_path!r}")
            checkpoint_path = found
        elif not saver_lib.checkpoint_exists(checkpoint_path):
            raise _NoCheckpointError(f"{who}: checkpoint {checkpoint_path!r} does not exist")
        if name is not None and not isinstance(name, str):
            raise _E(f"{who}: name must be a string, given: {name!r}")

        g = self._new_graph()
        with g.as_default():
            global_step = get_or_create_global_step(g)
            features, labels = self._call_input_fn(input_fn, ModeKeys.EVAL, who)
            spec = self._call_model_fn(features, labels, ModeKeys.EVAL, who)
            global_step = get_global_step(g)
            if "loss" in spec.eval_metric_ops:
                raise _E(f"{who}: an eval metric named 'loss' is not allowed: the Estimator adds its own 'loss' (the "
                         "mean of the loss over batches)")
            eval_ops = dict(spec.eval_metric_ops)
            eval_ops["loss"] = metrics_lib.mean(spec.loss, name="loss_mean")
            update_ops = [u for _, u in eval_ops.values()]
            final_ops = {k: v for k, (v, _) in eval_ops.items()}
            final_ops[GraphKeys.GLOBAL_STEP] = global_step
            stopper = _StopAfterNEvalsHook(steps)
            final = _FinalOpsHook(final_ops)
            all_hooks = list(hooks) + list(spec.evaluation_hooks) + [stopper, final]
            creator = ChiefSessionCreator(spec.scaffold, master=self._config.evaluation_master,
                                          config=self._config.session_config,
                                          checkpoint_filename_with_path=checkpoint_path)
            log.info("Starting evaluation; restoring parameters from %s", checkpoint_path)
            with MonitoredSession(creator, all_hooks) as sess:
                while not sess.should_stop():
                    sess.run(update_ops)
            results = final.final_ops_values
            if stopper.evals_done == 0:
                log.warning("%s: the input gave no batch; the metrics are those of no data", who)
            log.info("Saving dict for global step %d: %s", results[GraphKeys.GLOBAL_STEP],
                     ", ".join(f"{k} = {v}" for k, v in sorted(results.items()) if k != GraphKeys.GLOBAL_STEP))
            self._write_eval_summaries(self.eval_dir(name), results)   # the writer records the eval graph
        return results

    def _write_eval_summaries(self, directory, results):
        if not summaries_available():
            return
        step = int(results[GraphKeys.GLOBAL_STEP])
        values = []
        for k, v in sorted(results.items()):
            if k == GraphKeys.GLOBAL_STEP:
                continue
            arr = np.asarray(v)
            if arr.shape == () and arr.dtype.kind in "fiub":
                values.append(summary_lib.scalar_value(k, float(arr)).value[0])
            else:
                log.debug("not writing eval result %s (not a real scalar) as a summary", k)
        proto = summary_lib.Summary(value=values)
        writer = summary_lib.FileWriterCache.get(directory)
        writer.add_summary(proto, step)
        writer.flush()

    # -- predict -----------------------------------------------------------------------------
    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None, yield_single_examples=True):
        """Yield the model's predictions for the input: one example at a time (a dict of
        values, or a value when ``predictions`` is a single tensor), or whole batches with
        ``yield_single_examples=False``. Without a checkpoint the variables are initialized
        (as TF1 does; a warning is logged)."""
        who = "Estimator.predict"
        hooks = _check_hooks(hooks, who)
        if checkpoint_path is None:
            checkpoint_path = self.latest_checkpoint()
            if checkpoint_path is None:
                log.warning("Could not find trained model in model_dir: %s, running initialization to predict.",
                            self._model_dir)
        elif not saver_lib.checkpoint_exists(checkpoint_path):
            raise _NoCheckpointError(f"{who}: checkpoint {checkpoint_path!r} does not exist")
        g = self._new_graph()
        with g.as_default():
            get_or_create_global_step(g)
            features, _ = self._call_input_fn(input_fn, ModeKeys.PREDICT, who)
            spec = self._call_model_fn(features, None, ModeKeys.PREDICT, who)
            predictions = _extract_keys(spec.predictions, predict_keys, who)
            creator = ChiefSessionCreator(spec.scaffold, config=self._config.session_config,
                                          checkpoint_filename_with_path=checkpoint_path)
            sess = MonitoredSession(creator, list(hooks) + list(spec.prediction_hooks))
        # Yield outside g.as_default(): the caller's code between items must not build in g.
        with sess:
            while not sess.should_stop():
                batch = sess.run(predictions)
                if not yield_single_examples:
                    yield batch
                    continue
                if not isinstance(batch, dict):
                    yield from batch
                    continue
                n = _batch_length(batch, who)
                for i in range(n):
                    yield {k: v[i] for k, v in batch.items()}


class _NoCheckpointError(errors.NotFoundError, ValueError):
    """No checkpoint to evaluate: a NotFoundError, and the ValueError TF1 raises there."""


def _extract_keys(predictions, predict_keys, who):
    if predict_keys is None:
        return predictions
    if isinstance(predict_keys, str):
        predict_keys = [predict_keys]
    if not isinstance(predictions, dict):
        raise _E(f"{who}: predict_keys is not valid when the model_fn's predictions are a single tensor")
    missing = [k for k in predict_keys if k not in predictions]
    if missing:
        raise _E(f"{who}: predict_keys {missing} are not among the predictions; expected some of "
                 f"{sorted(predictions)}")
    return {k: predictions[k] for k in predict_keys}


def _batch_length(batch, who):
    lengths = {}
    for k, v in batch.items():
        arr = np.asarray(v)
        if arr.ndim == 0:
            raise _E(f"{who}: prediction {k!r} is a scalar; with yield_single_examples=True every prediction "
                     "needs a batch dimension (or pass yield_single_examples=False)")
        lengths[k] = arr.shape[0]
    if len(set(lengths.values())) > 1:
        raise _E(f"{who}: predictions have different batch lengths {lengths}; they must all have the same "
                 "batch size")
    return next(iter(lengths.values()))
