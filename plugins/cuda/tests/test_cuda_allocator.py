"""The CUDA allocators' device contract over a driver whose events pass only when the test
says so (the emulator's always have): driver frees wait for an event recorded after them,
and a refused allocation synchronizes the stream before memory goes back and is retried."""

import contextlib
import itertools

import pytest

from tensorweave.framework import errors
from tensorweave_cuda.allocator import CUDAAllocator, CUDAPoolAllocator
from tensorweave_cuda.driver import OutOfMemory
from tensorweave_cuda.tensor import Buffer


class Event:
    def __init__(self):
        self.done = False


class SlowDriver:
    """The driver calls the allocators make, with ``capacity`` bytes and manual events."""

    def __init__(self, capacity):
        self.capacity, self.used = capacity, 0
        self.live: dict = {}
        self.events: list = []
        self.freed = 0
        self.syncs = 0
        self._ids = itertools.count(1 << 20, 1 << 20)

    @contextlib.contextmanager
    def activate(self):
        yield

    def mem_alloc(self, nbytes):
        if self.used + nbytes > self.capacity:
            raise OutOfMemory(f"cuMemAlloc failed: out of memory ({nbytes} bytes asked)")
        h = next(self._ids)
        self.live[h] = nbytes
        self.used += nbytes
        return h

    def mem_free(self, handle):
        self.used -= self.live.pop(handle)
        self.freed += 1

    @staticmethod
    def pointer(handle):
        return handle

    def mem_get_info(self):
        return self.capacity - self.used, self.capacity

    def record(self):
        ev = Event()
        self.events.append(ev)
        return ev

    @staticmethod
    def event_done(ev):
        return ev.done

    def event_sync(self, ev):
        ev.done = True

    def synchronize(self):
        self.syncs += 1
        for ev in self.events:
            ev.done = True

    def finish_work(self):
        for ev in self.events:
            ev.done = True


def test_default_frees_behind_an_event_recorded_after_the_free():
    drv = SlowDriver(1 << 20)
    alloc = CUDAAllocator("/device:GPU:test", drv)
    a = alloc.allocate(1000)
    assert isinstance(a, Buffer) and a.ptr == a.handle and a.nbytes == 1000
    del a
    assert alloc.bytes_in_use == 0 and drv.freed == 0   # counted free, not yet given back
    alloc.allocate(10)                  # covers the free by an event: still queued work
    assert drv.freed == 0 and drv.used == 1010
    drv.finish_work()
    alloc.allocate(10)                  # the event has passed: now the driver gets it back
    assert drv.freed == 1 and drv.syncs == 0


def test_a_refused_allocation_synchronizes_frees_and_retries():
    drv = SlowDriver(4096)
    alloc = CUDAAllocator("/device:GPU:test", drv)
    a = alloc.allocate(3000)
    del a
    b = alloc.allocate(3000)            # the first is still pending: refused, then sync + free
    assert b is not None and drv.syncs == 1 and drv.freed == 1
    with pytest.raises(errors.ResourceExhaustedError,
                       match=r"asked for 2000 bytes with 3000 bytes in use \(the device refused: cuMemAlloc failed.*"
                             r"the device has 1096 of 4096 bytes free\)"):
        alloc.allocate(2000)
    assert alloc.bytes_in_use == 3000 and alloc.num_allocs == 2


def test_pool_reuses_without_the_driver_and_gives_its_cache_back_safely():
    drv = SlowDriver(8192)
    pool = CUDAPoolAllocator("/device:GPU:test", drv)
    a = pool.allocate(3000)             # class 3072
    h = a.handle
    del a
    b = pool.allocate(2900)             # same class: the cached handle, stream-ordered reuse
    assert b.handle == h and pool.stats()["cache_hits"] == 1 and len(drv.live) == 1
    del b
    assert pool.trim() == 3072 and drv.freed == 0      # behind an event, not freed under queued work
    c = pool.allocate(6000)             # 6144 of 8192: the old block is still held -> refused once
    assert c.size == 6144 and drv.syncs == 1 and drv.freed == 1 and drv.used == 6144
    assert pool.stats()["bytes_cached"] == 0 and pool.bytes_in_use == 6144
    assert pool.allocate(0) is None
