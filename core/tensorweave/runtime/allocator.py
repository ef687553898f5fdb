"""Allocators: the statistics every allocator reports, the one contract between the core and
a device's memory, and the one pooling policy every device plugin reuses.

``Allocator``
    Statistics and the memory limit, for every allocator (also those that only count what
    kernels produce, like the CPU's default): ``bytes_in_use``, ``peak_bytes_in_use``,
    ``num_allocs``, ``largest_alloc_size``, ``bytes_limit``. A request over the limit is a
    ``ResourceExhaustedError`` "out of memory on DEVICE: asked for N bytes with M of L bytes
    in use".

``BlockAllocator``
    Hands out device memory as ``Block`` objects. A device plugin implements four methods on
    raw buffers and nothing else:

    * ``_alloc(nbytes) -> raw``: a new buffer of exactly ``nbytes`` from the device; raise
      ``MemoryError`` (or ``ResourceExhaustedError``) when the device refuses.
    * ``_free(raw, nbytes)``: give a buffer back to the device. Called only once no tensor
      refers to it; the device may defer the real release (CUDA waits for an event).
    * ``_copyin(raw, src)`` / ``_copyout(dst, raw)``: blocking copies between a buffer and a
      C-contiguous host array. Optional: a device whose ``Device`` class does its own
      (asynchronous) copies may leave them raising ``NotImplementedError``.

    and, where it needs them, ``_reclaim()`` (make memory given to ``_free`` available now:
    called before an allocation the device refused is retried), ``max_alloc_size`` (the
    largest one buffer may be) and ``block_type``/``_block`` (a ``Block`` subclass carrying
    what its tensors need, such as a device pointer).

``PoolAllocator``
    The same with a cache: free lists by size class (``size_class``: at least 256 bytes, four
    classes per power of two, so at most 25% of a block is slack), reused most recently freed
    first. Cached bytes stay under ``max_cached_bytes`` (None: no cap of their own) and, with
    live blocks, under ``memory_limit``: the cache gives way (largest blocks first) before a
    request is refused, and when the device refuses a new buffer the whole cache is given back
    and the allocation retried once. It adds ``bytes_cached``, ``cached_blocks``,
    ``bytes_reserved`` (in use plus cached: all the memory it holds) and ``cache_hits``
    (allocations served from the cache) to the statistics, and sets ``pooling = True``.

    In a pool ``bytes_in_use`` counts whole size classes (the memory live tensors hold); in a
    plain ``BlockAllocator`` the bytes asked for. ``memory_limit`` bounds ``bytes_in_use``.

Lifetime: a ``Block``'s last reference going returns its buffer. ``Block.__del__`` only
appends to the allocator's return queue (a deque: no lock is taken, so it is safe wherever
the garbage collector runs it, on any thread, even inside the allocator); the allocator
settles the queue under its lock on its next call, including reading ``bytes_in_use``.
"""

from __future__ import annotations

import collections
import threading

from tensorweave.framework import errors

MIN_BLOCK = 256


def size_class(nbytes: int) -> int:
    """The block size that serves a request of ``nbytes`` in a pool: at least 256 bytes, then
    four classes per power of two (256, 320, 384, 448, 512, 640, ...): at most 25% slack, and
    every class a multiple of 64 bytes."""
    if nbytes <= MIN_BLOCK:
        return MIN_BLOCK
    step = 1 << ((nbytes - 1).bit_length() - 3)  # a quarter of the power of two below
    return (nbytes + step - 1) & -step


class Allocator:
    """Statistics and the memory limit. Allocators that hand out memory derive from
    ``BlockAllocator``; those that only account for what kernels produce (``track``) call
    ``_note_alloc``/``_note_free`` themselves."""

    name = "base"
    # Whether allocations come from a cache of size-class blocks (CPU kernels read this at
    # plan time to decide whether to write their outputs into allocator memory).
    pooling = False

    def __init__(self, device_name: str = "", memory_limit: int | None = None):
        self.device_name = device_name
        self.memory_limit = memory_limit
        # Re-entrant: a free triggered by garbage collection may run on a thread that is
        # already inside _note_alloc.
        self._lock = threading.RLock()
        self._in_use = 0
        self.peak_bytes_in_use = 0
        self.num_allocs = 0
        self.largest_alloc_size = 0

    @property
    def bytes_in_use(self) -> int:
        self._settle()
        return self._in_use

    def _settle(self) -> None:
        """Account for memory released since the last call (see BlockAllocator)."""

    def _exhausted(self, asked: int, why: str = "") -> errors.ResourceExhaustedError:
        """The error for a request of ``asked`` bytes that cannot be met (caller holds the lock)."""
        lim = self.memory_limit
        of = f"of {lim} " if lim is not None else ""
        return errors.ResourceExhaustedError(
            f"out of memory on {self.device_name}: asked for {asked} bytes with {self._in_use} {of}bytes in use{why}")

    def _count(self, nbytes: int) -> None:
        """Count an allocation (caller holds the lock and has checked the limit)."""
        in_use = self._in_use + nbytes
        self._in_use = in_use
        self.num_allocs += 1
        if in_use > self.peak_bytes_in_use:
            self.peak_bytes_in_use = in_use
        if nbytes > self.largest_alloc_size:
            self.largest_alloc_size = nbytes

    def _note_alloc(self, nbytes: int) -> None:
        """Count ``nbytes`` more in use; ResourceExhaustedError over the memory limit."""
        with self._lock:
            if self.memory_limit is not None and self._in_use + nbytes > self.memory_limit:
                raise self._exhausted(nbytes)
            self._count(nbytes)

    def _note_free(self, nbytes: int) -> None:
        with self._lock:
            self._in_use -= nbytes

    def reset_peak(self) -> None:
        with self._lock:
            self.peak_bytes_in_use = self.bytes_in_use

    def stats(self) -> dict:
        in_use = self.bytes_in_use
        return {
            "allocator": self.name, "bytes_in_use": in_use,
            "peak_bytes_in_use": self.peak_bytes_in_use, "num_allocs": self.num_allocs,
            "largest_alloc_size": self.largest_alloc_size, "bytes_limit": self.memory_limit,
        }

    def track(self, value) -> None:
        """Account for a buffer a kernel produced (released when its last reference goes)."""


class Block:
    """One allocation handed out by a ``BlockAllocator``: ``raw`` (the device's buffer),
    ``nbytes`` (asked for) and ``size`` (held: the size class in a pool). Tensors share it;
    when the last reference goes the buffer goes back to its allocator."""

    __slots__ = ("raw", "nbytes", "size", "_returns")

    def __init__(self, raw, nbytes: int, size: int, returns):
        self.raw = raw
        self.nbytes = nbytes
        self.size = size
        self._returns = returns  # the allocator's return queue (a deque)

    def __del__(self):
        # Only an append: this runs wherever the collector runs it, possibly on a thread
        # that holds the allocator's lock, so it must not take it.
        r = self._returns
        if r is not None:
            self._returns = None
            r.append((self.raw, self.size))


class BlockAllocator(Allocator):
    """A fresh device buffer per allocation, given back when its last tensor goes.
    Subclasses implement the device contract (see the module docstring)."""

    name = "default"
    block_type = Block
    # The largest single buffer the device allows (None: no limit of its own).
    max_alloc_size: int | None = None
    # Free blocks kept for reuse beyond which blocks go back to the device (pools only).
    max_cached_bytes: int | None = None

    def __init__(self, device_name: str = "", memory_limit: int | None = None):
        super().__init__(device_name, memory_limit)
        self._returns: collections.deque = collections.deque()
        self._cache: dict[int, list] = {}
        self._cached = 0
        self.cache_hits = 0

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.memory_limit)

    # -- the device contract ------------------------------------------------------------
    def _alloc(self, nbytes: int):
        """A new buffer of ``nbytes`` bytes; MemoryError when the device refuses."""
        raise NotImplementedError

    def _free(self, raw, nbytes: int) -> None:
        """Give ``raw`` back to the device (no tensor refers to it any more)."""
        raise NotImplementedError

    def _copyin(self, raw, src) -> None:
        """Copy the C-contiguous host array ``src`` into ``raw`` (returns when done)."""
        raise NotImplementedError(f"{type(self).__name__} does not copy; its device does")

    def _copyout(self, dst, raw) -> None:
        """Copy ``raw`` into the C-contiguous host array ``dst`` (returns when done)."""
        raise NotImplementedError(f"{type(self).__name__} does not copy; its device does")

    def _reclaim(self) -> None:
        """Make the memory given to ``_free`` available to ``_alloc`` now (default: it is)."""

    def _block(self, raw, nbytes: int, size: int) -> Block:
        return self.block_type(raw, nbytes, size, self._returns)

    # -- what the device and its kernels call -------------------------------------------
    def alloc(self, nbytes: int) -> Block:
        """A block of at least ``nbytes`` bytes (contents undefined)."""
        mx = self.max_alloc_size
        if mx is not None and nbytes > mx:
            with self._lock:
                raise self._exhausted(nbytes, f": one buffer may hold at most {mx} bytes on this device")
        pooling = self.pooling
        size = nbytes
        if pooling:
            size = size_class(nbytes)
            if mx is not None and size > mx:
                size = mx
        with self._lock:
            if self._returns:
                self._settle_locked()
            lim = self.memory_limit
            if lim is not None and self._in_use + size > lim:
                raise self._exhausted(nbytes)
            free = self._cache.get(size) if pooling else None
            if free:
                raw = free.pop()
                self._cached -= size
                self.cache_hits += 1
            else:
                raw = self._fresh(nbytes, size)
            self._count(size)
        try:
            return self._block(raw, nbytes, size)
        except BaseException:
            self._returns.append((raw, size))  # not handed out: back as if released
            raise

    allocate = alloc

    def copyin(self, block: Block, src) -> None:
        """Copy the host array ``src`` (C-contiguous, ``block.nbytes`` bytes) into ``block``."""
        self._copyin(block.raw, src)

    def copyout(self, dst, block: Block) -> None:
        """Copy ``block`` into the host array ``dst`` (C-contiguous, ``block.nbytes`` bytes)."""
        self._copyout(dst, block.raw)

    def trim(self, keep_bytes: int = 0) -> int:
        """Give cached blocks back to the device until at most ``keep_bytes`` stay cached
        (largest first); returns the bytes given back."""
        with self._lock:
            self._settle_locked()
            return self._trim_locked(keep_bytes)

    # -----------------------------------------------------------------------------------
    def _fresh(self, nbytes: int, size: int):
        """A new buffer of ``size`` from the device (caller holds the lock)."""
        lim = self.memory_limit
        if lim is not None and self._cached and self._in_use + self._cached + size > lim:
            self._trim_locked(lim - self._in_use - size)
        try:
            return self._alloc(size)
        except (MemoryError, errors.ResourceExhaustedError):
            pass
        # The device refused: give it everything we hold for nothing, then try once more.
        self._trim_locked(0)
        self._reclaim()
        try:
            return self._alloc(size)
        except (MemoryError, errors.ResourceExhaustedError) as e:
            raise self._exhausted(nbytes, f" (the device refused: {e})") from None

    def _settle(self) -> None:
        if self._returns:
            with self._lock:
                self._settle_locked()

    def _settle_locked(self) -> None:
        returns = self._returns
        pooling = self.pooling
        cap = self.max_cached_bytes
        lim = self.memory_limit
        while returns:
            raw, size = returns.popleft()
            self._in_use -= size
            if pooling and (cap is None or self._cached + size <= cap) and (
                    lim is None or self._in_use + self._cached + size <= lim):
                self._cache.setdefault(size, []).append(raw)
                self._cached += size
            else:
                self._free(raw, size)

    def _trim_locked(self, keep_bytes: int) -> int:
        freed = 0
        cache = self._cache
        for size in sorted(cache, reverse=True):
            if self._cached <= keep_bytes:
                break
            lst = cache[size]
            while lst and self._cached > keep_bytes:
                raw = lst.pop()
                self._cached -= size
                freed += size
                self._free(raw, size)
            if not lst:
                del cache[size]
        return freed

    def stats(self) -> dict:
        with self._lock:  # one consistent reading
            self._settle_locked()
            s = super().stats()
            if self.pooling:
                s.update(bytes_cached=self._cached, cached_blocks=sum(len(v) for v in self._cache.values()),
                         bytes_reserved=self._in_use + self._cached, cache_hits=self.cache_hits)
        return s


class PoolAllocator(BlockAllocator):
    """``BlockAllocator`` with the cache on: a plugin's pool is
    ``class MyPool(PoolAllocator, MyAllocator)`` (this class first, so its policy wins)."""

    name = "pool"
    pooling = True

    @property
    def bytes_cached(self) -> int:
        self._settle()
        return self._cached

    @property
    def bytes_reserved(self) -> int:
        with self._lock:
            self._settle_locked()
            return self._in_use + self._cached
