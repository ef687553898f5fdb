"""The programs in examples/ run to completion."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("script", ["figure1.py", "demo.py"])
def test_example_runs(script):
    proc = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=120,
                          cwd=EXAMPLES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if script == "figure1.py":
        assert "largest relative difference from NumPy" in proc.stdout
    if script == "demo.py":
        assert "/job:localhost/replica:0/task:0/device:CPU:0" in proc.stdout
        assert "b's producer did not run" in proc.stdout
