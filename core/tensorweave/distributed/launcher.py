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

A cluster's directory holds its secrets, so ``up`` keeps it private: without ``--dir`` it is
a new ``mkdtemp`` directory (mode 0700; ``down``/``status`` find it again), a ``--dir`` that
exists must be this user's and not world-writable, and logs, the token and keys are opened
with ``O_NOFOLLOW`` (a symlink planted there is refused, never followed). ``up`` turns on
token auth by default (a random token in ``DIR/token``, mode 0600) and, with ``tls=True``,
TLS with a self-signed certificate made for the cluster's host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import stat
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


DIR_PREFIX = "tensorweave-cluster-"
TOKEN_NAME = "token"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def default_dir() -> str:
    """Where ``cluster up`` puts a cluster without ``--dir``: a new private directory
    (``mkdtemp``: mode 0700) named ``$TMPDIR/tensorweave-cluster-XXXXXXXX`` (this is its
    pattern; ``new_default_dir`` makes one, ``find_default_dir`` finds the running one)."""
    return os.path.join(tempfile.gettempdir(), DIR_PREFIX + "XXXXXXXX")


def new_default_dir() -> str:
    return tempfile.mkdtemp(prefix=DIR_PREFIX)


def _private_dirs() -> list[str]:
    """This user's cluster directories made by ``up`` without ``--dir`` that hold a pid file."""
    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        if not name.startswith(DIR_PREFIX):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
        if stat.S_ISDIR(st.st_mode) and mine and not st.st_mode & 0o077 and os.path.isfile(_pids_path(path)):
            found.append(path)
    return found


def find_default_dir() -> str:
    """The directory of this user's cluster started without ``--dir`` (for ``down`` and
    ``status`` without ``--dir``): NotFoundError when there is none, InvalidArgumentError
    naming them when there are several."""
    found = _private_dirs()
    if not found:
        raise errors.NotFoundError(
            f"no cluster was started without --dir (no {default_dir()} of yours holds a {PIDS_NAME}); "
            "name its directory with --dir")
    if len(found) > 1:
        raise errors.InvalidArgumentError(
            f"{len(found)} clusters were started without --dir: {', '.join(found)}; name one with --dir")
    return found[0]


def _check_given_dir(directory: str) -> bool:
    """A ``--dir`` that exists must be a directory of this user that others cannot write to;
    one that does not exist is created private (mode 0700). Returns whether it was created."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        os.makedirs(directory, mode=0o700)
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise errors.InvalidArgumentError(f"--dir {directory} is not a directory (a symlink or a file)")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise errors.PermissionDeniedError(
            f"--dir {directory} belongs to another user (uid {st.st_uid}); a cluster's directory holds its "
            "token and keys: use a directory of your own, or leave --dir out for a private one")
    if st.st_mode & 0o002:
        raise errors.PermissionDeniedError(
            f"--dir {directory} is world-writable (mode {stat.S_IMODE(st.st_mode):o}): anyone could replace its "
            "config, logs or keys; use a private directory (chmod o-w), or leave --dir out for a new one")
    return False


def _open_private(path: str, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a symlink at ``path`` (refused with PermissionDenied)."""
    try:
        return os.open(path, flags | _NOFOLLOW, mode)
    except OSError as e:
        if os.path.islink(path):
            raise errors.PermissionDeniedError(f"{path} is a symlink; refusing to follow it") from None
        raise errors.PermissionDeniedError(f"cannot open {path}: {e}") from None


def _write_new(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write a new file (none there before; never through a symlink), readable by us only."""
    with contextlib.suppress(FileNotFoundError):
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)  # ours, from an earlier `up` in this directory
    fd = _open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _self_signed(hosts: list[str]) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM), ECDSA P-256, valid 10 years, for ``hosts`` (names and IP
    addresses in its subjectAltName): with the ``cryptography`` package, else the ``openssl``
    command."""
    hosts = list(dict.fromkeys(hosts))
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        return _self_signed_openssl(hosts)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _self_signed_openssl(hosts: list[str]) -> tuple[bytes, bytes]:
    if shutil.which("openssl") is None:
        raise errors.UnimplementedError(
            "--tls makes a self-signed certificate with the `cryptography` package or the `openssl` command; "
            "neither is available (pip install cryptography)")
    san = []
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            san.append(f"IP:{h}")
        except ValueError:
            san.append(f"DNS:{h}")
    with tempfile.TemporaryDirectory() as d:
        key, cert = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        proc = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", cert, "-days", "3650", "-subj", f"/CN={hosts[0]}",
             "-addext", "subjectAltName=" + ",".join(san)], capture_output=True, timeout=120)
        if proc.returncode != 0:
            raise errors.InternalError(f"openssl could not make a certificate: {proc.stderr.decode()[-500:]}")
        with open(cert, "rb") as c, open(key, "rb") as k:
            return c.read(), k.read()


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
    ``DIR/cluster.toml`` atomically (a new temp file, renamed: a symlink there is replaced,
    never written through); (ClusterConfig, path). Relative file paths in it (TLS, a token
    file) are resolved against ``directory``."""
    path = os.path.join(directory, CONFIG_NAME)
    config = cl.config_from_dict(obj, source=source or path, base_dir=directory)
    fd, tmp = tempfile.mkstemp(prefix=".cluster-", suffix=".toml", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write((f"# {comment}\n" if comment else "") + config.to_toml())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
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
    # O_NOFOLLOW: a symlink planted where the log goes is refused, never written through.
    fd = _open_private(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with os.fdopen(fd, "ab") as logf:
        offset = os.fstat(fd).st_size
        p = subprocess.Popen([*argv0, "--config", config_path, "--job", job, "--task", str(task)],
                             stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             cwd=cwd, env=child_env, start_new_session=True)
    return TaskProcess(job, task, address, p, log, offset)


def _read_log(path: str, offset: int = 0) -> str:
    """A log's text from ``offset`` (never through a symlink)."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def wait_ready(tasks: list[TaskProcess], timeout: float) -> None:
    """Wait until each task has printed its ready line (``tensorweave worker`` prints it once
    its server listens); fail naming the task and the end of its log when one exits first or
    the deadline passes."""
    deadline = time.monotonic() + timeout
    pending = list(tasks)
    while pending:
        for t in list(pending):
            try:
                m = READY_RE.search(_read_log(t.log, t.offset))
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
        text = _read_log(path)
    except OSError:
        return "(no log)"
    return "\n".join("    " + ln for ln in text.rstrip().splitlines()[-lines:]) or "    (empty log)"


def up(directory: str | None = None, *, workers: int = 2, ps: int = 1, transport: str = "grpc",
       tensors_transport: str | None = None, host: str = "127.0.0.1", base_port: int | None = None,
       timeout: float = 60.0, worker_argv: list[str] | None = None, env: dict | None = None,
       token: bool | str = True, tls: bool = False, files_allow=None) -> tuple[str, list]:
    """Start a local cluster; return (config path, task records) once every task is ready.

    ``directory`` None: a new private one (``new_default_dir``). ``token``: True (the
    default) writes a random token to ``DIR/token`` and names it in the config's ``[auth]``;
    a string is that token; False turns auth off. ``tls``: make a self-signed certificate for
    ``host`` (``DIR/tls/``) and serve with TLS. ``worker_argv`` is the command a task runs
    before ``--config/--job/--task`` (default ``python -m tensorweave worker``).
    ``files_allow``: directories where the tasks' ops may use files for clients (the config's
    ``[files] allow``; default: none given, so each task allows its working directory, which
    is ``directory``). On any
    failure every process already started is stopped, the pid file removed, and the error
    says which task failed with its log's tail.
    """
    if workers < 1 or ps < 0:
        raise errors.InvalidArgumentError(f"need --workers >= 1 and --ps >= 0, got {workers} and {ps}")
    for name in filter(None, (transport, tensors_transport)):
        if name == "inproc":
            raise errors.InvalidArgumentError(
                "transport 'inproc' serves only inside one process; `cluster up` starts one process per "
                "task (use grpc or ucx)")
    directory = os.path.abspath(directory) if directory else new_default_dir()
    _check_given_dir(directory)
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
    obj = {"cluster": cluster, "transport": value}
    if files_allow is not None:
        obj["files"] = {"allow": [os.path.abspath(os.fspath(d)) for d in files_allow]}
    # before anything starts: a missing transport plugin is named here
    cl.check_transports(cl.config_from_dict(obj, source=os.path.join(directory, CONFIG_NAME)))
    if token:
        secret = token if isinstance(token, str) else secrets.token_urlsafe(32)
        _write_new(os.path.join(directory, TOKEN_NAME), secret.encode() + b"\n")
        obj["auth"] = {"token_file": TOKEN_NAME}
    if tls:
        cert, key = _self_signed([host.strip("[]"), "localhost", "127.0.0.1"])
        tls_dir = os.path.join(directory, "tls")
        with contextlib.suppress(FileExistsError):
            os.mkdir(tls_dir, 0o700)
        if os.path.islink(tls_dir) or not os.path.isdir(tls_dir):
            raise errors.PermissionDeniedError(f"{tls_dir} is not a directory of its own (a symlink?); refusing it")
        _write_new(os.path.join(tls_dir, "cert.pem"), cert, 0o644)
        _write_new(os.path.join(tls_dir, "key.pem"), key)
        obj["tls"] = {"cert": "tls/cert.pem", "key": "tls/key.pem"}
    config, config_path = write_config(directory, obj,
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


@contextlib.contextmanager
def temporary(*, workers: int = 2, ps: int = 1, transport: str = "grpc", prefix: str = "tw-cluster-",
              timeout: float = 60.0, grace: float = 5.0):
    """A local cluster (``up``) in a fresh temporary directory for the ``with`` block: yields
    its loaded config; stops the tasks and removes the directory when the block ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        path, _ = up(directory, workers=workers, ps=ps, transport=transport, timeout=timeout)
        try:
            yield cl.load_config(path)
        finally:
            down(directory, grace=grace)


def down(directory: str | None = None, grace: float = 10.0) -> list[tuple[dict, str]]:
    """Stop the cluster started from ``directory`` (None: the one ``up`` started without a
    directory); (task, "stopped" | "killed" | "had exited")."""
    directory = os.path.abspath(directory) if directory else find_default_dir()
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
    directory = os.path.abspath(directory) if directory else find_default_dir()
    record = read_pids(directory)
    if record is None:
        raise errors.NotFoundError(f"no cluster was started from {directory} (no {PIDS_NAME} there)")
    rows = []
    for t in record["tasks"]:
        alive = is_alive(t["pid"], t.get("start_time"))
        rows.append({**t, "alive": alive, "listening": alive and accepts_connections(t["address"])})
    return record, rows
