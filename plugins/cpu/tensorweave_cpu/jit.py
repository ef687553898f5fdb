"""Loops compiled by numba for kernels that NumPy would run as many passes over memory, each
with a fresh array: the small softmax cross-entropies' rows (rowwise.py), max pooling's
gradient (kernels/nn.py). numba comes with the cpu plugin's ``fusion`` extra; without it
``enabled()`` is false and the callers take their NumPy paths. (The element-wise fuser,
fusion.py, generates its functions from expressions; these are written by hand.)
"""

from __future__ import annotations

import importlib.util
import threading

_lock = threading.Lock()
_state: dict = {}  # "on": whether numba is installed (tests set it to take the NumPy paths)


def numba_available() -> bool:
    """Whether numba is installed (without importing it: that takes about a second)."""
    return importlib.util.find_spec("numba") is not None


def enabled() -> bool:
    if "on" not in _state:
        _state["on"] = numba_available()
    return _state["on"]


class Loop:
    """``fn`` (a module-level function of arrays and scalars) compiled on its first call,
    without the GIL, its machine code cached beside the module (or in numba's cache
    directory) for the next process: importing numba and compiling take about a second,
    paid only by a process that runs the kernel."""

    def __init__(self, fn):
        self._fn = fn
        self._compiled = None

    def __call__(self, *args):
        fn = self._compiled
        if fn is None:
            fn = self._compile()
        return fn(*args)

    def _compile(self):
        # NumPy's error model: a float division by zero gives inf or NaN as in the NumPy
        # formulas the loops stand for, where numba's default (Python's) checks every divisor
        # to raise ZeroDivisionError, a branch that keeps LLVM from vectorising the loop
        # (RMSProp, Adam, Adagrad over 200k elements: 0.47 -> 0.06 ms, the same bits).
        # numba's cache is keyed on the loop's source file and the machine, not on these
        # options: after changing them, delete the cached ``*.nbi``/``*.nbc`` files.
        with _lock:
            if self._compiled is None:
                import numba

                try:
                    self._compiled = numba.njit(nogil=True, cache=True, error_model="numpy")(self._fn)
                except RuntimeError:  # no writable place for the cache: compile in every process
                    self._compiled = numba.njit(nogil=True, error_model="numpy")(self._fn)
        return self._compiled
