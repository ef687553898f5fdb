"""The pooling CPU allocator (``tw.ConfigProto(allocator={"CPU": "pool"})``): the core's
``PoolAllocator`` (``tensorweave/runtime/allocator.py``: size classes, the cache, the
statistics, the memory limit) over raw, 64-byte-aligned host buffers, handing out NumPy
arrays that are views of them. A plan that runs thousands of steps reuses the same few
buffers instead of asking ``malloc`` (and, for large sizes, the kernel: ``mmap`` plus a page
fault per 4 KiB touched) for fresh memory every step.

How "the last view is gone" is detected: each hand-out is a ``HostBlock`` (the core's
``Block``) that exposes its buffer through ``__array_interface__``. NumPy keeps a non-array
object as the base of every view derived from the array made from it, so the block's last
reference goes exactly when the last view (a reshape, a transpose, a slice a consumer kept)
dies, and the core's block lifetime returns the buffer. The raw buffer itself is never
exposed, so it can be handed out again.

Arrays that kernels produce without the pool (``track``) are counted like the default
allocator counts them.
"""

from __future__ import annotations

import ctypes

import numpy as np

from tensorweave.runtime import allocator
from tensorweave.runtime.allocator import size_class as size_class  # the pool's size classes, re-exported
from tensorweave_cpu.device import CPUAllocator

ALIGN = 64
# The CPU has no memory limit of its own to bound the cache: cached (free) buffers beyond this
# are returned to the system instead of being kept.
DEFAULT_MAX_CACHED_BYTES = 1 << 30


class HostBlock(allocator.Block):
    """A block NumPy can view: it is the base of every array made from it."""

    __slots__ = ("__array_interface__",)


class PoolAllocator(allocator.PoolAllocator, CPUAllocator):
    name = "pool"
    block_type = HostBlock

    def __init__(self, device_name="", memory_limit=None, max_cached_bytes=DEFAULT_MAX_CACHED_BYTES):
        super().__init__(device_name, memory_limit)
        self.max_cached_bytes = max_cached_bytes

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.memory_limit)

    # -- the device contract: raw = (backing uint8 array, aligned address) -----------------
    def _alloc(self, nbytes: int):
        raw = np.empty(nbytes + ALIGN, np.uint8)  # MemoryError when the system refuses
        ptr = raw.ctypes.data
        return raw, ptr + (-ptr) % ALIGN

    def _free(self, raw, nbytes: int) -> None:
        """Dropping the backing array gives the memory back to ``malloc``."""

    def _copyin(self, raw, src) -> None:
        ctypes.memmove(raw[1], src.ctypes.data, src.nbytes)

    def _copyout(self, dst, raw) -> None:
        ctypes.memmove(dst.ctypes.data, raw[1], dst.nbytes)

    # ------------------------------------------------------------------------------------
    def allocate(self, shape, dtype) -> np.ndarray:
        """An uninitialised array of ``shape``/``dtype`` backed by a pooled buffer."""
        dt = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, int | np.integer) else tuple(int(d) for d in shape)
        n = dt.itemsize
        for d in shape:
            n *= d
        if n == 0 or dt.hasobject or dt.fields is not None:
            return np.empty(shape, dt)
        block = self.alloc(n)  # ResourceExhaustedError over the limit
        block.__array_interface__ = {"data": (block.raw[1], False), "shape": shape, "typestr": dt.str, "version": 3}
        return np.asarray(block)

    def owns(self, value) -> bool:
        """Whether ``value`` is (a view of) an array this pool handed out."""
        base = getattr(value, "base", None)
        while isinstance(base, np.ndarray):
            base = base.base
        return type(base) is HostBlock

    def track(self, value) -> None:
        if type(value) is not np.ndarray:
            return
        base = value.base
        if base is not None:
            if type(base) is HostBlock:
                return  # ours: counted when handed out
            if type(base) is np.ndarray and type(base.base) is HostBlock:
                return
        super().track(value)
