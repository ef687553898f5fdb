"""The CPU plugin's device, allocator and registration."""

import gc

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave_cpu.device import CPUAllocator, CPUDeviceFactory


def test_plugin_registers_device_kernels_and_allocator():
    reg = plugins.registry()
    info = next(p for p in reg.plugins if p.name == "cpu")
    assert info.status == "loaded" and info.distribution == "tensorweave-cpu"
    assert info.registered["kernels"] > 90 and info.registered["devices"] == 1
    assert "CPU" in reg.device_factories
    assert "default" in reg.allocators.for_device("CPU")
    # every op the core defines has a CPU kernel
    missing = [name for name, _ in reg.ops.items() if not reg.kernels.device_types_for(name)]
    assert missing == []


def test_device_names_and_copies():
    (dev,) = CPUDeviceFactory().create_devices("/job:localhost/replica:0/task:0")
    assert dev.name == "/job:localhost/replica:0/task:0/device:CPU:0" and dev.device_type == "CPU"
    a = np.arange(3)
    assert dev.to_host(dev.to_device(a)) is a


def test_allocator_counts_arrays_until_released():
    alloc = CPUAllocator("cpu")
    a = np.ones(1000, np.float64)
    alloc.track(a)
    alloc.track(a[10:])  # a view of a counted array is not counted again
    assert alloc.bytes_in_use == 8000 and alloc.peak_bytes_in_use == 8000
    b = alloc.allocate((500,), np.float32)
    assert alloc.bytes_in_use == 10000
    del a, b
    gc.collect()
    assert alloc.bytes_in_use == 0 and alloc.peak_bytes_in_use == 10000
    assert alloc.stats()["num_allocs"] == 2


def test_allocator_memory_limit_is_resource_exhausted():
    alloc = CPUAllocator("/job:localhost/replica:0/task:0/device:CPU:0", memory_limit=1000)
    with pytest.raises(tw.errors.ResourceExhaustedError, match=r"CPU:0: asked for 8000 bytes with 0 of 1000"):
        alloc.allocate((1000,), np.float64)


def test_selecting_the_allocator_by_name():
    with tw.Session(config=tw.ConfigProto(allocator={"CPU": "default"})) as s:
        assert isinstance(s.devices[0].allocator, CPUAllocator)
    with pytest.raises(tw.errors.NotFoundError, match="no allocator 'nope' for device type CPU"):
        tw.Session(config=tw.ConfigProto(allocator={"CPU": "nope"}))
