"""How the GPU device fails: out of memory is a ResourceExhaustedError naming the device and
the bytes, after which the Session keeps working; a driver failure at a kernel launch, in a
cuBLAS call, or reported later when the device is waited for (CUDA reports a kernel's
failure asynchronously) is an InternalError naming the node.

On the emulator of the driver layer with a small memory (``EmuDriver(i, capacity=...)``)
and its failure injection (``EmuDriver.inject_failure``), which raises the driver's own
error classes where PyCUDA's would be raised.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins

CAPACITY = 64 << 20
DEV = "/device:CUDAEMU:0"


@pytest.fixture(scope="module")
def emu():
    """One emulated GPU of CAPACITY bytes, as device type CUDAEMU; yields its driver."""
    from tensorweave_cuda.testing import emulator

    reason = emulator.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    plug = emulator.plugin(count=1, capacity=CAPACITY)
    try:
        yield plug.factory.runtime(0).driver
    finally:
        plugins._reset_for_tests()


@pytest.fixture
def driver(emu):
    yield emu
    emu._failures.clear()
    emu._async_error = None


def _session(build):
    g = tw.Graph()
    with g.as_default():
        out = build()
    return g, out, tw.Session(graph=g)


# ---------------------------------------------------------------------------------------
# out of memory
def test_tensor_larger_than_the_gpu_is_resource_exhausted_and_the_session_goes_on(driver):
    def build():
        with tw.device(DEV):
            big = tw.zeros([100000, 100000, 10], name="big")   # 400 GB of float32
            small = tw.reduce_sum(tw.ones([1000, 100]) * 2.0, name="small")
        return big, small

    g, (big, small), s = _session(build)
    with s:
        with pytest.raises(errors.ResourceExhaustedError) as info:
            s.run(big.op)  # a target: were it to fit, nothing is copied to the host
        msg = str(info.value)
        assert "node 'big'" in msg and "device:CUDAEMU:0" in msg, msg
        assert "asked for 400000000000 bytes" in msg, msg
        # the same Session still runs, and nothing of the failed step is held
        assert s.run(small) == pytest.approx(200000.0)
        assert s.run(small) == pytest.approx(200000.0)
        dev = [d for d in s.devices if d.device_type == "CUDAEMU"][0]
        assert dev.allocator.bytes_in_use < 4096   # (constants the Session keeps on the device)


def test_out_of_memory_when_the_driver_refuses(driver, monkeypatch):
    """A limit above the card (the driver refuses the allocation): the same error, with the
    driver's words, and the Session goes on."""
    monkeypatch.setenv("TENSORWEAVE_GPU_MEMORY_LIMIT", "1TiB")

    def build():
        x = tw.placeholder(tw.float32, [1000])
        with tw.device(DEV):
            big = tw.broadcast_to(tw.exp(x), [100_000, 1000], name="big")   # 400 MB > 64 MiB
            ok = tw.reduce_sum(tw.broadcast_to(tw.exp(x), [1000, 1000]), name="ok")
        return x, big, ok

    g, (x, big, ok), s = _session(build)
    feed = {x: np.zeros(1000, np.float32)}
    with s:
        with pytest.raises(errors.ResourceExhaustedError,
                           match=r"node 'big' on .*CUDAEMU:0.*asked for 400000000 bytes.*the device refused"):
            s.run(big, feed)
        assert s.run(ok, feed) == pytest.approx(1e6)


def test_feeding_more_than_the_gpu_holds(driver):
    def build():
        x = tw.placeholder(tw.float32, [None])
        with tw.device(DEV):
            y = tw.reduce_sum(x * 2.0, name="y")
        return x, y

    g, (x, y), s = _session(build)
    with s:
        with pytest.raises(errors.ResourceExhaustedError, match=r"CUDAEMU:0.*asked for 80000000 bytes"):
            s.run(y, {x: np.ones(20_000_000, np.float32)})
        assert s.run(y, {x: np.ones(1_000_000, np.float32)}) == pytest.approx(2e6)


# ---------------------------------------------------------------------------------------
# kernel failures
def _exp_graph():
    def build():
        x = tw.placeholder(tw.float32, [300, 7])
        with tw.device(DEV):
            y = tw.exp(x, name="x_exp")
            z = tw.negative(y, name="after")
        return x, y, z
    return _session(build)


def test_a_refused_launch_names_the_node(driver):
    g, (x, y, z), s = _exp_graph()
    feed = {x: np.zeros((300, 7), np.float32)}
    with s:
        driver.inject_failure("launch", "too many resources requested for launch")
        with pytest.raises(errors.InternalError) as info:
            s.run(z, feed)
        msg = str(info.value)
        assert msg.startswith("Exp node 'x_exp' on /job:localhost/replica:0/task:0/device:CUDAEMU:0: "
                              "kernel launch failed: tw_exp_"), msg
        assert "grid (" in msg and "too many resources requested for launch" in msg, msg
        assert info.value.node_def == "x_exp"
        np.testing.assert_allclose(s.run(z, feed), -np.ones((300, 7)))  # the Session goes on


def test_a_cublas_failure_names_the_matmul_node(driver):
    def build():
        a = tw.placeholder(tw.float32, [64, 32])
        with tw.device(DEV):
            m = tw.matmul(a, tw.transpose(a), name="x")
        return a, m

    g, (a, m), s = _session(build)
    feed = {a: np.ones((64, 32), np.float32)}
    with s:
        driver.inject_failure("gemm", "CUBLAS_STATUS_EXECUTION_FAILED")
        with pytest.raises(errors.InternalError,
                           match=r"^MatMul node 'x' on .*device:CUDAEMU:0: kernel launch failed: "
                                 r"cublasSgemm_v2 \(m=64, n=64, k=32\): CUBLAS_STATUS_EXECUTION_FAILED"):
            s.run(m, feed)
        np.testing.assert_allclose(s.run(m, feed), np.full((64, 64), 32.0))


def test_an_asynchronous_failure_is_reported_at_the_fetch(driver):
    """The kernel launches; its failure comes back when the fetch waits for the device."""
    g, (x, y, z), s = _exp_graph()
    feed = {x: np.zeros((300, 7), np.float32)}
    with s:
        driver.inject_failure("async", "an illegal memory access was encountered")
        with pytest.raises(errors.InternalError) as info:
            s.run(y, feed)
        msg = str(info.value)
        assert "device:CUDAEMU:0: copying a float32[300, 7] tensor to the host failed: waiting for the " \
               "device: an illegal memory access was encountered" in msg, msg
        assert "the last node to queue work on this GPU was Exp node 'x_exp'" in msg, msg


def test_an_asynchronous_failure_is_reported_by_the_next_launch(driver):
    """CUDA's errors are sticky: the next launch reports the failure of an earlier kernel."""
    g, (x, y, z), s = _exp_graph()
    feed = {x: np.zeros((300, 7), np.float32)}
    with s:
        driver.inject_failure("async", "an illegal memory access was encountered")
        with pytest.raises(errors.InternalError,
                           match=r"^Neg node 'after' on .*CUDAEMU:0: kernel launch failed: tw_neg_\w+ grid .*"
                                 r"an illegal memory access was encountered"):
            s.run(z, feed)


def test_a_failure_while_waiting_inside_a_node(driver):
    """A node that waits for the device (Fill reads its dims, computed on the GPU, on the
    host) and is told of a failure there: an InternalError naming that node and the last
    node that queued a kernel."""
    def build():
        x = tw.placeholder(tw.int64, [2])
        with tw.device(DEV):
            dims = tw.abs(x, name="dims")
            total = tw.reduce_sum(tw.fill(dims, 2.0, name="filled"), name="total")
        return x, total

    g, (x, total), s = _session(build)
    feed = {x: np.array([3, 4])}
    with s:
        assert s.run(total, feed) == 24.0
        driver.inject_failure("sync", "unspecified launch failure")
        with pytest.raises(errors.InternalError,
                           match=r"^Fill node 'filled' on .*CUDAEMU:0: .*copying a int64\[2\] tensor to the host "
                                 r"failed: waiting for the device: unspecified launch failure .*the last node to "
                                 r"queue work on this GPU was Abs node 'dims'"):
            s.run(total, feed)
        assert s.run(total, feed) == 24.0


def test_launches_are_counted(driver):
    def build():
        a = tw.placeholder(tw.float32, [64, 32])
        with tw.device(DEV):
            m = tw.reduce_sum(tw.nn.relu(tw.matmul(a, tw.transpose(a))), name="m")
        return a, m

    g, (a, m), s = _session(build)
    feed = {a: np.ones((64, 32), np.float32)}
    with s:
        s.run(m, feed)
        before = driver.launches
        s.run(m, feed)
        # transpose, matmul (one cuBLAS call), relu, and the reduction's pass(es)
        assert 4 <= driver.launches - before <= 6, driver.launches - before
