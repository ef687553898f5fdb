"""Fixtures of the CPU plugin's tests."""

from __future__ import annotations

import pytest

from tensorweave_cpu import fusion, jit


@pytest.fixture(params=["compiled", "numpy"])
def path(request, monkeypatch):
    """Each test twice: with the loops numba compiles (tensorweave_cpu/jit.py) and with the
    NumPy paths a machine without numba takes."""
    if request.param == "compiled" and not fusion.numba_available():
        pytest.skip("numba is not installed (the fusion extra)")
    monkeypatch.setitem(jit._state, "on", request.param == "compiled")
    return request.param
