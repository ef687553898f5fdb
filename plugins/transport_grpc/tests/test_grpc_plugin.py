"""The gRPC transport skeleton is found through its entry point and says what it is."""

from tensorweave import plugins


def test_discovered_and_loaded():
    reg = plugins.registry()
    info = {p.name: p for p in reg.plugins}["grpc"]
    assert info.distribution == "tensorweave-grpc"
    assert info.status == "loaded", info.error
    assert info.note.startswith("skeleton: gRPC transport not implemented yet, registers no transport")
    assert "grpcio" in info.note
    assert info.registered == {}
    assert "grpc" not in reg.transports
