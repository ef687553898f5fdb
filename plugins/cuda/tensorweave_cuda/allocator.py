"""Allocators of GPU memory: ``default`` (one driver allocation per buffer) and ``pool``
(size-class bins of freed buffers, reused without going back to the driver).

Both keep the core's statistics (``bytes_in_use``, ``peak_bytes_in_use``, ...) and enforce
``memory_limit``: an allocation over the limit, or one the driver refuses, raises
``ResourceExhaustedError`` naming the device, the bytes asked for and the bytes in use.

Reuse is safe without waiting because all work on a device goes to its one stream in issue
order: work that used a freed buffer was issued before the free, so it runs before any work
that gets the buffer next. Returning memory to the driver is different (``cuMemFree`` of a
buffer a queued kernel still reads is not allowed), so ``default`` frees in batches once an
event recorded after the batch has completed, and the pool synchronizes before it trims.
"""

from __future__ import annotations

import threading

from tensorweave.framework import errors
from tensorweave.runtime.device import Allocator
from tensorweave_cuda.driver import OutOfMemory
from tensorweave_cuda.tensor import Buffer

MIN_CLASS = 512


def size_class(nbytes: int) -> int:
    """The pool's bin for ``nbytes``: multiples of 512 up to 2 KiB, then four classes per
    power of two (p, 1.25p, 1.5p, 1.75p), so at most 25% of a block is slack."""
    if nbytes <= 4 * MIN_CLASS:
        return max(MIN_CLASS, -(-nbytes // MIN_CLASS) * MIN_CLASS)
    p = 1 << (nbytes.bit_length() - 1)
    step = p // 4
    return -(-nbytes // step) * step


class CUDAAllocator(Allocator):
    """One driver allocation per buffer; frees are batched behind an event."""

    name = "default"

    def __init__(self, device_name: str, driver, memory_limit: int | None = None):
        super().__init__(device_name, memory_limit)
        self.driver = driver
        # The same thread may free (a handle's last reference dropped) while inside another
        # method of this allocator: re-entrant.
        self._mutex = threading.RLock()
        self._pending: list = []          # freed handles not yet covered by an event
        self._batches: list = []          # (event, [handles]) waiting for the event

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.driver, device.memory_limit)

    # -- the Allocator API -------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Buffer | None:
        """A buffer of ``nbytes`` (None for 0 bytes: nothing to allocate)."""
        if nbytes <= 0:
            return None
        self._note_alloc(nbytes)  # raises ResourceExhaustedError over the limit
        try:
            handle = self._obtain(nbytes)
        except BaseException:
            self._note_free(nbytes)
            raise
        return Buffer(self.driver.pointer(handle), nbytes, self, handle)

    def free(self, handle, nbytes: int) -> None:
        self._note_free(nbytes)
        with self._mutex:
            self._pending.append(handle)

    def track(self, value) -> None:
        """Buffers are counted when allocated; nothing to do for a kernel's outputs."""

    def stats(self) -> dict:
        s = super().stats()
        s["device"] = self.device_name
        return s

    # -- driver memory -----------------------------------------------------------------------
    def _obtain(self, nbytes: int):
        self._release_completed()
        try:
            return self.driver.mem_alloc(nbytes)
        except OutOfMemory:
            pass
        self._release_all()
        try:
            return self.driver.mem_alloc(nbytes)
        except OutOfMemory as e:
            raise self._oom(nbytes, e) from None

    def _release_completed(self) -> None:
        with self._mutex:
            if self._pending:
                self._batches.append((self.driver.record(), self._pending))
                self._pending = []
            done = []
            while self._batches and self.driver.event_done(self._batches[0][0]):
                done.extend(self._batches.pop(0)[1])
        for h in done:
            self.driver.mem_free(h)

    def _release_all(self) -> None:
        """Give every freed buffer back to the driver (waits for the stream)."""
        self.driver.synchronize()
        with self._mutex:
            handles = self._pending + [h for _, hs in self._batches for h in hs]
            self._pending, self._batches = [], []
        for h in handles:
            self.driver.mem_free(h)

    def _oom(self, nbytes: int, cause) -> errors.ResourceExhaustedError:
        try:
            free, total = self.driver.mem_get_info()
            dev = f"; the device has {free} of {total} bytes free"
        except Exception:  # noqa: BLE001
            dev = ""
        return errors.ResourceExhaustedError(
            f"out of memory on {self.device_name}: asked for {nbytes} bytes with {self.bytes_in_use} "
            f"bytes in use by the {self.name!r} allocator{dev} ({cause})")


class CUDAPoolAllocator(CUDAAllocator):
    """Freed buffers wait in size-class bins and are handed out again (stream-ordered reuse).

    ``bytes_in_use`` counts size classes (the memory held for live buffers); the cached bytes
    are reported as ``bytes_cached``. When the limit or the driver would refuse a new block,
    the cache is returned to the driver first.
    """

    name = "pool"

    def __init__(self, device_name: str, driver, memory_limit: int | None = None):
        super().__init__(device_name, driver, memory_limit)
        self._bins: dict[int, list] = {}
        self.bytes_cached = 0
        self.cache_hits = 0

    def allocate(self, nbytes: int) -> Buffer | None:
        if nbytes <= 0:
            return None
        cls = size_class(nbytes)
        self._note_alloc(cls)
        try:
            handle = self._take(cls)
        except BaseException:
            self._note_free(cls)
            raise
        return Buffer(self.driver.pointer(handle), nbytes, self, handle)

    def free(self, handle, nbytes: int) -> None:
        cls = size_class(nbytes)
        self._note_free(cls)
        with self._mutex:
            self._bins.setdefault(cls, []).append(handle)
            self.bytes_cached += cls

    def _take(self, cls: int):
        with self._mutex:
            bin_ = self._bins.get(cls)
            if bin_:
                self.bytes_cached -= cls
                self.cache_hits += 1
                return bin_.pop()
        lim = self.memory_limit
        if lim is not None and self.bytes_in_use + self.bytes_cached > lim:
            self.empty_cache()
        try:
            return self.driver.mem_alloc(cls)
        except OutOfMemory:
            pass
        self.empty_cache()
        try:
            return self.driver.mem_alloc(cls)
        except OutOfMemory as e:
            raise self._oom(cls, e) from None

    def empty_cache(self) -> None:
        """Return every cached block to the driver (after the stream has drained)."""
        self.driver.synchronize()
        with self._mutex:
            handles = [h for hs in self._bins.values() for h in hs]
            self._bins = {}
            self.bytes_cached = 0
        for h in handles:
            self.driver.mem_free(h)

    def stats(self) -> dict:
        s = super().stats()
        s["bytes_cached"] = self.bytes_cached
        s["cache_hits"] = self.cache_hits
        return s
