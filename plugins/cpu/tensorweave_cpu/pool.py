"""The pooling CPU allocator (``tw.ConfigProto(allocator={"CPU": "pool"})``).

It owns raw, 64-byte-aligned host buffers kept in free lists by size class, and hands out
NumPy arrays that are views of them. A buffer comes back to its free list when the last
array viewing it is garbage-collected, so a plan that runs thousands of steps reuses the same
few buffers instead of asking ``malloc`` (and, for large sizes, the kernel: ``mmap`` plus a
page fault per 4 KiB touched) for fresh memory every step.

How "the last view is gone" is detected: each hand-out wraps the buffer in a small
``_Block`` object that exposes it through ``__array_interface__``. NumPy keeps a non-array
object as the base of every view derived from the array made from it, so a weak reference to
the block fires exactly when the last view (a reshape, a transpose, a slice a consumer kept)
dies. The raw buffer itself is never exposed, so it can be handed out again.

Accounting: ``bytes_in_use`` counts the bytes callers asked for (like the default
allocator), ``bytes_reserved`` the size classes those live blocks really hold, ``pool_bytes``
the cached free buffers. ``memory_limit`` bounds ``bytes_in_use``: a request beyond it is a
``ResourceExhaustedError`` naming the device and the bytes asked for and in use; cached
buffers are dropped first whenever reserved plus cached memory would exceed the limit.
Arrays that kernels produce without the pool (``track``) are counted like the default
allocator counts them.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from tensorweave.framework import errors
from tensorweave_cpu.device import CPUAllocator

ALIGN = 64
MIN_CLASS = 256
# Cached (free) buffers beyond this are returned to the system instead of being kept.
DEFAULT_MAX_POOL_BYTES = 1 << 30


def size_class(nbytes: int) -> int:
    """The buffer size that serves a request of ``nbytes``: powers of two split into four
    steps (256, ..., 1 Ki, 1.25 Ki, 1.5 Ki, 1.75 Ki, 2 Ki, ...), so at most 25% is wasted."""
    if nbytes <= MIN_CLASS:
        return MIN_CLASS
    top = 1 << (nbytes - 1).bit_length()       # the power of two >= nbytes
    step = top >> 3                             # a quarter of the previous power of two
    return ((nbytes + step - 1) // step) * step


class _Block:
    """One hand-out of a raw buffer; NumPy keeps it as the base of every view."""

    __slots__ = ("raw", "__array_interface__", "__weakref__")


class _BlockRef(weakref.ref):
    """Weak reference to a live block that remembers the buffer to give back."""

    __slots__ = ("buf", "size", "nbytes")


class PoolAllocator(CPUAllocator):
    name = "pool"
    # Kernels look for this at plan time to decide whether to allocate outputs through us.
    pooling = True

    def __init__(self, device_name="", memory_limit=None, max_pool_bytes=DEFAULT_MAX_POOL_BYTES):
        super().__init__(device_name, memory_limit)
        # Re-entrant: a buffer can come back (a weakref callback, from the cyclic GC) while
        # this thread is inside allocate() holding the lock.
        self._lock = threading.RLock()
        self.max_pool_bytes = max_pool_bytes
        self._free: dict[int, list] = {}
        self._refs: set = set()
        self.pool_bytes = 0
        self.bytes_reserved = 0
        self.num_reused = 0
        self.num_fresh = 0

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.memory_limit)

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
        size = size_class(n)
        with self._lock:
            self._note_alloc(n)  # raises ResourceExhaustedError over the limit
            free = self._free.get(size)
            if free:
                buf = free.pop()
                self.pool_bytes -= size
                self.num_reused += 1
            else:
                buf = None
                self.num_fresh += 1
                if self.memory_limit is not None and self.bytes_reserved + self.pool_bytes + size > self.memory_limit:
                    self._trim_locked(max(0, self.memory_limit - self.bytes_reserved - size))
            self.bytes_reserved += size
        if buf is None:
            try:
                buf = _new_buffer(size)
            except MemoryError:
                with self._lock:
                    self.bytes_reserved -= size
                    self.num_fresh -= 1
                    self._note_free(n)
                    self._trim_locked(0)
                raise errors.ResourceExhaustedError(
                    f"out of memory on {self.device_name}: asked for {n} bytes with {self.bytes_in_use} "
                    "bytes in use (the system refused a new buffer)") from None
        raw, ptr = buf
        block = _Block()
        block.raw = raw
        block.__array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": dt.str, "version": 3}
        ref = _BlockRef(block, self._give_back)
        ref.buf, ref.size, ref.nbytes = buf, size, n
        self._refs.add(ref)
        return np.asarray(block)

    def _give_back(self, ref) -> None:
        with self._lock:
            self._refs.discard(ref)
            self.bytes_in_use -= ref.nbytes
            self.bytes_reserved -= ref.size
            if self.pool_bytes + ref.size <= self.max_pool_bytes and (
                    self.memory_limit is None or self.bytes_reserved + self.pool_bytes + ref.size <= self.memory_limit):
                self._free.setdefault(ref.size, []).append(ref.buf)
                self.pool_bytes += ref.size

    def trim(self, keep_bytes: int = 0) -> int:
        """Release cached buffers until at most ``keep_bytes`` stay cached; returns bytes freed."""
        with self._lock:
            return self._trim_locked(keep_bytes)

    def _trim_locked(self, keep_bytes: int) -> int:
        freed = 0
        for size in sorted(self._free, reverse=True):  # the largest buffers first
            lst = self._free[size]
            while lst and self.pool_bytes > keep_bytes:
                lst.pop()
                self.pool_bytes -= size
                freed += size
            if not lst:
                del self._free[size]
            if self.pool_bytes <= keep_bytes:
                break
        return freed

    def owns(self, value) -> bool:
        """Whether ``value`` is (a view of) an array this pool handed out."""
        base = getattr(value, "base", None)
        while isinstance(base, np.ndarray):
            base = base.base
        return type(base) is _Block

    def track(self, value) -> None:
        if type(value) is not np.ndarray:
            return
        base = value.base
        if base is not None:
            if type(base) is _Block:
                return  # ours: counted when handed out
            if type(base) is np.ndarray and type(base.base) is _Block:
                return
        super().track(value)

    def stats(self) -> dict:
        s = super().stats()
        with self._lock:
            s.update(pool_bytes=self.pool_bytes, bytes_reserved=self.bytes_reserved,
                     num_reused=self.num_reused, num_fresh=self.num_fresh,
                     free_buffers=sum(len(v) for v in self._free.values()))
        return s


def _new_buffer(size: int):
    raw = np.empty(size + ALIGN, np.uint8)
    ptr = raw.ctypes.data
    off = (-ptr) % ALIGN
    return raw, ptr + off
