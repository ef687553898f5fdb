"""``benchmarks/gpu.py`` runs: on the CPU emulator of the driver layer with tiny sizes
(``--small``), every workload either measured or skipped with a reason, and its docs block
goes into a performance.md (the GPU numbers themselves come from a GPU machine)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "benchmarks" / "gpu.py"


def _gpu_module():
    spec = importlib.util.spec_from_file_location("tw_gpu_benchmark", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_benchmark_small_on_the_emulator(tmp_path):
    from tensorweave_cuda.testing import emulator

    reason = emulator.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    out, md = tmp_path / "rows.json", tmp_path / "block.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "/device:CUDAEMU:0", "--small",
                           "--json", str(out), "--block-out", str(md)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    measured = {r["workload"] for r in rows if "median_s" in r}
    assert {"matmul", "mlp", "transfer"} <= measured, (measured, data["notes"])
    conv = "conv" in measured or any(n.startswith("conv: skipped: no CUDAEMU kernel yet for") for n in data["notes"])
    assert conv, data["notes"]
    mlp = next(r for r in rows if r["workload"] == "mlp" and r["implementation"].startswith("tensorweave (pool"))
    assert mlp["launches_per_step"] >= 10 and mlp["us_per_launch"] > 0
    assert any("No PyTorch comparison" in n for n in data["notes"])
    text = md.read_text()
    assert "| transfer | H2D tensorweave to_device (ordinary NumPy array) |" in text
    assert "staging-memmove threads" in text


def test_gpu_benchmark_block_goes_into_performance_md(tmp_path):
    gpu = _gpu_module()
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nintro\n\n<!-- results:begin -->\nCPU table\n<!-- results:end -->\n")
    block = f"{gpu.BEGIN}\nfirst\n{gpu.END}"
    gpu.write_block("noise\n" + block + "\nnoise", doc)
    text = doc.read_text()
    assert text.count(gpu.SECTION) == 1 and "first" in text and "noise" not in text and "CPU table" in text
    gpu.write_block(f"{gpu.BEGIN}\nsecond\n{gpu.END}", doc)
    text = doc.read_text()
    assert "second" in text and "first" not in text and text.count(gpu.BEGIN) == 1 and "CPU table" in text
