"""Fixtures of the OpenCL plugin's tests. Everything that needs a device skips, with the
reason, when this machine has no OpenCL platform (no pyopencl, no ICD, or no device)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw

OPENCL0 = "/device:OPENCL:0"
CPU0 = "/device:CPU:0"


def _why_no_opencl() -> str | None:
    from tensorweave_opencl import plugin

    why = plugin.missing()
    if why is not None:
        return why
    from tensorweave_opencl import runtime

    if not runtime.enumerate_devices():
        return "pyopencl and an ICD are installed, but no OpenCL platform reports a device"
    return None


_REASON = _why_no_opencl()
needs_opencl = pytest.mark.skipif(_REASON is not None, reason=f"no OpenCL device: {_REASON}")


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    for item in items:
        if "no_device" not in item.keywords:
            item.add_marker(needs_opencl)


def pytest_configure(config):
    config.addinivalue_line("markers", "no_device: an OpenCL test that runs without an OpenCL device")


@pytest.fixture(autouse=True)
def _fresh_default_graph():
    tw.reset_default_graph()
    yield
    tw.reset_default_graph()


@pytest.fixture
def device():
    """OPENCL:0 as a fresh Device object (its own allocator) over the shared runtime."""
    from tensorweave_opencl.device import OpenCLDeviceFactory

    return OpenCLDeviceFactory().create_devices("/job:localhost/replica:0/task:0")[0]


@pytest.fixture
def ocl():
    """The helpers below, for tests (test modules cannot import conftest in importlib mode)."""
    import types

    return types.SimpleNamespace(run_on=run_on, on_opencl=on_opencl, both=both, assert_same=assert_same,
                                 OPENCL0=OPENCL0, CPU0=CPU0)


def run_on(device_name, build, feeds: dict, config=None):
    """Build a graph with ``build(**placeholders)`` under ``tw.device(device_name)``, feed
    ``feeds`` (name -> array) and run it. Returns (values, placement)."""
    g = tw.Graph()
    with g.as_default(), tw.device(device_name):
        phs = {k: tw.placeholder(tw.as_dtype(np.asarray(v).dtype), np.shape(v), name=k) for k, v in feeds.items()}
        fetches = build(**phs)
    with tw.Session(graph=g, config=config) as sess:
        md = tw.RunMetadata()
        out = sess.run(fetches, {phs[k]: v for k, v in feeds.items()}, run_metadata=md)
    return out, md.placement


def on_opencl(build, feeds: dict, config=None):
    """Run on OPENCL:0, checking every node was placed there; returns the values."""
    out, placement = run_on(OPENCL0, build, feeds, config)
    elsewhere = {n: d for n, d in placement.items() if "OPENCL" not in d}
    assert not elsewhere, f"nodes not placed on OPENCL: {elsewhere}"
    return out


def both(build, feeds: dict):
    """(OPENCL values, CPU values) of the same graph and feeds."""
    return on_opencl(build, feeds), run_on(CPU0, build, feeds)[0]


def assert_same(got, want, rtol=None, atol=None):
    """Equal dtype, shape and values (floats within a dtype-sized tolerance, NaNs equal)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind == "f":
        tol = {4: (1e-5, 1e-6), 8: (1e-12, 1e-14)}[got.dtype.itemsize]
        np.testing.assert_allclose(got, want, rtol=rtol or tol[0], atol=atol or tol[1], equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)
