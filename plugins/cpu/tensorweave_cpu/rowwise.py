"""Row-wise kernels for the softmax cross-entropies, which NumPy runs as many passes over
memory with a fresh array each.

Small logits (the mlp's [64, 10]): one loop compiled by numba (the cpu plugin's ``fusion``
extra) computes each row's max, shifted exponentials, loss and backprop (softmax minus the
one-hot label) in one call instead of twelve NumPy calls (~25 us -> a few us). Large logits
(a language model's [1120, 10000]): NumPy's vectorised exp (numba's is scalar libm) on
blocks of rows that stay in cache, the blocks spread over the cores (NumPy releases the GIL;
TensorFlow also spreads this work over its threads). Without numba small inputs take the
NumPy path on one thread.

``split_rows`` is the same spreading for other kernels, and ``split_ufunc`` for element-wise
ones: binary ops, ReLU's gradient and fused element-wise nodes of a million elements and more
(kernels/math.py, kernels/nn.py, fusion.py) run one block of rows per core.
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


class LabelOutOfRange(ValueError):
    """``sparse_xent``'s labels hold one outside ``[0, c)``: the first is at ``row``."""

    def __init__(self, row: int):
        super().__init__(f"label {row} is out of range")
        self.row = row


def _sparse_xent_rows(x, labels, loss, back, r0, r1):
    # The labels are checked first, in the same call (NumPy's check is three calls): the
    # first row whose label is outside [0, c), with nothing computed, else -1.
    c = x.shape[1]
    for r in range(r0, r1):
        if labels[r] < 0 or labels[r] >= c:
            return r
    for r in range(r0, r1):
        # The max starts from the row's first logit, not -inf (a float64 literal), so that
        # float32 logits are shifted and exponentiated in float32 (expf: 4.3 -> 3.6 us for
        # the mlp's [64, 10]); c >= 1 here, as every label of a row is in [0, c).
        m = x[r, 0]
        for j in range(1, c):
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
    return -1


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


def over_rows(fn, n: int, elements: int) -> None:
    """``fn(r0, r1)`` over rows ``[0, n)``: one block per core from ``PARALLEL_MIN`` elements,
    else one call (``fn`` should release the GIL: a numba loop compiled ``nogil``, NumPy)."""
    if elements >= PARALLEL_MIN:
        split_rows(fn, n)
    else:
        fn(0, n)


def _rows_of(a, rank: int, r0: int, r1: int):
    """Rows ``r0:r1`` of an operand of a result of ``rank`` dimensions (all of it when the
    operand is broadcast along the first one: fewer dimensions, or a first one of 1)."""
    return a[r0:r1] if getattr(a, "ndim", 0) == rank and a.shape[0] != 1 else a


def split_ufunc(ufunc, dt, allocate=None, in_dtypes=None):
    """``ufunc`` (an element-wise NumPy ufunc: a kernel's, or a fused expression's) over a
    million elements and more, one block of rows per core, into ``np.empty`` (or
    ``allocate(shape, dt)``). Same values: each element is computed as the whole call
    computes it. Operands of other dtypes than ``in_dtypes`` (default: all ``dt``), or a
    result with fewer than two rows, take the plain call."""
    def f(*xs):
        shapes = [np.shape(x) for x in xs]
        shape = shapes[0] if all(s == shapes[0] for s in shapes) else np.broadcast_shapes(*shapes)
        want = in_dtypes or [dt] * len(xs)
        if len(shape) == 0 or shape[0] < 2 or any(getattr(x, "dtype", None) != w for x, w in zip(xs, want)):
            return ufunc(*xs)
        out = allocate(shape, dt) if allocate is not None else np.empty(shape, dt)
        rank = len(shape)
        split_rows(lambda r0, r1: ufunc(*[_rows_of(x, rank, r0, r1) for x in xs], out=out[r0:r1]), shape[0])
        return out
    return f


# Summing the leading axes of a C-contiguous array (a bias gradient over a convolution's
# [n * h * w, c] activations): NumPy's reduction walks down one column at a time (strided).
# With numba a compiled loop adds whole rows into the result, in NumPy's order from +0.0 (the
# same bits), at every size: the mlp's [64, 128] in 0.7 us against NumPy's 2.5 (most of which
# is the call's own cost), the convnet's [100352, 32] in 0.37-0.41 ms against einsum's 0.64
# and NumPy's 1.65, [2000, 1000] in 0.09 against 0.13-0.19. Without numba, einsum adds rows
# too (the same sums in the same order, 2-5x NumPy's speed) from SUM_ROWS_MIN_ELEMENTS up to
# SUM_ROWS_MAX_COLUMNS columns ([1120, 10000]: no faster).
SUM_ROWS_MIN_ELEMENTS = 1 << 16
SUM_ROWS_MAX_COLUMNS = 512


def _sum_rows(x, out):
    # As NumPy's reduction: from add's identity (+0.0: a column of -0.0 sums to +0.0), the
    # rows added in order.
    n, c = x.shape
    for j in range(c):
        out[j] = 0.0
    for i in range(n):
        for j in range(c):
            out[j] += x[i, j]


_compiled_sum_rows = jit.Loop(_sum_rows)


def sum_leading(x: np.ndarray, k: int):
    """``x`` summed over its first ``k`` axes, or None where NumPy's own reduction is as good
    (not C-contiguous, not float32/float64, nothing to sum; without numba: small, or wide)."""
    if not 0 < k < x.ndim or x.dtype.char not in "fd" or not x.flags.c_contiguous or x.size == 0:
        return None
    if jit.enabled():
        out = np.empty(x.shape[k:], x.dtype)
        if x.ndim == 2:  # (the usual case, without the reshapes: they cost as much as a small loop)
            _compiled_sum_rows(x, out)
        else:
            _compiled_sum_rows(x.reshape(-1, out.size), out.reshape(-1))
        return out
    cols = 1
    for d in x.shape[k:]:
        cols *= d
    if x.size < SUM_ROWS_MIN_ELEMENTS or cols > SUM_ROWS_MAX_COLUMNS:
        return None
    return np.einsum("ij->j", x.reshape(-1, cols)).reshape(x.shape[k:])


def sparse_xent(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(loss [n], backprop [n, c]) of C-contiguous float32/float64 logits ``x`` [n, c] and
    C-contiguous integer ``labels`` [n]; raises ``LabelOutOfRange`` naming the first row whose
    label is outside [0, c)."""
    n, c = x.shape
    loss = np.empty(n, x.dtype)
    back = np.empty((n, c), x.dtype)
    if n * c <= COMPILED_MAX and jit.enabled():
        bad = _compiled_rows(x, labels, loss, back, 0, n)
        if bad >= 0:
            raise LabelOutOfRange(bad)
        return loss, back
    outside = (labels < 0) | (labels >= c)
    if outside.any():
        raise LabelOutOfRange(int(np.argmax(outside)))
    if n * c >= PARALLEL_MIN:
        split_rows(lambda r0, r1: _numpy_rows(x, labels, loss, back, r0, r1), n)
    else:
        _numpy_rows(x, labels, loss, back, 0, n)
    return loss, back
