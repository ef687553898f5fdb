"""``GrpcServer``: a grpc.server serving the worker service and the standard health service.

One server per task: a thread pool (RunGraph blocks for a whole step while peers' RecvTensor
calls and health probes must still be answered, hence a generous pool), message size limits
from ``security.max_message_bytes``, TLS when the security settings carry a certificate and
key, and ``grpc.health.v1.Health`` reporting SERVING for ``""`` and ``tensorweave.WorkerService``
so ordinary probes (``grpc_health_probe``, load balancers) work. ``stop`` flips health to
NOT_SERVING first, then stops.
"""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tensorweave.framework import errors

from .service import SERVICE, WorkerServiceHandler

# gRPC's size options are C ints; Security's default (2 GiB) is one past the largest.
MAX_GRPC_MESSAGE = (1 << 31) - 1


def message_limit(security) -> int:
    return max(0, min(int(security.max_message_bytes), MAX_GRPC_MESSAGE))


def _split(address: str) -> tuple[str, str]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise errors.InvalidArgumentError(
            f"grpc transport: address {address!r} is not \"host:port\" (port 0 picks a free port)")
    return host, port


def server_credentials(security):
    """grpc server credentials for ``security``, or None for plaintext."""
    if security.tls_cert is None and security.tls_key is None:
        if security.tls_root is not None:
            raise errors.InvalidArgumentError(
                "grpc transport: a TLS server needs tls_cert and tls_key (only tls_root is set)")
        return None
    if security.tls_cert is None or security.tls_key is None:
        missing = "tls_key" if security.tls_key is None else "tls_cert"
        raise errors.InvalidArgumentError(f"grpc transport: a TLS server needs tls_cert and tls_key ({missing} is missing)")
    return grpc.ssl_server_credentials([(security.tls_key, security.tls_cert)])


class GrpcServer:
    """Serves ``dispatcher`` at ``address``; listening when the constructor returns."""

    def __init__(self, address: str, dispatcher, security, max_workers: int = 64):
        host, _ = _split(address)
        creds = server_credentials(security)
        limit = message_limit(security)
        options = [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            # Without this, Linux lets a second server bind the same port and steal calls.
            ("grpc.so_reuseport", 0),
        ]
        self._pool = futures.ThreadPoolExecutor(max_workers, thread_name_prefix="tw-grpc-server")
        self._server = grpc.server(self._pool, handlers=[WorkerServiceHandler(dispatcher, security)],
                                   options=options)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        try:
            port = (self._server.add_secure_port(address, creds) if creds is not None
                    else self._server.add_insecure_port(address))
        except RuntimeError:  # grpcio >= 1.58 raises; older versions return 0
            port = 0
        if port == 0:
            self._pool.shutdown(wait=False)
            raise errors.UnavailableError(
                f"grpc transport: cannot listen on {address} (address in use, or not an address of this machine)")
        self.address = f"{host}:{port}"
        self.tls = creds is not None
        for name in ("", SERVICE):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._stopped = False
        self._lock = threading.Lock()
        self._server.start()

    def stop(self, grace: float | None = None) -> None:
        """Stop serving: calls in flight are cancelled (after ``grace`` seconds, if given)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._health.enter_graceful_shutdown()
        self._server.stop(grace).wait()
        # Handlers still running (a blocked RunGraph) finish on their own; never wait for them.
        self._pool.shutdown(wait=False, cancel_futures=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server stops (True) or ``timeout`` passes (False)."""
        return self._server.wait_for_termination(timeout)

    def __repr__(self) -> str:
        return f"GrpcServer({self.address!r}{', tls' if self.tls else ''})"
