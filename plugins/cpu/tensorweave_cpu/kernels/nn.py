"""Neural-net kernels."""

from __future__ import annotations

import numpy as np

CPU = "CPU"


def _relu(x):
    return np.maximum(x, np.zeros((), x.dtype))


def register(reg):
    reg.register("Relu", CPU, _relu)
