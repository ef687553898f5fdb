"""Backends for the CUDA runtime tests.

``gpu`` runs each test twice: on the real ``GPU`` device type when this machine has a usable
one (else skipped with the probe's reason, e.g. "no CUDA driver: libcuda.so.1 not found"),
and on ``CUDAEMU``: the same plugin code (devices, allocators, launch planning, the real
``.cu`` kernels) over the CPU emulator of the driver layer (skipped without g++).
"""

from __future__ import annotations

import dataclasses

import pytest

from tensorweave import plugins


@dataclasses.dataclass
class Backend:
    name: str            # "cuda" | "emulator"
    device_type: str     # "GPU" | "CUDAEMU"
    open_driver: object  # ordinal -> driver

    def device(self, i: int = 0) -> str:
        return f"/device:{self.device_type}:{i}"

    @property
    def full_name(self) -> str:
        return f"/job:localhost/replica:0/task:0/device:{self.device_type}:0"


class EmulatorPlugin:
    """Registers two emulated GPUs with the plugin's kernels and allocators."""

    device_type = "CUDAEMU"

    def __init__(self, count=2):
        from tensorweave_cuda.device import CUDADeviceFactory
        from tensorweave_cuda.testing.emulator import EmuDriver

        self.factory = CUDADeviceFactory(count, lambda i: EmuDriver(i, capacity=256 << 20), self.device_type)

    @plugins.hookimpl
    def tensorweave_device_factories(self):
        return [self.factory]

    @plugins.hookimpl
    def tensorweave_register_kernels(self, registry):
        from tensorweave_cuda import kernels

        kernels.register_all(registry, self.device_type)

    @plugins.hookimpl
    def tensorweave_register_allocators(self, registry):
        from tensorweave_cuda.allocator import CUDAAllocator, CUDAPoolAllocator

        registry.register(self.device_type, "default", CUDAAllocator.for_device)
        registry.register(self.device_type, "pool", CUDAPoolAllocator.for_device)

    @plugins.hookimpl
    def tensorweave_register_fusers(self, registry):
        from tensorweave_cuda.fusion import CUDAFuser

        registry.register(self.device_type, CUDAFuser())


@pytest.fixture(scope="module", params=["emulator", "cuda"])
def gpu(request):
    if request.param == "cuda":
        from tensorweave_cuda import plugin

        reason = plugin.machine().reason
        if reason is not None:
            pytest.skip(reason)
        from tensorweave_cuda.driver import PyCudaDriver

        factory = plugins.registry().device_factories["GPU"]
        yield Backend("cuda", "GPU", lambda i: factory.runtime(i).driver if hasattr(factory, "runtime")
                      else PyCudaDriver(i))
        return
    from tensorweave_cuda.testing import emulator

    reason = emulator.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    plug = EmulatorPlugin()
    plugins.register_plugin(plug, name="cuda-emulator", distribution="tensorweave_cuda.testing.emulator")
    try:
        yield Backend("emulator", plug.device_type, lambda i: plug.factory.runtime(i).driver)
    finally:
        plugins._reset_for_tests()  # later tests see only the installed plugins again
