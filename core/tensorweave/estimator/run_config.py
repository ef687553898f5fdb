"""``tw.estimator.RunConfig``: where an Estimator keeps its files, how often it saves, and which
task of a cluster this process is.

The cluster comes from the environment, as in TF1: ``TW_CONFIG`` (tensorweave's JSON cluster
config, docs/distributed.md, which may also name the transport, TLS files and auth) or else
``TF_CONFIG`` (TensorFlow's JSON), both of the form::

    {"cluster": {"chief": ["host:port"], "worker": ["host:port", ...], "ps": ["host:port"]},
     "task": {"type": "worker", "index": 0}}

TF1's rules apply: without a ``cluster`` the process is the one local worker (task type
``worker``, index 0, chief); with one, ``task`` must name this process's job and index, the
cluster must have a ``chief`` job of one task (or the legacy ``master`` job), ``is_chief`` is
true for it, ``master`` is ``"<transport>://<this task's address>"``, ``num_ps_replicas``
counts the ps tasks and ``num_worker_replicas`` the chief and workers. An ``evaluator`` task
is not part of the cluster (it evaluates checkpoints locally). ``TF_CONFIG`` may carry
``rpc_layer`` (the transport, default ``grpc``), ``model_dir`` and ``session_master``.
"""

from __future__ import annotations

import copy
import json
import os

from tensorweave.distributed.cluster import config_from_dict
from tensorweave.framework import errors
from tensorweave.runtime.config import ConfigProto

__all__ = ["RunConfig", "TaskType"]

_E = errors.InvalidArgumentError
_USE_DEFAULT = object()


class TaskType:
    MASTER = "master"
    PS = "ps"
    WORKER = "worker"
    CHIEF = "chief"
    EVALUATOR = "evaluator"


# Keys TF_CONFIG may carry besides the cluster and the task; not part of the TW_CONFIG schema.
_TF_ONLY_KEYS = ("environment", "rpc_layer", "session_master", "eval_session_master", "model_dir")


def _read_env(environ):
    """(name of the variable used, its JSON as a dict) from TW_CONFIG, else TF_CONFIG, else
    (None, {})."""
    for var in ("TW_CONFIG", "TF_CONFIG"):
        text = environ.get(var)
        if text:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise _E(f"${var}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
            if not isinstance(data, dict):
                raise _E(f"${var}: expected a JSON object with 'cluster' and 'task', got {type(data).__name__}")
            return var, data
    return None, {}


def _task_of(var, data):
    task = data.get("task", {}) or {}
    if not isinstance(task, dict):
        raise _E(f"${var}: 'task' must be an object {{\"type\": ..., \"index\": ...}}, got {task!r}")
    task_type = task.get("type")
    index = task.get("index", 0)
    if task_type is not None and not isinstance(task_type, str):
        raise _E(f"${var}: task type must be a string, got {task_type!r}")
    try:
        index = int(index)
    except (TypeError, ValueError):
        raise _E(f"${var}: task index must be an integer, got {index!r}") from None
    return task_type, index


class RunConfig:
    """Settings of an Estimator's runs (TF1 ``tf.estimator.RunConfig``); read-only properties,
    ``replace(**kwargs)`` makes a changed copy.

    ``save_checkpoints_steps`` and ``save_checkpoints_secs`` exclude each other; with neither,
    checkpoints are saved every 600 seconds (and always at the end of training). Summaries are
    written every ``save_summary_steps`` steps, and the loss and steps/sec are logged every
    ``log_step_count_steps`` steps. ``keep_checkpoint_max`` checkpoints are kept.
    """

    def __init__(self, model_dir=None, tf_random_seed=None, save_summary_steps=100,
                 save_checkpoints_steps=_USE_DEFAULT, save_checkpoints_secs=_USE_DEFAULT, session_config=None,
                 keep_checkpoint_max=5, keep_checkpoint_every_n_hours=10000, log_step_count_steps=100,
                 train_distribute=None, device_fn=None, protocol=None, eval_distribute=None,
                 experimental_distribute=None, experimental_max_worker_delay_secs=None,
                 session_creation_timeout_secs=7200):
        if save_checkpoints_steps is _USE_DEFAULT and save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_steps, save_checkpoints_secs = None, 600
        elif save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_secs = None
        elif save_checkpoints_steps is _USE_DEFAULT:
            save_checkpoints_steps = None
        if save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise _E("RunConfig: can not specify both save_checkpoints_steps and save_checkpoints_secs")
        for what in ("train_distribute", "eval_distribute", "experimental_distribute"):
            if locals()[what] is not None:
                raise errors.UnimplementedError(f"RunConfig: {what} (tf.distribute strategies) is not supported; "
                                                "use TW_CONFIG/TF_CONFIG with ps and worker tasks")
        self._settings = dict(
            model_dir=model_dir, tf_random_seed=tf_random_seed, save_summary_steps=save_summary_steps,
            save_checkpoints_steps=save_checkpoints_steps, save_checkpoints_secs=save_checkpoints_secs,
            session_config=session_config, keep_checkpoint_max=keep_checkpoint_max,
            keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours, log_step_count_steps=log_step_count_steps,
            device_fn=device_fn, protocol=protocol,
            experimental_max_worker_delay_secs=experimental_max_worker_delay_secs,
            session_creation_timeout_secs=session_creation_timeout_secs)
        self._validate()
        self._init_cluster(os.environ)

    # -- validation ---------------------------------------------------------------------------
    def _validate(self):
        s = self._settings
        if s["model_dir"] is not None:
            try:
                s["model_dir"] = os.fspath(s["model_dir"])
            except TypeError:
                raise _E(f"RunConfig: model_dir must be a path, got {s['model_dir']!r}") from None
            if not s["model_dir"]:
                raise _E("RunConfig: model_dir must not be empty (use None for a temporary directory)")

        def check(name, minimum, allow_none=True):
            v = s[name]
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, int | float) or v < minimum:
                raise _E(f"RunConfig: {name} must be a number >= {minimum}{' or None' if allow_none else ''}, "
                         f"got {v!r}")
        check("save_summary_steps", 0)
        check("save_checkpoints_steps", 0)
        check("save_checkpoints_secs", 0)
        check("keep_checkpoint_max", 0)
        check("keep_checkpoint_every_n_hours", 0)
        check("log_step_count_steps", 0)
        check("session_creation_timeout_secs", 0, allow_none=False)
        seed = s["tf_random_seed"]
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _E(f"RunConfig: tf_random_seed must be an int or None, got {seed!r}")
        if s["session_config"] is not None and not isinstance(s["session_config"], ConfigProto):
            raise _E(f"RunConfig: session_config must be a tw.ConfigProto, got {s['session_config']!r}")
        if s["device_fn"] is not None and not callable(s["device_fn"]):
            raise _E(f"RunConfig: device_fn must be callable, got {s['device_fn']!r}")

    # -- the cluster ----------------------------------------------------------------------------
    def _init_cluster(self, environ):
        var, data = _read_env(environ)
        self._env_var = var
        self._cluster_config = None
        env_model_dir = data.get("model_dir")
        if env_model_dir:
            if self._settings["model_dir"] and os.path.abspath(self._settings["model_dir"]) != os.path.abspath(
                    env_model_dir):
                raise _E(f"RunConfig: model_dir {self._settings['model_dir']!r} conflicts with ${var}'s model_dir "
                         f"{env_model_dir!r}")
            self._settings["model_dir"] = env_model_dir
        cluster = data.get("cluster") or {}
        task_type, task_id = _task_of(var, data) if var else (None, 0)
        self._evaluation_master = data.get("eval_session_master", "")
        if not cluster:
            # Local: the one worker, which is the chief.
            task_type = task_type or TaskType.WORKER
            if task_type not in (TaskType.WORKER, TaskType.EVALUATOR):
                raise _E(f"${var}: without a 'cluster', the task type must be 'worker' (or 'evaluator'), "
                         f"got {task_type!r}")
            if task_id != 0:
                raise _E(f"${var}: without a 'cluster', the task index must be 0, got {task_id}")
            self._task_type, self._task_id = task_type, 0
            self._cluster_spec = None   # TF1 has an empty (false) ClusterSpec here
            self._master = data.get("session_master", "")
            self._is_chief = task_type == TaskType.WORKER
            self._num_ps_replicas, self._num_worker_replicas = 0, 1
            self._global_id_in_cluster = 0
            return

        if task_type is None:
            raise _E(f"${var}: with a 'cluster', 'task' must name this process's task: "
                     "{\"task\": {\"type\": \"worker\", \"index\": 0}}")
        rest = {k: v for k, v in data.items() if k not in ("task",) + _TF_ONLY_KEYS}
        if var == "TF_CONFIG":
            rest = {"cluster": cluster, "transport": data.get("rpc_layer") or self._settings["protocol"] or "grpc"}
        elif self._settings["protocol"] and "transport" not in rest:
            rest["transport"] = self._settings["protocol"]
        config = config_from_dict(rest, source=f"${var}")
        spec = config.spec
        jobs = spec.jobs
        if TaskType.MASTER in jobs:
            chief_job = TaskType.MASTER
            if TaskType.CHIEF in jobs:
                raise _E(f"${var}: the cluster has both a 'master' and a 'chief' job; use one ('chief')")
        elif TaskType.CHIEF in jobs:
            chief_job = TaskType.CHIEF
        else:
            raise _E(f"${var}: the cluster must have one 'chief' task (the worker that initializes, saves "
                     f"checkpoints and summaries); it has jobs {jobs}")
        if spec.num_tasks(chief_job) != 1:
            raise _E(f"${var}: the '{chief_job}' job must have exactly one task, it has {spec.num_tasks(chief_job)}")

        if task_type == TaskType.EVALUATOR:
            # The evaluator is not part of the training cluster (TF1): it evaluates checkpoints locally.
            if TaskType.EVALUATOR in jobs:
                raise _E(f"${var}: 'evaluator' must not be a job of the cluster; name it only as this task")
            if task_id != 0:
                raise _E(f"${var}: there can only be one evaluator task (index 0), got index {task_id}")
            self._task_type, self._task_id = task_type, 0
            self._cluster_spec = None
            self._master = ""
            self._is_chief = False
            self._num_ps_replicas = self._num_worker_replicas = 0
            self._global_id_in_cluster = None
            return

        if task_type not in jobs:
            raise _E(f"${var}: task type {task_type!r} is not a job of the cluster (jobs: {jobs})")
        if task_id not in spec.task_indices(task_type):
            raise _E(f"${var}: job {task_type!r} has no task {task_id} (indices: {spec.task_indices(task_type)})")
        config = config.with_task(task_type, task_id)
        self._cluster_config = config
        self._cluster_spec = spec
        self._task_type, self._task_id = task_type, task_id
        control = config.control_transport  # what every task serves at its address
        self._master = data.get("session_master") or f"{control}://{spec.task_address(task_type, task_id)}"
        self._is_chief = task_type == chief_job
        self._num_ps_replicas = spec.num_tasks(TaskType.PS) if TaskType.PS in jobs else 0
        self._num_worker_replicas = sum(spec.num_tasks(j) for j in (chief_job, TaskType.WORKER) if j in jobs)
        # chief 0, then workers, then ps (TF1's numbering)
        order = [chief_job, TaskType.WORKER, TaskType.PS] + sorted(j for j in jobs if j not in (
            chief_job, TaskType.WORKER, TaskType.PS))
        gid = 0
        for j in order:
            if j not in jobs:
                continue
            if j == task_type:
                gid += spec.task_indices(j).index(task_id)
                break
            gid += spec.num_tasks(j)
        self._global_id_in_cluster = gid

    # -- properties --------------------------------------------------------------------------
    model_dir = property(lambda self: self._settings["model_dir"])
    tf_random_seed = property(lambda self: self._settings["tf_random_seed"])
    save_summary_steps = property(lambda self: self._settings["save_summary_steps"])
    save_checkpoints_steps = property(lambda self: self._settings["save_checkpoints_steps"])
    save_checkpoints_secs = property(lambda self: self._settings["save_checkpoints_secs"])
    session_config = property(lambda self: self._settings["session_config"])
    keep_checkpoint_max = property(lambda self: self._settings["keep_checkpoint_max"])
    keep_checkpoint_every_n_hours = property(lambda self: self._settings["keep_checkpoint_every_n_hours"])
    log_step_count_steps = property(lambda self: self._settings["log_step_count_steps"])
    device_fn = property(lambda self: self._settings["device_fn"])
    protocol = property(lambda self: self._settings["protocol"])
    session_creation_timeout_secs = property(lambda self: self._settings["session_creation_timeout_secs"])
    train_distribute = property(lambda self: None)
    eval_distribute = property(lambda self: None)

    cluster_spec = property(lambda self: self._cluster_spec)   # None when local (false, as TF1's empty spec)
    task_type = property(lambda self: self._task_type)
    task_id = property(lambda self: self._task_id)
    master = property(lambda self: self._master)
    evaluation_master = property(lambda self: self._evaluation_master)
    is_chief = property(lambda self: self._is_chief)
    num_ps_replicas = property(lambda self: self._num_ps_replicas)
    num_worker_replicas = property(lambda self: self._num_worker_replicas)
    global_id_in_cluster = property(lambda self: self._global_id_in_cluster)

    @property
    def cluster_config(self):
        """The ``ClusterConfig`` of the cluster (transport, TLS, auth), or None when local."""
        return self._cluster_config

    _REPLACEABLE = ("model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
                    "save_checkpoints_secs", "session_config", "keep_checkpoint_max",
                    "keep_checkpoint_every_n_hours", "log_step_count_steps", "device_fn", "protocol",
                    "experimental_max_worker_delay_secs", "session_creation_timeout_secs")

    def replace(self, **kwargs):
        """A copy with the given settings changed (the cluster properties cannot be)."""
        for k in kwargs:
            if k not in self._REPLACEABLE:
                raise _E(f"RunConfig.replace: replacing {k!r} is not supported (replaceable: "
                         f"{', '.join(self._REPLACEABLE)})")
        new = copy.copy(self)
        new._settings = dict(self._settings)
        new._settings.update(kwargs)
        if "save_checkpoints_steps" in kwargs and "save_checkpoints_secs" not in kwargs \
                and kwargs["save_checkpoints_steps"] is not None:
            new._settings["save_checkpoints_secs"] = None
        elif "save_checkpoints_secs" in kwargs and "save_checkpoints_steps" not in kwargs \
                and kwargs["save_checkpoints_secs"] is not None:
            new._settings["save_checkpoints_steps"] = None
        if new._settings["save_checkpoints_steps"] is not None and new._settings["save_checkpoints_secs"] is not None:
            raise _E("RunConfig.replace: can not specify both save_checkpoints_steps and save_checkpoints_secs")
        new._validate()
        return new

    def __repr__(self):
        fields = dict(self._settings, task_type=self._task_type, task_id=self._task_id, master=self._master,
                      is_chief=self._is_chief, num_ps_replicas=self._num_ps_replicas,
                      num_worker_replicas=self._num_worker_replicas)
        return "RunConfig(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
