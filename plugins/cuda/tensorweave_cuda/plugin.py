"""Entry point of the CUDA plugin: implements the tensorweave hooks.

Where the probe (``probe.py``) finds no usable GPU it registers nothing, and its status line
says exactly why; nothing that imports PyCUDA is imported then. Otherwise it provides the
``GPU`` device type (one device per CUDA device), its kernels and two allocators,
``default`` and ``pool``.
"""

from __future__ import annotations

import functools

from tensorweave.plugins import hookimpl
from tensorweave_cuda import doctor
from tensorweave_cuda.probe import CudaProbe, probe, status  # noqa: F401 - re-exported

DEVICE_TYPE = "GPU"


@functools.lru_cache(maxsize=1)
def machine() -> CudaProbe:
    """This process's probe (the machine does not change while it runs)."""
    return probe()


@hookimpl
def tensorweave_device_factories():
    p = machine()
    if p.reason is not None:
        return []
    from tensorweave_cuda.device import CUDADeviceFactory

    return [CUDADeviceFactory(p.device_count, device_type=DEVICE_TYPE)]


@hookimpl
def tensorweave_register_kernels(registry):
    p = machine()
    if p.reason is not None:
        return
    from tensorweave_cuda import kernels

    kernels.register_all(registry, DEVICE_TYPE, blas_available=p.cublas is not None)


@hookimpl
def tensorweave_register_allocators(registry):
    if machine().reason is not None:
        return
    from tensorweave_cuda.allocator import CUDAAllocator, CUDAPoolAllocator

    registry.register(DEVICE_TYPE, "default", CUDAAllocator.for_device)
    registry.register(DEVICE_TYPE, "pool", CUDAPoolAllocator.for_device)


@hookimpl
def tensorweave_register_fusers(registry):
    if machine().reason is not None:
        return
    from tensorweave_cuda.fusion import CUDAFuser

    registry.register(DEVICE_TYPE, CUDAFuser())


@hookimpl
def tensorweave_plugin_status():
    return status(machine())


@hookimpl
def tensorweave_doctor():
    return doctor.lines(status(machine()))
