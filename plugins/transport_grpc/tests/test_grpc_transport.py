"""What the gRPC transport does beyond the transport contract (which the kit checks, see
``test_passes_the_transport_kit``): TLS, the standard health service, interoperation with
clients generated from the .proto, gRPC's own statuses, and its error messages. Real servers
on 127.0.0.1 (port 0); every server stopped, every channel closed."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tensorweave as tw
from tensorweave.distributed import wire
from tensorweave.distributed.transport import Security, ServiceDispatcher
from tensorweave.testing import transport_kit
from tensorweave.testing.transport_kit import echo

HERE = Path(__file__).resolve().parent


@pytest.fixture
def kit(tw_transport_kit):
    return tw_transport_kit("grpc")


def test_passes_the_transport_kit(tmp_path):
    transport_kit.assert_passes("grpc", tmp_path)


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


def test_tls_round_trip_with_a_self_signed_certificate(kit):
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = _self_signed(Path(tmp))
    server = kit.serve(ServiceDispatcher({"RunGraph": echo}, {"RecvTensor": lambda p: wire.tensor_chunks(
        np.arange(3 << 18, dtype=np.int64))}, token="tok"),
        Security(tls_cert=cert, tls_key=key, token="tok"))
    assert server.tls
    x = np.eye(3, dtype=np.float32)
    for client in (Security(tls_cert=cert, token="tok"),                                  # the cert as its own root
                   Security(tls_root=cert, tls_server_name="localhost", token="tok")):
        ch = kit.channel(server.address, client)
        h, t = wire.decode_response(ch.call("RunGraph", wire.encode_message({"tls": True}, [x]), timeout=10))
        assert h["echo"] == {"tls": True} and np.array_equal(t[0], x)
        assert np.array_equal(ch.fetch("RecvTensor", wire.encode_message({}), timeout=10),
                              np.arange(3 << 18, dtype=np.int64))
    # A plaintext client cannot talk to a TLS server; a client that does not trust the
    # certificate is refused during the handshake: both unavailable, neither hangs.
    with pytest.raises(tw.errors.UnavailableError, match=server.address):
        kit.channel(server.address, Security(token="tok")).call("RunGraph", wire.encode_message({}), timeout=10)
    with tempfile.TemporaryDirectory() as tmp:
        other, _ = _self_signed(Path(tmp))
    with pytest.raises(tw.errors.UnavailableError):
        kit.channel(server.address, Security(tls_root=other, token="tok")).call("RunGraph", wire.encode_message({}),
                                                                            timeout=10)


def test_tls_settings_that_cannot_be_honoured_fail_at_start_up(kit):
    with pytest.raises(tw.errors.InvalidArgumentError, match="tls_key is missing"):
        kit.transport.server("127.0.0.1:0", ServiceDispatcher({}), Security(tls_cert=b"pem"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="only tls_root"):
        kit.transport.server("127.0.0.1:0", ServiceDispatcher({}), Security(tls_root=b"pem"))


def test_health_service_reports_serving(kit):
    server = kit.serve(ServiceDispatcher({}))
    with grpc.insecure_channel(server.address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", "tensorweave.WorkerService"):
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as e:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_client_generated_from_the_proto_interoperates(kit):
    """BytesValue has the layout of the .proto's messages: a generated client would send this."""
    from google.protobuf import wrappers_pb2

    server = kit.serve(ServiceDispatcher({"GetStatus": echo}, token="k"), Security(token="k"))
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


def test_paths_outside_the_service_and_malformed_messages_get_grpc_statuses(kit):
    server = kit.serve(ServiceDispatcher({"RunGraph": echo}))
    with grpc.insecure_channel(server.address) as raw:
        with pytest.raises(grpc.RpcError) as e:
            raw.unary_unary("/other.Service/RunGraph")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # A body that is not a WorkerService message (a field announcing more bytes than follow).
        with pytest.raises(grpc.RpcError) as e:
            raw.unary_unary("/tensorweave.WorkerService/RunGraph")(b"\x0a\x05abc", timeout=10)
        assert e.value.code() == grpc.StatusCode.INTERNAL
    ch = kit.channel(server.address)  # the server kept serving
    assert wire.decode_response(ch.call("RunGraph", wire.encode_message({"ok": 1}), timeout=10))[0]["echo"] == {"ok": 1}


def test_errors_name_the_method_and_the_peer(kit):
    server = kit.serve(ServiceDispatcher({"RunGraph": echo, "Slow": kit.blocked()}, token="s3cret"),
                       Security(token="s3cret", max_message_bytes=1 << 20))
    ch = kit.channel(server.address, Security(token="s3cret", max_message_bytes=64 << 20))
    with pytest.raises(tw.errors.UnauthenticatedError, match=f"RunGraph to {server.address}.*token"):
        kit.channel(server.address, Security(token="wrong")).call("RunGraph", b"", timeout=10)
    payload = wire.encode_message({}, [np.zeros(300_000)])  # 2.4 MB
    with pytest.raises(tw.errors.ResourceExhaustedError, match=f"RunGraph to {server.address}"):
        ch.call("RunGraph", payload, timeout=10)
    with pytest.raises(tw.errors.ResourceExhaustedError, match=r"request of \d+ bytes exceeds"):
        kit.channel(server.address, Security(max_message_bytes=1 << 20)).call("RunGraph", payload, timeout=10)
    with pytest.raises(tw.errors.DeadlineExceededError, match=r"Slow to .*deadline \(0.2 s\)"):
        ch.call("Slow", b"", timeout=0.2)
    with pytest.raises(tw.errors.UnavailableError, match=f"cannot listen on {server.address}"):
        kit.transport.server(server.address, ServiceDispatcher({}), Security())
    closed = kit.transport.channel(server.address, Security())
    closed.close()
    with pytest.raises(tw.errors.FailedPreconditionError, match="closed"):
        closed.call("RunGraph", b"", timeout=10)
    server.stop()
    t0 = time.monotonic()
    with pytest.raises(tw.errors.UnavailableError, match=f"RunGraph to {server.address}"):
        ch.call("RunGraph", b"", timeout=30)
    assert time.monotonic() - t0 < 5
