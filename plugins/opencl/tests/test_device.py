"""Host<->device copies, the allocators' statistics and memory limit, and the pool."""

import gc

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_opencl.allocator import CLAllocator, CLPoolAllocator, size_class
from tensorweave_opencl.buffer import CLTensor
from tensorweave_opencl.device import configured_memory_limit, parse_bytes


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 4, 5)])
def test_round_trip(device, dtype, shape):
    a = (np.arange(int(np.prod(shape))).reshape(shape) % 3).astype(dtype)
    t = device.to_device(a)
    assert isinstance(t, CLTensor) and t.shape == shape and t.dtype == np.dtype(dtype)
    b = device.to_host(t)
    assert b.dtype == a.dtype and b.shape == a.shape and b is not a
    np.testing.assert_array_equal(a, b)


def test_non_contiguous_input_and_copy_from(device):
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    t = device.to_device(a)
    np.testing.assert_array_equal(device.to_host(t), a)
    # another Device object over the same OpenCL device shares the buffer
    from tensorweave_opencl.device import OpenCLDevice

    other = OpenCLDevice("/job:x/replica:0/task:0/device:OPENCL:0", device.runtime)
    assert other.copy_from(t, device) is t
    from tensorweave_cpu.device import CPUDeviceFactory

    (cpu,) = CPUDeviceFactory().create_devices("/job:localhost/replica:0/task:0")
    np.testing.assert_array_equal(device.to_host(device.copy_from(a, cpu)), a)
    np.testing.assert_array_equal(cpu.copy_from(t, device), a)


def test_unsupported_dtype_is_refused(device):
    with pytest.raises(tw.errors.InvalidArgumentError, match="cannot hold a tensor of dtype complex64"):
        device.to_device(np.zeros(2, np.complex64))


def test_allocator_counts_blocks_until_their_last_tensor_goes(device):
    alloc = CLAllocator(device.name, None, device.runtime)
    device.allocator = alloc
    a = device.to_device(np.ones(1000, np.float32))
    view = a.reshape((10, 100))  # shares the block: not counted again
    s = alloc.stats()
    assert s["bytes_in_use"] == 4000 and s["peak_bytes_in_use"] == 4000 and s["num_allocs"] == 1
    b = device.empty((500,), np.float64)
    assert alloc.stats()["bytes_in_use"] == 8000
    del a
    assert alloc.stats()["bytes_in_use"] == 8000  # the view still holds the block
    del view, b
    gc.collect()
    s = alloc.stats()
    assert s["bytes_in_use"] == 0 and s["peak_bytes_in_use"] == 8000 and s["largest_alloc_size"] == 4000


def test_memory_limit_raises_resource_exhausted_naming_device_and_sizes(device):
    device.allocator = CLAllocator(device.name, 10_000, device.runtime)
    keep = device.to_device(np.zeros(1500, np.float32))  # 6000 bytes
    with pytest.raises(tw.errors.ResourceExhaustedError) as e:
        device.to_device(np.zeros(1500, np.float32))
    msg = str(e.value)
    assert device.name in msg and "6000 bytes" in msg and "asked for 6000" in msg
    del keep
    device.to_device(np.zeros(1500, np.float32))  # fits again once the first is gone


def test_out_of_memory_inside_a_step_names_the_node():
    g = tw.Graph()
    with g.as_default(), tw.device("/device:OPENCL:0"):
        x = tw.placeholder(tw.float32, [256, 256], name="x")
        y = tw.matmul(x, x, name="big_product")
    cfg = tw.ConfigProto()
    with tw.Session(graph=g, config=cfg) as sess:
        dev = next(d for d in sess.list_devices() if d.device_type == "OPENCL")
        dev.allocator = CLAllocator(dev.name, 300_000, dev.runtime)  # the feed fits, the product does not
        with pytest.raises(tw.errors.ResourceExhaustedError) as e:
            sess.run(y, {x: np.zeros((256, 256), np.float32)})
    msg = str(e.value)
    assert "big_product" in msg and dev.name in msg and "asked for 262144 bytes" in msg


def test_a_buffer_larger_than_the_device_allows_is_refused(device):
    with pytest.raises(tw.errors.ResourceExhaustedError, match="one buffer may hold at most"):
        device.allocator.allocate(device.runtime.max_alloc_size + 1)


def test_size_classes():
    assert size_class(1) == 256 and size_class(256) == 256 and size_class(257) == 320
    for n in (1000, 4097, 10**6, 123457):
        c = size_class(n)
        assert n <= c <= n * 1.25


def test_pool_reuses_released_buffers(device):
    pool = CLPoolAllocator(device.name, None, device.runtime)
    device.allocator = pool
    a = device.to_device(np.arange(1000, dtype=np.float32))
    buf = a.block.buf
    del a
    b = device.empty((990,), np.float32)  # same size class
    assert b.block.buf is buf
    s = pool.stats()
    assert s["cache_hits"] == 1 and s["bytes_in_use"] == size_class(4000) and s["bytes_cached"] == 0
    del b
    s = pool.stats()
    assert s["bytes_in_use"] == 0 and s["bytes_cached"] == size_class(4000)


def test_pool_empties_its_free_lists_before_refusing(device):
    pool = CLPoolAllocator(device.name, 20_000, device.runtime)
    device.allocator = pool
    a = device.empty((3000,), np.float32)  # 12000 -> size class 12288
    del a
    assert pool.stats()["bytes_cached"] == 12288
    b = device.empty((4000,), np.float32)  # 16384: fits only after the free list is emptied
    assert pool.stats()["bytes_cached"] == 0 and pool.bytes_in_use == 16384
    with pytest.raises(tw.errors.ResourceExhaustedError, match="asked for 16000 bytes with 16384 of 20000 bytes in use"):
        device.empty((4000,), np.float32)
    del b


def test_pool_allocator_is_selected_by_config(ocl):
    cfg = tw.ConfigProto(allocator={"OPENCL": "pool"})

    def build(x):
        return tw.reduce_sum(tw.nn.relu(x) * 2.0)

    for _ in range(2):
        out = ocl.on_opencl(build, {"x": np.linspace(-1, 1, 5000, dtype=np.float32)}, config=cfg)
        np.testing.assert_allclose(out, 2 * np.maximum(np.linspace(-1, 1, 5000, dtype=np.float32), 0).sum(), rtol=1e-5)
    g = tw.Graph()
    with g.as_default():
        tw.constant(1.0)
    with tw.Session(graph=g, config=cfg) as sess:
        dev = next(d for d in sess.list_devices() if d.device_type == "OPENCL")
        assert isinstance(dev.allocator, CLPoolAllocator) and dev.allocator.stats()["allocator"] == "pool"


def test_run_metadata_reports_opencl_allocator_stats():
    g = tw.Graph()
    with g.as_default(), tw.device("/device:OPENCL:0"):
        x = tw.placeholder(tw.float32, [100, 100])
        y = tw.matmul(x, x)
    with tw.Session(graph=g) as sess:
        md = tw.RunMetadata()
        sess.run(y, {x: np.ones((100, 100), np.float32)}, run_metadata=md)
    stats = next(v for k, v in md.allocator_stats.items() if "OPENCL" in k)
    assert stats["peak_bytes_in_use"] >= 80_000 and stats["bytes_limit"] > 0


def test_memory_limit_configuration(monkeypatch):
    assert parse_bytes("512M") == 512 << 20 and parse_bytes("2g") == 2 << 30 and parse_bytes("1000") == 1000

    class Cfg:
        memory_limit = {"OPENCL": 1 << 20}

    assert configured_memory_limit(Cfg(), 0, 1 << 30) == 1 << 20
    assert configured_memory_limit(None, 0, 1 << 30) == 1 << 30
    cfg = tw.ConfigProto()
    cfg.gpu_options.per_process_gpu_memory_fraction = 0.25
    assert configured_memory_limit(cfg, 0, 1 << 30) == 1 << 28
    with tw.Session(config=cfg) as sess:
        dev = next(d for d in sess.list_devices() if d.device_type == "OPENCL")
        assert dev.allocator.memory_limit == dev.runtime.global_mem_size // 4
    monkeypatch.setenv("TENSORWEAVE_OPENCL_MEMORY_LIMIT", "64K")
    assert configured_memory_limit(None, 0, 1 << 30) == 65536
    with tw.Session() as sess:
        dev = next(d for d in sess.list_devices() if d.device_type == "OPENCL")
        assert dev.memory_limit == 65536 and dev.allocator.memory_limit == 65536
