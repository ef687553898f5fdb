"""Buffer allocators of an OpenCL device: ``default`` (a fresh ``cl.Buffer`` per tensor) and
``pool`` (size-class free lists that reuse buffers), selectable with
``tw.ConfigProto(allocator={"OPENCL": "pool"})``.

Both count bytes in use and the peak over the lifetime of the blocks they hand out (a
block is in use until its last tensor is gone), and refuse an allocation over the memory
limit (the device's global memory unless configured lower) with a ResourceExhaustedError
naming the device, the bytes asked for and the bytes in use. Buffers released while kernels
that read them are still queued are safe to reuse: every command goes through the device's
one in-order queue, so a later kernel writing a reused buffer runs after the earlier ones.
"""

from __future__ import annotations

import collections
import threading

from tensorweave.framework import errors
from tensorweave.runtime.device import Allocator
from tensorweave_opencl.buffer import Block


class CLAllocator(Allocator):
    """A fresh buffer per allocation; the buffer is freed with its last tensor."""

    name = "default"

    def __init__(self, device_name: str, memory_limit: int | None, runtime):
        super().__init__(device_name, memory_limit)
        self.runtime = runtime
        self._returns: collections.deque = collections.deque()
        self._alloc_lock = threading.Lock()

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.memory_limit, device.runtime)

    # -- what subclasses change ---------------------------------------------------------
    def _obtain(self, nbytes: int) -> tuple[object, int]:
        """A buffer for ``nbytes`` and the bytes it accounts for."""
        if self.memory_limit is not None and self.bytes_in_use + nbytes > self.memory_limit:
            raise self._exhausted(nbytes)
        return self._new_buffer(nbytes), nbytes

    def _give_back(self, buf, nbytes: int) -> None:
        """A block's buffer after its last tensor went (here: simply dropped)."""

    # -----------------------------------------------------------------------------------
    def _settle(self) -> None:
        """Account for the blocks released since the last call."""
        returns = self._returns
        while returns:
            try:
                buf, nbytes = returns.popleft()
            except IndexError:
                return
            self._note_free(nbytes)
            self._give_back(buf, nbytes)

    def _new_buffer(self, nbytes: int):
        import pyopencl as cl

        try:
            return cl.Buffer(self.runtime.context, cl.mem_flags.READ_WRITE, max(nbytes, 8))
        except (cl.MemoryError, cl.RuntimeError) as e:
            raise self._exhausted(nbytes, f" (the OpenCL runtime refused: {e})") from None

    def _exhausted(self, nbytes: int, why: str = "") -> errors.ResourceExhaustedError:
        return errors.ResourceExhaustedError(
            f"out of memory on {self.device_name}: asked for {nbytes} bytes with {self.bytes_in_use} bytes "
            f"in use (limit {self.memory_limit}){why}")

    def allocate(self, nbytes: int) -> Block:
        """A block of at least ``nbytes`` bytes (contents undefined)."""
        with self._alloc_lock:
            self._settle()
            if nbytes > self.runtime.max_alloc_size:
                raise self._exhausted(nbytes, f": one buffer may hold at most {self.runtime.max_alloc_size} "
                                              "bytes on this device")
            buf, accounted = self._obtain(nbytes)
            self._note_alloc(accounted)
        return Block(buf, accounted, self._returns)

    def stats(self) -> dict:
        with self._alloc_lock:
            self._settle()
        return super().stats()


def size_class(nbytes: int) -> int:
    """Round up to three significant bits (at most 12.5% slack), at least 256 bytes, so
    buffers of nearby sizes are interchangeable."""
    if nbytes <= 256:
        return 256
    shift = nbytes.bit_length() - 3
    return ((nbytes + (1 << shift) - 1) >> shift) << shift


class CLPoolAllocator(CLAllocator):
    """Keeps released buffers in free lists by size class and hands them out again.

    ``bytes_in_use`` counts whole size classes; ``stats()`` adds ``bytes_pooled`` (held in
    the free lists, not in use). Over the memory limit, the free lists are emptied before
    an allocation is refused.
    """

    name = "pool"

    def __init__(self, device_name, memory_limit, runtime):
        super().__init__(device_name, memory_limit, runtime)
        self._free: dict[int, list] = {}
        self.bytes_pooled = 0
        self.hits = 0

    def _obtain(self, nbytes):
        size = size_class(nbytes)
        bucket = self._free.get(size)
        if bucket:
            self.bytes_pooled -= size
            self.hits += 1
            return bucket.pop(), size
        lim = self.memory_limit
        if lim is not None and self.bytes_in_use + self.bytes_pooled + size > lim:
            self.release_pooled()
        if lim is not None and self.bytes_in_use + size > lim:
            raise self._exhausted(nbytes)
        return self._new_buffer(size), size

    def _give_back(self, buf, nbytes):
        self._free.setdefault(nbytes, []).append(buf)
        self.bytes_pooled += nbytes

    def release_pooled(self) -> None:
        """Free every buffer held in the free lists."""
        self._free.clear()
        self.bytes_pooled = 0

    def stats(self) -> dict:
        out = super().stats()
        out["bytes_pooled"] = self.bytes_pooled
        out["pool_hits"] = self.hits
        return out
