"""How many threads the BLAS under NumPy may use for one product (issue 17's threading defaults).

OpenBLAS (NumPy's BLAS) splits every product above a tiny size over all its threads, one per
core. For the small products of most steps (an LSTM cell's 32x400x800, a 128-row MLP layer)
that is a loss: the threads hand the work over and wait for each other, and when any other
thread or process holds a core — the executor's own threads, a data pipeline, a second
program — the product waits for a descheduled thread. Measured on this project's 2-core
machines under load: a 128x128x64 product took 5.6 ms on two threads and 28 us on one; an
LSTM language model's step 1135 ms against 52 ms.

So products below ``SMALL_FLOPS`` run on one BLAS thread. Larger 2-D products are split by
rows (or columns) into one block per BLAS thread the user allowed (the ``*_NUM_THREADS``
variables, else one per core), each block a one-thread BLAS call on the plugin's row pool
(see ``_split_matmul`` for why not OpenBLAS's own threads); larger batched products run on
the BLAS's own thread count. The count is
changed through threadpoolctl's handle on the loaded BLAS library, only when it differs from
the last one set (a C call of about a microsecond). Without threadpoolctl, or with a BLAS it
cannot drive, products run as NumPy runs them. ``TENSORWEAVE_BLAS_POLICY=0`` turns the
policy off (the BLAS then decides alone).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from tensorweave_cpu import onednn, rowwise

# About half a millisecond of single-threaded sgemm on a current core: below it a second
# thread wins back less than one wait for a descheduled thread costs on a busy machine (an
# LSTM cell's 2 * 32 * 400 * 800 = 2e7 stay on one). Above it, in a step that runs its
# products one after another (the autoencoder's [256, 784] x [784, 256], 1e8: 0.99 ms on one
# thread, 0.60 on oneDNN's team of two), one thread left a core idle: that step took 8.5 ms
# against 6.7 with the limit at 5e7 instead of 2e8, in one process, rounds interleaved on an
# AMD EPYC with 2 cores; the LSTM, convnet and sparse steps did not change.
SMALL_FLOPS = 5e7

_lock = threading.Lock()
_state: dict = {}  # "libs": BLAS controllers, "max": the BLAS's thread count, "now": the last count set


def _controllers():
    """The loaded BLAS libraries' threadpoolctl controllers and their thread count, or None."""
    if "libs" in _state:
        return _state["libs"]
    with _lock:
        if "libs" in _state:
            return _state["libs"]
        libs = None
        if os.environ.get("TENSORWEAVE_BLAS_POLICY", "").strip().lower() not in ("0", "false", "off", "no"):
            try:
                import threadpoolctl

                found = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
                if found:
                    libs = found
                    _state["max"] = max(1, max(c.num_threads for c in found))
                    _state["now"] = _state["max"]
            except Exception:  # noqa: BLE001 - an odd BLAS build: NumPy's own behaviour stays
                libs = None
        _state["libs"] = libs
        return libs


def use_threads_for(flops: float) -> None:
    """Set the BLAS's thread count for a product of ``flops`` floating-point operations."""
    libs = _state.get("libs", False)
    if libs is False:
        libs = _controllers()
    if not libs:
        return
    want = 1 if flops < SMALL_FLOPS else _state["max"]
    if _state["now"] != want:
        _state["now"] = want
        for c in libs:
            c.set_num_threads(want)


# ``a @ b.T`` with few rows in ``a`` (a backward pass's ``dy @ w.T`` on a small batch: an LSTM
# cell's [32, 800] x [800, 400]) is 1.5-2x faster in OpenBLAS as ``(b @ a.T).T``, then copied
# to row-major order (m * n elements, small here), when the inner dimension is long against
# the rows. Measured single-threaded on this project's machines: [32, 800] x T[400, 800]
# 307-373 us -> 189-203 us, [8, 400] x T[800, 400] 224 -> 111 us, [32, 2000] x T[8000, 2000]
# 16.3 -> 11.2 ms; [64, 400] x T[3136, 400] 2.29 -> 2.01 ms. With a short inner dimension it
# is the other way round: the convnet's [128, 10] x T[3136, 10] 0.13 -> 0.95 ms, the mlp's
# [64, 10] x T[128, 10] slower too, [64, 128] x T[3136, 128] 0.73 -> 0.81 ms: so only from
# ``SWAP_INNER_PER_ROW`` inner elements per row of ``a`` (and at least ``SWAP_MIN_INNER``).
SWAP_MAX_ROWS = 128
SWAP_INNER_PER_ROW = 4
SWAP_MIN_INNER = 64


# A large 2-D product is split by us, one block of rows (or columns, when there are few rows)
# per core, each block a single-threaded BLAS call on the plugin's row pool, rather than given
# to OpenBLAS's own threads: those spin for about 2^28 cycles (~0.1 s) after every threaded
# call before they sleep (OPENBLAS_THREAD_TIMEOUT, read only when NumPy loads OpenBLAS), and
# in a step that makes one large product every few tens of milliseconds (a language model's
# softmax) a spinning worker held one of two cores for good: a third of the LSTM benchmark's
# CPU samples were OpenBLAS's idle loop. Our pool's threads wait on a queue. Blocks are at
# least SPLIT_MIN_ROWS rows (or columns) so that each stays an efficient GEMM.
SPLIT_MIN_ROWS = 64


def _split_matmul(a, b, out, parts):
    """``a @ b`` (2-D, large) in ``parts`` blocks on the row pool, one BLAS thread each."""
    m, n = a.shape[0], b.shape[1]
    if out is None:
        out = np.empty((m, n), np.result_type(a.dtype, b.dtype))
    use_threads_for(0)
    try:
        if m >= parts * SPLIT_MIN_ROWS and m >= n // 4:
            rowwise.split_rows(lambda r0, r1: np.matmul(a[r0:r1], b, out=out[r0:r1]), m)
        else:
            rowwise.split_rows(lambda c0, c1: np.matmul(a, b[:, c0:c1], out=out[:, c0:c1]), n)
    finally:
        # The BLAS's own count again, for the NumPy code around the session (its large
        # products would otherwise run on one thread); setting it wakes no thread.
        use_threads_for(SMALL_FLOPS)
    return out


# float32 2-D products from ONEDNN_MIN_FLOPS up to SMALL_FLOPS run on oneDNN's sgemm, on one
# thread, when the cpu plugin's ``onednn`` extra is installed (onednn.py: faster from a few
# MFLOP, slower below; 1.6-2x for an LSTM cell's products).
ONEDNN_MIN_FLOPS = 4e6
# Large products with a short inner dimension or few output columns (a language model's
# softmax, [1120, 200] x [200, 10000], and its input gradient [1120, 10000] x T[200, 10000])
# run on oneDNN's OpenMP team: 29.7-38.8 ms against 33.7-45.6 split by rows on OpenBLAS, the
# gradient 16.1-23.5 against 17.4-26.6 (LSTM benchmark 1.12x -> 1.09x TF in one pair of runs
# with the first). Other large ones stay split over the cores on OpenBLAS: oneDNN, in blocks
# or on its team, was faster for some and slower for others (the softmax's weight gradient
# [200, 1120] x [1120, 10000], the matmul and branches benchmarks) within this machine's noise.
ONEDNN_TEAM_MAX_SHORT = 256


def _by_onednn(a, b, out, team=False):
    """``a @ b`` by oneDNN (float32, the extra installed), on this thread or on OpenMP's
    team, or None where it does not apply."""
    if a.dtype.char == "f" == b.dtype.char and (out is None or out.dtype.char == "f") and onednn.enabled():
        c = np.empty((a.shape[0], b.shape[1]), np.float32) if out is None else out
        if onednn.sgemm(a, b, c, team=team):
            return c
    return None


def matmul(a, b, out=None):
    """``np.matmul`` on the library and thread count its size deserves."""
    if a.ndim == 2 and b.ndim == 2:
        # (the common case first, in few steps: a small layer's product takes 3-8 us)
        m, k = a.shape
        n = b.shape[1]
        flops = 2.0 * m * k * n
        if flops < SMALL_FLOPS:
            if flops >= ONEDNN_MIN_FLOPS and (c := _by_onednn(a, b, out)) is not None:
                return c
            if _state.get("now", 0) != 1:
                use_threads_for(flops)
        elif min(k, n) <= ONEDNN_TEAM_MAX_SHORT and (c := _by_onednn(a, b, out, team=True)) is not None:
            return c
        elif a.dtype == b.dtype and a.dtype.char in "fd" and (out is None or out.dtype == a.dtype) \
                and _controllers() and _state["max"] > 1 and max(m, n) >= 2 * SPLIT_MIN_ROWS:
            return _split_matmul(a, b, out, _state["max"])
        else:
            use_threads_for(flops)
        if out is None and m <= SWAP_MAX_ROWS and n > m and k >= max(SWAP_MIN_INNER, SWAP_INNER_PER_ROW * m) \
                and b.flags.f_contiguous and not b.flags.c_contiguous and a.dtype.char in "fd" and b.dtype == a.dtype:
            return np.ascontiguousarray(np.matmul(b.T, a.T).T)
    elif a.ndim >= 2 and b.ndim >= 2:
        batch = a.size // (a.shape[-1] * a.shape[-2]) if a.shape[-1] and a.shape[-2] else 0
        use_threads_for(2.0 * max(batch, 1) * a.shape[-2] * a.shape[-1] * b.shape[-1])
    return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)


def accumulate(acc, a, b) -> bool:
    """``acc += a @ b`` into ``acc`` by oneDNN's sgemm with beta = 1, one thread, for the
    products it takes (as ``matmul``); False, with nothing written, for others. (An LSTM
    gradient's [400, 32] x [32, 800] added to its sum: 177-214 us against 273-495 for the
    product and then the addition.)"""
    if acc.ndim != 2 or a.ndim != 2 or b.ndim != 2 or acc.shape != (a.shape[0], b.shape[1]) \
            or a.shape[1] != b.shape[0]:
        return False
    flops = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    return (ONEDNN_MIN_FLOPS <= flops < SMALL_FLOPS and a.dtype.char == "f" == b.dtype.char == acc.dtype.char
            and onednn.enabled() and onednn.sgemm(a, b, acc, beta=1.0))


def max_threads() -> int | None:
    """The BLAS's own thread count, which large products use (None: the policy is not active)."""
    return _state.get("max") if _controllers() else None


def threads_now() -> int | None:
    """The thread count last set by the policy (None: the policy is not active)."""
    return _state.get("now") if _controllers() else None
