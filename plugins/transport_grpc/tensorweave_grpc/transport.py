"""``GrpcTransport``: the class registered as transport ``grpc`` (the contract is
``tensorweave.distributed.transport.Transport``)."""

from __future__ import annotations

from tensorweave.distributed.transport import Security

from .channel import GrpcChannel
from .server import GrpcServer


class GrpcTransport:
    """The worker service over gRPC (HTTP/2), optionally TLS, with token auth and health checks."""

    name = "grpc"
    #: Threads per server. RunGraph holds one for a whole step; peers' RecvTensor calls and
    #: health probes need others meanwhile.
    max_workers = 64

    def server(self, address: str, dispatcher, security: Security | None = None) -> GrpcServer:
        return GrpcServer(address, dispatcher, security or Security(), max_workers=self.max_workers)

    def channel(self, address: str, security: Security | None = None) -> GrpcChannel:
        return GrpcChannel(address, security or Security())
