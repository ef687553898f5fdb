"""A cluster of real task processes on loopback, for tests and examples (``LocalCluster``).

Owns starting one worker process per task (each in its own process group), waiting until
every task answers ``Health`` (polled with a deadline, through a fresh channel each try so a
transport's reconnect back-off never delays it), killing, stopping and restarting single
tasks to exercise fault tolerance, and **always** reaping every process it started: ``close``
(also on leaving the ``with`` block, and from ``atexit``) continues stopped processes and
kills their process groups. Each task also exits on its own when the process that started it
dies, so even a killed test run leaves nothing behind.

A task process runs ``serve(config_path, job, task)`` below (a ``Server`` and ``join``), so
this does not depend on the ``tensorweave worker`` command. Only transports that cross
processes can be used (``grpc``, ``ucx``); ``inproc`` is an error naming the alternatives.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref

from tensorweave.distributed import wire
from tensorweave.distributed.cluster import config_from_dict, load_config
from tensorweave.distributed.launcher import pick_ports
from tensorweave.distributed.server import Server
from tensorweave.distributed.transport import get_transport
from tensorweave.framework import errors

_SERVE = "import sys; from tensorweave.distributed.testing import serve; serve(*sys.argv[1:])"
_POLL = 0.05
_LIVE: weakref.WeakSet = weakref.WeakSet()


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free ports, outside the range the OS hands to outgoing connections
    (``launcher.pick_ports``), so none is taken before its task binds it."""
    return pick_ports(n, host)


class LocalCluster:
    """Real task processes on ``host`` for ``jobs`` ({job: number of tasks}) over ``transport``.

    ``config`` is the ``ClusterConfig`` (also written to ``config_path``); ``target`` is what
    ``tw.Session`` takes. ``token`` turns on auth (the token goes to a 0600 file the config
    names); ``tls`` is a dict of ``cert``/``key``/``root`` PEM paths for the ``[tls]`` table.
    Use it as a context manager, or call ``close()`` in a ``finally``.
    """

    def __init__(self, jobs: dict, transport: str = "grpc", *, health_check_interval: float = 1.0,
                 token: str | None = None, tls: dict | None = None, directory: str | None = None,
                 host: str = "127.0.0.1", start_timeout: float = 60.0, env: dict | None = None,
                 extra: dict | None = None):

        if transport == "inproc":
            raise errors.InvalidArgumentError(
                "LocalCluster starts real processes: the 'inproc' transport cannot cross them; use 'grpc' or 'ucx'")
        get_transport(transport)  # not installed: an error naming it, before any process starts
        self._tmp = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tw-local-cluster-")
            directory = self._tmp.name
        self.directory = directory
        self.transport = transport
        self.start_timeout = start_timeout
        self._env = dict(env or {})
        tasks = [(job, i) for job, n in jobs.items() for i in range(int(n))]
        ports = free_ports(len(tasks), host)
        cluster: dict = {}
        for (job, _), port in zip(tasks, ports):
            cluster.setdefault(job, []).append(f"{host}:{port}")
        obj = {"cluster": cluster, "transport": transport, "health_check_interval": health_check_interval}
        if token is not None:
            token_path = os.path.join(directory, "token")
            fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token)
            obj["auth"] = {"token_file": token_path}
        if tls is not None:
            obj["tls"] = dict(tls)
        obj.update(extra or {})
        self.config = config_from_dict(obj, source="LocalCluster", base_dir=directory)
        self.config_path = os.path.join(directory, "cluster.toml")
        with open(self.config_path, "w") as f:
            f.write(self.config.to_toml())
        self.tasks = tasks
        self._procs: dict = {}   # (job, task) -> Popen
        self._logs: dict = {}
        self._lock = threading.Lock()
        self._closed = False
        _LIVE.add(self)

    # --- addresses --------------------------------------------------------------------------
    def address(self, job: str, task: int = 0) -> str:
        return self.config.task_address(job, task)

    @property
    def target(self) -> str:
        """``"<transport>://address"`` of the first task (a client learns the rest from it)."""
        job, task = self.tasks[0]
        return f"{self.transport}://{self.address(job, task)}"

    def security(self):
        """The client side's ``transport.Security`` (token and TLS roots from the config)."""
        return self.config.security_for(role="client")

    def pid(self, job: str, task: int = 0) -> int | None:
        p = self._procs.get((job, task))
        return p.pid if p is not None else None

    def log(self, job: str, task: int = 0) -> str:
        """What the task process printed (stdout and stderr)."""
        path = self._logs.get((job, task))
        if path is None or not os.path.exists(path):
            return ""
        with open(path, errors="replace") as f:
            return f.read()

    # --- processes --------------------------------------------------------------------------
    def start(self, timeout: float | None = None) -> LocalCluster:
        """Start every task not running and wait until all answer Health."""
        for job, task in self.tasks:
            if not self.running(job, task):
                self.start_task(job, task, wait=False)
        self.wait_ready(timeout=timeout)
        return self

    def start_task(self, job: str, task: int = 0, wait: bool = True, timeout: float | None = None) -> None:
        """Start (or restart, after ``kill``) one task's process; with ``wait``, until it answers."""
        if self._closed:
            raise errors.FailedPreconditionError("LocalCluster is closed")
        key = (job, int(task))
        if key not in self.tasks:
            raise errors.InvalidArgumentError(f"no task /job:{job}/task:{task} in this LocalCluster ({self.tasks})")
        if self.running(*key):
            raise errors.AlreadyExistsError(f"/job:{job}/task:{task} is already running (pid {self.pid(*key)})")
        log_path = os.path.join(self.directory, f"{job}-{task}.log")
        env = dict(os.environ)
        env.update(self._env)
        env["TW_TESTING_PARENT_PID"] = str(os.getpid())
        with self._lock, open(log_path, "ab") as log:
            self._procs[key] = subprocess.Popen(
                [sys.executable, "-c", _SERVE, self.config_path, job, str(task)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)  # its own process group: killpg reaches anything it starts
            self._logs[key] = log_path
        if wait:
            self.wait_ready([key], timeout=timeout)

    def running(self, job: str, task: int = 0) -> bool:
        p = self._procs.get((job, int(task)))
        return p is not None and p.poll() is None

    def health(self, job: str, task: int = 0, timeout: float = 2.0) -> dict:
        """The task's ``Health`` answer (a fresh channel); raises the transport's tw error."""
        ch = get_transport(self.transport).channel(self.address(job, task), self.security())
        try:
            header, _ = wire.decode_response(ch.call("Health", wire.encode_message({}), timeout))
        finally:
            ch.close()
        return header

    def wait_ready(self, tasks=None, timeout: float | None = None) -> None:
        """Poll ``Health`` on ``tasks`` (default: all) until each answers, or fail naming the
        tasks still silent (and the end of a log of a task whose process exited)."""
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        waiting = list(tasks if tasks is not None else self.tasks)
        last: dict = {}
        while waiting:
            for key in list(waiting):
                p = self._procs.get(key)
                if p is not None and p.poll() is not None:
                    raise errors.UnavailableError(
                        f"/job:{key[0]}/task:{key[1]} exited with status {p.returncode} before answering "
                        f"Health; its log ends: {self.log(*key)[-2000:]}")
                try:
                    self.health(*key, timeout=max(0.2, min(2.0, deadline - time.monotonic())))
                    waiting.remove(key)
                except errors.OpError as e:
                    last[key] = e
            if not waiting:
                return
            if time.monotonic() > deadline:
                names = ", ".join(f"/job:{j}/task:{t} ({last.get((j, t))})" for j, t in waiting)
                raise errors.DeadlineExceededError(f"LocalCluster: no Health answer within {timeout:.0f}s from {names}")
            time.sleep(_POLL)

    def send_signal(self, job: str, task: int, sig: int) -> None:
        """Send ``sig`` to the task's process group."""
        p = self._procs.get((job, int(task)))
        if p is None or p.poll() is not None:
            raise errors.FailedPreconditionError(f"/job:{job}/task:{task} is not running")
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self, job: str, task: int = 0, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
        """Kill the task (SIGKILL: no clean-up in it at all) and reap it."""
        self.send_signal(job, task, signal.SIGCONT)  # a stopped process must run to die of SIGTERM
        self.send_signal(job, task, sig)
        p = self._procs[(job, int(task))]
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout)

    def restart(self, job: str, task: int = 0, timeout: float | None = None) -> None:
        """Kill the task if it runs, then start it again on the same address and wait for it."""
        if self.running(job, task):
            self.kill(job, task)
        self.start_task(job, task, wait=True, timeout=timeout)

    def close(self) -> None:
        """Kill every task process group this cluster started and reap them (idempotent)."""
        with self._lock:
            self._closed = True
            procs = list(self._procs.values())
            self._procs.clear()
        for p in procs:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in procs:
            try:
                p.wait(10.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
                pass
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True):
            self.close()


@atexit.register
def _close_all():
    for c in list(_LIVE):
        c.close()


def serve(config_path: str, job: str, task: str) -> None:
    """A task process: serve ``/job:<job>/task:<task>`` of the cluster in ``config_path``
    until SIGTERM/SIGINT, or until the process that started it is gone."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    parent = int(os.environ.get("TW_TESTING_PARENT_PID", "0") or 0)

    def orphan_watch():  # a test process killed outright must not leave its tasks running
        while not stop.wait(0.5):
            if parent and os.getppid() != parent:
                stop.set()
    threading.Thread(target=orphan_watch, name="tw-orphan-watch", daemon=True).start()
    server = Server(load_config(config_path), job, int(task))
    print(f"serving /job:{job}/task:{task} at {server.address} (pid {os.getpid()})", flush=True)
    stop.wait()
    server.stop()
    print(f"stopped /job:{job}/task:{task}", flush=True)
