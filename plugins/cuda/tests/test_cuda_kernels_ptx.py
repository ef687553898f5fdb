"""The CUDA C sources compile to PTX with nvcc (no GPU needed); skipped where nvcc is absent."""

import os
import shutil
import subprocess

import pytest

from tensorweave_cuda import kernels


def _nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = os.path.join(home, "bin", "nvcc")
    return candidate if os.access(candidate, os.X_OK) else None


NVCC = _nvcc()


def test_kernel_sources_are_packaged():
    names = [p.name for p in kernels.sources()]
    assert "elementwise.cu" in names


@pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin")
@pytest.mark.parametrize("source", kernels.sources(), ids=lambda p: p.name)
def test_compiles_to_ptx(source, tmp_path):
    out = tmp_path / (source.stem + ".ptx")
    proc = subprocess.run([NVCC, "--ptx", "-o", str(out), str(source)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"nvcc failed on {source.name}:\n{proc.stdout}\n{proc.stderr}"
    ptx = out.read_text()
    assert ".version" in ptx and ".target" in ptx
    if source.name == "elementwise.cu":
        assert ".entry tw_add_f32" in ptx and ".entry tw_relu_f32" in ptx
