"""OpenCL kernels, one module per op family, each with its OpenCL C source beside it
(``<family>.cl``). Each module's ``register(registry)`` registers its kernels for device
type ``OPENCL``. Nothing here imports pyopencl at import time: programs are built when a
plan first needs them.

Variables, the shape-only kernels and NoOp are the core's (``tensorweave.kernels``),
registered for every device type and the dtypes every device holds; ``register_all`` adds
them for the other dtypes OPENCL computes with (uint8). uint16 is held only as the
compressed form of transfers (``compression.py``)."""

from __future__ import annotations

import importlib

# Aliased: importing this package's own ``shapes`` module rebinds the name ``shapes`` here.
from tensorweave.kernels import shapes as core_shapes
from tensorweave.kernels import state as core_state
from tensorweave_opencl.kernels.common import ALL, OPENCL

FAMILIES = ("elementwise", "reduce", "matmul", "nn", "spatial", "array", "slicing", "gather", "scan", "shapes",
            "training", "compression", "scatter", "selection", "segment", "pad", "sparse", "random")
FAMILIES += ("normalization", "depthwise", "image")  # batch norm and LRN, depthwise convolution, resizing


def register_all(registry):
    for family in FAMILIES:
        importlib.import_module(f"tensorweave_opencl.kernels.{family}").register(registry)
    for core in (core_state, core_shapes):
        core.register_kernels(registry, OPENCL, ALL)
