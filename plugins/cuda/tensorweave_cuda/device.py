"""The ``GPU`` device: one per CUDA device, ``/device:GPU:{i}``.

A device is a view of one physical GPU's *runtime* (driver, compiled kernels, cuBLAS
handle), which is created once per process and shared by every Session's device object;
each Session's device has its own allocator (the config may pick ``pool``).

Copies (``HostTransfers``, one per physical GPU):

- ``to_device``: small arrays (shapes, scalars: up to ``HOST_BYTES``) become host-backed
  tensors, copied only when a kernel needs them. Arrays under ``STAGE_MIN`` are queued as
  one copy, which the driver stages itself (the array is kept alive until the copy's event
  has passed). From ``STAGE_MIN`` on, an array in page-locked memory (a ``to_host`` result,
  ``pinned_empty``) is copied by one DMA straight from it, waited for (so the caller may
  change it afterwards, as with any feed); larger ordinary arrays go through the
  *staging ring*: a few page-locked slots (``SLOTS`` x ``SLOT_BYTES``, allocated on first
  use and kept), filled chunk by chunk with a multi-threaded ``memmove`` while the DMA of the
  previous chunk runs (chunks grow from 1 MiB to the slot size and shrink again at the end,
  so that little of the copy is not overlapped). It returns once the last chunk is queued.
- ``to_host``: results from ``PINNED_MIN`` bytes on are allocated from a pool of page-locked
  host memory (``allocator.PinnedHostPool``, capped) and filled by one DMA: the array
  returned *is* the page-locked memory, and goes back to the pool when it is dropped. Over
  the cap, through the staging ring (DMA into a slot, ``memmove`` out while the next chunk
  arrives) into an ordinary array; small results, a plain copy.
- ``copy_from`` another GPU copies peer to peer when the two can, ordering the two streams
  with events; otherwise through the host.

Tuning (environment): ``TENSORWEAVE_GPU_COPY_THREADS`` (threads of the staging ``memmove``;
default half the CPUs, at most 8), ``TENSORWEAVE_GPU_STAGING`` (slot size, default 8MiB),
``TENSORWEAVE_GPU_PINNED_LIMIT`` (page-locked result memory, default 2GiB; 0 turns the
pinned results off).

Driver failures of a copy raise ``InternalError`` naming the device and what was copied (and
the last node that queued work: a kernel's failure is reported at the next wait).
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import os
import re
import threading
import warnings

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.device import Device, DeviceFactory
from tensorweave_cuda.allocator import CUDAAllocator, PinnedHostPool, is_pinned
from tensorweave_cuda.driver import DriverError
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


COPY_THREADS_ENV = "TENSORWEAVE_GPU_COPY_THREADS"
STAGING_ENV = "TENSORWEAVE_GPU_STAGING"
PINNED_LIMIT_ENV = "TENSORWEAVE_GPU_PINNED_LIMIT"
STAGE_MIN = 1 << 20          # to_device of ordinary arrays from here on: the staging ring
PINNED_MIN = 1 << 20         # to_host results from here on: page-locked (pool)
PINNED_MAX = 1 << 30         # ... up to this size for one result
SLOTS = 3
SLOT_BYTES = 8 << 20
FIRST_CHUNK = 1 << 20
PART_MIN = 1 << 20           # the smallest share of a memmove given to one thread
_memmove = ctypes.memmove    # a ctypes foreign call: releases the GIL while it copies


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _Slot:
    __slots__ = ("buf", "ptr", "event")

    def __init__(self, buf):
        self.buf = buf               # 1-D uint8 page-locked array
        self.ptr = buf.ctypes.data
        self.event = None            # passes when the DMA that last used the slot is done


class HostTransfers:
    """Copies between host arrays and one GPU through page-locked memory (module docstring)."""

    def __init__(self, driver, environ=None):
        env = os.environ if environ is None else environ
        self.driver = driver
        self.threads = int(env.get(COPY_THREADS_ENV) or min(8, max(1, _cpus() // 2)))
        self.slot_bytes = max(1 << 20, parse_bytes(env[STAGING_ENV])) if env.get(STAGING_ENV) else SLOT_BYTES
        limit = parse_bytes(env[PINNED_LIMIT_ENV]) if env.get(PINNED_LIMIT_ENV) else 2 << 30
        self.pinned = PinnedHostPool(f"GPU {getattr(driver, 'ordinal', '?')}", driver, limit,
                                     min(PINNED_MAX, limit)) if limit > 0 else None
        self._rings: dict[str, list] = {}
        self._locks = {"up": threading.Lock(), "down": threading.Lock()}
        self._pool = None
        self._pool_size = 0
        self._pool_lock = threading.Lock()
        self.staged = {"up": 0, "down": 0}   # how many copies went through the staging ring

    # -- parts ---------------------------------------------------------------------------
    def _ring(self, which: str) -> list | None:
        """The direction's staging slots (allocated on first use; caller holds its lock), or
        None when page-locked memory cannot be had (then copies go without staging)."""
        ring = self._rings.get(which)
        if ring is None:
            try:
                with self.driver.activate():
                    ring = [_Slot(self.driver.host_alloc(self.slot_bytes)) for _ in range(SLOTS)]
            except Exception as e:  # noqa: BLE001 - a speed-up only: copies still work without it
                ring = []
                warnings.warn(f"tensorweave-cuda: no staging buffers ({type(e).__name__}: {e}); "
                              "copies go through the driver's own staging", RuntimeWarning, stacklevel=3)
            self._rings[which] = ring
        return ring or None

    def _executor(self, workers: int):
        with self._pool_lock:
            if self._pool is None or self._pool_size < workers:
                old = self._pool
                self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tw-gpu-copy")
                self._pool_size = workers
                if old is not None:
                    old.shutdown(wait=False)
            return self._pool

    def memmove(self, dst: int, src: int, n: int) -> None:
        """Copy ``n`` bytes between host addresses, on up to ``threads`` threads."""
        parts = min(self.threads, n // PART_MIN)
        if parts <= 1:
            _memmove(dst, src, n)
            return
        step = ((n + parts - 1) // parts + 4095) & ~4095  # page-aligned shares
        pool = self._executor(parts - 1)
        futs = [pool.submit(_memmove, dst + o, src + o, min(step, n - o)) for o in range(step, n, step)]
        _memmove(dst, src, min(step, n))
        for f in futs:
            f.result()

    def _chunks(self, n: int) -> list:
        """(offset, size) of the chunks of an ``n``-byte staged copy: doubling from FIRST_CHUNK
        up to the slot size and halving again at the end, so that the first DMA starts after a
        small copy and the last one (which nothing overlaps) is small too."""
        slot = self.slot_bytes
        head, c, rest = [], min(FIRST_CHUNK, slot), n
        while c < slot and rest >= 3 * c:
            head.append(c)
            rest -= 2 * c
            c *= 2
        k = max(1, -(-rest // slot))
        even = (-(-rest // k) + 4095) & ~4095       # page-multiple middle chunks, at most a slot
        middle = [even] * (rest // even) + ([rest % even] if rest % even else []) if rest else []
        out, off = [], 0
        for size in head + middle + head[::-1]:
            out.append((off, size))
            off += size
        return out

    # -- host -> device ------------------------------------------------------------------
    def upload_pinned(self, ptr: int, array: np.ndarray) -> None:
        """Copy the page-locked, C-contiguous ``array`` to ``ptr`` by one DMA and wait for it
        (the caller may change ``array`` as soon as this returns, as with any feed)."""
        drv = self.driver
        with drv.activate():
            drv.htod(ptr, array)
            drv.event_sync(drv.record())

    def upload_staged(self, ptr: int, array: np.ndarray) -> None:
        """Queue the copy of the C-contiguous ``array`` to device address ``ptr`` through the
        staging ring; ``array`` may be reused as soon as this returns."""
        drv = self.driver
        src, n = array.ctypes.data, array.nbytes
        with self._locks["up"], drv.activate():
            ring = self._ring("up")
            if ring is None:
                drv.htod(ptr, array)
                drv.event_sync(drv.record())
                return
            for i, (off, c) in enumerate(self._chunks(n)):
                slot = ring[i % len(ring)]
                if slot.event is not None:
                    drv.event_sync(slot.event)
                    slot.event = None
                self.memmove(slot.ptr, src + off, c)
                drv.htod(ptr + off, slot.buf[:c])
                slot.event = drv.record()
            self.staged["up"] += 1

    # -- device -> host ------------------------------------------------------------------
    def pinned_array(self, shape, dtype) -> np.ndarray | None:
        """An uninitialised page-locked array from the pool, or None over the pool's limits
        (or when page-locked memory does not work here: then never again, with a warning)."""
        pool = self.pinned
        if pool is None:
            return None
        dtype = np.dtype(dtype)
        n = dtype.itemsize
        for d in shape:
            n *= int(d)
        try:
            with self.driver.activate():
                block = pool.alloc(max(n, 1))
            return block.array(shape, dtype)
        except (errors.ResourceExhaustedError, MemoryError):
            return None
        except Exception as e:  # noqa: BLE001 - a speed-up only: copies still work without it
            self.pinned = None
            warnings.warn(f"tensorweave-cuda: page-locked results turned off: {type(e).__name__}: {e}",
                          RuntimeWarning, stacklevel=2)
            return None

    def download_staged(self, out: np.ndarray, ptr: int) -> None:
        """Copy ``out.nbytes`` from device address ``ptr`` into the C-contiguous ``out`` through
        the staging ring (returns when done)."""
        drv = self.driver
        dst, n = out.ctypes.data, out.nbytes
        with self._locks["down"], drv.activate():
            ring = self._ring("down")
            if ring is None:
                drv.dtoh(out, ptr)
                drv.event_sync(drv.record())
                return
            chunks = iter(self._chunks(n))
            flight: collections.deque = collections.deque()

            def queue(slot):
                nxt = next(chunks, None)
                if nxt is not None:
                    off, c = nxt
                    drv.dtoh(slot.buf[:c], ptr + off)
                    flight.append((slot, off, c, drv.record()))

            for slot in ring:
                queue(slot)
            while flight:
                slot, off, c, ev = flight.popleft()
                drv.event_sync(ev)
                self.memmove(dst + off, slot.ptr, c)
                queue(slot)
            self.staged["down"] += 1


class DeviceRuntime:
    """Everything about one physical GPU that outlives a Session."""

    def __init__(self, driver):
        self.driver = driver
        self.programs = ProgramCache(driver)
        self.transfers = HostTransfers(driver)
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
                f"{self.name} holds tensors of dtype {', '.join(catalog.DTYPES)}; got {arr.dtype} "
                f"(place ops on {arr.dtype} tensors on the CPU)")
        if arr.nbytes <= HOST_BYTES:
            return self.host_tensor(arr)
        arr = np.ascontiguousarray(arr)
        try:
            with self.driver.activate():
                if arr.nbytes >= STAGE_MIN:
                    buf = self.allocator.allocate(arr.nbytes)
                    tr = self.runtime.transfers
                    if is_pinned(arr):
                        tr.upload_pinned(buf.ptr, arr)
                    else:
                        tr.upload_staged(buf.ptr, arr)
                    return GPUTensor(self, arr.shape, arr.dtype, buf)
                return GPUTensor(self, arr.shape, arr.dtype, self.upload(arr))
        except DriverError as e:
            raise self._copy_failure(e, f"copying a {arr.dtype}{list(arr.shape)} array to the device") from e

    def to_host(self, value) -> np.ndarray:
        if not isinstance(value, GPUTensor):
            raise errors.InternalError(f"{self.name}: to_host got a {type(value).__name__}, not a GPU tensor")
        host = value.host_value
        if host is not None:
            return host.copy()
        dev = value.device
        if not value.size:
            return np.empty(value.shape, value.dtype)
        drv = dev.driver
        try:
            with drv.activate():
                nbytes = value.nbytes
                tr = dev.runtime.transfers
                out = tr.pinned_array(value.shape, value.dtype) if nbytes >= PINNED_MIN else None
                if out is None:
                    out = np.empty(value.shape, value.dtype)
                    if nbytes >= STAGE_MIN:
                        tr.download_staged(out, value.ptr)
                        return out
                drv.dtoh(out, value.ptr)
                drv.event_sync(drv.record())
            return out
        except DriverError as e:
            raise dev._copy_failure(e, f"copying a {value.dtype}{list(value.shape)} tensor to the host") from e

    def pinned_empty(self, shape, dtype=np.float32) -> np.ndarray:
        """An uninitialised NumPy array in page-locked host memory (from the same capped pool
        as ``to_host``'s results): ``to_device`` copies it by DMA without staging.
        ResourceExhaustedError when the pool's limit (``TENSORWEAVE_GPU_PINNED_LIMIT``) is reached."""
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
        out = self.runtime.transfers.pinned_array(shape, dtype)
        if out is None:
            pool = self.runtime.transfers.pinned
            raise errors.ResourceExhaustedError(
                f"{self.name}: no page-locked host memory for a {np.dtype(dtype)}{list(shape)} array "
                f"(limit {pool.memory_limit if pool else 0} bytes, {pool.bytes_in_use if pool else 0} in use; "
                f"${PINNED_LIMIT_ENV} raises it)")
        return out

    def _copy_failure(self, e: DriverError, what: str) -> errors.InternalError:
        last = getattr(self.driver, "last_node", None)
        hint = (f" (CUDA reports a kernel's failure at the next wait: the last node to queue work on this "
                f"GPU was {last})") if last else ""
        return errors.InternalError(f"{self.name}: {what} failed: {e}{hint}")

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
            try:
                other.wait(self.driver.record())
                other.peer_copy(self.driver, out.ptr, value.ptr, value.nbytes)
                self.driver.wait(other.record())
            except DriverError as e:
                raise self._copy_failure(e, f"copying a {value.dtype}{list(value.shape)} tensor from "
                                            f"{value.device.name}") from e
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
