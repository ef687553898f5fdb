"""NumPy kernels, one module per op family. Each module's ``register(registry)`` registers
its kernels for device type ``CPU``."""

from __future__ import annotations

import importlib

FAMILIES = ("array", "math", "random", "state", "control", "nn", "training", "checkpoint", "io",
            "compression")


def register_all(registry):
    for family in FAMILIES:
        importlib.import_module(f"tensorweave_cpu.kernels.{family}").register(registry)
