"""Recv scheduling (whitepaper 5.2): a Recv of a big tensor waits until shortly before its
consumer needs it, so the destination holds fewer received tensors at once."""

import weakref

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.runtime.device import Allocator
from tensorweave.testing.fake_device import register_fake_devices

FAKE0 = "/device:FAKE:0"
N, LINKS = 256, 12  # 256 KiB per received tensor


class LifetimeAllocator(Allocator):
    """Counts a FAKE tensor's array from when it lands on the device until its last
    reference goes (the FAKE allocator itself never frees)."""

    name = "lifetime"

    def __init__(self, device_name, memory_limit=None):
        super().__init__(device_name, memory_limit)
        self._live = {}

    def track(self, value):
        arr = getattr(value, "array", value)
        if not isinstance(arr, np.ndarray):
            return
        base = arr if not isinstance(arr.base, np.ndarray) else arr.base
        if id(base) in self._live:
            return
        self._note_alloc(base.nbytes)
        self._live[id(base)] = weakref.finalize(base, self._release, id(base), base.nbytes)

    def _release(self, key, nbytes):
        self._live.pop(key, None)
        self._note_free(nbytes)


class _AllocatorPlugin:
    @plugins.hookimpl
    def tensorweave_register_allocators(self, registry):
        registry.register("FAKE", "lifetime", lambda dev: LifetimeAllocator(dev.name, dev.memory_limit))


@pytest.fixture(autouse=True)
def fake_devices():
    register_fake_devices(count=1)
    plugins.register_plugin(_AllocatorPlugin(), name="lifetime-allocator")
    yield
    plugins._reset_for_tests()


def _config(on):
    return tw.ConfigProto(allocator={"FAKE": "lifetime"},
                          graph_options=tw.GraphOptions(enable_recv_scheduling=on))


def _late_chain():
    """Big tensors made early on the CPU, consumed one by one by a chain on FAKE:0."""
    x = tw.placeholder(tw.float32, [N, N], name="x")
    w = tw.placeholder(tw.float32, [N, N], name="w")
    with tw.device("/device:CPU:0"):
        bs = [tw.multiply(x, float(i + 1), name=f"b{i}") for i in range(LINKS)]
    h = w
    with tw.device(FAKE0):
        for i, b in enumerate(bs):
            h = tw.tanh(tw.matmul(h, b) * (1.0 / N), name=f"link{i}")
    return x, w, h


def _expected(xv, wv):
    h = wv
    for i in range(LINKS):
        h = np.tanh(h @ (xv * np.float32(i + 1)) * np.float32(1.0 / N))
    return h


def _peak(on, fetch, feed):
    """(value, peak bytes received and alive at once on FAKE:0 during one step, plan)."""
    with tw.Session(config=_config(on)) as s:
        s.run(fetch, feed)  # builds the plan
        fake = next(d for d in s.list_devices() if d.device_type == "FAKE")
        fake.allocator.reset_peak()
        base = fake.allocator.bytes_in_use
        md = tw.RunMetadata()
        out = s.run(fetch, feed, options=tw.RunOptions(output_partition_graphs=True), run_metadata=md)
        peak = md.allocator_stats[fake.name]["peak_bytes_in_use"] - base
        plan = list(s._plans.values())[-1]
    return out, peak, plan, md


def test_scheduling_lowers_the_destinations_peak_memory():
    x, w, h = _late_chain()
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((N, N)).astype(np.float32), w: rng.standard_normal((N, N)).astype(np.float32)}
    want = _expected(feed[x], feed[w])
    out_off, peak_off, plan_off, _ = _peak(False, h, feed)
    out_on, peak_on, plan_on, md = _peak(True, h, feed)
    np.testing.assert_allclose(out_off, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out_on, out_off)
    one = N * N * 4
    # Off: the tensors arrive as soon as the CPU makes them and wait for their link; on:
    # each Recv waits for the matmul before its own, so about two are alive at a time.
    assert peak_off >= 6 * one, peak_off
    assert peak_on <= 3 * one, peak_on
    waits = {r.tensor.name: [m.name for m in r.wait_for]
             for p in plan_on.graph_parts.values() for r in p.recvs if r.tensor is not None}
    assert waits["b0:0"] == [] and all(len(waits[f"b{i}:0"]) == 1 for i in range(2, LINKS))
    assert all(not r.wait_for for p in plan_off.graph_parts.values() for r in p.recvs)
    fake_gd = next(gd for gd in md.partition_graphs if "FAKE" in gd["node"][0]["device"])
    assert sum(1 for n in fake_gd["node"] if n["op"] == "_Recv" and n["input"]) >= LINKS - 2


def test_back_and_forth_between_devices_never_deadlocks():
    x = tw.placeholder(tw.float32, [N, N], name="x")
    h = x
    for i in range(6):
        with tw.device("/device:CPU:0" if i % 2 else FAKE0):
            side = tw.multiply(x, float(i), name=f"side{i}")  # ready early, needed late
            h = tw.tanh(tw.matmul(h, h) * (1.0 / N) + side)
    xv = np.random.default_rng(1).standard_normal((N, N)).astype(np.float32) * 0.1
    want = xv
    for i in range(6):
        want = np.tanh(want @ want * np.float32(1.0 / N) + xv * np.float32(i))
    for on in (True, False):
        with tw.Session(config=_config(on)) as s:
            out = s.run(h, {x: xv}, options=tw.RunOptions(timeout_in_ms=20000))
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_small_tensors_and_single_device_plans_are_left_alone():
    x = tw.placeholder(tw.float32, [8], name="x")
    with tw.device("/device:CPU:0"):
        a = x * 2.0
    with tw.device(FAKE0):
        y = tw.identity(x) * 3.0 + a
    with tw.Session(config=_config(True)) as s:
        np.testing.assert_allclose(s.run(y, {x: np.ones(8, np.float32)}), np.full(8, 5.0))
        plan = list(s._plans.values())[-1]
    assert all(not r.wait_for for p in plan.graph_parts.values() for r in p.recvs)
    assert tw.ConfigProto().graph_options.enable_recv_scheduling is True
