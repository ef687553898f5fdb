"""Host <-> device copies through page-locked memory (``device.HostTransfers``): the staging
ring for ordinary arrays, page-locked ``to_host`` results from a capped pool, DMA straight
from page-locked inputs, and the multi-threaded ``memmove`` that fills the ring.

On the ``gpu`` backends of conftest.py: a real GPU when present, and the emulator, whose
"page-locked" memory is ordinary host memory (so there only the logic is checked).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cuda.allocator import PinnedBlock, is_pinned
from tensorweave_cuda.device import PINNED_LIMIT_ENV, PINNED_MIN, STAGE_MIN, STAGING_ENV, HostTransfers
from tensorweave_cuda.tensor import HOST_BYTES

RNG = np.random.default_rng(7)
MIB = 1 << 20


def _device(gpu):
    s = tw.Session(graph=tw.Graph())
    dev = [d for d in s.devices if d.device_type == gpu.device_type][0]
    s.close()
    return dev


def _values(nbytes, dtype):
    n = nbytes // np.dtype(dtype).itemsize
    if np.dtype(dtype) == np.bool_:
        return RNG.random(n) > 0.5
    return RNG.uniform(-1e6, 1e6, n).astype(dtype)


@pytest.fixture
def small_ring(gpu, monkeypatch):
    """The device with a 1 MiB staging slot and 3 MiB of page-locked results, 3 copy threads."""
    dev = _device(gpu)
    tr = HostTransfers(dev.driver, {STAGING_ENV: "1MiB", PINNED_LIMIT_ENV: "3MiB"})
    tr.threads = 3
    monkeypatch.setattr(dev.runtime, "transfers", tr)
    return dev, tr


@pytest.mark.parametrize("nbytes", [HOST_BYTES + 8, STAGE_MIN - 8, STAGE_MIN, STAGE_MIN + 8, 5 * MIB + 4 * 3 * 7,
                                    9 * MIB + 4])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_round_trip_sizes(small_ring, nbytes, dtype):
    dev, tr = small_ring
    x = _values(nbytes, dtype)
    t = dev.to_device(x)
    assert t.host_value is None
    y = dev.to_host(t)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, x)
    # back from the (possibly page-locked) result: DMA straight from it
    np.testing.assert_array_equal(dev.to_host(dev.to_device(y)), x)


def test_large_copies_use_the_ring_and_pinned_results(small_ring):
    dev, tr = small_ring
    x = _values(2 * MIB + 4, np.float32).reshape(-1, 3)
    t = dev.to_device(x)
    assert tr.staged["up"] == 1
    y = dev.to_host(t)
    assert isinstance(y.base, PinnedBlock) and is_pinned(y) and is_pinned(y[5:])
    assert tr.pinned.bytes_in_use >= x.nbytes
    np.testing.assert_array_equal(y, x)
    # a pinned input goes by one DMA, not through the ring
    dev.to_device(y)
    assert tr.staged["up"] == 1
    # over the pool's cap (3 MiB, one result in use): the next result is ordinary memory, through the ring
    z = dev.to_host(dev.to_device(_values(2 * MIB, np.float32)))
    assert not is_pinned(z) and tr.staged["down"] == 1
    # dropping the array gives its page-locked memory back to the pool
    del y
    gc.collect()
    assert tr.pinned.bytes_in_use == 0
    assert is_pinned(dev.to_host(t))
    assert tr.pinned.stats()["cache_hits"] >= 1


def test_small_results_are_ordinary_memory(gpu):
    dev = _device(gpu)
    x = _values(PINNED_MIN // 2, np.float32)
    y = dev.to_host(dev.to_device(x))
    assert not is_pinned(y)
    np.testing.assert_array_equal(y, x)


def test_pinned_empty(gpu):
    dev = _device(gpu)
    p = dev.pinned_empty((3, MIB // 4), np.float32)
    assert p.shape == (3, MIB // 4) and p.dtype == np.float32 and is_pinned(p)
    p[...] = np.arange(3, dtype=np.float32)[:, None]
    t = dev.to_device(p)
    p[...] = -1  # the copy was waited for: changing the array now does not change the tensor
    np.testing.assert_array_equal(dev.to_host(t), np.repeat(np.arange(3, dtype=np.float32)[:, None], MIB // 4, 1))
    with pytest.raises(tw.errors.ResourceExhaustedError, match="page-locked"):
        dev.pinned_empty(1 << 40, np.uint8)


def test_staged_upload_does_not_keep_or_need_the_source(small_ring):
    dev, tr = small_ring
    x = _values(4 * MIB, np.float64)
    want = x.copy()
    t = dev.to_device(x)
    x[...] = 0  # the source may be reused as soon as to_device returns
    np.testing.assert_array_equal(dev.to_host(t), want)


@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("n", [0, 1, 4095, 3 * MIB + 1, 9 * MIB - 3])
def test_memmove_on_threads(gpu, threads, n):
    tr = HostTransfers(_device(gpu).driver, {PINNED_LIMIT_ENV: "0"})
    tr.threads = threads
    src = RNG.integers(0, 256, n + 64, dtype=np.uint8)
    dst = np.zeros(n + 64, np.uint8)
    tr.memmove(dst.ctypes.data + 3, src.ctypes.data + 5, n)
    np.testing.assert_array_equal(dst[3:3 + n], src[5:5 + n])
    assert not dst[:3].any() and not dst[3 + n:].any()


def test_no_pinned_results_when_turned_off(gpu, monkeypatch):
    dev = _device(gpu)
    tr = HostTransfers(dev.driver, {PINNED_LIMIT_ENV: "0"})
    monkeypatch.setattr(dev.runtime, "transfers", tr)
    x = _values(3 * MIB, np.float32)
    y = dev.to_host(dev.to_device(x))
    assert not is_pinned(y) and tr.staged == {"up": 1, "down": 1}
    np.testing.assert_array_equal(y, x)


def test_feeds_and_fetches_in_a_session(gpu):
    x = _values(STAGE_MIN + 4 * 1024, np.float32).reshape(257, -1)  # staged in, page-locked out
    g = tw.Graph()
    with g.as_default():
        p = tw.placeholder(tw.float32, x.shape)
        with tw.device(gpu.device()):
            y = p * 2.0
    with tw.Session(graph=g) as s:
        for _ in range(2):
            out = s.run(y, {p: x})
            np.testing.assert_array_equal(out, x * 2.0)
            out2 = s.run(y, {p: out})  # a fetched (page-locked) array fed back
            np.testing.assert_array_equal(out2, x * 4.0)
            assert is_pinned(out) and is_pinned(out2)


def test_copies_work_without_page_locked_memory(gpu, monkeypatch):
    """Where page-locked memory cannot be had, copies go without it (with a warning)."""
    dev = _device(gpu)
    tr = HostTransfers(dev.driver, {STAGING_ENV: "1MiB"})
    monkeypatch.setattr(dev.runtime, "transfers", tr)

    def refuse(nbytes):
        raise TypeError("no page-locked memory in this test")

    monkeypatch.setattr(dev.driver, "host_alloc", refuse)
    x = _values(3 * MIB, np.float32)
    with pytest.warns(RuntimeWarning, match="no staging buffers"):
        t = dev.to_device(x)
    with pytest.warns(RuntimeWarning) as seen:
        y = dev.to_host(t)
    assert sorted(str(w.message).split(":")[1].strip() for w in seen) == [
        "no staging buffers (TypeError", "page-locked results turned off"], [str(w.message) for w in seen]
    assert not is_pinned(y) and tr.pinned is None
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(dev.to_host(dev.to_device(x)), x)
