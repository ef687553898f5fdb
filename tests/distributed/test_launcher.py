"""The local cluster launcher and ``tensorweave worker``: ports, config writing, the pid file,
ready lines, start-up failures, SIGTERM then SIGKILL, and an end-to-end run over a real
transport. Every test reaps the processes it starts (fixtures stop them in ``finally``)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

import pytest

from tensorweave import plugins
from tensorweave.distributed import cluster as cl
from tensorweave.distributed import launcher
from tensorweave.distributed.transport import InProcTransport
from tensorweave.framework import errors

TIMEOUT = 60

# A worker process whose Server is a stand-in (a TCP listener that answers one line) and whose
# config names the transport "fake_net" (registered here and by the fake_net fixture), so the
# launcher and the worker command are tested apart from the distributed runtime and plugins.
# FAKE_SERVER_MODE: "fail" (an OpError at start-up), "crash" (exit 3), "hang_on_stop",
# "wrong_port" (reports a port it was not configured with);
# FAKE_SERVER_TASK limits the mode to one task ("worker/1").
FAKE_BOOT = r'''
import os, socket, sys, threading, types

class Server:
    def __init__(self, config, job_name, task_index=0):
        self.job, self.task = job_name, task_index
        only = os.environ.get("FAKE_SERVER_TASK")
        self.mode = os.environ.get("FAKE_SERVER_MODE", "") if only in (None, f"{job_name}/{task_index}") else ""
        if self.mode == "fail":
            from tensorweave.framework import errors
            raise errors.UnavailableError("fake server: cannot bind")
        if self.mode == "crash":
            print("fake server: crashing", flush=True)
            os._exit(3)
        host, port = config.task_address(job_name, task_index).rsplit(":", 1)
        self._sock = socket.create_server((host, int(port)))
        self.address = f"{host}:{self._sock.getsockname()[1] + (self.mode == 'wrong_port')}"
        self._stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(f"fake {self.job}/{self.task}\n".encode())

    def start(self):
        pass

    def join(self):
        self._stopped.wait()

    def stop(self, grace=None):
        if self.mode == "hang_on_stop":
            threading.Event().wait()
        with __import__("contextlib").suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._stopped.set()

from tensorweave import plugins
from tensorweave.distributed.transport import InProcTransport
for name in ("fake_net", "fake_net2"):
    plugins.registry().transports.register(name, InProcTransport)
mod = types.ModuleType("tensorweave.distributed.server")
mod.Server = Server
sys.modules[mod.__name__] = mod
from tensorweave.tools import cli
sys.exit(cli.main(sys.argv[1:]))
'''
FAKE_WORKER = [sys.executable, "-c", FAKE_BOOT, "worker"]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_SERVER", "TW_CONFIG"))}
    env.update(extra)
    return env


def _kill_and_reap(pids) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break  # not our child (already reaped, or reaped by init)
            if done == pid:
                break
            time.sleep(0.01)


@pytest.fixture
def fake_net():
    """The transport names "fake_net" and "fake_net2" (the in-process transport), registered in
    this process as FAKE_BOOT registers them in the workers."""
    reg = plugins.registry().transports
    names = ("fake_net", "fake_net2")
    for name in names:
        reg.register(name, InProcTransport, override=True)
    try:
        yield "fake_net"
    finally:
        for name in names:
            reg._entries.pop(name, None)
            reg._sources.pop(name, None)
            reg._overrides.discard(name)


class Launch:
    def __init__(self, directory):
        self.dir = directory
        self.pids: set[int] = set()  # every task pid any pid file of this test named

    def up(self, **kw):
        kw.setdefault("transport", "fake_net")
        kw.setdefault("worker_argv", FAKE_WORKER)
        kw.setdefault("timeout", TIMEOUT)
        kw["env"] = _env(**kw.pop("env", {}))
        return launcher.up(self.dir, **kw)


@pytest.fixture
def launch(tmp_path, monkeypatch, fake_net):
    """Runs ``launcher.up`` with stand-in workers; whatever it started is killed and reaped after."""
    d = tmp_path / "cluster"
    d.mkdir()
    state = Launch(str(d))
    orig_write = launcher.write_pids

    def recording_write(directory, record):
        state.pids.update(t["pid"] for t in record["tasks"])
        orig_write(directory, record)

    monkeypatch.setattr(launcher, "write_pids", recording_write)
    try:
        yield state
    finally:
        _kill_and_reap(sorted(state.pids))


def _has(transport: str) -> bool:
    return transport in plugins.registry().transports


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    """One line of ``proc``'s stdout, waiting at most ``timeout`` seconds."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise AssertionError(f"no output within {timeout} s")
        return proc.stdout.readline()
    finally:
        sel.close()


@contextlib.contextmanager
def _popen(argv, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=TIMEOUT)


def run_cli(*args, env=None, timeout=TIMEOUT):
    return subprocess.run([sys.executable, "-m", "tensorweave", *args], env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------------------------------
# Ports and the pid file

def test_pick_ports_are_distinct_and_free():
    ports = launcher.pick_ports(5)
    assert len(set(ports)) == 5
    for p in ports:
        with socket.create_server(("127.0.0.1", p)):
            pass


def test_pick_ports_from_a_base_port_checks_each():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(errors.UnavailableError, match=rf"port {port} on 127.0.0.1 is in use"):
            launcher.pick_ports(2, base_port=port)
    free = launcher.pick_ports(1)[0]
    with contextlib.suppress(errors.UnavailableError):  # free+1 may be taken by someone else
        assert launcher.pick_ports(2, base_port=free) == [free, free + 1]
    with pytest.raises(errors.InvalidArgumentError, match="must lie in 1-65535"):
        launcher.pick_ports(3, base_port=65534)


def test_pid_file_round_trip_and_validation(tmp_path):
    d = str(tmp_path)
    assert launcher.read_pids(d) is None
    rec = {"config": "c.toml", "tasks": [{"job": "worker", "task": 0, "pid": 1234, "address": "h:1",
                                          "start_time": 5, "log": "x.log"}]}
    launcher.write_pids(d, rec)
    assert launcher.read_pids(d) == rec
    assert [f for f in os.listdir(d)] == ["pids.json"]  # no temp file left behind
    (tmp_path / "pids.json").write_text("{not json")
    with pytest.raises(errors.InvalidArgumentError, match=r"pids.json: not valid JSON"):
        launcher.read_pids(d)
    (tmp_path / "pids.json").write_text(json.dumps({"tasks": [{"job": "w", "task": 0, "pid": "1", "address": "h:1"}]}))
    with pytest.raises(errors.InvalidArgumentError, match=r"pids.json: tasks\[0\] must have job"):
        launcher.read_pids(d)


def test_a_reused_pid_is_not_ours(tmp_path):
    """A pid file names a pid now used by another process: `down` leaves that process alone."""
    me = os.getpid()
    assert launcher.is_alive(me, launcher.process_start_time(me))
    if launcher.process_start_time(me) is None:
        pytest.skip("process start times need /proc")
    with _popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) as other:
        real = launcher.process_start_time(other.pid)
        assert launcher.is_alive(other.pid, real) and not launcher.is_alive(other.pid, real + 1)
        launcher.write_pids(str(tmp_path), {"config": "c", "tasks": [
            {"job": "worker", "task": 0, "pid": other.pid, "address": "h:1", "start_time": real + 1}]})
        results = launcher.down(str(tmp_path), grace=1)
        assert [how for _, how in results] == ["had exited"]
        assert other.poll() is None  # untouched
        assert launcher.read_pids(str(tmp_path)) is None


# ----------------------------------------------------------------------------------------
# up / status / down with stand-in servers

def test_up_status_down(launch):
    path, tasks = launch.up(workers=2, ps=1)
    assert path == os.path.join(launch.dir, "cluster.toml")
    cfg = cl.load_config(path)
    assert cfg.spec.num_tasks("ps") == 1 and cfg.spec.num_tasks("worker") == 2
    assert cfg.transport == ("fake_net", "fake_net")
    assert [(t["job"], t["task"], t["address"]) for t in tasks] == cfg.spec.all_tasks()
    assert launcher.read_pids(launch.dir)["tasks"] == tasks
    for t in tasks:
        assert launcher.is_alive(t["pid"], t["start_time"])
        host, port = t["address"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s, s.makefile() as f:
            assert f.readline() == f"fake {t['job']}/{t['task']}\n"  # answering
        with open(t["log"]) as f:
            assert f.read().startswith(launcher.ready_line(t["job"], t["task"], t["address"], t["pid"]))
    _, rows = launcher.status(launch.dir)
    assert all(r["alive"] and r["listening"] for r in rows)

    with pytest.raises(errors.AlreadyExistsError, match=r"a cluster already runs from .* \(3 live task processes\); stop it first: tensorweave cluster down"):
        launch.up()

    results = launcher.down(launch.dir, grace=TIMEOUT)
    assert [how for _, how in results] == ["stopped"] * 3
    assert all(not launcher.is_alive(t["pid"]) for t in tasks)
    assert launcher.read_pids(launch.dir) is None
    for t in tasks:  # each worker stopped cleanly on SIGTERM
        with open(t["log"]) as f:
            assert f"tensorweave worker stopped: job={t['job']} task={t['task']}" in f.read()
    with pytest.raises(errors.NotFoundError, match="no cluster was started from"):
        launcher.status(launch.dir)


def test_split_transport_and_stale_pid_file(launch):
    launcher.write_pids(launch.dir, {"config": "old", "tasks": [
        {"job": "worker", "task": 0, "pid": 2 ** 22 + 7, "address": "h:1", "start_time": None}]})
    path, tasks = launch.up(workers=1, ps=0, tensors_transport="fake_net2", files_allow=["data", "/srv/ckpt"])
    assert [t["job"] for t in tasks] == ["worker"]
    cfg = cl.load_config(path)
    assert cfg.transport_for("worker", "worker") == ("fake_net", "fake_net2")
    assert cfg.files_allow == (os.path.abspath("data"), "/srv/ckpt")  # --allow-files
    assert launcher.down(launch.dir)[0][1] == "stopped"


@pytest.mark.parametrize("mode, match", [
    ("fail", r"/job:worker/task:1 \(127.0.0.1:\d+\) exited with status 1 before it was ready; the end of "
             r".*worker-1.log:\n.*could not start: fake server: cannot bind"),
    ("crash", r"/job:worker/task:1 .* exited with status 3 before it was ready.*\n\s+fake server: crashing"),
])
def test_a_task_that_fails_to_start_stops_the_others(launch, mode, match):
    with pytest.raises(errors.UnavailableError, match=match) as exc:
        launch.up(workers=2, ps=1, env={"FAKE_SERVER_MODE": mode, "FAKE_SERVER_TASK": "worker/1"})
    assert "Traceback" not in str(exc.value)
    assert launcher.read_pids(launch.dir) is None
    assert sorted(f for f in os.listdir(launch.dir) if f.endswith(".log")) == ["ps-0.log", "worker-0.log",
                                                                                "worker-1.log"]
    assert len(launch.pids) == 3 and all(not launcher.is_alive(p) for p in launch.pids)


def test_a_task_ready_at_another_port_is_an_error(launch):
    with pytest.raises(errors.InternalError, match=r"/job:worker/task:0 reported ready as 'tensorweave worker "
                                                   r"ready: job=worker task=0 address=127.0.0.1:\d+', expected its "
                                                   r"configured address 127.0.0.1:\d+"):
        launch.up(workers=1, ps=0, env={"FAKE_SERVER_MODE": "wrong_port"})
    assert launch.pids and all(not launcher.is_alive(p) for p in launch.pids)


def test_not_ready_in_time(launch):
    with pytest.raises(errors.DeadlineExceededError, match=r"not ready after 0.01 s: /job:worker/task:0"):
        launch.up(workers=1, ps=0, timeout=0.01)
    assert launch.pids and all(not launcher.is_alive(p) for p in launch.pids)


def test_down_kills_a_task_that_ignores_sigterm(launch):
    _, tasks = launch.up(workers=1, ps=0, env={"FAKE_SERVER_MODE": "hang_on_stop"})
    results = launcher.down(launch.dir, grace=0.5)
    assert [how for _, how in results] == ["killed"]
    assert not launcher.is_alive(tasks[0]["pid"])


# ----------------------------------------------------------------------------------------
# tensorweave worker

def _write_config(tmp_path, transport="fake_net", port=None) -> str:
    port = port or launcher.pick_ports(1)[0]
    path = tmp_path / "cluster.toml"
    path.write_text(f'transport = "{transport}"\n[cluster]\nworker = ["127.0.0.1:{port}"]\n')
    return str(path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_worker_prints_ready_and_stops_on_signal(tmp_path, sig):
    path = _write_config(tmp_path)
    address = cl.load_config(path).task_address("worker", 0)
    with _popen([*FAKE_WORKER, "--config", path, "--job", "worker", "--task", "0"], env=_env()) as proc:
        line = _read_line(proc, TIMEOUT)
        assert line == launcher.ready_line("worker", 0, address, proc.pid) + "\n"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        assert out == "tensorweave worker stopped: job=worker task=0\n"


def test_worker_takes_its_task_from_tw_config(tmp_path):
    ports = launcher.pick_ports(2)
    value = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                        "task": {"type": "worker", "index": 1}, "transport": "fake_net"})
    with _popen(FAKE_WORKER, env=_env(TW_CONFIG=value)) as proc:
        assert _read_line(proc, TIMEOUT).startswith(
            f"tensorweave worker ready: job=worker task=1 address=127.0.0.1:{ports[1]} ")
        proc.terminate()
        proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0


def test_worker_start_failure_exits_1(tmp_path):
    path = _write_config(tmp_path)
    with _popen([*FAKE_WORKER, "--config", path, "--job", "worker"], env=_env(FAKE_SERVER_MODE="fail")) as proc:
        out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 1 and out == ""
    assert "tensorweave: /job:worker/task:0 could not start: fake server: cannot bind" in err


def test_worker_usage_and_config_errors(tmp_path):
    path = _write_config(tmp_path, transport="grpc")
    proc = run_cli("worker", "--config", path)
    assert proc.returncode == 2 and "name the task to serve: --job NAME" in proc.stderr
    proc = run_cli("worker", "--config", path, "--job", "ps")
    assert proc.returncode == 2 and "no such job in cluster: 'ps' (jobs: worker)" in proc.stderr
    proc = run_cli("worker", "--config", str(tmp_path / "missing.toml"), "--job", "worker")
    assert proc.returncode == 2 and "missing.toml' does not exist" in proc.stderr
    proc = run_cli("worker", "--job", "worker")
    assert proc.returncode == 2 and "environment variable TW_CONFIG is not set" in proc.stderr
    bad = _write_config(tmp_path, transport="no_such_net")
    proc = run_cli("worker", "--config", bad, "--job", "worker", "--task", "0")
    assert proc.returncode == 2
    assert "transport 'no_such_net' (configured for job pair worker-worker) is not installed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cluster_cli_errors(tmp_path):
    d = str(tmp_path / "c")
    proc = run_cli("cluster", "up", "--transport", "inproc", "--dir", d)
    assert proc.returncode == 2 and "transport 'inproc' serves only inside one process" in proc.stderr
    proc = run_cli("cluster", "up", "--transport", "no_such_net", "--dir", d)
    assert proc.returncode == 2 and "transport 'no_such_net' (configured for job pairs ps-ps, ps-worker, " \
                                    "worker-worker) is not installed" in proc.stderr
    assert not os.path.exists(os.path.join(d, "pids.json"))
    for action in ("down", "status"):
        proc = run_cli("cluster", action, "--dir", d)
        assert proc.returncode == 2 and f"no cluster was started from {d}" in proc.stderr
    proc = run_cli("cluster", "up", "--workers", "0", "--dir", d)
    assert proc.returncode == 2 and "need --workers >= 1" in proc.stderr


# ----------------------------------------------------------------------------------------
# End to end: the real `tensorweave cluster up` with the real Server over a real transport

def _real_server() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorweave.distributed.server") is not None


@contextlib.contextmanager
def _subreaper():
    """Orphaned workers (their launcher exits) become this process's children while inside,
    so the test can reap them itself (some containers' init never does)."""
    libc = None
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
                libc = None
    try:
        yield
    finally:
        if libc is not None:
            libc.prctl(36, 0, 0, 0, 0)


@pytest.mark.skipif(not _real_server(), reason="tensorweave.distributed.server is not there yet")
@pytest.mark.parametrize("transport", [t for t in ("grpc", "ucx") if _has(t)] or
                         [pytest.param("grpc", marks=pytest.mark.skip(reason="no network transport installed"))])
def test_cluster_up_answers_then_down_reaps(tmp_path, transport):
    from tensorweave.distributed import wire
    from tensorweave.distributed.transport import get_transport

    d = str(tmp_path / "cluster")
    pids: list[int] = []
    with _subreaper():
        try:
            proc = run_cli("cluster", "up", "--workers", "2", "--ps", "1", "--transport", transport, "--dir", d,
                           timeout=120)
            rec = launcher.read_pids(d)
            pids = [t["pid"] for t in (rec or {"tasks": []})["tasks"]]
            assert proc.returncode == 0, proc.stderr
            path = proc.stdout.strip().splitlines()[-1]
            assert path == os.path.join(d, "cluster.toml")
            cfg = cl.load_config(path)
            assert len(pids) == 3 and all(launcher.is_alive(p) for p in pids)
            assert cfg.token_file == os.path.join(d, "token")  # a token by default
            for job, index, address in cfg.spec.all_tasks():
                ch = get_transport(transport).channel(address, cfg.security_for(role="client"))
                try:
                    header, _ = wire.decode_response(ch.call("GetStatus", wire.encode_message({}), 30))
                finally:
                    ch.close()
                assert (header["job"], header["task"]) == (job, index)
            st = run_cli("cluster", "status", "--dir", d)
            assert st.returncode == 0, st.stderr
            assert st.stdout.count(" alive ") == 3 and st.stdout.count(" yes") == 3
            down = run_cli("cluster", "down", "--dir", d)
            assert down.returncode == 0, down.stderr
            assert down.stdout.count(" stopped") == 3
            assert all(not launcher.is_alive(p) for p in pids)
            assert not os.path.exists(os.path.join(d, "pids.json"))
        finally:
            _kill_and_reap(pids)
