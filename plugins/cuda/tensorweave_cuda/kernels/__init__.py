"""The CUDA kernels: CUDA C sources (``*.cu``, sharing ``common.cuh`` and ``atomics.cuh``),
the catalog that names them (``catalog.py``) and the Python side of each op family, which
plans a launch and calls a compiled function (``elementwise.py``, ``reduction.py``,
``nn.py``, ``array.py``, ``training.py``, ``matmul.py``, ``conv.py``, ``pooling.py``,
``random.py``, ``compression.py``, ``indexing.py``; ``rows.py``: in-place row updates of
variables). Variables, the shape-only kernels and NoOp are the core's
(``tensorweave.kernels``), registered for every device type and the dtypes every device
holds, which are all the dtypes this device computes with (``catalog.ALL``; it also holds
uint16, only as the compressed form of transfers); ``rows.py`` registers this device's own
Scatter kernels ahead of the core's (which go through the host).

Sources are compiled at run time by PyCUDA's ``SourceModule`` (one module per file and
defines, see ``program.py``) and to PTX by the tests wherever ``nvcc`` exists. Importing this
package imports no driver.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

from tensorweave.kernels import shapes as core_shapes
from tensorweave.kernels import state as core_state
from tensorweave_cuda.kernels import catalog

KERNEL_DIR = Path(__file__).resolve().parent
FAMILIES = ("elementwise", "reduction", "nn", "array", "training", "matmul", "conv", "pooling", "random",
            "compression", "indexing", "rows")
FAMILIES += ("normalization", "depthwise", "image")  # batch norm and LRN, depthwise convolution, resizing
# Families whose kernels call cuBLAS: registered only where it loaded.
BLAS_FAMILIES = ("matmul", "conv")
_INCLUDE = re.compile(r'^#include "([\w.]+)"\s*$', re.M)


def sources() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.cu"))


@cache
def source_text(name: str) -> str:
    """The source of ``name`` with local ``#include "x.cuh"`` lines replaced by the file, so
    what is compiled (and what a compile cache keys on) is one self-contained text."""
    text = (KERNEL_DIR / name).read_text()

    def paste(m):
        return f"// ---- {m.group(1)} ----\n" + source_text(m.group(1)) + f"// ---- end {m.group(1)} ----\n"
    return _INCLUDE.sub(paste, text)


def register_all(registry, device_type: str = "GPU", blas_available: bool = True):
    """Register every family's kernels for ``device_type`` (the emulator uses another type)."""
    for family in FAMILIES:
        if family in BLAS_FAMILIES and not blas_available:
            continue
        importlib.import_module(f"tensorweave_cuda.kernels.{family}").register(registry, device_type)
    for core in (core_state, core_shapes):
        core.register_kernels(registry, device_type, catalog.ALL)
