"""Fixtures of the CPU plugin's tests."""

from __future__ import annotations

import pytest

from tensorweave_cpu import fusion, jit, onednn


@pytest.fixture(params=["compiled", "numpy"])
def path(request, monkeypatch):
    """Each test twice: with the loops numba compiles (tensorweave_cpu/jit.py) and with the
    NumPy paths a machine without numba takes. oneDNN's convolutions are off: these tests are
    about our own paths (tests/test_onednn.py has oneDNN's)."""
    if request.param == "compiled" and not fusion.numba_available():
        pytest.skip("numba is not installed (the fusion extra)")
    monkeypatch.setitem(jit._state, "on", request.param == "compiled")
    monkeypatch.setitem(onednn._state, "on", False)
    return request.param


@pytest.fixture
def without_onednn(monkeypatch):
    """The CPU's own convolutions (im2col + BLAS), oneDNN's switched off."""
    monkeypatch.setitem(onednn._state, "on", False)
