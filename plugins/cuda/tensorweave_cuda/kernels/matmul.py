"""MatMul through cuBLAS GEMM (row-major operands mapped onto column-major: blas.py)."""

from __future__ import annotations

from tensorweave_cuda import blas
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, fill
from tensorweave_cuda.kernels.util import register as reg_kernel

DTYPES = ("float32", "float64")


def _matmul(ctx):
    dev = ctx.device
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    dt = catalog.dtype(ctx.attrs["T"])
    plans: dict = {}

    def matmul(a, b):
        key = (a.shape, b.shape)
        p = plans.get(key)
        if p is None:
            if a.ndim != 2 or b.ndim != 2:
                raise ctx.error(E, f"inputs must be matrices, got shapes {a.shape} and {b.shape}")
            try:
                p = blas.gemm_plan(a.shape, b.shape, ta, tb)
            except ValueError as e:
                raise ctx.error(E, f"{e} (shapes {a.shape} and {b.shape}, transpose_a={ta}, "
                                   f"transpose_b={tb})") from None
            if len(plans) < 64:
                plans[key] = p
        call, out_shape = p
        c = dev.empty(out_shape, dt.np)
        if c.size == 0:
            return c
        if call.k == 0:  # an empty inner dimension: a sum of nothing
            return fill(dev, c, 0)
        dev.blas.gemm(dt.name, call, a.ptr, b.ptr, c.ptr)
        return c
    return matmul


def register(reg, device_type):
    reg_kernel(reg, "MatMul", device_type, _matmul, DTYPES)
