"""Random kernels (NumPy Generators, one per node, created once per session)."""

from __future__ import annotations


def register(reg):
    pass
