"""Entry point of the gRPC transport plugin: registers transport ``grpc`` and reports grpcio's version."""

from __future__ import annotations

import grpc

from tensorweave.plugins import hookimpl

from .transport import GrpcTransport


@hookimpl
def tensorweave_register_transports(registry):
    registry.register(GrpcTransport.name, GrpcTransport)


@hookimpl
def tensorweave_plugin_status():
    return f"transport grpc (grpcio {grpc.__version__})"
