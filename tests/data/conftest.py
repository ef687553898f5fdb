"""tw.data tests: a probe op (registered here through the plugin hooks) for the threading
tests, and a check that no prefetch thread outlives its test."""

import gc
import threading

import numpy as np
import pytest

import tensorweave.data  # noqa: F401 - the package under test (tw.data)
from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op


def _ensure_registered():
    # Checked before every test: another test may have reloaded the plugins.
    if "DataTestProbe" not in plugins.registry().ops:
        plugins.register_plugin(_ProbePlugin(), name="tw-data-test-probe")


# ----------------------------------------------------------------------------------------
# A probe op for the threading tests: its kernel records which calls run at once, and can
# make a call wait for another (so a test proves two calls overlapped, without timing).
WAIT = 10.0  # seconds: an upper bound for what should happen at once (a failure, never a pause)


class Probe:
    """State the probe kernel reads at call time (one per test)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.finished = []             # element values, in the order their calls finished
        self.threads = set()
        self.wait_for_next = False     # an even element's call waits until element + 1 finished
        self.done = {}

    def event(self, x):
        with self.lock:
            return self.done.setdefault(x, threading.Event())

    def __call__(self, x):
        return apply_op("DataTestProbe", [x])


_probe = [Probe()]


def _probe_kernel(ctx):
    def compute(x):
        p = _probe[0]
        v = int(x)
        with p.lock:
            p.in_flight += 1
            p.max_in_flight = max(p.max_in_flight, p.in_flight)
            p.threads.add(threading.current_thread().name)
        try:
            if p.wait_for_next and v % 2 == 0 and not p.event(v + 1).wait(WAIT):
                raise errors.DeadlineExceededError(f"the call for {v} waited for {v + 1}, which never ran")
        finally:
            with p.lock:
                p.in_flight -= 1
                p.finished.append(v)
        p.event(v).set()
        return np.asarray(x)
    return compute


class _ProbePlugin:
    @plugins.hookimpl
    def tensorweave_register_ops(self, registry):
        registry.op("DataTestProbe", inputs=["x: int64"], outputs=["y: int64"], stateful=True,
                    shape_fn=lambda op: [op.inputs[0].shape])

    @plugins.hookimpl
    def tensorweave_register_kernels(self, registry):
        registry.register("DataTestProbe", "CPU", factory=_probe_kernel)


@pytest.fixture
def probe():
    _probe[0] = Probe()
    return _probe[0]


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("tw-data-prefetch")]


@pytest.fixture(autouse=True)
def _no_leftover_threads():
    _ensure_registered()
    before = set(prefetch_threads())
    yield
    gc.collect()
    left = [t for t in prefetch_threads() if t not in before]
    assert not left, f"prefetch threads left running: {[t.name for t in left]}"
