"""The OpenCL skeleton is found through its entry point and says what it is."""

from tensorweave import plugins


def test_discovered_and_loaded():
    info = {p.name: p for p in plugins.registry().plugins}["opencl"]
    assert info.distribution == "tensorweave-opencl"
    assert info.status == "loaded", info.error
    assert info.note.startswith("skeleton: OpenCL kernels and devices not implemented yet")
    assert "pyopencl" in info.note and "ICD" in info.note
    assert info.registered == {}
