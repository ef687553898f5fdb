"""Matrix products through cuBLAS, loaded with ctypes (no compiled binding needed).

cuBLAS is column-major; tensors here are row-major. A row-major ``X`` (r x c) is, read as
column-major with leading dimension c, the matrix ``Xᵀ``. So ``C = op(A) @ op(B)`` is computed
as ``Cᵀ = op(B)ᵀ @ op(A)ᵀ``: cuBLAS gets B's buffer first and A's second, with each
operand's transpose flag as asked and the output's leading dimension N. ``gemm_plan`` does
that mapping (pure Python; the tests check it against NumPy with a column-major gemm).

The library comes from the ``nvidia-cublas-cu12`` (or CUDA 13 ``nvidia-cublas``) wheel when
installed, else from the CUDA toolkit or the system (``libcublas.so.*``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import os
import sys
import threading
from pathlib import Path

from tensorweave.framework import errors
from tensorweave_cuda.driver import LaunchError

OP_N, OP_T = 0, 1
_INT_MAX = 2**31 - 1
SONAMES = ("libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so")
STATUS = {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
          7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
          13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
          15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}


@dataclasses.dataclass(frozen=True)
class GemmCall:
    """Arguments of one column-major ``gemm`` computing a row-major product.

    ``first``/``second`` say which row-major operand ("a" or "b") is cuBLAS's A and B.
    """

    transa: int
    transb: int
    m: int
    n: int
    k: int
    first: str
    lda: int
    second: str
    ldb: int
    ldc: int


def gemm_plan(a_shape, b_shape, transpose_a: bool = False, transpose_b: bool = False):
    """(GemmCall, output shape) for ``op(a) @ op(b)`` of row-major 2-D ``a`` and ``b``.

    ValueError when the inner dimensions differ."""
    ar, ac = (int(d) for d in a_shape)
    br, bc = (int(d) for d in b_shape)
    m_rows, ka = (ac, ar) if transpose_a else (ar, ac)
    kb, n_cols = (bc, br) if transpose_b else (br, bc)
    if ka != kb:
        raise ValueError(f"matrix dimensions are incompatible: {m_rows}x{ka} and {kb}x{n_cols}")
    call = GemmCall(
        transa=OP_T if transpose_b else OP_N, transb=OP_T if transpose_a else OP_N,
        m=n_cols, n=m_rows, k=ka,
        first="b", lda=max(1, bc), second="a", ldb=max(1, ac), ldc=max(1, n_cols))
    return call, (m_rows, n_cols)


def cublas_candidates() -> list[str]:
    """Where to look for libcublas, best first: the pip wheels, the toolkit, the system."""
    out = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cublas/lib", "cu13/lib", "cu12/lib"):
            for name in SONAMES:
                p = Path(base) / sub / name
                if p.exists():
                    out.append(str(p))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            out += [os.path.join(home, "lib64", n) for n in SONAMES if os.path.exists(os.path.join(home, "lib64", n))]
    if sys.platform == "win32":
        out += ["cublas64_13.dll", "cublas64_12.dll", "cublas64_11.dll"]
    else:
        out += [os.path.join("/usr/local/cuda/lib64", n) for n in SONAMES
                if os.path.exists(os.path.join("/usr/local/cuda/lib64", n))]
        out += list(SONAMES)  # the dynamic loader's own search
    seen: set = set()
    return [p for p in out if not (p in seen or seen.add(p))]


def find_cublas() -> str | None:
    """The first candidate that is a file on disk (cheap: no dlopen), else None."""
    for p in cublas_candidates():
        if os.path.sep in p and os.path.exists(p):
            return p
    return None


def load_cublas() -> tuple[ctypes.CDLL, str]:
    tried = []
    for p in cublas_candidates():
        try:
            lib = ctypes.CDLL(p)
        except OSError as e:
            tried.append(f"{p}: {e}")
            continue
        return lib, p
    raise OSError("cuBLAS not found; install it with `pip install nvidia-cublas-cu12` (tried "
                  + "; ".join(tried) + ")")


class CuBlas:
    """A cuBLAS handle bound to one device's stream. Calls are serialised per handle."""

    def __init__(self, driver, lib: ctypes.CDLL | None = None, path: str | None = None):
        if lib is None:
            lib, path = load_cublas()
        self.lib, self.path, self.driver = lib, path, driver
        vp, i = ctypes.c_void_p, ctypes.c_int
        for name in ("cublasSgemm_v2", "cublasDgemm_v2"):
            f = getattr(lib, name)
            f.argtypes = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
            f.restype = i
        lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
        lib.cublasSetStream_v2.argtypes = [vp, vp]
        self._gemm = {"float32": (lib.cublasSgemm_v2, ctypes.c_float),
                      "float64": (lib.cublasDgemm_v2, ctypes.c_double)}
        self.handle = vp()
        with driver.activate():
            self._check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
            self._check(lib.cublasSetStream_v2(self.handle, vp(driver.stream_handle)), "cublasSetStream")
        self._lock = threading.Lock()

    @staticmethod
    def _check(status: int, what: str):
        if status != 0:
            raise errors.InternalError(f"{what} failed: {STATUS.get(status, status)}")

    def gemm(self, dtype: str, call: GemmCall, a_ptr: int, b_ptr: int, c_ptr: int) -> None:
        """Queue ``c = op(a) @ op(b)`` (row-major) on the device's stream."""
        if max(call.m, call.n, call.k, call.lda, call.ldb, call.ldc) > _INT_MAX:
            raise errors.UnimplementedError(f"matrix product of {call.n}x{call.k} by {call.k}x{call.m}: "
                                            "cuBLAS's 32-bit dimensions are exceeded")
        fn, scalar = self._gemm[dtype]
        one, zero = scalar(1.0), scalar(0.0)
        ptrs = {"a": a_ptr, "b": b_ptr}
        with self.driver.activate(), self._lock:
            status = fn(self.handle, call.transa, call.transb, call.m, call.n, call.k, ctypes.byref(one),
                        ptrs[call.first], call.lda, ptrs[call.second], call.ldb, ctypes.byref(zero),
                        c_ptr, call.ldc)
        if status != 0:  # the node's wrapper (kernels/util.py) names the node
            raise LaunchError(f"{fn.__name__} (m={call.m}, n={call.n}, k={call.k}): {STATUS.get(status, status)}")
        self.driver.launches += 1  # one cuBLAS call counts as one launch
