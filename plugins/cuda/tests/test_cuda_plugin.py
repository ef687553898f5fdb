"""The CUDA skeleton is found through its entry point and reports what it found."""

from tensorweave import plugins
from tensorweave_cuda import plugin as cuda_plugin


def test_discovered_and_loaded():
    info = {p.name: p for p in plugins.registry().plugins}["cuda"]
    assert info.distribution == "tensorweave-cuda"
    assert info.status == "loaded", info.error
    assert info.note.startswith("skeleton: CUDA kernels and devices not implemented yet, registers nothing")
    assert "pycuda" in info.note
    assert info.registered == {}


def test_note_matches_probe():
    p = cuda_plugin.probe()
    note = cuda_plugin.status(p)
    if p.driver:
        assert f"CUDA driver {p.driver_library} found" in note
    else:
        assert "no CUDA driver library" in note
    assert ("pycuda installed" in note) == p.pycuda


def test_status_without_driver_says_why():
    p = cuda_plugin.CudaProbe(None, None, "libcuda.so.1: cannot open shared object file", False)
    assert cuda_plugin.status(p).endswith(
        "(no CUDA driver library (libcuda.so.1: cannot open shared object file); pycuda not installed)")


def test_status_with_driver():
    p = cuda_plugin.CudaProbe("libcuda.so.1", "12.4", None, True)
    assert "CUDA driver libcuda.so.1 found (API 12.4); pycuda installed" in cuda_plugin.status(p)
