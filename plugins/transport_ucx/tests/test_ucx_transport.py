"""The ucx transport end to end: real UCX endpoints on 127.0.0.1 (port 0), with servers in this
process and in a subprocess, serving a ServiceDispatcher. Every call has a timeout, every
server is stopped and every subprocess reaped."""

from __future__ import annotations

import concurrent.futures
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distributed import transport, wire
from tensorweave.distributed.transport import Security, ServiceDispatcher
from tensorweave.runtime.step import DEAD

pytest.importorskip("ucxx", reason="the ucx transport needs ucxx (pip install ucxx-cu12)")

HERE = Path(__file__).resolve().parent
UCX = transport.get_transport("ucx")


def _echo(payload):
    header, tensors = wire.decode_message(payload)
    return wire.encode_response({"echo": header}, tensors)


@pytest.fixture
def release():
    """An event blocking handlers wait on; set at teardown so no handler thread outlives the test."""
    ev = threading.Event()
    yield ev
    ev.set()


@pytest.fixture
def serve(release):
    servers = []

    def start(dispatcher, security=None):
        server = UCX.server("127.0.0.1:0", dispatcher, security or Security())
        servers.append(server)
        return server

    yield start
    release.set()
    for s in servers:
        s.stop()
    deadline = time.monotonic() + 10
    while True:  # polling a condition with a deadline: handler threads end once released
        left = [t.name for t in threading.enumerate() if t.name.startswith("tw-ucx-serve")]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert left == []


@pytest.fixture
def channels():
    made = []

    def open_(address, security=None):
        ch = UCX.channel(address, security or Security())
        made.append(ch)
        return ch

    yield open_
    for ch in made:
        ch.close()


def _read_line(proc, timeout):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise TimeoutError(f"the server process printed nothing within {timeout} s")
        return proc.stdout.readline().strip()
    finally:
        sel.close()


@pytest.fixture
def peer():
    """peer(token=None, mib=1) -> address of a ucx server in a subprocess (killed and reaped
    at teardown); the process is in ``peer.procs``."""
    procs = []

    def start(token=None, mib=1):
        args = [sys.executable, str(HERE / "ucx_peer.py"), "--mib", str(mib)] + (["--token", token] if token else [])
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        procs.append(proc)
        address = _read_line(proc, 60)
        assert address.startswith("127.0.0.1:"), address
        return address

    start.procs = procs
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()


def test_unary_round_trip_through_a_dispatcher(serve, channels):
    server = serve(ServiceDispatcher({"RunGraph": _echo}))
    host, port = server.address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    ch = channels(server.address)
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    header, tensors = wire.decode_response(ch.call("RunGraph", wire.encode_message({"step": 7}, [x]), timeout=10))
    assert header == {"echo": {"step": 7}}
    np.testing.assert_array_equal(tensors[0], x)
    # empty requests and empty answers travel too
    empty = ServiceDispatcher({"Nothing": lambda p: b"" if p == b"" else b"?"})
    ch2 = channels(serve(empty).address)
    assert ch2.call("Nothing", b"", timeout=10) == b""


def test_payloads_straddling_the_inline_slot(serve, channels, monkeypatch):
    """Requests, answers and tensors just under, at and just over what fits in one slot
    (inline) go both ways: inline, or as the slot plus a message of their own."""
    from tensorweave_ucx import transport as ucx_transport

    inline = ucx_transport._INLINE
    seen = set()  # (body length, came inline) of every payload received, both ends
    recv_body = ucx_transport._recv_body

    async def spy(conn, slot, length, tag):
        seen.add((length, length <= inline))
        return await recv_body(conn, slot, length, tag)

    monkeypatch.setattr(ucx_transport, "_recv_body", spy)
    sizes = [0, 1, inline - 1, inline, inline + 1, 3 * ucx_transport._SLOT]
    arrays = {}

    def stream(payload):
        return wire.tensor_chunks(arrays[bytes(payload).decode()], chunk_bytes=1000)

    server = serve(ServiceDispatcher(
        {"Reverse": lambda p: bytes(p)[::-1], "Sized": lambda p: b"y" * int(bytes(p))}, {"Tensor": stream}),
        Security(token="k" * (inline + 50)))  # the hello's token does not fit the slot either
    ch = channels(server.address, Security(token="k" * (inline + 50)))
    rng = np.random.default_rng(0)
    for n in sizes:
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert ch.call("Reverse", payload, timeout=10) == payload[::-1], n
        assert ch.call("Sized", str(n).encode(), timeout=10) == b"y" * n, n
    head = len(next(wire.tensor_chunks(np.zeros(inline, np.uint8))))
    for n in [0, 1, inline - head - 1, inline - head, inline - head + 1, 3 * ucx_transport._SLOT]:
        arrays[str(n)] = rng.integers(0, 256, n, dtype=np.uint8)
        np.testing.assert_array_equal(ch.fetch("Tensor", str(n).encode(), timeout=10), arrays[str(n)])
    assert {(inline, True), (inline + 1, False), (inline + 50, False)} <= seen


def test_fetch_64_mib_tensor_from_a_subprocess(peer, channels):
    address = peer(mib=64)
    ch = channels(address)
    out = ch.fetch("Tensor", wire.encode_message({}), timeout=60)
    assert out.dtype == np.float32 and out.shape == (64 << 18,)
    np.testing.assert_array_equal(out, np.arange(64 << 18, dtype=np.float32))
    assert out.flags.writeable and out.flags.owndata is not None
    header, tensors = wire.decode_response(ch.call("Echo", wire.encode_message({"after": 1}), timeout=10))
    assert header == {"echo": {"after": 1}} and tensors == []


def test_fetch_values_dead_errors_and_odd_shapes(serve, channels):
    values = {
        "scalar": np.float64(3.5),
        "empty": np.zeros((0, 3), np.float32),
        "bool": np.array([True, False, True]),
        "strided": np.arange(30, dtype=np.int32).reshape(5, 6)[:, ::2],
        "strings": np.array([b"a", b"bcd", b""], dtype=object),
        "dead": DEAD,
    }

    def stream(payload):
        header, _ = wire.decode_message(payload)
        key = header["key"]
        if key == "missing":
            return iter([wire.encode_error(tw.errors.NotFoundError("no tensor 'missing' in this step"))])
        if key == "broken":
            raise RuntimeError("handler bug")
        return wire.tensor_chunks(values[key], chunk_bytes=8)

    ch = channels(serve(ServiceDispatcher({}, {"RecvTensor": stream})).address)
    for key, v in values.items():
        out = ch.fetch("RecvTensor", wire.encode_message({"key": key}), timeout=10)
        if v is DEAD:
            assert out is DEAD
        else:
            np.testing.assert_array_equal(out, np.asarray(v))
    with pytest.raises(tw.errors.NotFoundError, match="missing"):
        ch.fetch("RecvTensor", wire.encode_message({"key": "missing"}), timeout=10)
    with pytest.raises(tw.errors.InternalError, match="RuntimeError: handler bug"):
        ch.fetch("RecvTensor", wire.encode_message({"key": "broken"}), timeout=10)
    with pytest.raises(tw.errors.UnimplementedError, match="Nope"):
        ch.fetch("Nope", b"", timeout=10)
    # the channel is still good after errors
    assert ch.fetch("RecvTensor", wire.encode_message({"key": "scalar"}), timeout=10) == 3.5


def test_handler_failures_and_unknown_methods_are_error_responses(serve, channels):
    def boom(payload):
        raise ValueError("bad handler")

    ch = channels(serve(ServiceDispatcher({"Boom": boom, "Echo": _echo})).address)
    with pytest.raises(tw.errors.InternalError, match="ValueError: bad handler"):
        wire.decode_response(ch.call("Boom", b"", timeout=10))
    with pytest.raises(tw.errors.UnimplementedError, match="Nope"):
        wire.decode_response(ch.call("Nope", b"", timeout=10))
    assert wire.decode_response(ch.call("Echo", wire.encode_message({}), timeout=10))[0] == {"echo": {}}


def test_channel_is_shared_by_many_threads_and_a_slow_call_blocks_no_other(serve, channels, release):
    def slow(payload):
        release.wait(30)
        return wire.encode_response({"slow": True})

    ch = channels(serve(ServiceDispatcher({"Echo": _echo, "Slow": slow})).address)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        blocked = pool.submit(ch.call, "Slow", b"", 30)

        def many(i):
            for j in range(20):
                x = np.full((i + 1, j + 1), i * 100 + j, np.int32)
                h, t = wire.decode_response(ch.call("Echo", wire.encode_message({"i": i, "j": j}, [x]), timeout=20))
                assert h == {"echo": {"i": i, "j": j}}
                np.testing.assert_array_equal(t[0], x)
            return i

        assert sorted(pool.map(many, range(6))) == list(range(6))
        assert not blocked.done()
        release.set()
        assert wire.decode_response(blocked.result(30))[0] == {"slow": True}


def test_wrong_or_missing_token_is_refused(peer, channels):
    address = peer(token="s3cret")
    for bad in (Security(token="wrong"), Security()):
        with pytest.raises(tw.errors.UnauthenticatedError, match="token"):
            channels(address, bad).call("Echo", wire.encode_message({}), timeout=10)
    ok = channels(address, Security(token="s3cret"))
    assert wire.decode_response(ok.call("Echo", wire.encode_message({"x": 1}), timeout=10))[0] == {"echo": {"x": 1}}


def test_security_token_is_enforced_without_a_dispatcher_token(serve, channels):
    server = serve(ServiceDispatcher({"Echo": _echo}), Security(token="t1"))
    with pytest.raises(tw.errors.UnauthenticatedError):
        channels(server.address, Security(token="t2")).call("Echo", wire.encode_message({}), timeout=10)
    assert channels(server.address, Security(token="t1")).call("Echo", wire.encode_message({}), timeout=10)


def test_stopped_server_is_unavailable_promptly(serve, channels, release):
    def slow(payload):
        release.wait(30)
        return wire.encode_response({})

    server = serve(ServiceDispatcher({"Echo": _echo, "Slow": slow}))
    ch = channels(server.address)
    ch.call("Echo", wire.encode_message({}), timeout=10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(ch.call, "Slow", b"", 60)
        t0 = time.monotonic()
        server.stop()
        with pytest.raises(tw.errors.UnavailableError):
            in_flight.result(30)
        assert time.monotonic() - t0 < 5
    t0 = time.monotonic()
    with pytest.raises(tw.errors.UnavailableError, match=server.address):
        ch.call("Echo", wire.encode_message({}), timeout=30)
    assert time.monotonic() - t0 < 5


def test_killed_peer_is_unavailable_promptly(peer, channels):
    address = peer()
    ch = channels(address)
    ch.call("Echo", wire.encode_message({}), timeout=10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(ch.call, "Hang", b"", 120)
        proc = peer.procs[0]
        proc.kill()  # SIGKILL: no goodbye, the kernel closes its sockets
        proc.wait(10)
        t0 = time.monotonic()
        with pytest.raises(tw.errors.UnavailableError, match=address):
            in_flight.result(60)
        assert time.monotonic() - t0 < 5
    t0 = time.monotonic()
    with pytest.raises(tw.errors.UnavailableError):
        ch.fetch("Tensor", b"", timeout=30)
    assert time.monotonic() - t0 < 5


def test_nothing_listening_is_unavailable_promptly(channels):
    import socket

    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(tw.errors.UnavailableError, match=f"127.0.0.1:{port}"):
        channels(f"127.0.0.1:{port}").call("Echo", b"", timeout=30)
    assert time.monotonic() - t0 < 5


def test_deadline_exceeded_and_the_channel_goes_on(serve, channels, release):
    def slow(payload):
        release.wait(30)
        return wire.encode_response({"late": True})

    ch = channels(serve(ServiceDispatcher({"Echo": _echo, "Slow": slow})).address)
    t0 = time.monotonic()
    with pytest.raises(tw.errors.DeadlineExceededError, match="Slow"):
        ch.call("Slow", b"", timeout=0.3)
    assert time.monotonic() - t0 < 5
    release.set()  # the late answer arrives and is dropped
    assert wire.decode_response(ch.call("Echo", wire.encode_message({"n": 2}), timeout=10))[0] == {"echo": {"n": 2}}


def test_oversize_messages_are_refused(serve, channels):
    server = serve(ServiceDispatcher({"Echo": _echo}), Security(max_message_bytes=1 << 16))
    big = wire.encode_message({}, [np.zeros(1 << 15, np.float32)])  # 128 KiB
    # refused by the client before sending
    with pytest.raises(tw.errors.ResourceExhaustedError, match="exceeds"):
        channels(server.address, Security(max_message_bytes=1 << 16)).call("Echo", big, timeout=10)
    # refused by the server; the channel reconnects for the next call
    ch = channels(server.address)
    with pytest.raises(tw.errors.ResourceExhaustedError, match="server's limit"):
        ch.call("Echo", big, timeout=10)
    assert wire.decode_response(ch.call("Echo", wire.encode_message({}), timeout=10))[0] == {"echo": {}}
    # an answer over the client's limit
    big_answer = ServiceDispatcher({"Big": lambda p: wire.encode_response({}, [np.zeros(1024, np.float32)])})
    small = channels(serve(big_answer).address, Security(max_message_bytes=1 << 10))
    with pytest.raises(tw.errors.ResourceExhaustedError, match="answer"):
        small.call("Big", b"", timeout=10)


def test_tls_is_unimplemented_naming_ucx():
    d = ServiceDispatcher({"Echo": _echo})
    for sec in (Security(tls_cert=b"PEM", tls_key=b"PEM"), Security(tls_root=b"PEM")):
        with pytest.raises(tw.errors.UnimplementedError, match="'ucx'.*TLS"):
            UCX.server("127.0.0.1:0", d, sec)
        with pytest.raises(tw.errors.UnimplementedError, match="'ucx'.*TLS"):
            UCX.channel("127.0.0.1:1", sec)


def test_cluster_config_asking_for_tls_over_ucx_fails_at_start_up(tmp_path):
    from tensorweave.distributed.cluster import load_config
    from tensorweave.distributed.server import Server

    (tmp_path / "node.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "node.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    cfg = tmp_path / "cluster.toml"
    cfg.write_text('transport = "ucx"\n[cluster]\nworker = ["127.0.0.1:0"]\n'
                   f'[tls]\ncert = "{tmp_path / "node.pem"}"\nkey = "{tmp_path / "node.key"}"\n')
    with pytest.raises(tw.errors.UnimplementedError, match="'ucx'"):
        Server(load_config(cfg), "worker", 0)


def test_closed_channel_and_stop_twice(serve):
    server = serve(ServiceDispatcher({"Echo": _echo}))
    ch = UCX.channel(server.address)
    ch.call("Echo", wire.encode_message({}), timeout=10)
    ch.close()
    with pytest.raises(tw.errors.UnavailableError, match="closed"):
        ch.call("Echo", wire.encode_message({}), timeout=10)
    server.stop()
    server.stop()


def test_bad_addresses():
    with pytest.raises(tw.errors.InvalidArgumentError, match="host:port"):
        UCX.channel("no-port")
    with pytest.raises(tw.errors.InvalidArgumentError, match="host:port"):
        UCX.server("127.0.0.1:http", ServiceDispatcher({}))
