"""The TF1-style programs in examples/tf1/ run as written (only `import tensorweave as tf`)
and reach what they claim."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

TF1 = Path(__file__).resolve().parents[2] / "examples" / "tf1"


def _run(name, *args, expect_rc=0):
    proc = subprocess.run([sys.executable, str(TF1 / name), *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=TF1)
    assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    return proc.stdout, proc.stderr


def test_programs_import_only_tensorweave_as_tf():
    for path in TF1.glob("*.py"):
        text = path.read_text()
        assert "import tensorweave as tf" in text, path
        assert "from tensorweave" not in text and "import tensorflow" not in text, path


def test_linear_regression_with_flags_and_logging():
    out, err = _run("linear_regression.py", "--steps=300", "--learning_rate=0.1", "leftover")
    w, b, loss = map(float, re.search(r"w = (\S+), b = (\S+), final loss = (\S+)", out).groups())
    assert abs(w - 3.0) < 0.1 and abs(b + 2.0) < 0.1 and loss < 1e-3, out
    lines = err.splitlines()
    assert "WARNING:tensorweave:ignoring arguments ['leftover']" in lines
    assert [line.split(":")[2] for line in lines if line.startswith("INFO:tensorweave:step")] == \
        ["step 0", "step 50", "step 100", "step 150", "step 200", "step 250"]
    quiet_out, quiet_err = _run("linear_regression.py", "--steps=10", "--noverbose")
    assert "INFO" not in quiet_err and "final loss" in quiet_out
    _, bad = _run("linear_regression.py", "--steps=0", expect_rc=1)
    assert "FATAL Flags parsing error: flag --steps: invalid value '0': must be >= 1" in bad


def test_mlp_on_digits_with_contrib_layers_and_losses():
    pytest.importorskip("sklearn")
    out, err = _run("mlp_digits.py", "--hidden=64,32")
    assert "regularization losses: 3" in out      # one per layer's weights, from the arg_scope
    acc = float(re.search(r"test accuracy: (\d\.\d+)", out).group(1))
    assert acc >= 0.95, out
    losses = [float(v) for v in re.findall(r"total loss (\d+\.\d+)", err)]
    assert len(losses) == 3 and losses[-1] < losses[0], err


def test_cnn_on_digits_with_optimize_loss():
    pytest.importorskip("sklearn")
    out, _ = _run("cnn_digits.py")
    step, first, last = re.search(r"global step (\d+): training loss (\S+) -> (\S+)", out).groups()
    assert int(step) == 150 and float(last) < 0.3 < 2.0 < float(first), out
    assert float(re.search(r"test accuracy: (\d\.\d+)", out).group(1)) >= 0.85, out


def test_autoencoder_writes_its_results_with_gfile(tmp_path):
    pytest.importorskip("sklearn")
    out_dir = tmp_path / "results" / "ae"
    out, _ = _run("autoencoder.py", f"--output_dir={out_dir}")
    first, final = map(float, re.search(r"reconstruction mse (\S+) -> (\S+)", out).groups())
    assert final < 0.25 * first, out
    rows = (out_dir / "reconstruction.csv").read_text().splitlines()
    assert rows[0] == "digit,mse" and len(rows) == 11
    assert all(0 < float(r.split(",")[1]) < first for r in rows[1:])
    assert (out_dir / "summary.txt").read_text().startswith("mse ")
    _, err = _run("autoencoder.py", expect_rc=1)         # --output_dir is required
    assert "flag --output_dir=None: flag is required" in err


def test_testcase_program_runs_its_tests():
    _, err = _run("ops_test.py")
    assert "Ran 4 tests" in err and err.rstrip().endswith("OK"), err
