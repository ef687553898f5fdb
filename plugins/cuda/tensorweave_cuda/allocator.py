"""Allocators of GPU memory: ``default`` (one driver allocation per buffer) and ``pool`` (the
core's size-class cache of freed buffers, reused without going back to the driver).

This module is only the device contract of ``tensorweave/runtime/allocator.py``: driver
allocations (a refusal is out of memory, reported with what the device has free), frees,
blocking copies, and ``Buffer`` blocks that carry their device pointer. Accounting, the
memory limit, block lifetimes and pooling are the core's.

Reuse is safe without waiting because all work on a device goes to its one stream in issue
order: work that used a freed buffer was issued before the free, so it runs before any work
that gets the buffer next. Returning memory to the driver is different (``cuMemFree`` of a
buffer a queued kernel still reads is not allowed), so ``_free`` frees in batches once an
event recorded after the batch has completed, and when the driver refuses an allocation
``_reclaim`` synchronizes the stream and frees every batch before the one retry.
"""

from __future__ import annotations

import numpy as np

from tensorweave.runtime.allocator import Block, BlockAllocator, PoolAllocator
from tensorweave.runtime.allocator import size_class as size_class  # the pool's size classes, re-exported
from tensorweave_cuda.driver import OutOfMemory
from tensorweave_cuda.tensor import Buffer


class CUDAAllocator(BlockAllocator):
    """One driver allocation per buffer; frees are batched behind an event."""

    name = "default"
    block_type = Buffer

    def __init__(self, device_name: str, driver, memory_limit: int | None = None):
        super().__init__(device_name, memory_limit)
        self.driver = driver
        # Touched only under the allocator's lock (from _alloc, _free and _reclaim).
        self._pending: list = []          # freed handles not yet covered by an event
        self._batches: list = []          # (event, [handles]) waiting for the event

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.driver, device.memory_limit)

    def allocate(self, nbytes: int) -> Buffer | None:
        """A buffer of ``nbytes`` (None for 0 bytes: nothing to allocate)."""
        if nbytes <= 0:
            return None
        return self.alloc(nbytes)

    def stats(self) -> dict:
        s = super().stats()
        s["device"] = self.device_name
        return s

    # -- the device contract -------------------------------------------------------------
    def _block(self, raw, nbytes: int, size: int) -> Buffer:
        return Buffer(raw, nbytes, size, self._returns, self.driver.pointer(raw))

    def _alloc(self, nbytes: int):
        self._release_completed()
        try:
            return self.driver.mem_alloc(nbytes)
        except OutOfMemory as e:
            raise MemoryError(f"{e}{self._device_memory()}") from None

    def _free(self, raw, nbytes: int) -> None:
        self._pending.append(raw)

    def _reclaim(self) -> None:
        """Give every freed buffer back to the driver (waits for the stream)."""
        self.driver.synchronize()
        handles = self._pending + [h for _, hs in self._batches for h in hs]
        self._pending, self._batches = [], []
        for h in handles:
            self.driver.mem_free(h)

    def _copyin(self, raw, src) -> None:
        drv = self.driver
        with drv.activate():
            drv.htod(drv.pointer(raw), src)
            drv.event_sync(drv.record())

    def _copyout(self, dst, raw) -> None:
        drv = self.driver
        with drv.activate():
            drv.dtoh(dst, drv.pointer(raw))
            drv.event_sync(drv.record())

    # -----------------------------------------------------------------------------------
    def _release_completed(self) -> None:
        """Free the batches whose event has passed; cover the pending frees by a new event."""
        if self._pending:
            self._batches.append((self.driver.record(), self._pending))
            self._pending = []
        while self._batches and self.driver.event_done(self._batches[0][0]):
            for h in self._batches.pop(0)[1]:
                self.driver.mem_free(h)

    def _device_memory(self) -> str:
        try:
            free, total = self.driver.mem_get_info()
        except Exception:  # noqa: BLE001 - only detail for the message
            return ""
        return f"; the device has {free} of {total} bytes free"


class CUDAPoolAllocator(PoolAllocator, CUDAAllocator):
    """Freed buffers wait in the core's size-class bins and are handed out again
    (stream-ordered reuse)."""


# ---------------------------------------------------------------------------------------
# Page-locked host memory


class PinnedBlock(Block):
    """Page-locked host memory lent to NumPy arrays (``array``): the array's ``base`` is this
    block, so the memory goes back to its pool when the last array (or view) using it goes."""

    __slots__ = ("ptr", "_iface")

    def __init__(self, raw, nbytes: int, size: int, returns, ptr: int):
        super().__init__(raw, nbytes, size, returns)
        self.ptr = ptr
        self._iface = None

    @property
    def __array_interface__(self):
        return self._iface

    def array(self, shape, dtype) -> np.ndarray:
        """A C-contiguous array of ``shape`` and ``dtype`` over this block (at most ``nbytes``)."""
        dtype = np.dtype(dtype)
        self._iface = {"data": (self.ptr, False), "shape": tuple(int(d) for d in shape),
                       "typestr": dtype.str, "version": 3}
        try:
            out = np.asarray(self)
        finally:
            self._iface = None
        if out.nbytes > self.nbytes:
            raise ValueError(f"an array of {out.nbytes} bytes does not fit a block of {self.nbytes}")
        return out


def is_pinned(array: np.ndarray) -> bool:
    """Whether ``array`` (C-contiguous) lives in page-locked memory this process allocated
    through the plugin (``PinnedBlock``) or PyCUDA (``pagelocked_empty``)."""
    b = array.base
    for _ in range(8):
        if b is None:
            return False
        if isinstance(b, PinnedBlock) or type(b).__name__.endswith("HostAllocation"):
            return True
        b = getattr(b, "base", None)
    return False


class PinnedHostPool(PoolAllocator):
    """The core's pool (size classes, limit, reuse) over page-locked host memory of one GPU's
    driver: what large ``to_host`` results and ``CUDADevice.pinned_empty`` arrays are made
    of. ``memory_limit`` caps the page-locked bytes held (in use + cached), ``max_alloc_size``
    one array; beyond either the allocation raises ResourceExhaustedError and the caller
    falls back to ordinary memory. Blocks are freed only when the cap makes room (or by
    ``trim``): allocating page-locked memory is slow, reusing it is free."""

    name = "pinned"
    block_type = PinnedBlock

    def __init__(self, device_name: str, driver, memory_limit: int | None, max_alloc_size: int | None = None):
        super().__init__(f"{device_name} (page-locked host memory)", memory_limit)
        self.driver = driver
        self.max_alloc_size = max_alloc_size

    def _block(self, raw, nbytes: int, size: int) -> PinnedBlock:
        return PinnedBlock(raw, nbytes, size, self._returns, raw.ctypes.data)

    def _alloc(self, nbytes: int):
        try:
            return self.driver.host_alloc(nbytes)
        except OutOfMemory as e:
            raise MemoryError(str(e)) from None

    def _free(self, raw, nbytes: int) -> None:
        self.driver.host_free(raw)
