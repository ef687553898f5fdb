"""The core's allocator contract and its one pool (runtime/allocator.py), over a tiny in-memory
device: size classes, reuse, the cache limit, giving the cache back when the device refuses,
statistics, and blocks coming back when their last reference goes."""

import gc
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.runtime.allocator import Block, BlockAllocator, PoolAllocator, size_class

DEV = "/job:localhost/replica:0/task:0/device:MEM:0"


class Memory(BlockAllocator):
    """The device contract over host bytearrays, with a capacity the 'device' enforces.
    With ``deferred``, ``_free`` only queues (like CUDA's event-batched frees) and memory comes
    back to the device in ``_reclaim``."""

    def __init__(self, device_name=DEV, memory_limit=None, capacity=None, deferred=False):
        super().__init__(device_name, memory_limit)
        self.capacity, self.deferred = capacity, deferred
        self.used = 0
        self.device_allocs = 0
        self.freed: list = []
        self.pending: list = []
        self.reclaims = 0

    def _alloc(self, nbytes):
        if self.capacity is not None and self.used + nbytes > self.capacity:
            raise MemoryError(f"only {self.capacity - self.used} bytes left")
        self.used += nbytes
        self.device_allocs += 1
        return bytearray(nbytes)

    def _free(self, raw, nbytes):
        assert len(raw) == nbytes
        self.freed.append(raw)
        if self.deferred:
            self.pending.append(nbytes)
        else:
            self.used -= nbytes

    def _reclaim(self):
        self.reclaims += 1
        self.used -= sum(self.pending)
        self.pending.clear()

    def _copyin(self, raw, src):
        raw[:src.nbytes] = src.tobytes()

    def _copyout(self, dst, raw):
        dst.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, np.uint8, dst.nbytes)


class Pool(PoolAllocator, Memory):
    pass


# ---------------------------------------------------------------------------------------
# size classes
def test_size_classes_are_four_per_power_of_two_from_256():
    assert [size_class(n) for n in (0, 1, 256, 257, 321, 385, 449, 512, 513)] == [
        256, 256, 256, 320, 384, 448, 512, 512, 640]
    assert size_class(4 << 20) == 4 << 20 and size_class((1 << 20) + 1) == (1 << 20) + (1 << 18)
    prev = 0
    for n in list(range(1, 5000, 7)) + [70_000, 3 << 20, 10**7, 10**9 + 1]:
        c = size_class(n)
        assert n <= c and c >= prev and c % 64 == 0
        assert n <= 256 or c < n * 1.25, (n, c)
        prev = c


# ---------------------------------------------------------------------------------------
# the plain block allocator
def test_default_allocates_exact_sizes_and_frees_with_the_last_reference():
    mem = Memory()
    b = mem.alloc(1000)
    assert isinstance(b, Block) and b.nbytes == b.size == 1000 and len(b.raw) == 1000
    other = b  # a second tensor over the same block
    del b
    assert mem.bytes_in_use == 1000
    raw = other.raw
    del other
    assert mem.bytes_in_use == 0  # reading the statistic settles the returns
    assert mem.freed[-1] is raw and mem.used == 0
    s = mem.stats()
    assert s == {"allocator": "default", "bytes_in_use": 0, "peak_bytes_in_use": 1000, "num_allocs": 1,
                 "largest_alloc_size": 1000, "bytes_limit": None}
    again = mem.alloc(1000)
    assert mem.device_allocs == 2 and again.raw is not raw  # nothing is cached


def test_memory_limit_names_device_and_bytes_and_leaves_no_trace():
    mem = Memory(memory_limit=4000)
    keep = mem.alloc(3000)
    with pytest.raises(tw.errors.ResourceExhaustedError,
                       match=r"^out of memory on .*MEM:0: asked for 2000 bytes with 3000 of 4000 bytes in use$"):
        mem.alloc(2000)
    s = mem.stats()
    assert s["bytes_in_use"] == 3000 and s["num_allocs"] == 1 and s["peak_bytes_in_use"] == 3000
    del keep
    assert mem.alloc(4000).size == 4000


def test_one_buffer_larger_than_the_device_allows_is_refused():
    mem = Memory()
    mem.max_alloc_size = 1 << 20
    with pytest.raises(tw.errors.ResourceExhaustedError, match=r"one buffer may hold at most 1048576 bytes"):
        mem.alloc((1 << 20) + 1)
    pool = Pool()
    pool.max_alloc_size = 1000  # the class (1024) would not fit: the largest buffer serves it
    assert pool.alloc(1000).size == 1000 and pool.device_allocs == 1


def test_copies_go_through_the_contract_and_are_optional():
    mem = Memory()
    b = mem.alloc(24)
    mem.copyin(b, np.arange(6, dtype=np.float32))
    out = np.empty(6, np.float32)
    mem.copyout(out, b)
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32))

    class NoCopies(BlockAllocator):
        def _alloc(self, nbytes):
            return bytearray(nbytes)

        def _free(self, raw, nbytes):
            pass

    with pytest.raises(NotImplementedError, match="does not copy"):
        NoCopies(DEV).copyin(b, out)


def test_a_block_subclass_carries_what_the_device_needs():
    class Tagged(Block):
        __slots__ = ("tag",)

    class TaggedMemory(Memory):
        def _block(self, raw, nbytes, size):
            blk = Tagged(raw, nbytes, size, self._returns)
            blk.tag = f"{size} bytes"
            return blk

    mem = TaggedMemory()
    b = mem.alloc(300)
    assert type(b) is Tagged and b.tag == "300 bytes"
    del b
    assert mem.bytes_in_use == 0 and mem.used == 0


# ---------------------------------------------------------------------------------------
# lifetimes: returns never take the lock
def test_a_block_released_while_the_allocator_holds_its_lock_is_settled_later():
    pool = Pool()
    b = pool.alloc(1000)
    with pool._lock:        # as if the collector ran inside an allocation on this thread
        del b
        assert pool._cached == 0 and pool._in_use == 1024  # only queued so far
    assert pool.bytes_in_use == 0 and pool.bytes_cached == 1024


def test_a_release_on_another_thread_does_not_wait_for_the_lock():
    pool = Pool()
    holder = [pool.alloc(1000)]
    locked, go = threading.Event(), threading.Event()

    def hold_lock():
        with pool._lock:
            locked.set()
            go.wait(10)

    t = threading.Thread(target=hold_lock)
    t.start()
    assert locked.wait(10)
    r = threading.Thread(target=holder.clear)  # drops the block's last reference on that thread
    r.start()
    r.join(10)
    released_while_locked = not r.is_alive()
    go.set()
    t.join(10)
    assert released_while_locked
    assert pool.bytes_in_use == 0 and pool.bytes_cached == 1024


def test_blocks_in_reference_cycles_come_back_after_a_collection():
    pool = Pool()

    class Holder:
        pass

    h = Holder()
    h.me, h.block = h, pool.alloc(5000)
    del h
    gc.collect()
    assert pool.bytes_in_use == 0 and pool.bytes_cached == size_class(5000)


# ---------------------------------------------------------------------------------------
# the pool
def test_pool_reuses_blocks_of_the_same_class_most_recent_first():
    pool = Pool()
    a, b = pool.alloc(1000), pool.alloc(1000)   # class 1024
    raw_a, raw_b = a.raw, b.raw
    assert a.size == 1024 and a.nbytes == 1000 and pool.bytes_in_use == 2048
    del a, b
    c = pool.alloc(900)                          # same class: from the cache, no device call
    assert c.raw is raw_b and c.nbytes == 900 and pool.device_allocs == 2
    d = pool.alloc(1024)
    assert d.raw is raw_a
    e = pool.alloc(1100)                         # another class: a fresh buffer
    assert e.size == 1280 and pool.device_allocs == 3
    s = pool.stats()
    assert s["allocator"] == "pool" and s["cache_hits"] == 2 and s["num_allocs"] == 5
    assert s["bytes_in_use"] == 1024 + 1024 + 1280 and s["bytes_cached"] == 0 and pool.freed == []


def test_pool_statistics():
    pool = Pool(memory_limit=1 << 20)
    a = pool.alloc(8000)    # 8192
    b = pool.alloc(4000)    # 4096
    del a
    s = pool.stats()
    assert s == {"allocator": "pool", "bytes_in_use": 4096, "peak_bytes_in_use": 12288, "num_allocs": 2,
                 "largest_alloc_size": 8192, "bytes_limit": 1 << 20, "bytes_cached": 8192, "cached_blocks": 1,
                 "bytes_reserved": 12288, "cache_hits": 0}
    del b
    assert pool.bytes_reserved == 12288 and pool.bytes_cached == 12288
    pool.reset_peak()
    assert pool.peak_bytes_in_use == 0


def test_trim_gives_back_the_largest_blocks_first():
    pool = Pool()
    blocks = [pool.alloc(n) for n in (256, 1024, 4096, 4096)]
    raws = [b.raw for b in blocks]
    del blocks
    assert pool.bytes_cached == 256 + 1024 + 8192
    assert pool.trim(2000) == 8192 and pool.bytes_cached == 1280
    assert {id(r) for r in pool.freed} == {id(raws[2]), id(raws[3])}
    assert pool.trim() == 1280 and pool.bytes_cached == 0 and pool.used == 0 and pool.stats()["cached_blocks"] == 0


def test_max_cached_bytes_sends_the_rest_back_to_the_device():
    pool = Pool()
    pool.max_cached_bytes = 10_000
    blocks = [pool.alloc(4096) for _ in range(4)]
    del blocks
    assert pool.bytes_cached == 8192 and len(pool.freed) == 2 and pool.used == 8192


def test_the_cache_gives_way_under_the_memory_limit():
    pool = Pool(memory_limit=4096)
    a = pool.alloc(3000)            # 3072
    del a
    assert pool.bytes_cached == 3072
    b = pool.alloc(2000)            # 2048: fits only once the cached 3072 are given back
    assert pool.bytes_cached == 0 and pool.bytes_in_use == 2048 and pool.used == 2048
    with pytest.raises(tw.errors.ResourceExhaustedError, match=r"asked for 3000 bytes with 2048 of 4096 bytes in use"):
        pool.alloc(3000)
    assert pool.bytes_reserved == 2048
    del b


def test_when_the_device_refuses_the_cache_is_given_back_and_the_allocation_retried():
    pool = Pool(capacity=4096, deferred=True)
    a = pool.alloc(3000)            # 3072 of the device's 4096
    del a
    b = pool.alloc(2000)            # refused (3072 cached); trim, reclaim, retry
    assert pool.reclaims == 1 and pool.bytes_cached == 0 and pool.used == 2048 and b.size == 2048
    with pytest.raises(tw.errors.ResourceExhaustedError,
                       match=r"asked for 3000 bytes with 2048 bytes in use \(the device refused: only 2048 bytes left\)"):
        pool.alloc(3000)
    assert pool.reclaims == 2 and pool.bytes_in_use == 2048 and pool.stats()["num_allocs"] == 2


def test_the_default_allocator_reclaims_deferred_frees_when_the_device_refuses():
    mem = Memory(capacity=4096, deferred=True)
    a = mem.alloc(3000)
    del a
    assert mem.bytes_in_use == 0 and mem.used == 3000  # given back, not yet available
    assert mem.alloc(2000).size == 2000 and mem.reclaims == 1


def test_many_threads_allocating_and_releasing_keep_the_books_straight():
    pool = Pool(memory_limit=64 << 20)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            held = []
            for _ in range(300):
                held.append(pool.alloc(int(rng.integers(1, 100_000))))
                if len(held) > 5:
                    held.pop(int(rng.integers(0, len(held))))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = pool.stats()
    assert s["bytes_in_use"] == 0 and s["num_allocs"] == 1200
    assert s["bytes_cached"] == pool.used and s["cache_hits"] + pool.device_allocs == 1200
