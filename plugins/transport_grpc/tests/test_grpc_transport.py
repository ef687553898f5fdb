"""The grpc transport end to end: real servers on 127.0.0.1 (port 0), in this process and in a
subprocess, serving a ServiceDispatcher; every test bounded in time, every server stopped."""

from __future__ import annotations

import datetime
import ipaddress
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tensorweave as tw
from tensorweave.distributed import transport, wire
from tensorweave.distributed.transport import Security, ServiceDispatcher

HERE = Path(__file__).resolve().parent
GRPC = transport.get_transport("grpc")


def _echo(payload):
    header, tensors = wire.decode_message(payload)
    return wire.encode_response({"echo": header}, tensors)


@pytest.fixture(autouse=True)
def no_server_threads_left():
    """Every test's servers are stopped and their handler threads gone afterwards."""
    yield
    deadline = time.monotonic() + 10
    while True:
        left = [t.name for t in threading.enumerate() if t.name.startswith("tw-grpc-server")]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.02)  # polling a condition with a deadline, not waiting for time to pass
    assert left == []


@pytest.fixture
def serve():
    """serve(dispatcher, security=None) -> server; every server is stopped at teardown."""
    servers = []

    def start(dispatcher, security=None):
        server = GRPC.server("127.0.0.1:0", dispatcher, security or Security())
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def channels():
    made = []

    def open_(address, security=None):
        ch = GRPC.channel(address, security or Security())
        made.append(ch)
        return ch

    yield open_
    for ch in made:
        ch.close()


def test_unary_round_trip_through_a_dispatcher(serve, channels):
    server = serve(ServiceDispatcher({"RunGraph": _echo}))
    host, port = server.address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    ch = channels(server.address)
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    resp = ch.call("RunGraph", wire.encode_message({"step": 7, "name": "a/b"}, [x]), timeout=10)
    assert isinstance(resp, bytes)
    header, tensors = wire.decode_response(resp)
    assert header["echo"] == {"step": 7, "name": "a/b"}
    np.testing.assert_array_equal(tensors[0], x)


def test_streams_a_64_mib_tensor_in_chunks(serve, channels):
    big = np.random.default_rng(0).standard_normal(16 << 20).astype(np.float32)  # 64 MiB
    assert big.nbytes == 64 << 20
    sent = []

    def recv_tensor(payload):
        header, _ = wire.decode_message(payload)
        assert header == {"key": "w:0"}
        for chunk in wire.tensor_chunks(big):
            sent.append(memoryview(chunk).nbytes)
            yield chunk

    server = serve(ServiceDispatcher({}, {"RecvTensor": recv_tensor}))
    # The whole tensor is far over the per-message limit: only chunks have to fit.
    ch = channels(server.address, Security(max_message_bytes=4 << 20))
    out = ch.fetch("RecvTensor", wire.encode_message({"key": "w:0"}), timeout=60)
    assert out.dtype == np.float32 and out.shape == big.shape
    assert np.array_equal(out, big)
    assert len(sent) == 1 + 64 and max(sent[1:]) == 1 << 20


def test_channel_is_reusable_from_many_threads(serve, channels):
    server = serve(ServiceDispatcher({"RunGraph": _echo}, {"RecvTensor": lambda p: wire.tensor_chunks(
        np.full(1 << 18, wire.decode_message(p)[0]["v"], np.int32))}))
    ch = channels(server.address)
    failures = []

    def worker(i):
        try:
            for j in range(5):
                h, _ = wire.decode_response(ch.call("RunGraph", wire.encode_message({"i": i, "j": j}), timeout=10))
                assert h["echo"] == {"i": i, "j": j}
                out = ch.fetch("RecvTensor", wire.encode_message({"v": i * 10 + j}), timeout=10)
                assert out.shape == (1 << 18,) and (out == i * 10 + j).all()
        except Exception as e:  # reported below, in the test's thread
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


def test_wrong_or_missing_token_is_refused(serve, channels):
    calls = []

    def handler(payload):
        calls.append(payload)
        return _echo(payload)

    server = serve(ServiceDispatcher({"RunGraph": handler}, {"RecvTensor": lambda p: wire.tensor_chunks(np.zeros(3))},
                                     token="s3cret"), Security(token="s3cret"))
    msg = wire.encode_message({"x": 1})
    for bad in (Security(token="wrong"), Security()):
        ch = channels(server.address, bad)
        with pytest.raises(tw.errors.UnauthenticatedError, match=f"RunGraph to {server.address}.*token"):
            ch.call("RunGraph", msg, timeout=10)
        with pytest.raises(tw.errors.UnauthenticatedError, match="RecvTensor"):
            ch.fetch("RecvTensor", msg, timeout=10)
    assert calls == []  # refused before the dispatcher saw anything
    good = channels(server.address, Security(token="s3cret"))
    assert wire.decode_response(good.call("RunGraph", msg, timeout=10))[0]["echo"] == {"x": 1}
    np.testing.assert_array_equal(good.fetch("RecvTensor", msg, timeout=10), np.zeros(3))


def test_security_token_is_enforced_even_without_a_dispatcher_token(serve, channels):
    server = serve(ServiceDispatcher({"RunGraph": _echo}), Security(token="t0k"))
    with pytest.raises(tw.errors.UnauthenticatedError):
        channels(server.address).call("RunGraph", wire.encode_message({}), timeout=10)
    channels(server.address, Security(token="t0k")).call("RunGraph", wire.encode_message({}), timeout=10)


def _self_signed(tmp: Path) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for CN=localhost with SANs localhost and 127.0.0.1."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor the openssl CLI is available")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem"), "-days", "1",
             "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True, timeout=60)
        return (tmp / "cert.pem").read_bytes(), (tmp / "key.pem").read_bytes()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_tls_round_trip_with_a_self_signed_certificate(serve, channels):
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = _self_signed(Path(tmp))
    server = serve(ServiceDispatcher({"RunGraph": _echo}, {"RecvTensor": lambda p: wire.tensor_chunks(
        np.arange(3 << 18, dtype=np.int64))}, token="tok"),
        Security(tls_cert=cert, tls_key=key, token="tok"))
    assert server.tls
    x = np.eye(3, dtype=np.float32)
    for client in (Security(tls_cert=cert, token="tok"),                                  # the cert as its own root
                   Security(tls_root=cert, tls_server_name="localhost", token="tok")):
        ch = channels(server.address, client)
        h, t = wire.decode_response(ch.call("RunGraph", wire.encode_message({"tls": True}, [x]), timeout=10))
        assert h["echo"] == {"tls": True} and np.array_equal(t[0], x)
        assert np.array_equal(ch.fetch("RecvTensor", wire.encode_message({}), timeout=10),
                              np.arange(3 << 18, dtype=np.int64))
    # A plaintext client cannot talk to a TLS server; a client that does not trust the
    # certificate is refused during the handshake: both unavailable, neither hangs.
    with pytest.raises(tw.errors.UnavailableError, match=server.address):
        channels(server.address, Security(token="tok")).call("RunGraph", wire.encode_message({}), timeout=10)
    with tempfile.TemporaryDirectory() as tmp:
        other, _ = _self_signed(Path(tmp))
    with pytest.raises(tw.errors.UnavailableError):
        channels(server.address, Security(tls_root=other, token="tok")).call("RunGraph", wire.encode_message({}),
                                                                            timeout=10)


def test_tls_settings_that_cannot_be_honoured_fail_at_start_up():
    with pytest.raises(tw.errors.InvalidArgumentError, match="tls_key is missing"):
        GRPC.server("127.0.0.1:0", ServiceDispatcher({}), Security(tls_cert=b"pem"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="only tls_root"):
        GRPC.server("127.0.0.1:0", ServiceDispatcher({}), Security(tls_root=b"pem"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="host:port"):
        GRPC.server("127.0.0.1", ServiceDispatcher({}), Security())


def test_health_service_reports_serving(serve):
    server = serve(ServiceDispatcher({}))
    with grpc.insecure_channel(server.address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", "tensorweave.WorkerService"):
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as e:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_client_generated_from_the_proto_interoperates(serve):
    """BytesValue has the layout of the .proto's messages: a generated client would send this."""
    from google.protobuf import wrappers_pb2

    server = serve(ServiceDispatcher({"GetStatus": _echo}, token="k"), Security(token="k"))
    with grpc.insecure_channel(server.address) as ch:
        stub = ch.unary_unary("/tensorweave.WorkerService/GetStatus",
                              request_serializer=wrappers_pb2.BytesValue.SerializeToString,
                              response_deserializer=wrappers_pb2.BytesValue.FromString)
        resp = stub(wrappers_pb2.BytesValue(value=wire.encode_message({"q": 1})), timeout=10,
                    metadata=(("authorization", "Bearer k"),))
    assert wire.decode_response(resp.value)[0]["echo"] == {"q": 1}
    proto = (HERE.parent / "tensorweave_grpc" / "worker_service.proto").read_text()
    for method in ("GetStatus", "RegisterGraph", "DeregisterGraph", "RunGraph", "AbortStep", "CleanupStep",
                   "ResetContainers", "Health"):
        assert f"rpc {method}(WireMessage) returns (WireMessage);" in proto
    assert "rpc RecvTensor(WireMessage) returns (stream TensorChunk);" in proto


def test_unknown_methods_are_unimplemented(serve, channels):
    server = serve(ServiceDispatcher({"RunGraph": _echo}))
    ch = channels(server.address)
    with pytest.raises(tw.errors.UnimplementedError, match="Bogus"):
        wire.decode_response(ch.call("Bogus", wire.encode_message({}), timeout=10))
    with pytest.raises(tw.errors.UnimplementedError, match="Bogus"):
        ch.fetch("Bogus", wire.encode_message({}), timeout=10)
    with pytest.raises(tw.errors.UnimplementedError, match="RecvTensor"):  # in the proto, not in this dispatcher
        ch.fetch("RecvTensor", wire.encode_message({}), timeout=10)
    with grpc.insecure_channel(server.address) as raw:  # a path outside the service
        with pytest.raises(grpc.RpcError) as e:
            raw.unary_unary("/other.Service/RunGraph")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # The server kept serving.
    assert wire.decode_response(ch.call("RunGraph", wire.encode_message({"ok": 1}), timeout=10))[0]["echo"] == {"ok": 1}


def test_oversize_messages_are_refused(serve, channels):
    seen = []
    server = serve(ServiceDispatcher({"RunGraph": lambda p: seen.append(len(p)) or _echo(p),
                                      "Big": lambda p: wire.encode_response({}, [np.zeros(1 << 20)])}),
                   Security(max_message_bytes=1 << 20))
    payload = wire.encode_message({}, [np.zeros(300_000)])  # 2.4 MB
    # Refused by the server (this client allows more) ...
    with pytest.raises(tw.errors.ResourceExhaustedError, match=f"RunGraph to {server.address}"):
        channels(server.address, Security(max_message_bytes=64 << 20)).call("RunGraph", payload, timeout=10)
    # ... and by a client whose own limit is smaller, before anything is sent.
    small = channels(server.address, Security(max_message_bytes=1 << 20))
    with pytest.raises(tw.errors.ResourceExhaustedError, match=r"request of \d+ bytes exceeds"):
        small.call("RunGraph", payload, timeout=10)
    # A response over the server's limit is refused too (8 MiB > 1 MiB).
    with pytest.raises(tw.errors.ResourceExhaustedError):
        small.call("Big", wire.encode_message({}), timeout=10)
    assert seen == []
    assert wire.decode_response(small.call("RunGraph", wire.encode_message({"small": 1}), timeout=10))[0]["echo"]


def test_deadline_exceeded(serve, channels):
    release = threading.Event()

    def slow(payload):
        release.wait(30)
        return _echo(payload)

    server = serve(ServiceDispatcher({"RunGraph": slow}))
    try:
        t0 = time.monotonic()
        with pytest.raises(tw.errors.DeadlineExceededError, match=r"RunGraph to .*deadline \(0.2 s\)"):
            channels(server.address).call("RunGraph", wire.encode_message({}), timeout=0.2)
        assert time.monotonic() - t0 < 5
    finally:
        release.set()


def test_handler_failures_reach_the_client_as_errors(serve, channels):
    def broken(payload):
        raise KeyError("oops")

    def broken_stream(payload):
        yield from wire.tensor_chunks(np.zeros(1 << 20), chunk_bytes=1 << 16)
        raise tw.errors.AbortedError("step 3 was aborted")

    def partial_stream(payload):
        chunks = wire.tensor_chunks(np.zeros(1 << 18))
        yield next(chunks)
        yield next(chunks)  # 1 of 2 MiB, then the stream just ends

    server = serve(ServiceDispatcher({"RunGraph": broken}, {"RecvTensor": broken_stream, "Partial": partial_stream}))
    ch = channels(server.address)
    with pytest.raises(tw.errors.InternalError, match="KeyError"):
        wire.decode_response(ch.call("RunGraph", wire.encode_message({}), timeout=10))
    with pytest.raises(tw.errors.AbortedError, match="step 3 was aborted"):
        ch.fetch("RecvTensor", wire.encode_message({}), timeout=10)
    with pytest.raises(tw.errors.DataLossError):
        ch.fetch("Partial", wire.encode_message({}), timeout=10)


def test_stopped_server_is_unavailable_promptly(serve, channels):
    server = serve(ServiceDispatcher({"RunGraph": _echo}, {"RecvTensor": lambda p: wire.tensor_chunks(np.ones(4))}))
    ch = channels(server.address)
    ch.call("RunGraph", wire.encode_message({}), timeout=10)
    server.stop()
    server.stop()  # idempotent
    for call in (lambda: ch.call("RunGraph", wire.encode_message({}), timeout=30),
                 lambda: ch.fetch("RecvTensor", wire.encode_message({}), timeout=30)):
        t0 = time.monotonic()
        with pytest.raises(tw.errors.UnavailableError, match=server.address):
            call()
        assert time.monotonic() - t0 < 5
    # Nothing ever listened here (the port was just freed).
    t0 = time.monotonic()
    with pytest.raises(tw.errors.UnavailableError):
        channels(server.address).call("RunGraph", b"", timeout=30)
    assert time.monotonic() - t0 < 5


def test_stop_cancels_calls_in_flight(serve, channels):
    entered, release = threading.Event(), threading.Event()

    def blocked(payload):
        entered.set()
        release.wait(30)
        return _echo(payload)

    server = serve(ServiceDispatcher({"RunGraph": blocked}))
    ch = channels(server.address)
    result = []
    t = threading.Thread(target=lambda: result.append(_capture(lambda: ch.call("RunGraph", b"", timeout=30))))
    t.start()
    try:
        assert entered.wait(10)
        server.stop()
        t.join(10)
        assert not t.is_alive()
        assert isinstance(result[0], (tw.errors.UnavailableError, tw.errors.CancelledError)), result
    finally:
        release.set()
        t.join(10)


def _capture(fn):
    try:
        return fn()
    except Exception as e:
        return e


def test_address_in_use_is_an_error(serve):
    server = serve(ServiceDispatcher({}))
    with pytest.raises(tw.errors.UnavailableError, match=f"cannot listen on {server.address}"):
        GRPC.server(server.address, ServiceDispatcher({}), Security())


def test_closed_channel(serve):
    server = serve(ServiceDispatcher({"RunGraph": _echo}))
    ch = GRPC.channel(server.address, Security())
    ch.close()
    with pytest.raises(tw.errors.FailedPreconditionError, match="closed"):
        ch.call("RunGraph", b"", timeout=10)


def _read_line(proc, timeout):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise TimeoutError(f"the server process printed nothing within {timeout} s")
        return proc.stdout.readline().strip()
    finally:
        sel.close()


def test_server_in_a_subprocess():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(HERE / "grpc_server_main.py"), "--token", "tk", "--mib", "16"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    ch = None
    try:
        address = _read_line(proc, 60)
        assert address.startswith("127.0.0.1:"), address
        ch = GRPC.channel(address, Security(token="tk"))
        x = np.linspace(0, 1, 10)
        h, t = wire.decode_response(ch.call("GetStatus", wire.encode_message({"from": "parent"}, [x]), timeout=10))
        assert h["echo"] == {"from": "parent"} and np.array_equal(t[0], x)
        out = ch.fetch("RecvTensor", wire.encode_message({}), timeout=60)
        assert np.array_equal(out, np.arange(16 << 18, dtype=np.float32))
        proc.kill()  # a crashed worker: the next call fails fast instead of hanging
        proc.wait(10)
        t0 = time.monotonic()
        with pytest.raises(tw.errors.UnavailableError, match=address):
            ch.call("GetStatus", wire.encode_message({}), timeout=30)
        assert time.monotonic() - t0 < 5
    finally:
        if ch is not None:
            ch.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()
