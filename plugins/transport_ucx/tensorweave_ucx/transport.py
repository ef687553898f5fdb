"""``UcxTransport``: the class registered as transport ``ucx`` (the contract is
``tensorweave.distributed.transport.Transport``). It checks what a server or channel is asked
for — a ``host:port`` address, and no TLS, which UCX cannot give — and makes them."""

from __future__ import annotations

from tensorweave.distributed.transport import Security
from tensorweave.framework import errors

from .channel import UcxChannel
from .server import UcxServer


def _split_address(address: str, what: str) -> tuple[str, int]:
    host, sep, port = str(address).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise errors.InvalidArgumentError(f"ucx transport: {what} address {address!r} is not host:port")
    return host, int(port)


def _refuse_tls(security: Security | None, what: str) -> Security:
    security = security or Security()
    if security.tls:
        raise errors.UnimplementedError(
            f"transport 'ucx' cannot use TLS ({what}): UCX has no encryption. Use TLS over grpc for the "
            "control channel and UCX for tensors only on a trusted network, e.g. "
            "transport = {control = \"grpc\", tensors = \"ucx\"} without TLS, or grpc for both")
    return security


class UcxTransport:
    """The worker service over UCX endpoints (TCP, shared memory) through ucxx; no TLS."""

    name = "ucx"
    #: Seconds a client may leave a request body unfinished before its connection is dropped
    #: (None: the server's ``security.idle_timeout`` — a cluster config's ``[timeouts] idle`` —
    #: else ``server.IDLE_TIMEOUT``, or the TENSORWEAVE_UCX_IDLE_TIMEOUT environment variable).
    idle_timeout: float | None = None

    def server(self, address: str, dispatcher, security: Security | None = None) -> UcxServer:
        security = _refuse_tls(security, f"server at {address}")
        host, port = _split_address(address, "server")
        idle = self.idle_timeout if self.idle_timeout is not None else security.idle_timeout
        return UcxServer(host, port, dispatcher, security, idle_timeout=idle)

    def channel(self, address: str, security: Security | None = None) -> UcxChannel:
        security = _refuse_tls(security, f"channel to {address}")
        host, port = _split_address(address, "channel")
        return UcxChannel(address, host, port, security)
