"""The plugin is found through its entry point; without a usable GPU it registers nothing and
its status line says exactly why (the probe's reason)."""

import pytest

from tensorweave import plugins
from tensorweave_cuda import plugin as cuda_plugin
from tensorweave_cuda.probe import CudaProbe, status

MACHINE = cuda_plugin.machine()


def test_discovered_and_loaded():
    info = {p.name: p for p in plugins.registry().plugins}["cuda"]
    assert info.distribution == "tensorweave-cuda"
    assert info.status == "loaded", info.error
    assert info.note == status(MACHINE)


@pytest.mark.skipif(MACHINE.reason is None, reason="this machine has a usable GPU")
def test_registers_nothing_without_a_gpu():
    info = {p.name: p for p in plugins.registry().plugins}["cuda"]
    assert info.registered == {}
    assert info.note.startswith(f"registers nothing: {MACHINE.reason}")
    assert "GPU" not in plugins.registry().device_factories


@pytest.mark.skipif(MACHINE.reason is not None, reason=MACHINE.reason or "")
def test_registers_gpu_device_kernels_and_allocators():
    reg = plugins.registry()
    assert "GPU" in reg.device_factories
    assert {"default", "pool"} <= set(reg.allocators.for_device("GPU"))
    assert "MatMul" in reg.kernels.ops_for_device("GPU") or MACHINE.cublas is None


def test_reasons_in_order():
    no_driver = CudaProbe(driver_error="libcuda.so.1: cannot open shared object file: No such file or directory")
    assert no_driver.reason == "no CUDA driver: libcuda.so.1 not found"
    odd = CudaProbe(driver_error="libcuda.so.1: wrong ELF class: ELFCLASS32")
    assert odd.reason == "no CUDA driver: libcuda.so.1 not found (libcuda.so.1: wrong ELF class: ELFCLASS32)"
    drv = dict(driver_library="libcuda.so.1", driver_version="12.4")
    init = CudaProbe(**drv, init_error="cuInit failed: CUDA_ERROR_NO_DEVICE (100)")
    assert init.reason == "CUDA driver libcuda.so.1 found but cuInit failed: CUDA_ERROR_NO_DEVICE (100)"
    assert CudaProbe(**drv, device_count=0, pycuda=True).reason == "no CUDA device: the driver reports 0 devices"
    assert CudaProbe(**drv, device_count=1).reason.startswith("pycuda is not installed")
    assert CudaProbe(**drv, device_count=1, pycuda=True).reason.startswith("nvcc not found on PATH")
    assert CudaProbe(**drv, device_count=1, pycuda=True, nvcc="/usr/bin/nvcc").reason is None


def test_status_lines():
    p = CudaProbe(driver_error="libcuda.so.1: cannot open shared object file", pycuda=False)
    assert status(p) == "registers nothing: no CUDA driver: libcuda.so.1 not found; pycuda not installed"
    p = CudaProbe("libcuda.so.1", "12.4", None, True, 2, ("NVIDIA H100", "NVIDIA H100"), nvcc="/usr/bin/nvcc",
                  cublas="/x/libcublas.so.12")
    assert status(p) == ("GPU:0 NVIDIA H100, GPU:1 NVIDIA H100; CUDA driver libcuda.so.1 (API 12.4); "
                         "pycuda installed; nvcc /usr/bin/nvcc; cuBLAS /x/libcublas.so.12")
    p.cublas = None
    assert "MatMul stays on the CPU" in status(p)


def test_probe_is_cheap_and_import_free():
    import sys

    cuda_plugin.probe()
    assert "pycuda" not in sys.modules or MACHINE.pycuda
