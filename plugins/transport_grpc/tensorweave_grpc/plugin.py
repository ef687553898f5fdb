"""Entry point of the gRPC transport plugin: registers transport ``grpc`` and reports grpcio's version.

grpcio is looked up in the installed distributions, not imported: importing it is slow and
this probe runs whenever a process loads its plugins (``GrpcTransport`` imports it lazily too).
"""

from __future__ import annotations

import importlib.metadata as md

from tensorweave.plugins import hookimpl

from .transport import GrpcTransport


def grpcio_version() -> str | None:
    try:
        return md.version("grpcio")
    except md.PackageNotFoundError:
        return None


def status() -> str:
    v = grpcio_version()
    return f"transport grpc ({'grpcio ' + v if v else 'grpcio NOT installed: reinstall tensorweave-grpc'})"


@hookimpl
def tensorweave_register_transports(registry):
    registry.register("grpc", GrpcTransport)


@hookimpl
def tensorweave_plugin_status():
    return status()
