"""NumPy kernels, one module per op family. Each module's ``register(registry)`` registers
its kernels for device type ``CPU``. Variables, the shape-only kernels and NoOp are the
core's (``tensorweave.kernels``): registered for every device type and the dtypes every
device holds, and here for the other dtypes the CPU holds (all of them)."""

from __future__ import annotations

import importlib

from tensorweave.framework import dtypes
from tensorweave.kernels import shapes as core_shapes
from tensorweave.kernels import state as core_state

FAMILIES = ("array", "math", "random", "nn", "training", "checkpoint", "io", "compression", "sparse", "sampling",
            "indexing", "embedding", "strings")
FAMILIES += ("normalization", "depthwise", "image")  # batch norm and LRN, depthwise convolution, resizing
FAMILIES += ("rows",)  # float ScatterAdd/ScatterSub by compiled loops, ahead of the core's


def register_all(registry):
    for family in FAMILIES:
        importlib.import_module(f"tensorweave_cpu.kernels.{family}").register(registry)
    for core in (core_state, core_shapes):
        core.register_kernels(registry, "CPU", dtypes.ALL_DTYPES)
