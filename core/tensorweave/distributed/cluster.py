"""Cluster configuration (DESIGN: Distributed): which tasks exist, where they listen, how they talk.

Owns:

* ``ClusterSpec`` (``tw.train.ClusterSpec``, the TF1 API): jobs -> task index -> "host:port".
* ``ClusterConfig``: a spec plus the transport for the whole cluster or per pair of jobs,
  TLS file paths, where the auth token comes from (never the token itself), the health-check
  interval and timeouts, the directories a task's ops may use files in for its clients
  (``[files] allow``), what each task keeps for its clients at most (``[limits]``, read into
  ``limits.Limits``), and optionally this process's own task.
* Reading it: ``load_config(path)`` (TOML), ``config_from_env("TW_CONFIG")`` (JSON, like
  TensorFlow's ``TF_CONFIG``) and ``config_from_dict`` — one schema for all three, validated
  with ``InvalidArgumentError``s that name the file and the key.
* ``check_transports(config)``: called when a server or session starts; a transport the
  config names but no plugin provides is an error naming it and the job pair, never a
  fallback to another transport.
* ``ClusterConfig.to_toml()`` / ``to_dict()``: writing a config back (the local launcher
  writes ``cluster.toml`` with it; ``json.dumps(config.to_dict())`` is a ``TW_CONFIG`` value).

The format is documented in docs/distributed.md ("Cluster configuration").
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport, a dependency there
    import tomli as tomllib

from tensorweave import plugins
from tensorweave.distributed.limits import Limits, limit_fields
from tensorweave.distributed.transport import Security, get_transport
from tensorweave.framework import errors

DEFAULT_TRANSPORT = "grpc"
DEFAULT_HEALTH_CHECK_INTERVAL = 1.0
DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_REQUEST_TIMEOUT = 60.0
DEFAULT_MAX_MESSAGE_BYTES = 1 << 31

# Job names as in TensorFlow; no "-", which is what lets "ps-worker" name a pair of jobs.
_JOB_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ADDRESS_RE = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)"
                         r":(?P<port>[0-9]{1,5})$")
_TRANSPORT_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TOP_KEYS = ("cluster", "task", "transport", "transport_pairs", "tls", "auth",
             "health_check_interval", "timeouts", "max_message_bytes", "files", "limits")
_TLS_KEYS = ("cert", "key", "root", "server_name")
_AUTH_KEYS = ("token_env", "token_file")
_TIMEOUT_KEYS = ("connect", "request", "health_check", "idle")
_TASK_KEYS = ("type", "index")
_FILES_KEYS = ("allow",)


def _bad(where: str, msg: str) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(f"{where}: {msg}")


def _check_keys(obj: dict, allowed, where: str) -> None:
    for k in obj:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _bad(where, f"unknown key {k!r}{hint}; expected one of {', '.join(allowed)}")


def _type_name(v) -> str:
    return type(v).__name__


def parse_address(address, where: str = "address") -> tuple[str, int]:
    """("host", port) of a "host:port" string (IPv6 hosts in brackets), or InvalidArgumentError."""
    if not isinstance(address, str):
        raise _bad(where, f"expected a \"host:port\" string, got {_type_name(address)} {address!r}")
    m = _ADDRESS_RE.match(address)
    if m is None or int(m.group("port")) > 65535:
        raise _bad(where, f"{address!r} is not a \"host:port\" address (e.g. \"127.0.0.1:2222\", "
                          "\"[::1]:2222\"; port 0-65535)")
    return m.group("host"), int(m.group("port"))


# ----------------------------------------------------------------------------------------
# ClusterSpec

def _parse_jobs(cluster, where: str) -> dict[str, dict[int, str]]:
    if not isinstance(cluster, dict):
        raise _bad(where, f"expected a table of job name -> task addresses, got {_type_name(cluster)}")
    # The ClusterDef form: {"job": [{"name": ..., "tasks": {index: address}}, ...]}.
    if set(cluster) == {"job"} and isinstance(cluster["job"], list) and all(
            isinstance(j, dict) for j in cluster["job"]):
        as_jobs = {}
        for i, j in enumerate(cluster["job"]):
            _check_keys(j, ("name", "tasks"), f"{where} job[{i}]")
            name = j.get("name")
            if not isinstance(name, str):
                raise _bad(f"{where} job[{i}]", f"'name' must be a string, got {_type_name(name)}")
            if name in as_jobs:
                raise _bad(f"{where} job[{i}]", f"job {name!r} appears twice")
            as_jobs[name] = j.get("tasks", {})
        cluster = as_jobs
    jobs: dict[str, dict[int, str]] = {}
    for job, tasks in cluster.items():
        jwhere = f"{where} {job}"
        if not isinstance(job, str) or not _JOB_RE.match(job):
            raise _bad(where, f"job name {job!r} is not valid (a letter, then letters, digits or '_')")
        if isinstance(tasks, (list, tuple)):
            items = list(enumerate(tasks))
        elif isinstance(tasks, dict):
            items = []
            for k, addr in tasks.items():
                if isinstance(k, bool) or not (isinstance(k, int) or (isinstance(k, str) and k.isdigit())):
                    raise _bad(jwhere, f"task index {k!r} is not a non-negative integer")
                if int(k) < 0:
                    raise _bad(jwhere, f"task index {k!r} is negative")
                items.append((int(k), addr))
        else:
            close = difflib.get_close_matches(job, _TOP_KEYS, n=1)
            hint = (f" ({close[0]!r} is a top-level setting: in TOML it must come before the first [table] "
                    "header, or every key after [cluster] belongs to [cluster])") if close else ""
            raise _bad(jwhere, f"expected a list of \"host:port\" addresses or a table index -> address, "
                               f"got {_type_name(tasks)}{hint}")
        if not items:
            raise _bad(jwhere, f"job {job!r} has no tasks")
        table: dict[int, str] = {}
        for i, addr in sorted(items):
            if i in table:
                raise _bad(jwhere, f"task index {i} appears twice")
            parse_address(addr, f"{jwhere}[{i}]")
            table[i] = addr
        jobs[job] = table
    if not jobs:
        raise _bad(where, "the cluster has no jobs")
    seen: dict[str, tuple[str, int]] = {}
    for job, table in jobs.items():
        for i, addr in table.items():
            if addr.endswith(":0"):
                continue  # port 0: each task binds its own free port; nothing to collide
            if addr in seen:
                j0, i0 = seen[addr]
                raise _bad(where, f"address {addr!r} is used by two tasks: /job:{j0}/task:{i0} and /job:{job}/task:{i}")
            seen[addr] = (job, i)
    return jobs


class ClusterSpec:
    """Jobs and their tasks' addresses (TF1 ``tf.train.ClusterSpec``).

    Built from ``{"ps": ["h:p", ...], "worker": [...]}``, ``{"worker": {0: "h:p", 2: "h:p"}}``
    (sparse), another ``ClusterSpec``, or the ``as_cluster_def()`` form.
    """

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            self._jobs = {j: dict(t) for j, t in cluster._jobs.items()}
        else:
            self._jobs = _parse_jobs(cluster, "ClusterSpec")

    @classmethod
    def _from_jobs(cls, jobs: dict[str, dict[int, str]]) -> ClusterSpec:
        spec = cls.__new__(cls)
        spec._jobs = jobs
        return spec

    @property
    def jobs(self) -> list[str]:
        """The job names, in the order they were given."""
        return list(self._jobs)

    def _tasks(self, job_name: str) -> dict[int, str]:
        try:
            return self._jobs[job_name]
        except (KeyError, TypeError):
            raise errors.InvalidArgumentError(
                f"no such job in cluster: {job_name!r} (jobs: {', '.join(self._jobs)})") from None

    def num_tasks(self, job_name: str) -> int:
        return len(self._tasks(job_name))

    def task_indices(self, job_name: str) -> list[int]:
        return sorted(self._tasks(job_name))

    def task_address(self, job_name: str, task_index: int) -> str:
        tasks = self._tasks(job_name)
        try:
            return tasks[task_index]
        except (KeyError, TypeError):
            raise errors.InvalidArgumentError(
                f"no task with index {task_index!r} in job {job_name!r} (indices: {sorted(tasks)})") from None

    def job_tasks(self, job_name: str) -> list[str | None]:
        """Addresses by index, ``None`` where a sparse job has no task."""
        tasks = self._tasks(job_name)
        return [tasks.get(i) for i in range(max(tasks) + 1)]

    def all_tasks(self) -> list[tuple[str, int, str]]:
        """Every (job, index, address), jobs in order, indices ascending."""
        return [(j, i, a) for j, t in self._jobs.items() for i, a in sorted(t.items())]

    def as_dict(self) -> dict:
        """job -> list of addresses (dense jobs) or index -> address (sparse jobs)."""
        out: dict = {}
        for job, tasks in self._jobs.items():
            if sorted(tasks) == list(range(len(tasks))):
                out[job] = [tasks[i] for i in range(len(tasks))]
            else:
                out[job] = dict(sorted(tasks.items()))
        return out

    def as_cluster_def(self) -> dict:
        """The ``ClusterDef`` message as a dict: ``{"job": [{"name": ..., "tasks": {i: addr}}]}``,
        jobs sorted by name as TensorFlow does."""
        return {"job": [{"name": j, "tasks": dict(sorted(self._jobs[j].items()))} for j in sorted(self._jobs)]}

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __bool__(self):
        return bool(self._jobs)

    def __repr__(self):
        return f"ClusterSpec({self.as_dict()!r})"


# ----------------------------------------------------------------------------------------
# ClusterConfig

@dataclasses.dataclass(frozen=True)
class TLSFiles:
    """Absolute paths of the PEM files (resolved against the config file's directory)."""

    cert: str | None = None          # this task's certificate chain (servers)
    key: str | None = None           # its private key (servers)
    root: str | None = None          # root CA certificates clients trust
    server_name: str | None = None   # name checked in server certificates instead of the host


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds. ``health_check`` None means: the health-check interval."""

    connect: float = DEFAULT_CONNECT_TIMEOUT     # waiting for a task to come up
    request: float = DEFAULT_REQUEST_TIMEOUT     # one control request (not a RunGraph: steps use RunOptions)
    health_check: float | None = None            # one health-check reply
    idle: float | None = None                    # a peer's unfinished request (None: the transport's default)


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """A cluster and how its tasks talk; see docs/distributed.md ("Cluster configuration").

    ``transport`` is the (control, tensors) transport names for every pair of jobs;
    ``transport_pairs`` maps a sorted (job_a, job_b) to the pair's own (control, tensors).
    ``task`` is this process's (job, index) when the source named it (``TW_CONFIG``).
    ``files_allow``: the directories under which a task's ops may use files for its clients
    (``[files] allow``; None: the directory each task was started in). ``limits``: what each
    task keeps for its clients at most (``[limits]``, ``distributed.limits.Limits``).
    """

    spec: ClusterSpec
    transport: tuple[str, str] = (DEFAULT_TRANSPORT, DEFAULT_TRANSPORT)
    transport_pairs: dict = dataclasses.field(default_factory=dict)
    tls: TLSFiles | None = None
    token_env: str | None = None
    token_file: str | None = None
    health_check_interval: float = DEFAULT_HEALTH_CHECK_INTERVAL
    timeouts: Timeouts = dataclasses.field(default_factory=Timeouts)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    task: tuple[str, int] | None = None
    files_allow: tuple[str, ...] | None = None
    limits: Limits = dataclasses.field(default_factory=Limits)
    source: str = dataclasses.field(default="<dict>", compare=False)

    @property
    def cluster_spec(self) -> ClusterSpec:
        return self.spec

    @property
    def health_check_timeout(self) -> float:
        t = self.timeouts.health_check
        return self.health_check_interval if t is None else t

    @property
    def control_transport(self) -> str:
        """The transport every task serves at its address: what clients and masters dial
        (``grpc://``/``ucx://`` targets, ``tw.Session(target=config)``, the remote master).
        ``[transport_pairs]`` never change it; they choose how tasks exchange tensors."""
        return self.transport[0]

    def transport_for(self, job_a: str, job_b: str) -> tuple[str, str]:
        """(control transport name, tensors transport name) between tasks of two jobs (either order)."""
        for j in (job_a, job_b):
            self.spec._tasks(j)  # an unknown job is an error, not the default transport
        key = tuple(sorted((job_a, job_b)))
        return self.transport_pairs.get(key, self.transport)

    def transports_used(self, job: str | None = None) -> dict[str, list[str]]:
        """transport name -> the job pairs using it ("ps-worker", or "ps-worker tensors" when the
        pair's control and tensor transports differ).

        With ``job``, only pairs that involve that job (what one task's server needs)."""
        jobs = self.spec.jobs
        out: dict[str, list[str]] = {}
        for i, a in enumerate(jobs):
            for b in jobs[i:]:
                if job is not None and job not in (a, b):
                    continue
                control, tensors = self.transport_for(a, b)
                if control == tensors:
                    out.setdefault(control, []).append(f"{a}-{b}")
                else:
                    out.setdefault(control, []).append(f"{a}-{b} control")
                    out.setdefault(tensors, []).append(f"{a}-{b} tensors")
        return out

    def task_of(self, address: str) -> tuple[str, int]:
        """(job, index) of the task listening at ``address`` (exact "host:port" match)."""
        for job, i, addr in self.spec.all_tasks():
            if addr == address:
                return job, i
        raise errors.NotFoundError(f"{self.source}: no task of the cluster has address {address!r} "
                                   f"(tasks: {', '.join(f'{j}/{i}={a}' for j, i, a in self.spec.all_tasks())})")

    def task_address(self, job_name: str, task_index: int) -> str:
        return self.spec.task_address(job_name, task_index)

    def with_task(self, job_name: str, task_index: int) -> ClusterConfig:
        """This config with ``task`` set (checked against the cluster)."""
        self.spec.task_address(job_name, task_index)
        return dataclasses.replace(self, task=(job_name, int(task_index)))

    # -- secrets: read when a server or channel is made, never stored in the config or shown --
    def _read_file(self, path: str, key: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise errors.NotFoundError(
                f"{self.source}: cannot read {key} file {path!r}: {e.strerror or e}") from None

    def token(self) -> str | None:
        """The auth token from its source (``[auth] token_env`` / ``token_file``), or None."""
        if self.token_env is not None:
            value = os.environ.get(self.token_env)
            if not value:
                raise errors.NotFoundError(
                    f"{self.source}: [auth] token_env names the environment variable {self.token_env!r}, "
                    "which is not set (or empty) in this process")
            return value
        if self.token_file is not None:
            value = self._read_file(self.token_file, "[auth] token_file").decode("utf-8", "replace").strip()
            if not value:
                raise errors.InvalidArgumentError(
                    f"{self.source}: [auth] token_file {self.token_file!r} is empty")
            return value
        return None

    def security_for(self, job_a: str | None = None, job_b: str | None = None, *, role: str | None = None):
        """The ``transport.Security`` for a ``"server"``, a ``"client"``, or (None) both.

        The settings are the same for every pair of jobs; naming the pair (``job_a``,
        ``job_b``) checks that both jobs exist. A server gets its certificate and key, a client the root certificates (or, with no
        ``root``, the certificate itself: a self-signed cluster) and the server-name override;
        both get the token and the message size limit. Files are read here, so a missing one
        is an error when the server or session starts, naming the key and path.
        """
        for j in (job_a, job_b):
            if j is not None:
                self.spec._tasks(j)
        if role not in (None, "server", "client"):
            raise errors.InvalidArgumentError(f"security_for: role must be 'server', 'client' or None, got {role!r}")
        sec = Security(token=self.token(), max_message_bytes=self.max_message_bytes, idle_timeout=self.timeouts.idle)
        tls = self.tls
        if tls is not None:
            if role in (None, "server") and tls.cert is not None:
                sec.tls_cert = self._read_file(tls.cert, "[tls] cert")
                if tls.key is not None:
                    sec.tls_key = self._read_file(tls.key, "[tls] key")
            if role in (None, "client"):
                if tls.root is not None:
                    sec.tls_root = self._read_file(tls.root, "[tls] root")
                elif tls.cert is not None:
                    sec.tls_root = self._read_file(tls.cert, "[tls] cert")
                sec.tls_server_name = tls.server_name
        return sec

    # -- writing it back --
    def to_dict(self) -> dict:
        """The config in the schema ``config_from_dict`` reads (JSON-safe; paths absolute)."""
        out: dict = {"cluster": self.spec.as_dict()}
        for job, tasks in out["cluster"].items():
            if isinstance(tasks, dict):
                out["cluster"][job] = {str(i): a for i, a in tasks.items()}
        out["transport"] = _transport_value(self.transport)
        if self.transport_pairs:
            out["transport_pairs"] = {f"{a}-{b}": _transport_value(v) for (a, b), v in self.transport_pairs.items()}
        if self.tls is not None:
            out["tls"] = {k: v for k, v in dataclasses.asdict(self.tls).items() if v is not None}
        if self.token_env is not None:
            out["auth"] = {"token_env": self.token_env}
        elif self.token_file is not None:
            out["auth"] = {"token_file": self.token_file}
        out["health_check_interval"] = self.health_check_interval
        t = {k: v for k, v in dataclasses.asdict(self.timeouts).items() if v is not None}
        out["timeouts"] = t
        out["max_message_bytes"] = self.max_message_bytes
        if self.files_allow is not None:
            out["files"] = {"allow": list(self.files_allow)}
        changed = {k: v for k, v in dataclasses.asdict(self.limits).items()
                   if v != getattr(Limits, k)}
        if changed:
            out["limits"] = changed
        if self.task is not None:
            out["task"] = {"type": self.task[0], "index": self.task[1]}
        return out

    def to_toml(self) -> str:
        """The config as TOML that ``load_config`` reads back to an equal config."""
        d = self.to_dict()
        lines = []
        for key in ("transport", "health_check_interval", "max_message_bytes"):
            lines.append(f"{key} = {_toml_value(d[key])}")
        for table in ("cluster", "transport_pairs", "tls", "auth", "timeouts", "files", "limits", "task"):
            if table in d:
                lines.append("")
                lines.append(f"[{table}]")
                for k, v in d[table].items():
                    lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        return "\n".join(lines) + "\n"


def _transport_value(pair: tuple[str, str]):
    return pair[0] if pair[0] == pair[1] else {"control": pair[0], "tensors": pair[1]}


def _toml_string(s: str) -> str:
    # JSON's escapes are a subset of TOML basic-string escapes; TOML also wants DEL escaped.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(k: str) -> str:
    return k if re.match(r"^[A-Za-z0-9_]+$", k) else _toml_string(k)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


# ----------------------------------------------------------------------------------------
# Reading

def _parse_transport(value, where: str) -> tuple[str, str]:
    def name(v, w):
        if not isinstance(v, str) or not _TRANSPORT_NAME_RE.match(v):
            raise _bad(w, f"expected a transport name such as \"grpc\" or \"ucx\", got {v!r}")
        return v

    if isinstance(value, str):
        n = name(value, where)
        return n, n
    if isinstance(value, dict):
        _check_keys(value, ("control", "tensors"), where)
        missing = [k for k in ("control", "tensors") if k not in value]
        if missing:
            raise _bad(where, f"a transport table needs both 'control' and 'tensors' (missing {', '.join(missing)})")
        return name(value["control"], f"{where}.control"), name(value["tensors"], f"{where}.tensors")
    raise _bad(where, f"expected a transport name or {{ control = ..., tensors = ... }}, got {_type_name(value)}")


def _number(value, where: str, *, integer: bool = False) -> float | int:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise _bad(where, f"expected a {'whole number' if integer else 'number'}, got {_type_name(value)} {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise _bad(where, f"expected a positive number, got {value!r}")
    return value if integer else float(value)


def _path(value, where: str, base_dir: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(where, f"expected a file path string, got {_type_name(value)} {value!r}")
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(value)))


def _table(d: dict, key: str, where: str) -> dict:
    v = d[key]
    if not isinstance(v, dict):
        raise _bad(f"{where}: [{key}]", f"expected a table, got {_type_name(v)}")
    return v


def config_from_dict(obj: dict, *, source: str = "<dict>", base_dir: str | None = None) -> ClusterConfig:
    """A validated ``ClusterConfig`` from the TOML/JSON schema as a dict.

    ``source`` names it in errors (a file path, ``$TW_CONFIG``); relative TLS and token file
    paths are resolved against ``base_dir`` (default: the current directory).
    """
    where = source
    base_dir = os.path.abspath(base_dir or os.getcwd())
    if not isinstance(obj, dict):
        raise _bad(where, f"expected a table at the top level, got {_type_name(obj)}")
    _check_keys(obj, _TOP_KEYS, where)
    if "cluster" not in obj:
        raise _bad(where, "missing the [cluster] table (job name -> list of \"host:port\" addresses)")
    spec = ClusterSpec._from_jobs(_parse_jobs(obj["cluster"], f"{where}: [cluster]"))

    transport = _parse_transport(obj.get("transport", DEFAULT_TRANSPORT), f"{where}: transport")
    pairs: dict[tuple[str, str], tuple[str, str]] = {}
    if "transport_pairs" in obj:
        pw = f"{where}: [transport_pairs]"
        for key, value in _table(obj, "transport_pairs", where).items():
            parts = key.split("-") if isinstance(key, str) else []
            if len(parts) != 2 or not all(parts):
                raise _bad(pw, f"key {key!r} is not a job pair \"job_a-job_b\" (e.g. \"ps-worker\")")
            for j in parts:
                if j not in spec.jobs:
                    raise _bad(pw, f"key {key!r} names job {j!r}, which is not in [cluster] "
                                   f"(jobs: {', '.join(spec.jobs)})")
            pair = tuple(sorted(parts))
            if pair in pairs:
                raise _bad(pw, f"the pair {pair[0]}-{pair[1]} is given twice (order does not matter)")
            pairs[pair] = _parse_transport(value, f"{pw} {key!r}")

    tls = None
    if "tls" in obj:
        tw_ = f"{where}: [tls]"
        t = _table(obj, "tls", where)
        _check_keys(t, _TLS_KEYS, tw_)
        files = {k: _path(t[k], f"{tw_} {k}", base_dir) for k in ("cert", "key", "root") if k in t}
        if ("cert" in files) != ("key" in files):
            raise _bad(tw_, "'cert' and 'key' go together (a server needs both its certificate and its key)")
        server_name = t.get("server_name")
        if server_name is not None and (not isinstance(server_name, str) or not server_name):
            raise _bad(f"{tw_} server_name", f"expected a host name string, got {server_name!r}")
        if not files:
            raise _bad(tw_, "name 'cert' and 'key' (servers) and/or 'root' (clients), or leave [tls] out")
        tls = TLSFiles(server_name=server_name, **files)

    token_env = token_file = None
    if "auth" in obj:
        aw = f"{where}: [auth]"
        a = _table(obj, "auth", where)
        _check_keys(a, _AUTH_KEYS, aw)
        if len(a) != 1:
            raise _bad(aw, "give exactly one token source: token_env = \"VAR\" or token_file = \"path\"")
        if "token_env" in a:
            token_env = a["token_env"]
            if not isinstance(token_env, str) or not _ENV_NAME_RE.match(token_env):
                raise _bad(f"{aw} token_env", "expected the name of an environment variable (not the token)")
        else:
            token_file = _path(a["token_file"], f"{aw} token_file", base_dir)

    interval = DEFAULT_HEALTH_CHECK_INTERVAL
    if "health_check_interval" in obj:
        interval = _number(obj["health_check_interval"], f"{where}: health_check_interval")

    timeouts = Timeouts()
    if "timeouts" in obj:
        tow = f"{where}: [timeouts]"
        t = _table(obj, "timeouts", where)
        _check_keys(t, _TIMEOUT_KEYS, tow)
        timeouts = Timeouts(**{k: _number(v, f"{tow} {k}") for k, v in t.items()})

    max_bytes = DEFAULT_MAX_MESSAGE_BYTES
    if "max_message_bytes" in obj:
        max_bytes = _number(obj["max_message_bytes"], f"{where}: max_message_bytes", integer=True)

    files_allow = None
    if "files" in obj:
        fw = f"{where}: [files]"
        f = _table(obj, "files", where)
        _check_keys(f, _FILES_KEYS, fw)
        allow = f.get("allow", [])
        if not isinstance(allow, list):
            raise _bad(f"{fw} allow", f"expected a list of directories, got {_type_name(allow)} {allow!r}")
        files_allow = tuple(_path(d, f"{fw} allow[{i}]", base_dir) for i, d in enumerate(allow))

    limits = Limits()
    if "limits" in obj:
        lw = f"{where}: [limits]"
        t = _table(obj, "limits", where)
        fields = limit_fields()
        _check_keys(t, tuple(fields), lw)
        limits = Limits(**{k: _number(v, f"{lw} {k}", integer=fields[k] is int) for k, v in t.items()})

    task = None
    if "task" in obj:
        kw = f"{where}: task"
        t = _table(obj, "task", where)
        _check_keys(t, _TASK_KEYS, kw)
        job, index = t.get("type"), t.get("index", 0)
        if not isinstance(job, str):
            raise _bad(f"{kw}.type", f"expected a job name, got {job!r}")
        if isinstance(index, bool) or not isinstance(index, int):
            raise _bad(f"{kw}.index", f"expected a task index, got {_type_name(index)} {index!r}")
        if job not in spec.jobs:
            raise _bad(f"{kw}.type", f"job {job!r} is not in the cluster (jobs: {', '.join(spec.jobs)})")
        if index not in spec.task_indices(job):
            raise _bad(f"{kw}.index", f"job {job!r} has no task {index} (indices: {spec.task_indices(job)})")
        task = (job, index)

    return ClusterConfig(spec=spec, transport=transport, transport_pairs=pairs, tls=tls, token_env=token_env,
                         token_file=token_file, health_check_interval=interval, timeouts=timeouts,
                         max_message_bytes=max_bytes, task=task, files_allow=files_allow, limits=limits,
                         source=source)


def load_config(path) -> ClusterConfig:
    """Read a TOML cluster config; relative file paths in it are relative to its directory."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise errors.NotFoundError(f"cluster config {path!r} does not exist") from None
    except OSError as e:
        raise errors.NotFoundError(f"cannot read cluster config {path!r}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise errors.InvalidArgumentError(f"{path}: not valid TOML: {e}") from None
    return config_from_dict(data, source=path, base_dir=os.path.dirname(os.path.abspath(path)))


def config_from_env(var: str = "TW_CONFIG", environ=None) -> ClusterConfig:
    """The config in environment variable ``var`` (JSON: ``{"cluster": {...}, "task": {"type":
    "worker", "index": 0}, "transport": ...}``); relative paths are relative to the current directory."""
    env = os.environ if environ is None else environ
    text = env.get(var)
    if not text:
        raise errors.NotFoundError(f"environment variable {var} is not set (expected a JSON cluster config)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        # Position only: the value is the user's, and we never echo configuration text.
        raise errors.InvalidArgumentError(
            f"${var}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    return config_from_dict(data, source=f"${var}")


def as_config(obj) -> ClusterConfig:
    """A ``ClusterConfig`` from a config, a ``ClusterSpec``, a dict (the config schema when it
    has a "cluster" key, else a cluster), or a path to a TOML file."""
    if isinstance(obj, ClusterConfig):
        return obj
    if isinstance(obj, ClusterSpec):
        return ClusterConfig(spec=ClusterSpec(obj), source="ClusterSpec")
    if isinstance(obj, dict):
        return config_from_dict(obj if "cluster" in obj else {"cluster": obj})
    if isinstance(obj, (str, os.PathLike)):
        return load_config(obj)
    raise errors.InvalidArgumentError(
        f"expected a ClusterConfig, ClusterSpec, dict or TOML path, got {_type_name(obj)}")


# Bounds on the health-check settings a task announces (they come over the network): a
# tiny interval would make the client's checker spin, a huge one never notice a lost task.
_ANNOUNCED_SECONDS = (0.01, 3600.0)


def health_check_announcement(config) -> dict | None:
    """What a task tells clients in ``GetStatus`` about its cluster's health checks:
    ``{"interval": s, "timeout": s}`` from its config (None without one), so a client that
    connected with only ``grpc://host:port`` checks as often as the config says."""
    interval = getattr(config, "health_check_interval", None)
    if interval is None:
        return None
    timeout = getattr(config, "health_check_timeout", None)
    return {"interval": float(interval), "timeout": float(interval if timeout is None else timeout)}


def health_check_settings(config=None, announced=None, where: str = "GetStatus") -> tuple[float, float]:
    """(interval, timeout) in seconds of a master's health checks: those of the client's own
    cluster ``config`` when it has one; else what the tasks ``announced`` in ``GetStatus``
    (``health_check_announcement``, clamped to 10 ms .. 1 h); else 1 s and 1 s. An
    announcement that is not two positive numbers is an ``InvalidArgumentError`` naming ``where``."""
    if config is not None and getattr(config, "health_check_interval", None) is not None:
        interval = float(config.health_check_interval)
        timeout = getattr(config, "health_check_timeout", None)
        return interval, float(interval if timeout is None else timeout)
    if announced is None:
        return DEFAULT_HEALTH_CHECK_INTERVAL, DEFAULT_HEALTH_CHECK_INTERVAL
    if not isinstance(announced, dict) or set(announced) != {"interval", "timeout"}:
        raise errors.InvalidArgumentError(
            f"{where}: 'health_check' must be an object with 'interval' and 'timeout', got {announced!r:.200}")
    lo, hi = _ANNOUNCED_SECONDS
    out = []
    for key in ("interval", "timeout"):
        v = announced[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v > 0):
            raise errors.InvalidArgumentError(
                f"{where}: health_check.{key} must be a positive number of seconds, got {v!r:.100}")
        out.append(min(max(float(v), lo), hi))
    return out[0], out[1]


def check_transports(config: ClusterConfig, job: str | None = None) -> dict:
    """Every transport the config names (for pairs involving ``job``, or all pairs, and the
    control transport every task serves), as instances.

    Called when a server or session starts: a transport no installed plugin provides is a
    NotFoundError naming it, where it is used (role and job pair) and the config — never a
    silent fallback to another transport.
    """
    out = {}
    used = config.transports_used(job)
    # Every task serves its address over the control transport, even where every pair with
    # its job names another one.
    used.setdefault(config.control_transport, [])
    for name, uses in used.items():
        try:
            out[name] = get_transport(name)
        except errors.NotFoundError as e:
            installed = ", ".join(sorted(n for n, _ in plugins.registry().transports.items())) or "none"
            where = f"job pair{'s' if len(uses) > 1 else ''} {', '.join(uses)}" if uses else \
                "every task's address (the cluster's control transport)"
            raise errors.NotFoundError(
                f"{config.source}: transport {name!r} (configured for {where}) is not installed "
                f"(installed: {installed}); install its plugin, e.g. "
                f"`pip install tensorweave-{name}` (no other transport is used in its place)") from e
    return out
