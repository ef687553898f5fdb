"""A real Slurm cluster of one node on this machine: munged, slurmctld and slurmd started
here (private config, state, sockets and ports in a temporary directory), then the
distributed digits example run as an `srun` job step of 3 tasks — 1 ps and 2 workers that
find their roles and addresses with ``SlurmClusterResolver`` — and trained to the accuracy
its local-cluster test asks for.

Needs Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them) and root (slurmd
starts job steps as their user). Every daemon and task this test starts is stopped at the
end, failure or not: the daemons by their pids, the job's processes (slurmstepd and the
tasks) by a marker variable in their environment, which only they carry.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tensorweave import plugins
from tensorweave.distributed import launcher

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmstepd", "srun", "scontrol", "sinfo", "scancel")
MARK = "TW_SLURM_TEST_MARK"
POLL = 0.05


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"]))


def _why_skip() -> str | None:
    missing = [p for p in PROGRAMS if _which(p) is None]
    if missing:
        return (f"Slurm/munge are not installed (missing {', '.join(missing)}): "
                "`apt-get install slurm-wlm munge` (.ci/run installs them)")
    if os.geteuid() != 0:
        return "starting slurmd needs root (it starts job steps as their user); this test runs as uid " \
               f"{os.geteuid()}"
    if "grpc" not in {n for n, _ in plugins.registry().transports.items()}:
        return "transport grpc is not installed"
    return None


def _free_run(n: int) -> int:
    """The first of ``n`` consecutive ports that are free on loopback now."""
    for _ in range(50):
        base = launcher.pick_ports(1)[0]
        try:
            launcher.pick_ports(n, "127.0.0.1", base)
        except Exception:  # noqa: BLE001 - one of them is taken: try another start
            continue
        return base
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")


def _marked(token: str) -> list[int]:
    """Pids of processes whose environment carries this test's marker."""
    needle = f"{MARK}={token}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env and launcher.is_alive(int(pid)):
            found.append(int(pid))
    return found


def _children() -> dict[int, str]:
    """This process's children: pid -> state (``Z`` for a zombie)."""
    me, out = os.getpid(), {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == me:
            out[int(pid)] = fields[0]
    return out


def _subreaper(on: bool) -> bool:
    """Make this process the reaper of orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``):
    slurmstepd daemonizes, and an init that does not reap (in a container) would keep it as a
    zombie; with this it becomes our child, and stop() reaps it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class Slurm:
    """munged + slurmctld + slurmd for the node ``localhost``, all in ``directory``."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.token = secrets.token_hex(8)
        self.procs: dict[str, subprocess.Popen] = {}
        self.baseline = set(_children())  # children from before this test are not ours to reap
        self.logs: dict = {}
        self.conf = directory / "slurm.conf"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SBATCH", "SRUN"))}
        self.env.update({"SLURM_CONF": str(self.conf), MARK: self.token})

    def _start(self, name: str, argv: list[str]) -> None:
        self.logs[name] = log = open(self.dir / f"{name}.out", "wb")  # noqa: SIM115 - closed in stop()
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, cwd=self.dir, start_new_session=True)

    def _wait(self, what: str, ready, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {p.returncode} while waiting for {what}:\n"
                                       f"{_tail(self.dir / f'{name}.out')}\n{_tail(self.dir / f'{name}.log')}")
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}:\n{_tail(self.dir / f'{n}.log')}" for n in ("slurmctld", "slurmd"))
                raise RuntimeError(f"{what} not ready after {timeout:g} s\n{logs}")
            time.sleep(POLL)  # polling daemons we started, with a deadline

    def _run(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        return subprocess.run([_which(argv[0]), *argv[1:]], capture_output=True, text=True, env=self.env,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self) -> None:
        d = self.dir
        os.chmod(d, 0o755)  # munged wants its socket's directory searchable by everyone
        key = d / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
        sock = d / "munge.sock"
        self._start("munged", [_which("munged"), "--foreground", "--force", f"--socket={sock}",
                               f"--key-file={key}", f"--log-file={d / 'munged.log'}",
                               f"--pid-file={d / 'munged.pid'}", f"--seed-file={d / 'munged.seed'}"])
        self._wait("munged's socket", sock.exists)

        ctld_port, slurmd_port = launcher.pick_ports(2)
        (d / "state").mkdir()
        (d / "spool").mkdir()
        (d / "plugstack.conf").write_text("")
        host = socket.gethostname().split(".")[0]
        self.conf.write_text("\n".join([
            "ClusterName=twtest",
            f"SlurmctldHost={host}(127.0.0.1)",  # slurmctld serves only where the host name matches
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={sock}",
            "CredType=cred/munge",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd.log'}",
            f"PlugStackConfig={d / 'plugstack.conf'}",
            # No cgroups: whatever container CI runs in, processes are tracked by parentage.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",  # 4 CPUs whatever the machine has
            "NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN",
            "PartitionName=tw Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n")
        self._start("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: "UP" in self._run("scontrol", "ping", timeout=10).stdout)
        self._start("slurmd", [_which("slurmd"), "-D", "-N", "localhost", "-f", str(self.conf)])
        self._wait("slurmd (node localhost idle)",
                   lambda: self._run("sinfo", "-h", "-N", "-n", "localhost", "-o", "%T", timeout=10)
                   .stdout.strip().startswith("idle"))

    def stop(self) -> list[str]:
        """Stop everything started; the names of processes that would not go (none, or a bug)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self._run("scancel", "--partition=tw", timeout=10)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None:
                continue
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
            self.logs[name].close()
        # slurmstepd and the job's tasks: ours by the marker in their environment; those that
        # were orphaned became our children (the subreaper) and are reaped here.
        deadline = time.monotonic() + 10
        while True:
            left = _marked(self.token)
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            orphans = {pid for pid, state in _children().items() if pid not in self.baseline}
            for pid in orphans:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            if not left and not orphans or time.monotonic() > deadline:
                break
            time.sleep(POLL)
        return [f"pid {pid}" for pid in _marked(self.token)] + \
            [f"pid {pid} (child, {state})" for pid, state in _children().items() if pid not in self.baseline]


@pytest.fixture
def slurm():
    why = _why_skip()
    if why:
        pytest.skip(why)
    directory = Path(tempfile.mkdtemp(prefix="tw-slurm-"))  # short: munged's socket path must fit sun_path
    cluster = Slurm(directory)
    reaper = _subreaper(True)
    try:
        cluster.start()
        yield cluster
    finally:
        try:
            left = cluster.stop()
        finally:
            if reaper:
                _subreaper(False)
            shutil.rmtree(directory, ignore_errors=True)
        assert not left, f"processes of the Slurm test still running: {left}"


def test_distributed_digits_trains_as_an_srun_job_step(slurm):
    """srun -n 3 on one node, jobs ps=1,worker=2: rank 0 becomes the ps task, ranks 1-2 the
    workers (jobs take the ranks in name order); 10 epochs of sync training reach >= 95%."""
    port = _free_run(3)
    argv = [_which("srun"), "--nodes=1", "--ntasks=3", "--ntasks-per-node=3", "--overcommit",
            "--kill-on-bad-exit=1", "--time=3", "--job-name=tw-digits",
            sys.executable, str(EXAMPLES / "distributed_digits.py"), "--resolver", "slurm",
            "--jobs", "ps=1,worker=2", "--port-base", str(port), "--epochs", "10", "--mode", "sync"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=slurm.env, cwd=EXAMPLES, timeout=150,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the job step did not finish in 150 s:\n{e.stdout}\n{e.stderr}\n"
                    f"{_tail(slurm.dir / 'slurmd.log')}")
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, f"srun exited with {proc.returncode}:\n{out}\n{err}\n{_tail(slurm.dir / 'slurmd.log')}"
    # Each task found its role and address from Slurm's variables.
    for job, task, offset in (("ps", 0, 0), ("worker", 0, 1), ("worker", 1, 2)):
        assert f"grpc://localhost:{port + offset}: /job:{job}/task:{task} of ps=1, worker=2" in err, err
    m = re.search(r"\[sync\] (\d+) updates; test accuracy on the held-out 20% \(360 images\): (\d\.\d+)", out)
    assert m, out + err
    assert int(m.group(1)) == 10 * 23, out
    assert float(m.group(2)) >= 0.95, out
    assert "[sync] epoch  10/10" in err
    assert "done in" in out and "found by the slurm resolver" in out
