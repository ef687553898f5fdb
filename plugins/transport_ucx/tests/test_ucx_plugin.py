"""The UCX transport skeleton is found through its entry point and says what it is."""

from tensorweave import plugins


def test_discovered_and_loaded():
    reg = plugins.registry()
    info = {p.name: p for p in reg.plugins}["ucx"]
    assert info.distribution == "tensorweave-ucx"
    assert info.status == "loaded", info.error
    assert info.note.startswith("skeleton: UCX transport not implemented yet, registers no transport")
    assert "ucxx" in info.note
    assert info.registered == {}
    assert "ucx" not in reg.transports
