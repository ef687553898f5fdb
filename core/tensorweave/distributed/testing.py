"""A cluster of real task processes on loopback, for tests and examples (``LocalCluster``).

Its tasks are ``tensorweave worker`` processes started by ``distributed/launcher.py`` (ports,
config file, ready lines — the same code as ``tensorweave cluster up``). What this adds for
tests: asking a task for ``Health`` (through a fresh channel each time, so a transport's
reconnect back-off never delays it), killing, signalling and restarting single tasks to
exercise fault tolerance, and **always** reaping every process it started: ``close`` (also on
leaving the ``with`` block, and from ``atexit``) continues stopped processes and kills their
process groups. Each task also exits on its own when the process that started it dies, so
even a killed test run leaves nothing behind. Only transports that cross processes can be
used (``grpc``, ``ucx``); ``inproc`` is an error naming the alternatives.
``poll(predicate, what)`` waits for a state with a deadline (tests never sleep for a server).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import tempfile
import threading
import time
import weakref

from tensorweave.distributed import launcher, wire
from tensorweave.distributed.transport import get_transport
from tensorweave.framework import errors

_LIVE: weakref.WeakSet = weakref.WeakSet()


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
        ports = launcher.pick_ports(len(tasks), host)
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
        self.config, self.config_path = launcher.write_config(directory, obj, source="LocalCluster")
        self.tasks = tasks
        self._procs: dict = {}   # (job, task) -> launcher.TaskProcess
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
        """What the task's processes printed (stdout and stderr; every start of it)."""
        path = self._log_path(job, task)
        if not os.path.exists(path):
            return ""
        with open(path, errors="replace") as f:
            return f.read()

    def _log_path(self, job: str, task: int) -> str:
        return os.path.join(self.directory, f"{job}-{task}.log")

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
        env = dict(os.environ)
        env.update(self._env)
        env[launcher.PARENT_ENV] = str(os.getpid())
        with self._lock:
            self._procs[key] = launcher.start_task(self.config_path, job, key[1], self.address(*key),
                                                   self._log_path(*key), env=env)
        if wait:
            self.wait_ready([key], timeout=timeout)

    def running(self, job: str, task: int = 0) -> bool:
        p = self._procs.get((job, int(task)))
        return p is not None and p.popen.poll() is None

    def health(self, job: str, task: int = 0, timeout: float = 2.0) -> dict:
        """The task's ``Health`` answer (a fresh channel); raises the transport's tw error."""
        ch = get_transport(self.transport).channel(self.address(job, task), self.security())
        try:
            header, _ = wire.decode_response(ch.call("Health", wire.encode_message({}), timeout))
        finally:
            ch.close()
        return header

    def wait_ready(self, tasks=None, timeout: float | None = None) -> None:
        """Wait until ``tasks`` (default: all) are serving, or fail naming those that are not
        (and the end of the log of one whose process exited)."""
        keys = list(tasks if tasks is not None else self.tasks)
        launcher.wait_ready([self._procs[k] for k in keys], self.start_timeout if timeout is None else timeout)

    def send_signal(self, job: str, task: int, sig: int) -> None:
        """Send ``sig`` to the task's process group."""
        p = self._procs.get((job, int(task)))
        if p is None or p.popen.poll() is not None:
            raise errors.FailedPreconditionError(f"/job:{job}/task:{task} is not running")
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self, job: str, task: int = 0, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
        """Kill the task (SIGKILL: no clean-up in it at all) and reap it."""
        self.send_signal(job, task, signal.SIGCONT)  # a stopped process must run to die of SIGTERM
        self.send_signal(job, task, sig)
        p = self._procs[(job, int(task))].popen
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
            procs = [t.popen for t in self._procs.values()]
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


def poll(predicate, what, timeout: float = 30.0, interval: float = 0.02) -> None:
    """Wait until ``predicate()`` holds, checking every ``interval`` seconds; after ``timeout``
    an AssertionError saying ``what`` (a string, or a callable giving one then: the state
    that was not reached). What tests use instead of sleeping for a server."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what() if callable(what) else what}")
        time.sleep(interval)


@atexit.register
def _close_all():
    for c in list(_LIVE):
        c.close()
