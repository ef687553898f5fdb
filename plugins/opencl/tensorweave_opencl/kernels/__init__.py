"""OpenCL kernels, one module per op family, each with its OpenCL C source beside it
(``<family>.cl``). Each module's ``register(registry)`` registers its kernels for device
type ``OPENCL``. Nothing here imports pyopencl at import time: programs are built when a
plan first needs them."""

from __future__ import annotations

import importlib

FAMILIES = ("elementwise", "reduce", "matmul", "nn", "spatial", "array", "slicing", "gather", "scan", "shapes",
            "state", "training")


def register_all(registry):
    for family in FAMILIES:
        importlib.import_module(f"tensorweave_opencl.kernels.{family}").register(registry)
