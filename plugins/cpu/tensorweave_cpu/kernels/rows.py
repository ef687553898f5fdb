"""In-place row updates of the CPU's variables: ``CPU_ROWS``, the host's ``RowWriter`` (the
core's NumPy one, ``tensorweave.kernels.state.NUMPY_ROWS``) with the additions and
subtractions of float rows done by a loop numba compiles (jit.py), one row after another in
index order. NumPy applies repeated rows with ``ufunc.at``, element by element through its
generic machinery: the LSTM language model's embedding update (1120 rows of 200, words
repeating) took 4.2-4.9 ms a step. The loop gives ``ufunc.at``'s bits (the same additions in
the same order) and runs distinct rows too, without NumPy's check for repeats.

Registered here for ScatterAdd and ScatterSub of float32/float64 ahead of the core's kernels
for the CPU (``state.scatter_factory`` with this ``RowWriter``); without numba, and for
everything else, the core's NumPy paths run.
"""

from __future__ import annotations

import numpy as np

from tensorweave.kernels import state
from tensorweave_cpu import jit

CPU = "CPU"


def _add_rows(target, rows, updates):
    width = target.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(width):
            target[r, j] = target[r, j] + updates[i, j]


def _sub_rows(target, rows, updates):
    width = target.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(width):
            target[r, j] = target[r, j] - updates[i, j]


_LOOPS = {"add": jit.Loop(_add_rows), "sub": jit.Loop(_sub_rows)}


class CPURows(state.RowWriter):
    """``NUMPY_ROWS`` but for float rows added or subtracted, which a compiled loop applies."""

    def owns(self, t) -> bool:
        return state.NUMPY_ROWS.owns(t)

    def copy(self, t):
        return state.NUMPY_ROWS.copy(t)

    def scatter(self, kind, target, indices, updates):
        loop = _LOOPS.get(kind)
        if loop is not None and jit.enabled() and target.ndim >= 1 and target.dtype.char in "fd" \
                and target.flags.c_contiguous and getattr(updates, "dtype", None) == target.dtype \
                and np.ndim(updates) == target.ndim and np.ndim(indices) == 1:
            width = target.size // target.shape[0] if target.shape[0] else 0
            loop(target.reshape(target.shape[0], width), np.ascontiguousarray(indices),
                 np.ascontiguousarray(updates).reshape(len(indices), width))
            return
        state.NUMPY_ROWS.scatter(kind, target, indices, updates)

    def scatter_nd(self, kind, target, indices, updates):
        state.NUMPY_ROWS.scatter_nd(kind, target, indices, updates)


CPU_ROWS = CPURows()


def register(reg):
    # Ahead of the core's ScatterAdd/ScatterSub for the CPU (registered after the families,
    # for every number type): priority 1, for the float types the loops take.
    for op in ("ScatterAdd", "ScatterSub"):
        reg.register(op, CPU, factory=state.scatter_factory(op, CPU_ROWS), host_memory=("indices",), priority=1,
                     constraints={"T": ["float32", "float64"], "Tindices": ["int32", "int64"]})
