"""CUDA C sources of the plugin's kernels (``*.cu``), compiled at run time or to PTX in CI."""

from __future__ import annotations

from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent


def sources() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.cu"))
