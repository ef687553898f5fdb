"""A real worker (a ``tensorweave worker`` process, ``LocalCluster``) over each network transport
against what a crashed or hostile client leaves behind (docs/distributed.md, "Limits and
hardening"):

* a client SIGKILLed mid-step: the worker notices its RunGraph's connection is gone and aborts
  the step — nothing of it stays running or parked, its threads are free again;
* RecvTensor calls for values that will never come hold no thread: Health, the grpc health
  probe, AbortStep and a real step answer at once while dozens wait, and closing the callers
  frees their waits;
* ucx: a request frame announcing a gigabyte costs what arrives (reserved, not committed),
  a connection that stops sending its body is dropped after the idle timeout and nothing
  else is; a 63-byte string-tensor header claiming 2 GiB allocates nothing on either side;
* where a worker configured on 127.0.0.1 listens (its sockets, from /proc).

Every process started here is killed and reaped (``LocalCluster``, the clients' ``finally``).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import ipaddress
import json
import os
import struct
import subprocess
import sys
import time

import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed import wire
from tensorweave.distributed.testing import LocalCluster
from tensorweave.distributed.testing import poll as _poll
from tensorweave.distributed.transport import get_transport

DEV = "/job:worker/replica:0/task:0/device:CPU:0"
TRANSPORTS = [pytest.param(name, marks=pytest.mark.skipif(
    name not in {n for n, _ in plugins.registry().transports.items()}, reason=f"needs the {name} transport"))
    for name in ("grpc", "ucx")]
IDLE_TIMEOUT = 2.0  # the ucx worker's [timeouts] idle here


def _ucx_available() -> bool:
    # Looked up, not imported: importing ucxx loads UCX before the transport sets its environment.
    return ("ucx" in {n for n, _ in plugins.registry().transports.items()}
            and importlib.util.find_spec("ucxx") is not None)


needs_ucx = pytest.mark.skipif(not _ucx_available(), reason="needs the ucx transport and ucxx")


@pytest.fixture(scope="module", params=TRANSPORTS)
def cluster(request):
    idle = {"timeouts": {"idle": IDLE_TIMEOUT}}
    with LocalCluster({"worker": 1}, request.param, health_check_interval=0.5, extra=idle) as c:
        yield c


def _status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(field + ":")).split()[1])


def _threads(pid: int) -> int:
    return _status(pid, "Threads")


def _rss_mib(pid: int) -> float:
    return _status(pid, "VmRSS") / 1024


def _queue_graph(name):
    g = tw.Graph()
    with g.as_default(), tw.device("/job:worker/task:0"):
        q = tw.FIFOQueue(4, tw.float32, shared_name=name)
        x = tw.placeholder(tw.float32, [])
        ops = {"take": q.dequeue(), "put": q.enqueue(x), "x": x, "size": q.size()}
    return g, ops


def _warm_up(cluster, name):
    """One step that blocks on a dequeue while another session enqueues what releases it: the
    worker's pools have the threads such steps use (a baseline taken after this is stable)."""
    g, ops = _queue_graph(name)
    with tw.Session(cluster.target, graph=g) as a, tw.Session(cluster.target, graph=g) as b:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            taken = pool.submit(a.run, ops["take"])
            _poll(lambda: cluster.health("worker")["running_steps"] == 1, "the warm-up step blocks")
            b.run(ops["put"], {ops["x"]: 1.0})
            assert taken.result(30) == 1.0
    _poll(lambda: cluster.health("worker")["running_steps"] == 0, "the warm-up step ended")


# ----------------------------------------------------------------------------------------
# 1. A client killed mid-step

CLIENT = """
import sys
import tensorweave as tw
g = tw.Graph()
with g.as_default(), tw.device("/job:worker/task:0"):
    take = tw.FIFOQueue(4, tw.float32, shared_name=sys.argv[2]).dequeue()
config = tw.ConfigProto(use_remote_master=sys.argv[3] == "service")
with tw.Session(sys.argv[1], graph=g, config=config) as sess:
    sess.run(take)  # nothing is ever enqueued: blocks until killed
"""


def _idle(cluster) -> bool:
    health = cluster.health("worker")
    return (health["running_steps"], health["steps"]) == (0, 0)


@pytest.mark.parametrize("master", ["client", "service"])
def test_a_client_killed_mid_step_leaves_nothing_running(cluster, master):
    """``client``: the master runs in the killed process, whose RunGraph connection breaks;
    ``service``: a thin client of the task's master service, whose RunStep connection breaks
    (the master service then aborts the step on every task)."""
    pid = cluster.pid("worker", 0)
    queue = f"killed_{master}_{cluster.transport}"
    _warm_up(cluster, queue)
    baseline = _threads(pid)
    client = subprocess.Popen([sys.executable, "-c", CLIENT, cluster.target, queue, master],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _poll(lambda: cluster.health("worker")["running_steps"] == 1, "the client's step runs on the worker")
        client.kill()  # SIGKILL: no AbortStep, no CleanupStep will ever come
        client.wait(30)
        _poll(lambda: _idle(cluster), "the dead client's step is aborted and forgotten on the worker", timeout=20)
        if master == "client":  # (a thin client's session keeps its threads until it expires)
            # (pools keep threads they started while busy: a few more than before is no wait holding one)
            _poll(lambda: _threads(pid) <= baseline + 4, f"the worker's threads back to {baseline} (+4)", timeout=20)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(30)
    # The aborted dequeue gave its wait back (it would otherwise take the next element).
    g, ops = _queue_graph(queue)
    with tw.Session(cluster.target, graph=g) as sess:
        sess.run(ops["put"], {ops["x"]: 7.0})
        assert sess.run(ops["size"]) == 1
        assert sess.run(ops["take"]) == 7.0


# ----------------------------------------------------------------------------------------
# 2. RecvTensor calls that wait for values never produced

def _key(name):
    return f"{DEV};1;{DEV};{name}:0"


def test_waiting_recv_tensors_hold_no_thread_and_control_calls_answer(cluster):
    pid = cluster.pid("worker", 0)
    address = cluster.address("worker", 0)
    transport = get_transport(cluster.transport)
    g = tw.Graph()
    with g.as_default(), tw.device("/job:worker/task:0"):
        y = tw.constant(2.0) * tw.constant(3.0)
    sess = tw.Session(cluster.target, graph=g)
    waiters = transport.channel(address, cluster.security())
    n, step = 80, 1 << 50  # more than any server pool has threads
    try:
        assert sess.run(y) == 6.0
        _warm_up(cluster, f"recv_{cluster.transport}")
        baseline = _threads(pid)
        pool = concurrent.futures.ThreadPoolExecutor(n)
        calls = [pool.submit(waiters.fetch, "RecvTensor",
                             wire.encode_message({"step_id": step, "key": _key(f"never{i}")}), 120)
                 for i in range(n)]
        _poll(lambda: cluster.health("worker")["waiting_recvs"] == n, f"the {n} RecvTensor calls wait on the worker")
        # Each answers well within its 2 s deadline however many wait (before: not for a minute).
        for _ in range(3):
            assert cluster.health("worker", timeout=2.0)["task"] == 0
            control = transport.channel(address, cluster.security())
            try:
                wire.decode_response(control.call("AbortStep", wire.encode_message(
                    {"step_id": step + 1, "message": "not this one"}), 2.0))
            finally:
                control.close()
            assert sess.run(y, options=tw.RunOptions(timeout_in_ms=2000)) == 6.0
            if cluster.transport == "grpc":
                _grpc_health_probe(address)
        assert not any(c.done() for c in calls), "a RecvTensor for a value never sent answered"
        # The waits hold no thread (before: one each, every thread of the server's pool).
        assert _threads(pid) <= baseline + 4, (baseline, _threads(pid))
        waiters.close()  # the callers go away: every wait is withdrawn
        for c in calls:
            with pytest.raises((errors.UnavailableError, errors.CancelledError, errors.FailedPreconditionError)):
                c.result(30)
        pool.shutdown()
        _poll(lambda: cluster.health("worker")["waiting_recvs"] == 0, "the waits are withdrawn", timeout=20)
        # Pools keep the threads they started while busy (the session's steps above): a few
        # more than before is fine, one per wait (80) is what this guards against.
        _poll(lambda: _threads(pid) <= baseline + 4, f"the worker's threads back to {baseline} (+4)", timeout=20)
        control = transport.channel(address, cluster.security())
        try:
            for method in ("AbortStep", "CleanupStep"):
                header = {"step_id": step} if method == "CleanupStep" else {"step_id": step, "message": "done"}
                wire.decode_response(control.call(method, wire.encode_message(header), 10.0))
        finally:
            control.close()
        # (a session sends CleanupStep after its step returns: polled)
        _poll(lambda: _idle(cluster), lambda: f"no step left on the worker: {cluster.health('worker')}")
    finally:
        waiters.close()
        sess.close()


def _grpc_health_probe(address):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0).status
        assert status == health_pb2.HealthCheckResponse.SERVING


# ----------------------------------------------------------------------------------------
# 3. ucx: hand-made frames

def _str_tensor_header(nbytes: int) -> bytes:
    """A wire tensor header of a string tensor claiming ``nbytes`` of payload (none follows)."""
    raw = json.dumps({"dtype": "STR", "shape": [1], "nbytes": nbytes}, separators=(",", ":")).encode()
    return wire.TENSOR_MAGIC + struct.pack("<I", len(raw)) + raw


@needs_ucx
@pytest.mark.parametrize("cluster", ["ucx"], indirect=True)
def test_ucx_an_unfinished_request_body_is_reserved_not_committed_and_times_out(cluster):
    import asyncio

    from tensorweave_ucx import connection, engine, framing

    pid = cluster.pid("worker", 0)
    address = cluster.address("worker", 0)
    host, port = address.rsplit(":", 1)
    assert cluster.health("worker")["task"] == 0
    rss = _rss_mib(pid)
    eng = engine.engine()
    announced = 1 << 30

    async def open_raw():
        conn = connection.Conn(eng, await eng.connect(host, int(port), 10), address)
        conn.post(framing.slot(framing.HELLO, 0))
        kind, *_ = await connection.recv_slot(conn, framing.tag(0, framing.RESP_HEAD), "hello answer")
        assert kind == framing.OK
        # A RunGraph announcing 1 GiB of body; its first 4 MiB piece comes, then nothing.
        conn.post(framing.slot(framing.CALL, 1, announced, 0, "RunGraph"))
        conn.post(bytes(framing.BODY_PIECE), framing.tag(1, framing.CHUNK0))
        return conn

    async def closed(conn, timeout):
        try:
            await asyncio.wait_for(conn.closed.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    conn = eng.run(open_raw(), 20)
    started = time.monotonic()
    try:
        for _ in range(5):  # while the body is unfinished: a few MiB resident, not a gigabyte
            assert cluster.health("worker", timeout=2.0)["task"] == 0
            assert _rss_mib(pid) - rss < 64, (rss, _rss_mib(pid))
        # The server drops that connection once no piece came for its idle timeout, not before.
        assert eng.run(closed(conn, 30), 40), "the server kept a connection that stopped sending"
        assert time.monotonic() - started >= IDLE_TIMEOUT * 0.9
    finally:
        eng.loop.call_soon_threadsafe(conn.fail, errors.UnavailableError("test done"))
    assert "sent no part of its 1073741824-byte RunGraph request" in cluster.log("worker")
    assert cluster.health("worker", timeout=2.0)["task"] == 0  # the worker serves on
    assert _rss_mib(pid) - rss < 64

    # A 63-byte string-tensor header claiming 2 GiB, in a request: refused before anything is
    # allocated for it (the message must hold the payload it announces).
    head = _str_tensor_header(2 << 30)
    assert len(head) <= 64
    raw = (wire.MESSAGE_MAGIC + struct.pack("<I", 2) + b"{}" + struct.pack("<I", 1)
           + struct.pack("<Q", len(head)) + head)
    ch = get_transport("ucx").channel(address, cluster.security())
    try:
        with pytest.raises((errors.DataLossError, errors.InvalidArgumentError)):
            wire.decode_response(ch.call("RunGraph", raw, 10.0))
    finally:
        ch.close()
    assert _rss_mib(pid) - rss < 64


@needs_ucx
def test_ucx_a_string_tensor_header_claiming_2_gib_allocates_nothing_in_the_receiver():
    """A fetch answered with a 63-byte string-tensor header claiming 2 GiB (and no payload):
    the client reserves the tensor's memory, commits none of it, and fails with DataLossError."""
    from tensorweave.distributed.transport import ServiceDispatcher

    ucx = get_transport("ucx")
    head = _str_tensor_header(2 << 30)
    server = ucx.server("127.0.0.1:0", ServiceDispatcher({}, {"Liar": lambda payload: iter([head])}))
    ch = ucx.channel(server.address)
    try:
        rss = _rss_mib(os.getpid())
        with pytest.raises(errors.DataLossError, match="2147483648"):
            ch.fetch("Liar", b"", 10)
        assert _rss_mib(os.getpid()) - rss < 64
    finally:
        ch.close()
        server.stop()


# ----------------------------------------------------------------------------------------
# 4. Where a worker configured on 127.0.0.1 listens

def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of process ``pid``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                hex_ip, hex_port = fields[1].split(":")
                raw = bytes.fromhex(hex_ip)
                # /proc prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                ip = ipaddress.ip_address(raw)
                ip = getattr(ip, "ipv4_mapped", None) or ip
                out.append((str(ip), int(hex_port, 16)))
    return out


def test_a_worker_on_127_0_0_1_listens_nowhere_else(cluster):
    pid = cluster.pid("worker", 0)
    port = int(cluster.address("worker", 0).rsplit(":", 1)[1])
    sockets = _listening(pid)
    assert (("127.0.0.1", port) in sockets) or (("0.0.0.0", port) in sockets), sockets
    elsewhere = [(ip, p) for ip, p in sockets
                 if not ipaddress.ip_address(ip).is_loopback and not ipaddress.ip_address(ip).is_unspecified]
    assert not elsewhere, f"listening on non-loopback addresses: {elsewhere}"
    wildcard = [(ip, p) for ip, p in sockets if ipaddress.ip_address(ip).is_unspecified]
    if cluster.transport == "grpc":
        assert not wildcard, wildcard
    else:
        # ucxx's listener takes only a port (it binds every interface): the task's port is the one
        # wildcard socket, and connections arriving there at another address are closed (below).
        assert [p for _, p in wildcard] in ([], [port]), wildcard


@needs_ucx
def test_ucx_connections_at_another_address_than_the_configured_one_are_closed():
    """With UCX's own TCP listeners let onto every interface (UCX_NET_DEVICES=all, set by the
    user), a client dialling the task's port at a non-loopback address of this machine is
    refused before its hello; the worker goes on serving 127.0.0.1."""
    from tensorweave_ucx import env

    others = sorted({str(ip) for _, ip, up in env.interface_addresses()
                     if up and ip.version == 4 and not ipaddress.ip_address(ip).is_loopback})
    if not others:
        pytest.skip("this machine has no non-loopback IPv4 address to dial")
    with LocalCluster({"worker": 1}, "ucx", env={"UCX_NET_DEVICES": "all"}) as c:
        port = c.address("worker", 0).rsplit(":", 1)[1]
        probe = ("import sys\nfrom tensorweave.distributed import transport, wire\n"
                 "ch = transport.get_transport('ucx').channel(sys.argv[1])\n"
                 "try:\n    ch.call('Health', wire.encode_message({}), 10)\n    print('answered')\n"
                 "except Exception as e:\n    print(type(e).__name__)\nfinally:\n    ch.close()\n")
        out = subprocess.run([sys.executable, "-c", probe, f"{others[0]}:{port}"], capture_output=True, text=True,
                             timeout=60, env={k: v for k, v in os.environ.items() if k != "UCX_NET_DEVICES"})
        assert out.stdout.strip() == "UnavailableError", out.stdout + out.stderr
        assert c.health("worker", timeout=2.0)["task"] == 0
        _poll(lambda: f"arrived at {others[0]}" in c.log("worker"), "the worker says why it closed the connection")

