"""``GrpcServer``: a grpc.aio server serving the worker service and the standard health service.

One server per task, on the process's gRPC event loop (``_Loop``: one thread, started on first
use and shared by every server of the process). The handlers are coroutines
(``service.py``): a unary request runs on a thread of the server's pool (RunGraph blocks for a
whole step; peers' RecvTensor calls and health probes must still be answered, hence a
generous pool), the control methods (Health, AbortStep, CleanupStep, GetStatus) on a small
pool of their own, and a RecvTensor waits for its value on no thread at all. Message size
limits from ``security.max_message_bytes``, TLS when the security settings carry a
certificate and key, and ``grpc.health.v1.Health`` (served on the loop, no thread) reporting
SERVING for ``""`` and ``tensorweave.WorkerService`` so ordinary probes (``grpc_health_probe``,
load balancers) work. ``stop`` flips health to NOT_SERVING first, then stops.

A caller that goes away is noticed: a killed process's kernel closes its connection at once,
and keepalive pings (every ``KEEPALIVE_S`` while calls are in flight, ``KEEPALIVE_TIMEOUT_S``
to answer) find a peer whose host vanished without a word; either way grpc cancels its calls
and the handler hears it (``transport.CallContext``: the worker aborts the step of a RunGraph
whose master died).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from tensorweave.framework import errors

from .service import SERVICE, WorkerServiceHandler

# gRPC's size options are C ints; Security's default (2 GiB) is one past the largest.
MAX_GRPC_MESSAGE = (1 << 31) - 1
# Keepalive pings while calls are in flight: a peer that answers none within the timeout is
# gone, and its calls are cancelled (a step whose master vanished with its host is aborted).
KEEPALIVE_S = 30.0
KEEPALIVE_TIMEOUT_S = 10.0
# Calls in flight on one connection at most (HTTP/2 MAX_CONCURRENT_STREAMS): more wait in the
# client. Bounds what one client can park here (a pull channel has at most 64 in flight).
MAX_STREAMS_PER_CONNECTION = 1024
# Threads of their own for Health, AbortStep, CleanupStep and GetStatus (they never block long).
CONTROL_THREADS = 8
# Threads that make the chunks of a RecvTensor whose value came (a device-to-host copy at most).
SEND_THREADS = 8


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


class _Loop:
    """The asyncio loop every gRPC server of the process runs on, in a daemon thread."""

    _instance = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> _Loop:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="tw-grpc-server-loop", daemon=True)
        self.thread.start()
        # Held for the life of the process: grpc.aio otherwise stops its poller thread with its
        # last object and starts another with the next server.
        self.run(self._init(), 60.0)

    @staticmethod
    async def _init():
        grpc.aio.init_grpc_aio()

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro, timeout: float | None = None):
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise errors.DeadlineExceededError("grpc transport: the server's event loop did not answer in time") from None


class GrpcServer:
    """Serves ``dispatcher`` at ``address``; listening when the constructor returns."""

    def __init__(self, address: str, dispatcher, security, max_workers: int = 64):
        host, _ = _split(address)
        creds = server_credentials(security)
        limit = message_limit(security)
        self._options = [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            # Without this, Linux lets a second server bind the same port and steal calls.
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
            ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
            ("grpc.keepalive_permit_without_calls", 0),  # idle connections cost no pings
            ("grpc.http2.max_pings_without_data", 0),    # a step that sends nothing for long is pinged still
            ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        ]
        self._pool = futures.ThreadPoolExecutor(max_workers, thread_name_prefix="tw-grpc-server")
        self._control = futures.ThreadPoolExecutor(CONTROL_THREADS, thread_name_prefix="tw-grpc-control")
        self._send = futures.ThreadPoolExecutor(SEND_THREADS, thread_name_prefix="tw-grpc-send")
        self._handler = WorkerServiceHandler(dispatcher, security, self._pool, self._control, self._send)
        self._loop = _Loop.get()
        self._server = None
        self._terminated = threading.Event()
        try:
            port = self._loop.run(self._start(address, creds), 60.0)
        except BaseException:
            self._shutdown_pools()
            raise
        if port == 0:
            self._shutdown_pools()
            raise errors.UnavailableError(
                f"grpc transport: cannot listen on {address} (address in use, or not an address of this machine)")
        self.address = f"{host}:{port}"
        self.tls = creds is not None
        self._stopped = False
        self._lock = threading.Lock()

    async def _start(self, address, creds) -> int:
        server = grpc.aio.server(handlers=[self._handler], options=self._options)
        self._health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        try:
            port = server.add_secure_port(address, creds) if creds is not None else server.add_insecure_port(address)
        except RuntimeError:  # grpcio >= 1.58 raises; older versions return 0
            port = 0
        if port == 0:
            await server.stop(None)
            return 0
        for name in ("", SERVICE):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        await server.start()
        self._server = server
        return port

    def _shutdown_pools(self):
        # Handlers still running (a blocked RunGraph) finish on their own; never wait for them.
        for pool in (self._pool, self._control, self._send):
            pool.shutdown(wait=False, cancel_futures=True)

    def stop(self, grace: float | None = None) -> None:
        """Stop serving: calls in flight are cancelled (after ``grace`` seconds, if given)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            self._loop.run(self._stop(grace), None if grace is None else grace + 30.0)
        finally:
            self._shutdown_pools()
            self._terminated.set()

    async def _stop(self, grace):
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server stops (True) or ``timeout`` passes (False)."""
        return self._terminated.wait(timeout)

    def __repr__(self) -> str:
        return f"GrpcServer({self.address!r}{', tls' if self.tls else ''})"
