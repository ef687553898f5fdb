"""Entry point of the CPU plugin: implements the tensorweave hooks."""

from __future__ import annotations

from tensorweave.plugins import hookimpl
from tensorweave_cpu import device, kernels, pool


@hookimpl
def tensorweave_device_factories():
    return [device.CPUDeviceFactory()]


@hookimpl
def tensorweave_register_kernels(registry):
    kernels.register_all(registry)


@hookimpl
def tensorweave_register_allocators(registry):
    registry.register("CPU", "default", device.CPUAllocator.for_device)
    registry.register("CPU", "pool", pool.PoolAllocator.for_device)
