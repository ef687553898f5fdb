"""Cluster resolvers (``tw.distribute.cluster_resolver``): a cluster and this process's task,
found from what a cluster manager put in the environment.

Owns the TensorFlow 1.x ``ClusterResolver`` interface (``cluster_spec()``, ``master()``,
``task_type``, ``task_id``, ``rpc_layer``, ``num_accelerators()``) and its implementations:

* ``SimpleClusterResolver``: a given ClusterSpec and task.
* ``TFConfigClusterResolver``: ``$TW_CONFIG`` (our JSON config schema), else ``$TF_CONFIG``
  (TensorFlow's ``{"cluster", "task", "rpc_layer"}``).
* ``SlurmClusterResolver``: a Slurm job step (``srun``): ranks, node list, tasks per node.
* ``KubernetesClusterResolver``: a pod of a StatefulSet behind a headless Service, from the
  pod's own environment (no API server).

``config_from_resolver(resolver)`` (also ``resolver.cluster_config()``) turns any of them into
a ``ClusterConfig`` with this process's task, through ``cluster.config_from_dict``, so
``tensorweave worker --resolver slurm|kubernetes|tf_config`` serves the task it names. A
resolver made outside its environment is a ``NotFoundError`` naming every variable it looked
for; malformed values are ``InvalidArgumentError``s naming the variable and the value. The
address schemes are documented in docs/distributed.md ("Cluster managers").
"""

from __future__ import annotations

import abc
import json
import os
import re
import shutil
import subprocess

from tensorweave.distributed import cluster as cl
from tensorweave.framework import errors

# Job names as cluster.py accepts them (no "-", which keeps "<set>-<job>" unambiguous).
_JOB_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def format_master_url(master: str, rpc_layer: str | None = None) -> str:
    """``"grpc://host:port"`` from ``"host:port"`` and ``"grpc"``; the address alone without an
    rpc layer, and ``""`` for no master (never a bare ``"grpc://"``)."""
    if not master:
        return ""
    return f"{rpc_layer}://{master}" if rpc_layer else master


def parse_jobs(text, where: str = "--jobs") -> dict[str, int]:
    """``{"ps": 1, "worker": 2}`` from ``"ps=1,worker=2"`` (or a dict of the same, checked):
    job names as in a cluster config, counts positive whole numbers."""
    if isinstance(text, dict):
        items = list(text.items())
    elif isinstance(text, str):
        items = []
        for part in text.split(","):
            name, eq, count = part.strip().partition("=")
            if not eq or not count.strip().isdigit():
                raise errors.InvalidArgumentError(
                    f"{where}: {text!r} is not a list of job=count (e.g. \"ps=1,worker=2\"); bad part {part!r}")
            items.append((name.strip(), int(count)))
    else:
        raise errors.InvalidArgumentError(
            f"{where}: expected a dict job -> number of tasks or \"ps=1,worker=2\", got {type(text).__name__}")
    jobs: dict[str, int] = {}
    for name, count in items:
        if not isinstance(name, str) or not _JOB_RE.match(name):
            raise errors.InvalidArgumentError(
                f"{where}: job name {name!r} is not valid (a letter, then letters, digits or '_')")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise errors.InvalidArgumentError(f"{where}: job {name!r} needs a positive number of tasks, got {count!r}")
        if name in jobs:
            raise errors.InvalidArgumentError(f"{where}: job {name!r} is given twice")
        jobs[name] = count
    if not jobs:
        raise errors.InvalidArgumentError(f"{where}: no jobs given")
    return jobs


def _format_jobs(jobs: dict[str, int]) -> str:
    return ",".join(f"{j}={n}" for j, n in jobs.items())


# ----------------------------------------------------------------------------------------
# The interface

class ClusterResolver(abc.ABC):
    """Where the tasks of a cluster are and which one this process is (TF1's
    ``tf.distribute.cluster_resolver.ClusterResolver``).

    ``task_type`` and ``task_id`` name this process's task (None where the source does not
    say), ``rpc_layer`` the transport (``"grpc"``, ``"ucx"``; None: the default)."""

    task_type: str | None = None
    task_id: int | None = None
    rpc_layer: str | None = None

    @abc.abstractmethod
    def cluster_spec(self) -> cl.ClusterSpec:
        """The cluster as a ``tw.train.ClusterSpec`` (resolved again on every call)."""

    def master(self, task_type=None, task_id=None, rpc_layer=None) -> str:
        """The session target of a task: ``"grpc://host:port"`` of (``task_type``, ``task_id``),
        by default this process's task; ``""`` when no task is named or known."""
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        if task_type is None or task_id is None:
            return ""
        return format_master_url(self.cluster_spec().task_address(task_type, int(task_id)),
                                 rpc_layer or self.rpc_layer)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None) -> dict[str, int]:
        """Accelerators per task by type (``{"GPU": 2}``); ``{}`` where the resolver does not know."""
        del task_type, task_id, config_proto
        return {}

    @property
    def environment(self) -> str:
        """TF's ``environment`` (``"google"`` in Google's own data centres); always ``""`` here."""
        return ""

    def cluster_config(self, transport=None, **settings) -> cl.ClusterConfig:
        """This cluster as a ``ClusterConfig`` with this process's task: ``config_from_resolver``."""
        return config_from_resolver(self, transport, **settings)

    # What config_from_resolver starts from: the cluster config's schema as a dict.
    def _config_dict(self) -> dict:
        return {"cluster": _cluster_value(self.cluster_spec())}

    def _source(self) -> str:
        return type(self).__name__


def _cluster_value(spec: cl.ClusterSpec) -> dict:
    return {job: (tasks if isinstance(tasks, list) else {str(i): a for i, a in tasks.items()})
            for job, tasks in spec.as_dict().items()}


def config_from_resolver(resolver: ClusterResolver, transport=None, **settings) -> cl.ClusterConfig:
    """A validated ``ClusterConfig`` from a resolver: its cluster, its task (when it names one),
    and the transport — ``transport`` (a name or ``{"control": ..., "tensors": ...}``), else the
    resolver's ``rpc_layer``, else what its source says (``$TW_CONFIG``), else ``"grpc"``.
    ``settings`` are more keys of the config schema (``auth={"token_env": "TW_TOKEN"}``,
    ``timeouts={...}``, ...), which override the source's."""
    obj = dict(resolver._config_dict())
    if transport is not None:
        obj["transport"] = transport
    elif resolver.rpc_layer:
        obj.setdefault("transport", resolver.rpc_layer)
    obj.update(settings)
    if resolver.task_type is not None and resolver.task_id is not None:
        obj["task"] = {"type": resolver.task_type, "index": int(resolver.task_id)}
    return cl.config_from_dict(obj, source=resolver._source())


# ----------------------------------------------------------------------------------------
# Simple

class SimpleClusterResolver(ClusterResolver):
    """A cluster given outright: a ``ClusterSpec`` (or ``{job: [addresses]}``), an optional
    master address and this process's task."""

    def __init__(self, cluster_spec, master: str = "", task_type=None, task_id=None, environment: str = "",
                 num_accelerators=None, rpc_layer=None):
        self._cluster_spec = cl.ClusterSpec(cluster_spec)
        self._master = master
        self.task_type = task_type
        self.task_id = task_id
        self._environment = environment
        self._num_accelerators = dict(num_accelerators or {})
        self.rpc_layer = rpc_layer

    def cluster_spec(self) -> cl.ClusterSpec:
        return self._cluster_spec

    def master(self, task_type=None, task_id=None, rpc_layer=None) -> str:
        """The named task's target, else the ``master`` given (both with the rpc layer)."""
        if task_type is not None and task_id is not None:
            address = self._cluster_spec.task_address(task_type, int(task_id))
        else:
            address = self._master
        return format_master_url(address, rpc_layer or self.rpc_layer)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None) -> dict[str, int]:
        del task_type, task_id, config_proto
        return dict(self._num_accelerators)

    @property
    def environment(self) -> str:
        return self._environment


# ----------------------------------------------------------------------------------------
# TW_CONFIG / TF_CONFIG

TW_CONFIG = "TW_CONFIG"
TF_CONFIG = "TF_CONFIG"
_TF_TASK_KEYS = ("type", "index")


class TFConfigClusterResolver(ClusterResolver):
    """The cluster in ``$TW_CONFIG`` (tensorweave's JSON config: cluster, task, transport, auth,
    ...) or, when that is unset, ``$TF_CONFIG`` (TensorFlow's: ``{"cluster": {...}, "task":
    {"type": "worker", "index": 0}, "rpc_layer": "grpc", "environment": ""}``; other keys are
    ignored, as TensorFlow does). The variable is read again on every call; ``task_type``,
    ``task_id`` and ``rpc_layer`` given here win over the variable's."""

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None, *, environ=None):
        self._environ = os.environ if environ is None else environ
        self._task_type, self._task_id = task_type, task_id
        self._rpc_layer, self._environment = rpc_layer, environment
        self._load()  # outside its environment this is an error now, not at first use

    def _load(self) -> tuple[str, dict]:
        for var in (TW_CONFIG, TF_CONFIG):
            text = self._environ.get(var)
            if text:
                break
        else:
            raise errors.NotFoundError(
                "TFConfigClusterResolver: neither TW_CONFIG nor TF_CONFIG is set (it looks for the cluster in "
                "$TW_CONFIG, tensorweave's JSON config, then in $TF_CONFIG, TensorFlow's "
                "{\"cluster\": ..., \"task\": {\"type\": ..., \"index\": ...}})")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            # Position only: the value is the user's, and configuration text is never echoed.
            raise errors.InvalidArgumentError(
                f"${var}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        if not isinstance(data, dict):
            raise errors.InvalidArgumentError(f"${var}: expected a JSON object, got {type(data).__name__}")
        if var == TF_CONFIG:
            self._check_tf_config(data)
        return var, data

    @staticmethod
    def _check_tf_config(data: dict) -> None:
        if "cluster" not in data:
            raise errors.InvalidArgumentError(
                "$TF_CONFIG: has no \"cluster\" (job name -> list of \"host:port\" addresses)")
        task = data.get("task", {})
        if not isinstance(task, dict):
            raise errors.InvalidArgumentError(f"$TF_CONFIG: \"task\" must be an object, got {type(task).__name__}")
        index = task.get("index", 0)
        if "type" in task and not isinstance(task["type"], str):
            raise errors.InvalidArgumentError(f"$TF_CONFIG: task.type must be a job name, got {task['type']!r}")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise errors.InvalidArgumentError(f"$TF_CONFIG: task.index must be a task index, got {index!r}")
        rpc = data.get("rpc_layer")
        if rpc is not None and not isinstance(rpc, str):
            raise errors.InvalidArgumentError(f"$TF_CONFIG: rpc_layer must be a string, got {rpc!r}")

    def _source(self) -> str:
        return f"${self._load()[0]}"

    def cluster_spec(self) -> cl.ClusterSpec:
        var, data = self._load()
        if var == TW_CONFIG:
            return cl.config_from_dict(data, source=f"${var}").spec
        try:
            return cl.ClusterSpec(data["cluster"])
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"$TF_CONFIG: {e}") from None

    def _task(self) -> tuple[str | None, int | None]:
        var, data = self._load()
        task = data.get("task") or {}
        if not isinstance(task, dict):
            return None, None
        return task.get("type"), (task.get("index", 0) if "type" in task else None)

    @property
    def task_type(self):
        return self._task_type if self._task_type is not None else self._task()[0]

    @task_type.setter
    def task_type(self, value):
        self._task_type = value

    @property
    def task_id(self):
        return self._task_id if self._task_id is not None else self._task()[1]

    @task_id.setter
    def task_id(self, value):
        self._task_id = value

    @property
    def rpc_layer(self):
        if self._rpc_layer is not None:
            return self._rpc_layer
        var, data = self._load()
        if var == TW_CONFIG:
            return cl.config_from_dict(data, source=f"${var}").control_transport
        return data.get("rpc_layer")

    @rpc_layer.setter
    def rpc_layer(self, value):
        self._rpc_layer = value

    @property
    def environment(self) -> str:
        if self._environment is not None:
            return self._environment
        return str(self._load()[1].get("environment", ""))

    def _config_dict(self) -> dict:
        var, data = self._load()
        if var == TW_CONFIG:
            # The whole config (auth, tls, timeouts, transport pairs) carries over; the task
            # is set again by config_from_resolver from task_type/task_id.
            obj = {k: v for k, v in data.items() if k != "task"}
            if self._rpc_layer is not None:  # given to the resolver: wins over the variable's
                obj["transport"] = self._rpc_layer
            return obj
        return {"cluster": _cluster_value(self.cluster_spec())}


# ----------------------------------------------------------------------------------------
# Slurm

_SLURM_VARS = {
    "rank": ("SLURM_PROCID",),
    "num_tasks": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
    "nodelist": ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"),
    "tasks_per_node": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
}
_HOST_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _split_outside_brackets(text: str, where: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for c in text:
        if c == "[":
            if depth:
                raise errors.InvalidArgumentError(f"{where}: nested '[' in {text!r}")
            depth = 1
        elif c == "]":
            if not depth:
                raise errors.InvalidArgumentError(f"{where}: ']' without '[' in {text!r}")
            depth = 0
        elif c == "," and not depth:
            parts.append(cur)
            cur = ""
            continue
        cur += c
    if depth:
        raise errors.InvalidArgumentError(f"{where}: '[' without ']' in {text!r}")
    parts.append(cur)
    if any(not p for p in parts):
        raise errors.InvalidArgumentError(f"{where}: empty host name in {text!r}")
    return parts


def _expand_range(body: str, where: str, text: str) -> list[str]:
    out = []
    for item in body.split(","):
        lo, dash, hi = item.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise errors.InvalidArgumentError(
                f"{where}: {item!r} in {text!r} is not a number or a range of numbers (e.g. 1-4, 01-10)")
        if not dash:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise errors.InvalidArgumentError(f"{where}: the range {item!r} in {text!r} runs backwards")
        # Slurm keeps the start's zero padding: n[01-10] is n01 ... n10.
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def expand_hostlist(hostlist: str, where: str = "hostlist") -> list[str]:
    """The host names of a Slurm host list, in order, repeats kept:
    ``"n[1-2],m5,o[08-10]"`` -> ``["n1", "n2", "m5", "o08", "o09", "o10"]`` (several bracket
    groups in one name expand in order: ``"r[1-2]n[1-2]"`` -> r1n1 r1n2 r2n1 r2n2)."""
    if not isinstance(hostlist, str) or not hostlist.strip():
        raise errors.InvalidArgumentError(f"{where}: empty host list")
    hosts: list[str] = []
    for part in _split_outside_brackets(hostlist.strip(), where):
        names = [""]
        for piece in re.split(r"(\[[^\]]*\])", part):
            if piece.startswith("["):
                choices = _expand_range(piece[1:-1], where, hostlist)
            elif piece:
                if not _HOST_RE.match(piece):
                    raise errors.InvalidArgumentError(
                        f"{where}: {piece!r} in {hostlist!r} is not part of a host name")
                choices = [piece]
            else:
                continue
            names = [n + c for n in names for c in choices]
        hosts.extend(names)
    return hosts


def expand_tasks_per_node(text: str, where: str = "tasks per node") -> list[int]:
    """Slurm's tasks-per-node list, one count per node in node-list order:
    ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    if not isinstance(text, str) or not text.strip():
        raise errors.InvalidArgumentError(f"{where}: empty tasks-per-node list")
    out: list[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            raise errors.InvalidArgumentError(
                f"{where}: {part!r} in {text!r} is not a task count N or N(xREPEATS) (e.g. \"2(x3),1\")")
        count, repeats = int(m.group(1)), int(m.group(2) or 1)
        if count < 1 or repeats < 1:
            raise errors.InvalidArgumentError(f"{where}: {part!r} in {text!r}: counts must be positive")
        out.extend([count] * repeats)
    return out


# Where scontrol finds its configuration when SLURM_CONF does not say.
SLURM_CONF_FILES = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")


def _scontrol_hostnames(nodelist: str, environ) -> tuple[list[str] | None, str]:
    """Slurm's own expansion (``scontrol show hostnames``): (hosts, "") or (None, why not).

    Only with a Slurm configuration (``$SLURM_CONF``, or a slurm.conf where scontrol looks):
    without one scontrol cannot run, and would first look for a controller in DNS."""
    exe = shutil.which("scontrol", path=environ.get("PATH", os.defpath))
    if exe is None:
        return None, "scontrol is not on PATH"
    if not environ.get("SLURM_CONF") and not any(os.path.exists(p) for p in SLURM_CONF_FILES):
        return None, "no Slurm configuration for scontrol (SLURM_CONF is not set)"
    try:
        proc = subprocess.run([exe, "show", "hostnames", nodelist], capture_output=True, text=True,
                              timeout=30, env=dict(environ), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"scontrol failed: {e}"
    hosts = proc.stdout.split()
    if proc.returncode != 0 or not hosts:
        detail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return None, f"`scontrol show hostnames` failed: {detail}"
    return hosts, ""


def _gpu_ids(environ, gpus_per_node) -> list[str]:
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [x.strip() for x in visible.split(",") if x.strip()]
        if gpus_per_node is None or gpus_per_node <= len(ids):
            return ids[:gpus_per_node] if gpus_per_node is not None else ids
    if gpus_per_node is not None:
        return [str(i) for i in range(gpus_per_node)]
    exe = shutil.which("nvidia-smi", path=environ.get("PATH", os.defpath))
    if exe is None:
        return []
    try:
        proc = subprocess.run([exe, "--list-gpus"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    n = sum(line.startswith("GPU ") for line in proc.stdout.splitlines()) if proc.returncode == 0 else 0
    return [str(i) for i in range(n)]


class SlurmClusterResolver(ClusterResolver):
    """The tasks of a Slurm job step (a program started with ``srun``), TF1's resolver.

    Reads ``SLURM_PROCID`` (this task's rank), ``SLURM_STEP_NUM_TASKS`` (or ``SLURM_NTASKS``),
    ``SLURM_STEP_NODELIST`` (or ``SLURM_JOB_NODELIST``; expanded with ``scontrol show
    hostnames``, or by the resolver itself where scontrol is missing, has no configuration
    or fails) and
    ``SLURM_STEP_TASKS_PER_NODE`` (or ``SLURM_TASKS_PER_NODE``, e.g. ``"2(x3),1"``).

    The step's tasks are laid out node by node in node-list order (Slurm's default block
    distribution: ranks 0..k-1 on the first node, ...); the tasks on one node listen on
    ``port_base``, ``port_base + 1``, .... ``jobs`` (``{"ps": 1, "worker": 2}``; default: every
    task a ``worker``) takes the tasks in that order, jobs sorted by name as TensorFlow does,
    and must add up to the step's number of tasks. Where ``SLURMD_NODENAME`` and
    ``SLURM_LOCALID`` are set, this task's place in the layout is checked against them (a
    ``--distribution`` other than block is an error, not a wrong cluster).

    GPUs: ``gpus_per_node`` defaults to the ids in ``CUDA_VISIBLE_DEVICES``, else
    ``nvidia-smi --list-gpus``, else none; ``gpus_per_task`` to an even share. With
    ``auto_set_gpu``, ``cluster_spec()`` sets ``CUDA_VISIBLE_DEVICES`` to this task's share
    (call it before the process first uses a GPU: CUDA reads the variable once).
    """

    def __init__(self, jobs=None, port_base: int = 8888, gpus_per_node=None, gpus_per_task=None,
                 tasks_per_node=None, auto_set_gpu: bool = True, rpc_layer: str | None = "grpc", *, environ=None):
        self._environ = os.environ if environ is None else environ
        env = self._environ
        missing = []
        if "SLURM_PROCID" not in env:
            missing.append("SLURM_PROCID")
        if jobs is None and not any(v in env for v in _SLURM_VARS["num_tasks"]):
            missing.append(" or ".join(_SLURM_VARS["num_tasks"]))
        if not isinstance(tasks_per_node, dict):
            if not any(v in env for v in _SLURM_VARS["nodelist"]):
                missing.append(" or ".join(_SLURM_VARS["nodelist"]))
            if tasks_per_node is None and not any(v in env for v in _SLURM_VARS["tasks_per_node"]):
                missing.append(" or ".join(_SLURM_VARS["tasks_per_node"]))
        if missing:
            raise errors.NotFoundError(
                "SlurmClusterResolver: not inside a Slurm job step (start the program with srun); not set: "
                + "; ".join(missing))
        self._rank = self._int_var("SLURM_PROCID", minimum=0)
        num_tasks = None
        for var in _SLURM_VARS["num_tasks"]:
            if var in env:
                num_tasks, num_tasks_var = self._int_var(var, minimum=1), var
                break

        if not isinstance(port_base, int) or isinstance(port_base, bool) or not 1 <= port_base <= 65535:
            raise errors.InvalidArgumentError(f"SlurmClusterResolver: port_base must be a port 1-65535, got {port_base!r}")
        self._port_base = port_base

        self._layout = self._resolve_layout(tasks_per_node)  # [(host, tasks on it)] in node order
        total = sum(n for _, n in self._layout)
        if num_tasks is not None and num_tasks != total:
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: {num_tasks_var}={num_tasks} but the tasks per node add up to {total} "
                f"({', '.join(f'{h}: {n}' for h, n in self._layout)})")
        if self._rank >= total:
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: SLURM_PROCID={self._rank} is not a task of this step ({total} tasks)")
        if max(n for _, n in self._layout) + self._port_base - 1 > 65535:
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: port_base {self._port_base} leaves no room for "
                f"{max(n for _, n in self._layout)} tasks on a node below port 65536")

        self._jobs = parse_jobs({"worker": total} if jobs is None else jobs, "SlurmClusterResolver jobs")
        asked = sum(self._jobs.values())
        if asked != total:
            more = "more" if asked > total else "fewer"
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: jobs {_format_jobs(self._jobs)} ask for {asked} tasks, {more} than the "
                f"{total} tasks of this job step (start as many tasks as the jobs need: srun -n {asked} ...)")

        # Where this rank sits: its node and its index among that node's tasks.
        start = 0
        for host, n in self._layout:
            if self._rank < start + n:
                self._host, self._local = host, self._rank - start
                break
            start += n
        self._check_own_place()

        max_per_node = max(n for _, n in self._layout)
        if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int)
                                          or gpus_per_node < 0):
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: gpus_per_node must be a whole number >= 0, got {gpus_per_node!r}")
        self._gpu_ids = _gpu_ids(env, gpus_per_node)
        self._gpus_per_node = len(self._gpu_ids) if gpus_per_node is None else gpus_per_node
        if gpus_per_task is None:
            gpus_per_task = self._gpus_per_node // max_per_node
        if isinstance(gpus_per_task, bool) or not isinstance(gpus_per_task, int) or gpus_per_task < 0:
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: gpus_per_task must be a whole number >= 0, got {gpus_per_task!r}")
        if max_per_node * gpus_per_task > self._gpus_per_node:
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: {max_per_node} tasks on a node x {gpus_per_task} GPUs per task is more "
                f"than the {self._gpus_per_node} GPUs per node")
        self._gpus_per_task = gpus_per_task
        self._auto_set_gpu = auto_set_gpu
        self.rpc_layer = rpc_layer

        # Jobs take the tasks in order, sorted by name as TensorFlow does (the same cluster
        # whatever order the dict was written in).
        self._assignment: dict[str, list[int]] = {}
        rank = 0
        for job in sorted(self._jobs):
            self._assignment[job] = list(range(rank, rank + self._jobs[job]))
            if rank <= self._rank < rank + self._jobs[job]:
                self.task_type, self.task_id = job, self._rank - rank
            rank += self._jobs[job]

    def _int_var(self, var: str, minimum: int) -> int:
        value = self._environ[var]
        if not value.strip().isdigit() or int(value) < minimum:
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: {var}={value!r} is not a whole number >= {minimum}")
        return int(value)

    def _resolve_layout(self, tasks_per_node) -> list[tuple[str, int]]:
        env = self._environ
        if isinstance(tasks_per_node, dict):
            layout = list(tasks_per_node.items())
            for host, n in layout:
                if not isinstance(host, str) or isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise errors.InvalidArgumentError(
                        f"SlurmClusterResolver: tasks_per_node must map host names to positive counts, got {host!r}: {n!r}")
            if not layout:
                raise errors.InvalidArgumentError("SlurmClusterResolver: tasks_per_node is empty")
            return layout
        var = next(v for v in _SLURM_VARS["nodelist"] if v in env)
        hosts = self._expand_nodelist(env[var], var)
        if tasks_per_node is not None:
            if isinstance(tasks_per_node, bool) or not isinstance(tasks_per_node, int) or tasks_per_node < 1:
                raise errors.InvalidArgumentError(
                    f"SlurmClusterResolver: tasks_per_node must be a positive count or a dict host -> count, "
                    f"got {tasks_per_node!r}")
            return [(h, tasks_per_node) for h in hosts]
        tvar = next(v for v in _SLURM_VARS["tasks_per_node"] if v in env)
        counts = expand_tasks_per_node(env[tvar], f"SlurmClusterResolver: {tvar}")
        if len(counts) != len(hosts):
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: {tvar}={env[tvar]!r} gives task counts for {len(counts)} nodes but "
                f"{var}={env[var]!r} names {len(hosts)}")
        return list(zip(hosts, counts, strict=True))

    def _expand_nodelist(self, nodelist: str, var: str) -> list[str]:
        hosts, why = _scontrol_hostnames(nodelist, self._environ)
        if hosts is not None:
            return hosts
        try:
            return expand_hostlist(nodelist, f"SlurmClusterResolver: {var}")
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{e} ({why})") from None

    def _check_own_place(self) -> None:
        env = self._environ
        node, local = env.get("SLURMD_NODENAME"), env.get("SLURM_LOCALID")
        if node is None or local is None or not local.isdigit():
            return
        if (node, int(local)) != (self._host, self._local):
            raise errors.InvalidArgumentError(
                f"SlurmClusterResolver: rank {self._rank} runs as task {local} on {node} "
                f"(SLURMD_NODENAME, SLURM_LOCALID), but a block layout of the step puts it as task {self._local} "
                f"on {self._host}: start the step with --distribution=block (the default), or give "
                "tasks_per_node to match it")

    def cluster_spec(self) -> cl.ClusterSpec:
        addresses = [f"{host}:{self._port_base + i}" for host, n in self._layout for i in range(n)]
        if self._auto_set_gpu and self._gpus_per_task > 0:
            share = self._gpu_ids[self._local * self._gpus_per_task:(self._local + 1) * self._gpus_per_task]
            self._environ["CUDA_VISIBLE_DEVICES"] = ",".join(share)
        return cl.ClusterSpec({job: [addresses[r] for r in ranks] for job, ranks in self._assignment.items()})

    def get_task_info(self) -> tuple[str | None, int | None]:
        """(task_type, task_id) of this process (TF1's name)."""
        return self.task_type, self.task_id

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None) -> dict[str, int]:
        del task_type, task_id, config_proto
        return {"GPU": self._gpus_per_task} if self._gpus_per_task else {}

    def _source(self) -> str:
        return f"SlurmClusterResolver (job step of {sum(n for _, n in self._layout)} tasks, rank {self._rank})"


# ----------------------------------------------------------------------------------------
# Kubernetes

K8S_DEFAULT_PORT = 2222
K8S_DEFAULT_DOMAIN = "cluster.local"
K8S_POD_NAME_VARS = ("TW_K8S_POD_NAME", "HOSTNAME")
K8S_NAMESPACE_VARS = ("TW_K8S_NAMESPACE", "POD_NAMESPACE")
K8S_JOBS_VAR = "TW_K8S_JOBS"
K8S_DOMAIN_VAR = "TW_K8S_CLUSTER_DOMAIN"
# Where a pod with a service account token finds its namespace.
K8S_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_POD_RE = re.compile(r"^(?P<set>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)-(?P<ordinal>0|[1-9][0-9]*)$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$")


def kubernetes_set_name(cluster_name: str, job: str) -> str:
    """The StatefulSet (and, by default, headless Service) of a job: ``<cluster_name>-<job>``,
    or ``<job>`` for an empty cluster name."""
    return f"{cluster_name}-{job}" if cluster_name else job


class KubernetesClusterResolver(ClusterResolver):
    """The tasks of a cluster run as one StatefulSet per job, each behind a headless Service,
    resolved from the pod's own environment (no API server, no service account needed).

    Naming scheme (what ``tensorweave cluster manifest --kubernetes`` writes): job ``J`` of
    cluster ``NAME`` is StatefulSet ``NAME-J`` with ``replicas`` pods ``NAME-J-0`` ...; task
    ``i`` of ``J`` is pod ``NAME-J-i``, at
    ``NAME-J-i.<service>.<namespace>.svc.<cluster domain>:<port>``, where the service is the
    StatefulSet's headless Service (``NAME-J`` unless ``service`` says otherwise: one name for
    every job, or a dict job -> name).

    * ``jobs``: job -> replicas (``{"ps": 1, "worker": 2}``), else ``$TW_K8S_JOBS``
      (``"ps=1,worker=2"``).
    * ``pod_name``: this pod, ``<statefulset>-<ordinal>``, else ``$TW_K8S_POD_NAME`` (the
      downward API's ``metadata.name``), else ``$HOSTNAME`` (a StatefulSet pod's host name is
      its name). Its StatefulSet names its job (``NAME-J`` or ``J``) and the cluster's NAME.
    * ``namespace``: else ``$TW_K8S_NAMESPACE``, ``$POD_NAMESPACE``, else the service account's
      namespace file.
    * ``cluster_domain``: else ``$TW_K8S_CLUSTER_DOMAIN``, else ``cluster.local``.
    """

    def __init__(self, jobs=None, port: int = K8S_DEFAULT_PORT, pod_name: str | None = None,
                 namespace: str | None = None, service=None, cluster_domain: str | None = None,
                 rpc_layer: str | None = "grpc", *, environ=None, namespace_file: str | None = None):
        env = os.environ if environ is None else environ
        missing = []
        if jobs is None and not env.get(K8S_JOBS_VAR):
            missing.append(f"the jobs (jobs= or {K8S_JOBS_VAR}, e.g. \"ps=1,worker=2\")")
        if pod_name is None:
            pod_name = next((env[v] for v in K8S_POD_NAME_VARS if env.get(v)), None)
            if pod_name is None:
                missing.append(f"the pod name (pod_name= or {' or '.join(K8S_POD_NAME_VARS)})")
        ns_file = K8S_NAMESPACE_FILE if namespace_file is None else namespace_file
        if namespace is None:
            namespace = next((env[v] for v in K8S_NAMESPACE_VARS if env.get(v)), None)
            if namespace is None:
                try:
                    with open(ns_file) as f:
                        namespace = f.read().strip() or None
                except OSError:
                    namespace = None
            if namespace is None:
                missing.append(f"the namespace (namespace= or {' or '.join(K8S_NAMESPACE_VARS)}, or {ns_file})")
        if missing:
            raise errors.NotFoundError(
                "KubernetesClusterResolver: not inside a pod of a tensorweave StatefulSet; missing: "
                + "; ".join(missing))
        where = "KubernetesClusterResolver"
        self._jobs = parse_jobs(jobs if jobs is not None else env[K8S_JOBS_VAR],
                                f"{where} jobs" if jobs is not None else f"${K8S_JOBS_VAR}")
        for job in self._jobs:
            if not _DNS_LABEL_RE.match(job):
                raise errors.InvalidArgumentError(
                    f"{where}: job {job!r} cannot be part of a pod name (lowercase letters and digits only)")
        m = _POD_RE.match(pod_name)
        if m is None:
            raise errors.InvalidArgumentError(
                f"{where}: pod name {pod_name!r} is not <statefulset>-<ordinal> (e.g. \"digits-worker-1\")")
        set_name, ordinal = m.group("set"), int(m.group("ordinal"))
        job = next((j for j in self._jobs if set_name == j or set_name.endswith("-" + j)), None)
        if job is None:
            raise errors.InvalidArgumentError(
                f"{where}: pod {pod_name!r} belongs to StatefulSet {set_name!r}, which is not <name>-<job> for a job "
                f"of {_format_jobs(self._jobs)}")
        if ordinal >= self._jobs[job]:
            raise errors.InvalidArgumentError(
                f"{where}: pod {pod_name!r} is task {ordinal} of job {job!r}, which has {self._jobs[job]} "
                "replicas (scale the StatefulSet and the jobs together)")
        self.cluster_name = set_name[:-len(job) - 1] if set_name != job else ""
        if not _DNS_LABEL_RE.match(namespace):
            raise errors.InvalidArgumentError(f"{where}: namespace {namespace!r} is not a DNS label")
        self.namespace = namespace
        self.cluster_domain = (cluster_domain or env.get(K8S_DOMAIN_VAR) or K8S_DEFAULT_DOMAIN).strip(".")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise errors.InvalidArgumentError(f"{where}: port must be 1-65535, got {port!r}")
        self.port = port
        if service is None:
            self._services = {j: kubernetes_set_name(self.cluster_name, j) for j in self._jobs}
        elif isinstance(service, str):
            self._services = dict.fromkeys(self._jobs, service)
        elif isinstance(service, dict) and set(service) == set(self._jobs):
            self._services = dict(service)
        else:
            raise errors.InvalidArgumentError(
                f"{where}: service must be a Service name or a dict naming one for each job ({', '.join(self._jobs)})")
        for s in self._services.values():
            if not isinstance(s, str) or not _DNS_LABEL_RE.match(s):
                raise errors.InvalidArgumentError(f"{where}: service name {s!r} is not a DNS label")
        self.pod_name = pod_name
        self.task_type, self.task_id = job, ordinal
        self.rpc_layer = rpc_layer

    def task_address(self, job: str, index: int) -> str:
        pod = f"{kubernetes_set_name(self.cluster_name, job)}-{index}"
        return f"{pod}.{self._services[job]}.{self.namespace}.svc.{self.cluster_domain}:{self.port}"

    def cluster_spec(self) -> cl.ClusterSpec:
        return cl.ClusterSpec({job: [self.task_address(job, i) for i in range(n)] for job, n in self._jobs.items()})

    def _source(self) -> str:
        return f"KubernetesClusterResolver (pod {self.pod_name} in namespace {self.namespace})"


# ----------------------------------------------------------------------------------------
# By name, for the command line

RESOLVERS = {"slurm": SlurmClusterResolver, "kubernetes": KubernetesClusterResolver,
             "tf_config": TFConfigClusterResolver}


def resolver_from_name(name: str, jobs=None, port_base: int | None = None, rpc_layer: str | None = None,
                       environ=None) -> ClusterResolver:
    """The resolver ``tensorweave worker --resolver NAME`` uses: ``slurm`` (``jobs``,
    ``port_base``), ``kubernetes`` (``jobs``, ``port_base`` = every pod's port) or
    ``tf_config`` (takes neither)."""
    if name not in RESOLVERS:
        raise errors.InvalidArgumentError(f"no resolver {name!r}; choose one of {', '.join(RESOLVERS)}")
    if name == "tf_config":
        if jobs is not None or port_base is not None:
            raise errors.InvalidArgumentError(
                "the tf_config resolver reads jobs and addresses from $TW_CONFIG/$TF_CONFIG; leave out --jobs "
                "and --port-base")
        return TFConfigClusterResolver(rpc_layer=rpc_layer, environ=environ)
    kwargs: dict = {"environ": environ, "rpc_layer": rpc_layer or "grpc"}
    if jobs is not None:
        kwargs["jobs"] = parse_jobs(jobs)
    if name == "slurm":
        if port_base is not None:
            kwargs["port_base"] = port_base
        return SlurmClusterResolver(**kwargs)
    if port_base is not None:
        kwargs["port"] = port_base
    return KubernetesClusterResolver(**kwargs)
