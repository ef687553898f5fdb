"""``GrpcTransport``: the class registered as transport ``grpc`` (see core ``distributed/transport.py``).

It imports grpcio only when a server or channel is made, so loading plugins stays fast in
processes that never use the network.
"""

from __future__ import annotations


class GrpcTransport:
    """The worker service over gRPC (HTTP/2), optionally TLS, with token auth and health checks."""

    name = "grpc"
    #: Threads per server. RunGraph holds one for a whole step; peers' RecvTensor calls and
    #: health probes need others meanwhile.
    max_workers = 64

    def server(self, address: str, dispatcher, security=None):
        from tensorweave.distributed.transport import Security

        from .server import GrpcServer

        return GrpcServer(address, dispatcher, security or Security(), max_workers=self.max_workers)

    def channel(self, address: str, security=None):
        from tensorweave.distributed.transport import Security

        from .channel import GrpcChannel

        return GrpcChannel(address, security or Security())
