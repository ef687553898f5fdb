"""Row-wise kernels for the softmax cross-entropies, which NumPy runs as many passes over
memory with a fresh array each.

Small logits (the mlp's [64, 10]): one loop compiled by numba (the cpu plugin's ``fusion``
extra) computes each row's max, shifted exponentials, loss and backprop (softmax minus the
one-hot label) in one call instead of twelve NumPy calls (~25 us -> a few us). Large logits
(a language model's [1120, 10000]): NumPy's vectorised exp (numba's is scalar libm) on
blocks of rows that stay in cache, the blocks spread over the cores (NumPy releases the GIL;
TensorFlow also spreads this work over its threads). Without numba small inputs take the
NumPy path on one thread.

``split_rows`` is the same spreading for other kernels: element-wise products of a million
elements and more (kernels/math.py) run one block of rows per core.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorweave_cpu import jit

# Up to COMPILED_MAX logits the compiled loop does it all (its exp is scalar libm: beyond a
# few thousand elements NumPy's vectorised exp wins); from PARALLEL_MIN on, the row blocks are
# spread over the cores (below it the threads mostly wait for the GIL between NumPy calls).
# A block of about BLOCK_ELEMENTS logits (256 KiB of float32) stays in L2 for its passes.
COMPILED_MAX = 1 << 14
PARALLEL_MIN = 1 << 20
BLOCK_ELEMENTS = 1 << 16

_lock = threading.Lock()
_pool: list = []  # [ThreadPoolExecutor] once a large input needs it
# A forked child has none of the parent's threads: it makes its own pool.
os.register_at_fork(after_in_child=_pool.clear)


def _sparse_xent_rows(x, labels, loss, back, r0, r1):
    c = x.shape[1]
    for r in range(r0, r1):
        m = -np.inf
        for j in range(c):
            v = x[r, j]
            if v > m or v != v:  # a NaN wins, as in np.max
                m = v
        total = 0.0
        for j in range(c):
            e = np.exp(x[r, j] - m)
            back[r, j] = e
            total += e
        label = labels[r]
        loss[r] = np.log(total) - (x[r, label] - m)
        inv = 1.0 / total
        for j in range(c):
            back[r, j] *= inv
        back[r, label] -= 1.0


_compiled_rows = jit.Loop(_sparse_xent_rows)


def _executor() -> ThreadPoolExecutor:
    if not _pool:
        with _lock:
            if not _pool:
                _pool.append(ThreadPoolExecutor(max(1, (os.cpu_count() or 1) - 1),
                                                thread_name_prefix="tw-cpu-rows"))
    return _pool[0]


def _numpy_rows(x, labels, loss, back, r0, r1):
    """The same rows with NumPy's vectorised exp (numba's is scalar libm), a block of rows at
    a time so that each block's passes stay in cache."""
    step = max(1, BLOCK_ELEMENTS // max(1, x.shape[1]))
    for b0 in range(r0, r1, step):
        b1 = min(r1, b0 + step)
        xs, out = x[b0:b1], back[b0:b1]
        rows = np.arange(b1 - b0)
        lab = labels[b0:b1]
        np.subtract(xs, np.max(xs, axis=1, keepdims=True), out=out)
        at = out[rows, lab]
        np.exp(out, out=out)
        total = np.sum(out, axis=1, keepdims=True)
        loss[b0:b1] = np.log(total[:, 0]) - at
        np.divide(out, total, out=out)
        out[rows, lab] -= 1


def split_rows(fn, n: int) -> None:
    """``fn(r0, r1)`` over rows ``[0, n)``, one contiguous block per core: the other blocks on
    the pool's threads, the first on this one (``fn`` must release the GIL to gain: NumPy
    on large arrays does)."""
    parts = min(os.cpu_count() or 1, n)
    if parts <= 1:
        fn(0, n)
        return
    bounds = [n * i // parts for i in range(parts + 1)]
    futures = [_executor().submit(fn, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    try:
        fn(bounds[0], bounds[1])
    finally:
        for f in futures:
            f.result()


def sparse_xent(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(loss [n], backprop [n, c]) of float32/float64 logits ``x`` [n, c] and integer
    ``labels`` [n] already checked to lie in [0, c)."""
    n, c = x.shape
    loss = np.empty(n, x.dtype)
    back = np.empty((n, c), x.dtype)
    if n * c <= COMPILED_MAX and jit.enabled():
        _compiled_rows(x, labels, loss, back, 0, n)
    elif n * c >= PARALLEL_MIN:
        split_rows(lambda r0, r1: _numpy_rows(x, labels, loss, back, r0, r1), n)
    else:
        _numpy_rows(x, labels, loss, back, 0, n)
    return loss, back
