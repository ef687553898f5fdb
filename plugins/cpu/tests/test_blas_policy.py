"""The BLAS thread policy (tensorweave_cpu/blas.py): small products on one thread, large ones
on the BLAS's own count, the same results either way."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cpu import blas

pytestmark = pytest.mark.skipif(blas.max_threads() is None,
                                reason="no BLAS threadpoolctl can drive (or TENSORWEAVE_BLAS_POLICY=0)")


def test_small_products_run_on_one_thread_and_large_ones_on_all():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(32, 400)).astype(np.float32), rng.normal(size=(400, 800)).astype(np.float32)
    big_a = rng.normal(size=(600, 600)).astype(np.float32)
    x, y = tw.placeholder(tw.float32, [None, None]), tw.placeholder(tw.float32, [None, None])
    prod = tw.matmul(x, y, transpose_b=True)
    with tw.Session() as sess:
        small = sess.run(prod, {x: a, y: b.T})
        assert blas.threads_now() == 1
        large = sess.run(prod, {x: big_a, y: big_a})  # 2 * 600^3 = 4.3e8 flops
        assert blas.threads_now() == blas.max_threads()
    np.testing.assert_allclose(small, a @ b, rtol=1e-5)
    np.testing.assert_allclose(large, big_a @ big_a.T, rtol=1e-4)


def test_the_policy_can_be_turned_off():
    code = ("from tensorweave_cpu import blas; import numpy as np; a = np.ones((8, 8), np.float32); "
            "blas.matmul(a, a); print(blas.threads_now())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TENSORWEAVE_BLAS_POLICY": "0"})
    assert out.returncode == 0 and out.stdout.strip() == "None", out.stdout + out.stderr
