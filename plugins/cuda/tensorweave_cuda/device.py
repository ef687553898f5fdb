"""The ``GPU`` device: one per CUDA device, ``/device:GPU:{i}``.

A device is a view of one physical GPU's *runtime* (driver, compiled kernels, cuBLAS
handle), which is created once per process and shared by every Session's device object;
each Session's device has its own allocator (the config may pick ``pool``).

Copies: ``to_device`` queues an asynchronous host-to-device copy on the stream and records
an event; the host array is kept alive until that event has passed. Small arrays (shapes,
scalars) become host-backed tensors, copied only when a kernel needs them. ``to_host``
queues the copy back and waits for its event. ``copy_from`` another GPU copies peer to peer
when the two can, ordering the two streams with events; otherwise through the host.
"""

from __future__ import annotations

import os
import re
import threading

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.device import Device, DeviceFactory
from tensorweave_cuda.allocator import CUDAAllocator
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.program import ProgramCache
from tensorweave_cuda.tensor import HOST_BYTES, Buffer, GPUTensor

MEMORY_LIMIT_ENV = "TENSORWEAVE_GPU_MEMORY_LIMIT"
# Without a configured limit, the allocator may use this share of what was free when the
# device was created (the rest is headroom for cuBLAS workspaces and other processes).
DEFAULT_FREE_FRACTION = 0.95


def parse_bytes(text: str) -> int:
    """``"1073741824"``, ``"512MiB"``, ``"2G"``, ``"1.5GB"`` -> bytes (binary units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", text, re.I)
    if not m:
        raise ValueError(f"cannot read {text!r} as a number of bytes (e.g. 2GiB, 512MiB, 1073741824)")
    unit = m.group(2).lower()
    scale = 1024 ** ("kmgt".find(unit) + 1) if unit else 1
    return int(float(m.group(1)) * scale)


def memory_limit(free: int, total: int, config=None, environ=None) -> int:
    """The allocator's limit: ``$TENSORWEAVE_GPU_MEMORY_LIMIT``, else the config's
    ``gpu_options.per_process_gpu_memory_fraction`` of the total (TF1's name), else 95% of
    the memory free now."""
    env = (os.environ if environ is None else environ).get(MEMORY_LIMIT_ENV)
    if env:
        return parse_bytes(env)
    frac = getattr(getattr(config, "gpu_options", None), "per_process_gpu_memory_fraction", None)
    if frac:
        if not 0 < float(frac) <= 1:
            raise errors.InvalidArgumentError(f"per_process_gpu_memory_fraction must be in (0, 1], got {frac}")
        return int(total * float(frac))
    return int(free * DEFAULT_FREE_FRACTION)


def fp32_cores_per_sm(cc: tuple) -> int:
    major, minor = (tuple(cc) + (0, 0))[:2]
    if major >= 9 or (major == 8 and minor > 0):
        return 128
    return 64


class DeviceRuntime:
    """Everything about one physical GPU that outlives a Session."""

    def __init__(self, driver):
        self.driver = driver
        self.programs = ProgramCache(driver)
        self._blas = None
        self._blas_lock = threading.Lock()

    @property
    def blas(self):
        b = self._blas
        if b is None:
            with self._blas_lock:
                if self._blas is None:
                    self._blas = self.driver.open_blas()
                b = self._blas
        return b


class CUDADevice(Device):
    device_type = "GPU"
    host_tensors = False

    def __init__(self, name: str, runtime: DeviceRuntime, memory_limit: int | None = None,
                 device_type: str = "GPU"):
        drv = runtime.driver
        super().__init__(name, None, description=drv.describe(), memory_limit=memory_limit)
        self.device_type = device_type
        self.runtime = runtime
        self.driver = drv
        self.programs = runtime.programs
        self.allocator = CUDAAllocator.for_device(self)
        # Hints for the placer's cost model (passes/cost_model.py).
        sms = getattr(drv, "multiprocessors", 0)
        clock = getattr(drv, "clock_khz", 0)
        if sms and clock:
            self.flops_per_second = 2.0 * sms * fp32_cores_per_sm(drv.compute_capability) * clock * 1e3
        self.node_overhead_seconds = getattr(drv, "node_overhead_seconds", 2e-5)
        self._uploads: list = []    # (event, host array) until the copy has passed
        self._uploads_lock = threading.Lock()

    @property
    def blas(self):
        return self.runtime.blas

    # -- allocation -------------------------------------------------------------------------
    def empty(self, shape, dtype) -> GPUTensor:
        dtype = np.dtype(dtype)
        n = 1
        for d in shape:
            n *= int(d)
        return GPUTensor(self, shape, dtype, self.allocator.allocate(n * dtype.itemsize))

    def host_tensor(self, array) -> GPUTensor:
        """A host-backed tensor (copied to the device only if a kernel needs it)."""
        arr = np.array(array, copy=True, order="C")
        return GPUTensor(self, arr.shape, arr.dtype, None, host=arr)

    def upload(self, array: np.ndarray) -> Buffer | None:
        """A new buffer holding ``array`` (the copy is queued; ``array`` is kept until done)."""
        buf = self.allocator.allocate(array.nbytes)
        if buf is None:
            return None
        with self.driver.activate():
            self.driver.htod(buf.ptr, array)
            ev = self.driver.record()
        with self._uploads_lock:
            up = self._uploads
            while up and self.driver.event_done(up[0][0]):
                up.pop(0)
            up.append((ev, array))
        return buf

    # -- Device API --------------------------------------------------------------------------
    def to_device(self, array) -> GPUTensor:
        if isinstance(array, GPUTensor):
            return array if array.device is self else self.copy_from(array, array.device)
        arr = np.asarray(array)
        if not catalog.supported(arr.dtype):
            raise errors.InvalidArgumentError(
                f"{self.name} holds tensors of dtype {', '.join(catalog.ALL)}; got {arr.dtype} "
                f"(place ops on {arr.dtype} tensors on the CPU)")
        if arr.nbytes <= HOST_BYTES:
            return self.host_tensor(arr)
        arr = np.ascontiguousarray(arr)
        with self.driver.activate():
            return GPUTensor(self, arr.shape, arr.dtype, self.upload(arr))

    def to_host(self, value) -> np.ndarray:
        if not isinstance(value, GPUTensor):
            raise errors.InternalError(f"{self.name}: to_host got a {type(value).__name__}, not a GPU tensor")
        host = value.host_value
        if host is not None:
            return host.copy()
        out = np.empty(value.shape, value.dtype)
        if value.size:
            drv = value.device.driver
            with drv.activate():
                drv.dtoh(out, value.ptr)
                drv.event_sync(drv.record())
        return out

    def copy_from(self, value, src) -> GPUTensor:
        if not isinstance(value, GPUTensor):
            return self.to_device(src.to_host(value) if src is not None else value)
        if value.device is self:
            return value
        host = value.host_value
        if host is not None and value._buffer is None:
            return self.host_tensor(host)
        other = value.device.driver
        if other is self.driver:  # another Session's view of this GPU
            return GPUTensor(self, value.shape, value.dtype, value.buffer)
        if value.size and other.can_access_peer(self.driver):
            out = self.empty(value.shape, value.dtype)
            # The copy runs on the source's stream: it must wait for work this device queued
            # on the (possibly reused) destination buffer, and this device must wait for it.
            other.wait(self.driver.record())
            other.peer_copy(self.driver, out.ptr, value.ptr, value.nbytes)
            self.driver.wait(other.record())
            return out
        return self.to_device(value.device.to_host(value))

    def sync(self) -> None:
        self.driver.synchronize()


class CUDADeviceFactory(DeviceFactory):
    """The GPUs of this machine. ``open_driver(i)`` gives physical device i's driver
    (PyCudaDriver, or the emulator's in tests); runtimes are opened once per process."""

    device_type = "GPU"

    def __init__(self, count: int, open_driver=None, device_type: str = "GPU"):
        self._count = count
        if open_driver is None:
            from tensorweave_cuda.driver import PyCudaDriver as open_driver
        self._open = open_driver
        self.device_type = device_type
        self._runtimes: dict[int, DeviceRuntime] = {}
        self._lock = threading.Lock()

    def runtime(self, i: int) -> DeviceRuntime:
        with self._lock:
            rt = self._runtimes.get(i)
            if rt is None:
                rt = self._runtimes[i] = DeviceRuntime(self._open(i))
            return rt

    def count(self) -> int:
        return self._count

    def create_devices(self, name_prefix, config=None):
        out = []
        for i in range(self._count):
            rt = self.runtime(i)
            free, total = rt.driver.mem_get_info()
            out.append(CUDADevice(f"{name_prefix}/device:{self.device_type}:{i}", rt,
                                  memory_limit(free, total, config), self.device_type))
        return out

    def describe(self):
        return [f"{self.device_type}:{i} {self.runtime(i).driver.describe()}" for i in range(self._count)]
