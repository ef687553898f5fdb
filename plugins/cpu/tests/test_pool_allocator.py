"""The pooling CPU allocator: reuse, statistics, the memory limit, and Sessions that use it."""

import gc

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.framework.kernel_registry import KernelContext
from tensorweave_cpu import blas
from tensorweave_cpu.device import CPUAllocator, CPUDeviceFactory
from tensorweave_cpu.pool import PoolAllocator, size_class

DEV = "/job:localhost/replica:0/task:0/device:CPU:0"
POOL = tw.ConfigProto(allocator={"CPU": "pool"})


@pytest.fixture(autouse=True)
def _fresh_graph():
    tw.reset_default_graph()
    yield
    tw.reset_default_graph()


def test_registered_for_cpu_and_selected_by_config():
    assert plugins.registry().allocators.for_device("CPU")["pool"] is not None
    with tw.Session(config=POOL) as sess:
        (cpu,) = [d for d in sess.devices if d.device_type == "CPU"]
        assert isinstance(cpu.allocator, PoolAllocator) and cpu.allocator.device_name == cpu.name
    with tw.Session() as sess:
        assert not isinstance(sess.devices[0].allocator, PoolAllocator)


def test_size_classes_waste_at_most_a_quarter():
    assert size_class(1) == size_class(256) == 256
    assert size_class(4 << 20) == 4 << 20
    for n in (257, 1000, 1025, 70_000, 3 << 20, 10**7):
        c = size_class(n)
        assert n <= c < n * 1.25 + 256


def test_buffer_is_reused_once_the_last_view_is_released():
    pool = PoolAllocator(DEV)
    a = pool.allocate((256, 256), np.float32)
    assert a.shape == (256, 256) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    ptr = a.ctypes.data
    assert ptr % 64 == 0
    view = a.T[3:]            # a consumer keeps a view: the buffer must stay out of the pool
    del a
    gc.collect()
    assert pool.bytes_cached == 0 and pool.bytes_in_use == 256 * 256 * 4
    b = pool.allocate((256, 256), np.float32)
    assert b.ctypes.data != ptr
    del view
    assert pool.bytes_cached == 256 * 256 * 4        # back in the free list, no GC pass needed
    c = pool.allocate((128, 512), np.float32)        # same size class, other shape and dtype-size
    assert c.ctypes.data == ptr and pool.stats()["cache_hits"] == 1
    d = pool.allocate((65536,), np.int32)
    assert d.ctypes.data != ptr
    assert pool.owns(c) and pool.owns(c.reshape(-1)[5:]) and not pool.owns(np.ones(3))


def test_stats_in_use_peak_and_cached_bytes():
    pool = PoolAllocator(DEV)
    a = pool.allocate((1000,), np.float64)         # 8000 bytes in the 8192 class
    b = pool.allocate((100, 10), np.float32)       # 4000 bytes in the 4096 class
    s = pool.stats()
    assert s["allocator"] == "pool"
    # a pool counts the size classes live arrays hold
    assert s["bytes_in_use"] == 8192 + 4096 and s["peak_bytes_in_use"] == 8192 + 4096
    assert s["bytes_reserved"] == 8192 + 4096 and s["bytes_cached"] == 0
    assert s["cache_hits"] == 0 and s["num_allocs"] == 2 and s["largest_alloc_size"] == 8192
    del a
    s = pool.stats()
    assert s["bytes_in_use"] == 4096 and s["peak_bytes_in_use"] == 8192 + 4096
    assert s["bytes_cached"] == 8192 and s["bytes_reserved"] == 8192 + 4096 and s["cached_blocks"] == 1
    del b
    assert pool.bytes_in_use == 0 and pool.bytes_cached == 8192 + 4096
    assert pool.trim() == 8192 + 4096 and pool.bytes_cached == 0 and pool.bytes_reserved == 0


def test_memory_limit_is_resource_exhausted_naming_device_and_bytes():
    pool = PoolAllocator(DEV, memory_limit=1 << 20)
    a = pool.allocate((512 * 1024,), np.uint8)
    with pytest.raises(tw.errors.ResourceExhaustedError,
                       match=r"CPU:0: asked for 614400 bytes with 524288 of 1048576 bytes in use"):
        pool.allocate((600 * 1024,), np.uint8)
    assert pool.bytes_in_use == 512 * 1024          # the failed request left no trace
    del a
    b = pool.allocate((600 * 1024,), np.uint8)      # fits once the first is released
    assert b.nbytes == 600 * 1024


def test_cached_buffers_give_way_under_the_limit():
    pool = PoolAllocator(DEV, memory_limit=1 << 20)
    a = pool.allocate((700 * 1024,), np.uint8)
    del a
    assert pool.bytes_cached > 0                    # cached, counted against nothing in use
    b = pool.allocate((300 * 1024,), np.uint8)      # another class: the cache is dropped first
    assert pool.bytes_reserved <= 1 << 20 and pool.bytes_cached == 0
    del b


def test_max_cached_bytes_caps_the_cache():
    pool = PoolAllocator(DEV, max_cached_bytes=10_000)
    arrays = [pool.allocate((4096,), np.uint8) for _ in range(4)]
    del arrays
    assert pool.bytes_cached == 8192 and pool.stats()["cached_blocks"] == 2


def test_track_counts_foreign_arrays_but_not_its_own():
    pool = PoolAllocator(DEV)
    own = pool.allocate((100_000,), np.float32)
    pool.track(own)
    pool.track(own[10:])
    assert pool.bytes_in_use == size_class(400_000)
    foreign = np.ones(50_000)
    pool.track(foreign)
    assert pool.bytes_in_use == size_class(400_000) + 400_000
    del foreign
    gc.collect()
    assert pool.bytes_in_use == size_class(400_000)


def _cpu_kernel(op, allocator):
    (dev,) = CPUDeviceFactory().create_devices("/job:localhost/replica:0/task:0")
    dev.allocator = allocator
    kd = plugins.registry().kernels.find(op, "CPU")
    return kd.factory(KernelContext(op, dev, None))


def test_default_allocator_keeps_the_plain_numpy_kernels():
    a = tw.placeholder(tw.float32, [512, 512])
    s, p = a + a, tw.matmul(a, a)
    cpu = CPUAllocator(DEV)
    assert _cpu_kernel(s.op, cpu) is np.add
    assert _cpu_kernel(p.op, cpu) is blas.matmul  # NumPy's, on the thread count its size deserves
    pool = PoolAllocator(DEV)
    assert _cpu_kernel(s.op, pool) is not np.add and _cpu_kernel(p.op, pool) is not blas.matmul
    small = tw.placeholder(tw.float32, [4, 4])       # statically small: plain kernels even with a pool
    assert _cpu_kernel((small * small).op, pool) is np.multiply
    assert _cpu_kernel(tw.matmul(small, small).op, pool) is blas.matmul


def test_pooled_kernels_write_into_pool_buffers():
    x = tw.placeholder(tw.float32, [None, 256])
    w = tw.constant(np.eye(256, dtype=np.float32) * 2)
    y = tw.matmul(x, w, transpose_b=True) + x
    z = tw.maximum(y, 0.5) - tw.minimum(x, 0.25)
    xv = np.random.default_rng(1).standard_normal((300, 256)).astype(np.float32)
    with tw.Session(config=POOL) as sess:
        pool = sess.devices[0].allocator
        out_y, out_z = sess.run([y, z], {x: xv})
        assert pool.owns(out_y) and pool.owns(out_z)
        np.testing.assert_allclose(out_y, 3 * xv, rtol=1e-6)
        np.testing.assert_allclose(out_z, np.maximum(3 * xv, 0.5) - np.minimum(xv, 0.25), rtol=1e-6)
        small = sess.run(y, {x: xv[:2]})               # unknown batch: decided per run from sizes
        assert not pool.owns(small)
        np.testing.assert_allclose(small, 3 * xv[:2], rtol=1e-6)


def _mlp(seed=0):
    rng = np.random.default_rng(seed)
    x = tw.placeholder(tw.float32, [None, 64], name="x")
    labels = tw.placeholder(tw.int32, [None], name="labels")
    w1 = tw.constant(rng.standard_normal((64, 256)).astype(np.float32) * 0.1)
    b1 = tw.constant(rng.standard_normal(256).astype(np.float32) * 0.1)
    w2 = tw.constant(rng.standard_normal((256, 128)).astype(np.float32) * 0.1)
    w3 = tw.constant(rng.standard_normal((128, 10)).astype(np.float32) * 0.1)
    h1 = tw.nn.relu(tw.matmul(x, w1) + b1)
    h2 = tw.tanh(tw.matmul(h1, w2)) * tw.sigmoid(tw.matmul(h1, w2))
    logits = tw.matmul(h2, w3)
    loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    grads = tw.gradients(loss, [w1, b1, w2, w3])
    feeds = {x: rng.standard_normal((512, 64)).astype(np.float32), labels: rng.integers(0, 10, 512).astype(np.int32)}
    return [loss, h1, h2, *grads], feeds


def test_session_with_pool_gives_identical_results_on_an_mlp():
    fetches, feeds = _mlp()
    with tw.Session() as sess:
        expected = sess.run(fetches, feeds)
    with tw.Session(config=POOL) as sess:
        pool = sess.devices[0].allocator
        first = sess.run(fetches, feeds)
        kept = [np.array(v, copy=True) for v in first]
        for _ in range(5):
            again = sess.run(fetches, feeds)
        stats = pool.stats()
        # results handed to the caller are never recycled under them
        for a, b in zip(first, kept):
            np.testing.assert_array_equal(a, b)
    for a, b, c in zip(expected, first, again):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert stats["cache_hits"] > 0
    assert stats["peak_bytes_in_use"] >= 512 * 256 * 4
