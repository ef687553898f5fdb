"""The BLAS thread policy (tensorweave_cpu/blas.py): small products on one thread, large 2-D
ones in blocks over the cores (one BLAS thread each), large batched ones on the BLAS's own
count, the same results every way."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cpu import blas

# (OpenBLAS's policy: oneDNN's products are off here; tests/test_onednn.py has theirs)
pytestmark = [pytest.mark.skipif(blas.max_threads() is None,
                                 reason="no BLAS threadpoolctl can drive (or TENSORWEAVE_BLAS_POLICY=0)"),
              pytest.mark.usefixtures("without_onednn")]


def test_small_products_run_on_one_thread_and_large_ones_in_blocks_over_the_cores(monkeypatch):
    """Small products: one BLAS thread. Large 2-D ones: one block of rows (or of columns, for
    few rows) per core on the plugin's row pool, each on one BLAS thread, so OpenBLAS's own
    threads never run (and never spin afterwards). Large batched ones: the BLAS's threads."""
    from tensorweave_cpu import rowwise

    blocks = []
    real = rowwise.split_rows
    # (rows or columns split, BLAS threads while the blocks run)
    monkeypatch.setattr(rowwise, "split_rows", lambda fn, n: blocks.append((n, blas.threads_now())) or real(fn, n))
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(32, 400)).astype(np.float32), rng.normal(size=(400, 800)).astype(np.float32)
    big_a = rng.normal(size=(600, 600)).astype(np.float32)
    wide_a, wide_b = rng.normal(size=(200, 1200)).astype(np.float32), rng.normal(size=(1200, 3000)).astype(np.float32)
    batch = rng.normal(size=(4, 300, 300)).astype(np.float32)
    x, y = tw.placeholder(tw.float32, [None, None]), tw.placeholder(tw.float32, [None, None])
    bx = tw.placeholder(tw.float32, [None, None, None])
    prod, plain, bprod = tw.matmul(x, y, transpose_b=True), tw.matmul(x, y), tw.matmul(bx, bx)
    with tw.Session() as sess:
        small = sess.run(prod, {x: a, y: b.T})
        assert blas.threads_now() == 1 and blocks == []
        large = sess.run(prod, {x: big_a, y: big_a})  # 2 * 600^3 = 4.3e8 flops: by rows
        assert blocks == [(600, 1)]
        # (after a split product the BLAS's own count is back, for NumPy code around the session)
        assert blas.threads_now() == blas.max_threads()
        wide = sess.run(plain, {x: wide_a, y: wide_b})  # 200 rows, 3000 columns: by columns
        assert blocks == [(600, 1), (3000, 1)]
        batched = sess.run(bprod, {bx: batch})         # 4 * 2 * 300^3 = 2.2e8 flops
        assert blas.threads_now() == blas.max_threads() and blocks == [(600, 1), (3000, 1)]
    np.testing.assert_allclose(small, a @ b, rtol=1e-5)
    np.testing.assert_allclose(large, big_a @ big_a.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(wide, wide_a @ wide_b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(batched, batch @ batch, rtol=1e-4, atol=1e-3)


def test_the_policy_can_be_turned_off():
    code = ("from tensorweave_cpu import blas; import numpy as np; a = np.ones((8, 8), np.float32); "
            "blas.matmul(a, a); print(blas.threads_now())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TENSORWEAVE_BLAS_POLICY": "0"})
    assert out.returncode == 0 and out.stdout.strip() == "None", out.stdout + out.stderr
