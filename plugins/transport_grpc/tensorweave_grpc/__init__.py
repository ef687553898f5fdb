"""tensorweave's gRPC transport plugin: the worker service over grpcio.

Registers transport ``grpc`` (``plugin.py``). The package, one concern per module:

* ``worker_service.proto`` — the service: its methods and message layout (documentation and
  the contract for clients in other languages; no generated code is used here);
* ``codec.py`` — the ``bytes data = 1`` protobuf framing of every message, by hand;
* ``service.py`` — method paths, token auth, routing to the core's ``ServiceDispatcher``;
* ``server.py`` — ``GrpcServer``: grpc.server, TLS, size limits, the standard health service;
* ``channel.py`` — ``GrpcChannel``: unary calls and chunked tensor fetches;
* ``status.py`` — gRPC status codes to ``tw.errors``;
* ``transport.py`` — ``GrpcTransport``, the registered class.
"""

__version__ = "0.1.0"
