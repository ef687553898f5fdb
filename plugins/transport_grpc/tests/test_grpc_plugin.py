"""The gRPC plugin is found through its entry point, registers transport `grpc` and reports grpcio."""

import importlib.metadata as md

from tensorweave import plugins
from tensorweave.distributed import transport
from tensorweave_grpc.transport import GrpcTransport


def test_discovered_and_registers_the_transport():
    reg = plugins.registry()
    info = {p.name: p for p in reg.plugins}["grpc"]
    assert info.distribution == "tensorweave-grpc"
    assert info.status == "loaded", info.error
    assert info.note == f"transport grpc (grpcio {md.version('grpcio')})"
    assert info.registered == {"transports": 1}
    assert isinstance(transport.get_transport("grpc"), GrpcTransport)


def test_hard_dependencies_declared():
    requires = md.requires("tensorweave-grpc")
    names = {r.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip() for r in requires if "extra ==" not in r}
    assert {"grpcio", "grpcio-health-checking"} <= names
