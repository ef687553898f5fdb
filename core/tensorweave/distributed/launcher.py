"""Task processes of a cluster on this machine: the home of local clusters.

Owns what every local cluster needs — picking free loopback ports, writing the cluster's
``cluster.toml``, starting a ``tensorweave worker`` process per task (each in its own
session, its output appended to a log), waiting with a deadline for each task's ready line,
stopping tasks (SIGTERM, then SIGKILL after a grace period) — and, on top of that, the
detached clusters of ``tensorweave cluster up|down|status`` with their pid file
``DIR/pids.json``. Tests and examples use ``distributed.testing.LocalCluster``, which starts
its tasks here too and adds killing, restarting and always reaping them.

A pid file is only trusted as far as it can be checked: a recorded process counts as ours
while its pid exists, is not a zombie and (on Linux) has the start time recorded when it
was launched — so ``down`` never signals an unrelated process that reused the pid.
The ready line a worker prints is ``READY_FORMAT`` (``tensorweave worker`` prints it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from tensorweave.distributed import cluster as cl
from tensorweave.framework import errors

CONFIG_NAME = "cluster.toml"
PIDS_NAME = "pids.json"
READY_FORMAT = "tensorweave worker ready: job={job} task={task} address={address} pid={pid}"
READY_RE = re.compile(r"^tensorweave worker ready: job=(?P<job>\S+) task=(?P<task>\d+) address=(?P<address>\S+)",
                      re.M)
POLL_SECONDS = 0.05
# Set to a pid in a task's environment, the task exits when that process is gone (a test
# process killed outright must not leave its tasks running; `cluster up` tasks outlive it).
PARENT_ENV = "TENSORWEAVE_EXIT_WITH_PARENT"


def default_dir() -> str:
    """Where ``cluster up``/``down``/``status`` work without ``--dir``: one per user."""
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return os.path.join(tempfile.gettempdir(), f"tensorweave-cluster-{user}")


def ready_line(job: str, task: int, address: str, pid: int | None = None) -> str:
    return READY_FORMAT.format(job=job, task=task, address=address, pid=os.getpid() if pid is None else pid)


# ----------------------------------------------------------------------------------------
# Ports

def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_ports(n: int, host: str = "127.0.0.1", base_port: int | None = None) -> list[int]:
    """``n`` distinct ports on ``host`` that are free now: ``base_port``, ``base_port+1``, ...
    (each checked), or ports the OS picks.

    The OS-picked ones are held open together while picking so they differ; another program
    can still take one before a worker binds it, which ``up`` reports as that worker's failure.
    """
    if n < 1:
        raise errors.InvalidArgumentError(f"pick_ports: need at least one port, got {n}")
    if base_port is not None:
        if not 1 <= base_port <= 65535 - n + 1:
            raise errors.InvalidArgumentError(
                f"--base-port {base_port}: {n} ports from it must lie in 1-65535")
        ports = list(range(base_port, base_port + n))
        busy = [p for p in ports if not _bindable(host, p)]
        if busy:
            raise errors.UnavailableError(
                f"port{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} on {host} "
                f"{'are' if len(busy) > 1 else 'is'} in use (needed {base_port}-{base_port + n - 1}); "
                "choose another --base-port or leave it out to pick free ports")
        return ports
    # Below the kernel's ephemeral range: a port the OS would hand out for an outgoing
    # connection (any client socket of this machine) could be taken between picking it and
    # the worker binding it; these are not. Checked on the host and on all interfaces (UCX
    # listens on 0.0.0.0).
    lo, hi = _ephemeral_range()
    candidates = list(range(20000, min(lo, 32768)))
    random.shuffle(candidates)
    out = []
    for p in candidates:
        if _bindable(host, p) and (":" in host or _bindable("0.0.0.0", p)):
            out.append(p)
            if len(out) == n:
                return out
    raise errors.UnavailableError(f"no {n} free ports on {host} between 20000 and {lo}")


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ----------------------------------------------------------------------------------------
# Processes

def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def is_alive(pid: int, start_time: int | None = None) -> bool:
    """Whether ``pid`` runs and is the process recorded (same start time, where known).

    A zombie is not alive: it has exited and only waits to be reaped (by its parent, or by
    an init that does not reap, in some containers)."""
    _reap(pid)
    if os.path.isdir("/proc"):
        state = _state(pid)
        if state is None or state in ("Z", "X"):
            return False
        return start_time is None or process_start_time(pid) == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Task processes this process started (``up`` and ``down`` in one process, as in tests):
# only these are reaped here, so no other child's exit status is ever taken from its owner.
_STARTED: set[int] = set()


def _reap(pid: int) -> None:
    if pid not in _STARTED:
        return
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        done = pid
    if done == pid:
        _STARTED.discard(pid)


def _signal(pid: int, sig: int) -> None:
    # Each worker leads its own session (start_new_session): signal its whole process group
    # so anything it started goes too.
    try:
        if hasattr(os, "killpg") and os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


# ----------------------------------------------------------------------------------------
# The pid file

def _pids_path(directory: str) -> str:
    return os.path.join(directory, PIDS_NAME)


def write_pids(directory: str, record: dict) -> None:
    """Write ``DIR/pids.json`` atomically (a reader never sees half a file)."""
    path = _pids_path(directory)
    fd, tmp = tempfile.mkstemp(prefix=".pids-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_pids(directory: str) -> dict | None:
    """The validated pid file of ``directory``, or None when there is none."""
    path = _pids_path(directory)
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise errors.InvalidArgumentError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); "
                                          "remove it if no cluster from this directory runs") from None
    tasks = record.get("tasks") if isinstance(record, dict) else None
    if not isinstance(tasks, list):
        raise errors.InvalidArgumentError(f"{path}: expected {{\"config\": ..., \"tasks\": [...]}}")
    for i, t in enumerate(tasks):
        ok = (isinstance(t, dict) and isinstance(t.get("job"), str) and isinstance(t.get("task"), int)
              and isinstance(t.get("pid"), int) and t["pid"] > 1 and isinstance(t.get("address"), str)
              and (t.get("start_time") is None or isinstance(t.get("start_time"), int)))
        if not ok:
            raise errors.InvalidArgumentError(
                f"{path}: tasks[{i}] must have job (string), task (int), pid (int > 1), address (string) "
                "and start_time (int or null)")
    return record


# ----------------------------------------------------------------------------------------
# The config, task processes, readiness

def write_config(directory: str, obj: dict, *, source: str | None = None, comment: str = ""):
    """Validate the cluster config ``obj`` (the TW_CONFIG schema as a dict) and write it to
    ``DIR/cluster.toml`` atomically; (ClusterConfig, path). Relative file paths in it (TLS, a
    token file) are resolved against ``directory``."""
    path = os.path.join(directory, CONFIG_NAME)
    config = cl.config_from_dict(obj, source=source or path, base_dir=directory)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write((f"# {comment}\n" if comment else "") + config.to_toml())
    os.replace(tmp, path)
    return config, path


@dataclasses.dataclass(eq=False)
class TaskProcess:
    """A started task: its process and where it logs (``offset``: the log's size when it
    started, so a ready line from an earlier run of the same task is not taken for this one)."""

    job: str
    task: int
    address: str
    popen: subprocess.Popen
    log: str
    offset: int = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def name(self) -> str:
        return f"/job:{self.job}/task:{self.task}"

    def record(self) -> dict:
        """As the pid file keeps it."""
        return {"job": self.job, "task": self.task, "address": self.address, "pid": self.pid,
                "start_time": process_start_time(self.pid), "log": self.log}


def start_task(config_path: str, job: str, task: int, address: str, log: str, *,
               worker_argv: list[str] | None = None, env: dict | None = None,
               cwd: str | None = None) -> TaskProcess:
    """Start the worker process of one task, in its own session (so signalling its group
    reaches whatever it starts), appending its output to ``log``. ``worker_argv`` is the
    command before ``--config/--job/--task`` (default ``python -m tensorweave worker``)."""
    argv0 = list(worker_argv) if worker_argv is not None else [sys.executable, "-m", "tensorweave", "worker"]
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env.pop("TW_CONFIG", None)  # the task is named on the command line, not inherited
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    with open(log, "ab") as logf:
        p = subprocess.Popen([*argv0, "--config", config_path, "--job", job, "--task", str(task)],
                             stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             cwd=cwd, env=child_env, start_new_session=True)
    return TaskProcess(job, task, address, p, log, offset)


def wait_ready(tasks: list[TaskProcess], timeout: float) -> None:
    """Wait until each task has printed its ready line (``tensorweave worker`` prints it once
    its server listens); fail naming the task and the end of its log when one exits first or
    the deadline passes."""
    deadline = time.monotonic() + timeout
    pending = list(tasks)
    while pending:
        for t in list(pending):
            try:
                with open(t.log, errors="replace") as f:
                    f.seek(t.offset)
                    m = READY_RE.search(f.read())
            except OSError:
                m = None
            if m is not None:
                # The host may be spelled differently by a transport ("localhost", "[::1]"); the
                # job, task and port must be the configured ones.
                if ((m.group("job"), int(m.group("task")), m.group("address").rpartition(":")[2])
                        != (t.job, t.task, t.address.rpartition(":")[2])):
                    raise errors.InternalError(
                        f"{t.name} reported ready as {m.group(0)!r}, expected its configured address {t.address}")
                pending.remove(t)
                continue
            code = t.popen.poll()
            if code is not None:
                raise errors.UnavailableError(
                    f"{t.name} ({t.address}) exited with status {code} before it was ready; the end of "
                    f"{t.log}:\n{_tail(t.log)}")
        if pending and time.monotonic() > deadline:
            names = ", ".join(t.name for t in pending)
            raise errors.DeadlineExceededError(
                f"not ready after {timeout:g} s: {names}; the end of {pending[0].log}:\n{_tail(pending[0].log)}")
        if pending:
            time.sleep(POLL_SECONDS)  # polling child logs with a deadline; nothing to block on


def exit_with_parent(stop: threading.Event) -> None:
    """In a task started with ``PARENT_ENV``: set ``stop`` when that parent process is gone."""
    parent = int(os.environ.get(PARENT_ENV, "0") or 0)
    if not parent:
        return

    def watch():
        while not stop.wait(0.5):
            if os.getppid() != parent:
                stop.set()
    threading.Thread(target=watch, name="tw-exit-with-parent", daemon=True).start()


# ----------------------------------------------------------------------------------------
# up / down / status

def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return "(no log)"
    return "\n".join("    " + ln for ln in text.rstrip().splitlines()[-lines:]) or "    (empty log)"


def up(directory: str | None = None, *, workers: int = 2, ps: int = 1, transport: str = "grpc",
       tensors_transport: str | None = None, host: str = "127.0.0.1", base_port: int | None = None,
       timeout: float = 60.0, worker_argv: list[str] | None = None, env: dict | None = None) -> tuple[str, list]:
    """Start a local cluster; return (config path, task records) once every task is ready.

    ``worker_argv`` is the command a task runs before ``--config/--job/--task`` (default
    ``python -m tensorweave worker``). On any failure every process already started is
    stopped, the pid file removed, and the error says which task failed with its log's tail.
    """
    directory = os.path.abspath(directory or default_dir())
    if workers < 1 or ps < 0:
        raise errors.InvalidArgumentError(f"need --workers >= 1 and --ps >= 0, got {workers} and {ps}")
    for name in filter(None, (transport, tensors_transport)):
        if name == "inproc":
            raise errors.InvalidArgumentError(
                "transport 'inproc' serves only inside one process; `cluster up` starts one process per "
                "task (use grpc or ucx)")
    os.makedirs(directory, exist_ok=True)
    existing = read_pids(directory)
    if existing is not None:
        alive = [t for t in existing["tasks"] if is_alive(t["pid"], t.get("start_time"))]
        if alive:
            raise errors.AlreadyExistsError(
                f"a cluster already runs from {directory} ({len(alive)} live task processes); "
                f"stop it first: tensorweave cluster down --dir {directory}")
        os.unlink(_pids_path(directory))  # stale: every process it names has exited

    jobs = [("ps", ps), ("worker", workers)]
    ports = pick_ports(ps + workers, host, base_port)
    it = iter(ports)
    cluster = {job: [format_address(host, next(it)) for _ in range(n)] for job, n in jobs if n}
    value = transport if not tensors_transport or tensors_transport == transport else {
        "control": transport, "tensors": tensors_transport}
    # before anything starts: a missing transport plugin is named here
    cl.check_transports(cl.config_from_dict({"cluster": cluster, "transport": value},
                                            source=os.path.join(directory, CONFIG_NAME)))
    config, config_path = write_config(directory, {"cluster": cluster, "transport": value},
                                       comment="written by `tensorweave cluster up`; see docs/distributed.md")

    record = {"config": config_path, "created": time.time(), "tasks": []}
    started: list[TaskProcess] = []
    try:
        for job, index, address in config.spec.all_tasks():
            t = start_task(config_path, job, index, address, os.path.join(directory, f"{job}-{index}.log"),
                           worker_argv=worker_argv, env=env, cwd=directory)
            _STARTED.add(t.pid)  # detached: reaped by is_alive() when it exits
            started.append(t)
            record["tasks"].append(t.record())
            write_pids(directory, record)  # after each start: `down` finds whatever did start
        wait_ready(started, timeout)
    except BaseException:
        _stop(record["tasks"], grace=5.0)
        for t in started:
            with contextlib.suppress(Exception):
                t.popen.wait(timeout=1)
            _STARTED.discard(t.pid)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_pids_path(directory))
        raise
    for t in started:
        # Detached on purpose: the Popen objects go without waiting (no "still running"
        # warning); is_alive() reaps the ones that are this process's children.
        t.popen.returncode = 0
    return config_path, record["tasks"]


def _stop(tasks: list[dict], grace: float) -> list[tuple[dict, str]]:
    """SIGTERM each live task, SIGKILL what is left after ``grace`` seconds; (task, outcome)."""
    outcome = {}
    live = []
    for t in tasks:
        if is_alive(t["pid"], t.get("start_time")):
            _signal(t["pid"], signal.SIGTERM)
            live.append(t)
        else:
            outcome[id(t)] = "had exited"
    for sig, wait_s, label in ((None, grace, "stopped"), (signal.SIGKILL, 10.0, "killed")):
        if sig is not None:
            for t in live:
                _signal(t["pid"], sig)
        deadline = time.monotonic() + wait_s
        while True:
            still = [t for t in live if is_alive(t["pid"], t.get("start_time"))]
            for t in live:
                if t not in still:
                    outcome[id(t)] = label
            live = still
            if not live or time.monotonic() > deadline:
                break
            time.sleep(POLL_SECONDS)
        if not live:
            break
    for t in live:
        outcome[id(t)] = "still running"
    return [(t, outcome[id(t)]) for t in tasks]


def down(directory: str | None = None, grace: float = 10.0) -> list[tuple[dict, str]]:
    """Stop the cluster started from ``directory``; (task, "stopped" | "killed" | "had exited")."""
    directory = os.path.abspath(directory or default_dir())
    record = read_pids(directory)
    if record is None:
        raise errors.NotFoundError(f"no cluster was started from {directory} (no {PIDS_NAME} there)")
    results = _stop(record["tasks"], grace)
    left = [t for t, how in results if how == "still running"]
    if left:
        raise errors.InternalError(
            "still running after SIGKILL: " + ", ".join(f"pid {t['pid']} (/job:{t['job']}/task:{t['task']})"
                                                         for t in left))
    os.unlink(_pids_path(directory))
    return results


def accepts_connections(address: str, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections at "host:port" (grpc and ucx listeners do)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def status(directory: str | None = None) -> tuple[dict, list[dict]]:
    """(pid file record, tasks each with "alive" and "listening" added)."""
    directory = os.path.abspath(directory or default_dir())
    record = read_pids(directory)
    if record is None:
        raise errors.NotFoundError(f"no cluster was started from {directory} (no {PIDS_NAME} there)")
    rows = []
    for t in record["tasks"]:
        alive = is_alive(t["pid"], t.get("start_time"))
        rows.append({**t, "alive": alive, "listening": alive and accepts_connections(t["address"])})
    return record, rows
