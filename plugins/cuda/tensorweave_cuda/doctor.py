"""What ``tensorweave doctor`` says about CUDA on this machine: where nvcc is and which
release, and whether a GPU is usable (the probe's verdict). Report only; changes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess


def find_nvcc() -> str | None:
    """nvcc on PATH, else in $CUDA_HOME/bin, $CUDA_PATH/bin or /usr/local/cuda/bin."""
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = os.path.join(home, "bin", "nvcc")
    return candidate if os.access(candidate, os.X_OK) else None


def nvcc_release(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"does not run ({e})"
    for line in out.splitlines():
        if "release" in line:
            return line.split(",", 1)[-1].strip()
    return out.strip().splitlines()[-1] if out.strip() else "unknown version"


def lines(probe_status: str) -> list[tuple[str, str]]:
    nvcc = find_nvcc()
    return [("nvcc", f"{nvcc} ({nvcc_release(nvcc)})" if nvcc else
             "not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"),
            ("CUDA", probe_status)]
