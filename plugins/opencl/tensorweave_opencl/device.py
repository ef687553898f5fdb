"""The OPENCL device: one per OpenCL device of any platform, named
``{prefix}/device:OPENCL:{i}``; its tensors are ``CLTensor`` handles in device memory.

Host->device copies go through the allocator (so they are counted) and are blocking: the
host array may be reused by the caller right after. Device->host copies wait for the
queued work that produces the value (the queue is in-order). Two OPENCL devices of the
same physical device (two Sessions) share buffers directly.
"""

from __future__ import annotations

import os

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.device import Device, DeviceFactory
from tensorweave_opencl import runtime as rt_mod
from tensorweave_opencl.allocator import CLAllocator
from tensorweave_opencl.buffer import CLTensor
from tensorweave_opencl.program import CTYPES

MEMORY_LIMIT_ENV = "TENSORWEAVE_OPENCL_MEMORY_LIMIT"
CPU_DEVICE_FLOPS = 1e9             # see OpenCLDevice.__init__
CPU_DEVICE_NODE_OVERHEAD = 1e-2


class OpenCLDevice(Device):
    device_type = "OPENCL"
    host_tensors = False

    def __init__(self, name: str, runtime, memory_limit: int | None = None):
        super().__init__(name, None, description=runtime.describe(), memory_limit=memory_limit)
        self.runtime = runtime
        self.queue = runtime.queue
        self.allocator = CLAllocator(name, memory_limit, runtime)
        if runtime.is_cpu:
            # For the cost model (passes/cost_model.py). An OpenCL device on the CPU (PoCL)
            # runs on the host's own cores: offloading to it adds no parallel capacity, and
            # each launch costs tens of microseconds. The placer's simulation treats devices
            # as independent resources and would move work here whenever the CPU device
            # looks busy, so this device states a low throughput and a prohibitive per-node
            # cost: unpinned nodes stay on the CPU device, pinned ones run here. (Measured
            # times from traced runs still refine the estimates of pinned nodes.)
            self.flops_per_second = CPU_DEVICE_FLOPS
            self.node_overhead_seconds = CPU_DEVICE_NODE_OVERHEAD

    # -- the core's interface -----------------------------------------------------------
    def to_device(self, array) -> CLTensor:
        arr = np.asarray(array)
        if arr.dtype not in CTYPES:
            raise errors.InvalidArgumentError(
                f"{self.name} cannot hold a tensor of dtype {arr.dtype.name}; OPENCL holds "
                f"{', '.join(sorted({d.name for d in CTYPES}))}")
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        block = self.allocator.allocate(arr.nbytes)
        if arr.nbytes:
            import pyopencl as cl

            cl.enqueue_copy(self.queue, block.buf, arr, is_blocking=True)
        return CLTensor(block, arr.shape, arr.dtype)

    def to_host(self, value) -> np.ndarray:
        if not isinstance(value, CLTensor):
            if isinstance(value, np.ndarray):
                return value  # host-memory outputs (none today) pass through unchanged
            raise errors.InternalError(f"{self.name}: to_host was handed a {type(value).__name__}, not a CLTensor")
        out = np.empty(value.shape, dtype=value.dtype)
        if out.nbytes:
            import pyopencl as cl

            cl.enqueue_copy(self.queue, out, value.block.buf, is_blocking=True)
        return out

    def copy_from(self, value, src: Device):
        if isinstance(src, OpenCLDevice) and src.runtime is self.runtime:
            return value  # one context: the buffer is usable as it is (tensors are immutable)
        if src.host_tensors:
            return self.to_device(value)
        return self.to_device(src.to_host(value))

    def sync(self) -> None:
        self.queue.finish()

    # -- helpers for kernels ------------------------------------------------------------
    def empty(self, shape, dtype) -> CLTensor:
        """A new tensor of ``shape``/``dtype`` with undefined contents."""
        dtype = np.dtype(dtype)
        shape = tuple(shape)
        n = 1
        for d in shape:
            n *= d
        return CLTensor(self.allocator.allocate(n * dtype.itemsize), shape, dtype)


def parse_bytes(text: str) -> int:
    """``"512M"``, ``"2G"``, ``"1048576"`` -> bytes."""
    t = text.strip().upper().rstrip("B")
    mult = 1
    if t and t[-1] in "KMGT":
        mult = 1 << (10 * ("KMGT".index(t[-1]) + 1))
        t = t[:-1]
    return int(float(t) * mult)


def configured_memory_limit(config, index: int, global_mem: int) -> int:
    """The memory limit of device ``index``: the smallest of its global memory,
    ``config.gpu_options.per_process_gpu_memory_fraction`` of it (TF1's knob, when > 0),
    ``config.memory_limit["OPENCL"]`` (bytes; a dict per device type, or a list per device)
    when the ConfigProto has one, and ``$TENSORWEAVE_OPENCL_MEMORY_LIMIT`` ("512M")."""
    limit = global_mem
    fraction = getattr(getattr(config, "gpu_options", None), "per_process_gpu_memory_fraction", 0) or 0
    if 0 < fraction < 1:
        limit = int(global_mem * fraction)
    per_type = getattr(config, "memory_limit", None)
    if isinstance(per_type, dict):
        v = per_type.get("OPENCL", per_type.get("opencl"))
        if isinstance(v, list | tuple):
            v = v[index] if index < len(v) else None
        if v:
            limit = min(limit, int(v))
    env = os.environ.get(MEMORY_LIMIT_ENV)
    if env:
        limit = min(limit, parse_bytes(env))
    return limit


class OpenCLDeviceFactory(DeviceFactory):
    device_type = "OPENCL"

    def count(self) -> int:
        return len(rt_mod.enumerate_devices())

    def create_devices(self, name_prefix, config=None):
        out = []
        for i in range(self.count()):
            runtime = rt_mod.runtime(i)
            limit = configured_memory_limit(config, i, runtime.global_mem_size)
            out.append(OpenCLDevice(f"{name_prefix}/device:OPENCL:{i}", runtime, limit))
        return out

    def describe(self):
        return [f"OPENCL:{i} {p.name.strip()}: {d.name.strip()}"
                for i, (p, d) in enumerate(rt_mod.enumerate_devices())]
