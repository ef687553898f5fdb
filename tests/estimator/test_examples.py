"""The Estimator programs in examples/tf1/ (estimator_*.py) run with `import tensorweave as tf`
alone and reach what they print."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tf1"


@pytest.fixture(scope="module", autouse=True)
def _sklearn():
    pytest.importorskip("sklearn", reason="the examples load scikit-learn's bundled data sets")


def _run(name, *args):
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          timeout=120, cwd=EXAMPLES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_dnn_classifier_on_digits():
    out = _run("estimator_dnn_digits.py")
    steps, acc = re.search(r"trained (\d+) steps; test accuracy: (\d\.\d+)", out).groups()
    assert int(steps) == -(-1437 * 30 // 32)    # 30 epochs of 1437 in batches of 32, the last one smaller
    assert float(acc) >= 0.95, out
    predicted, labels = re.search(r"predicted (\[.*\]), labels (\[.*\])", out).groups()
    assert sum(a == b for a, b in zip(ast.literal_eval(predicted), ast.literal_eval(labels))) >= 7
    assert "variables in the checkpoint: 13" in out   # 3 layers x (kernel, bias, 2 Adagrad slots) + step


def test_custom_model_fn_with_train_and_evaluate():
    out = _run("estimator_custom_model_fn.py")
    assert "evaluated at steps [400, 800, 1200]" in out
    acc, per_class = map(float, re.search(r"step 1200: accuracy (\d\.\d+), mean per-class accuracy (\d\.\d+)",
                                          out).groups())
    assert acc >= 0.95 and per_class >= 0.95, out


def test_linear_regressor_matches_least_squares():
    out = _run("estimator_linear_regressor.py")
    ours, exact = map(float, re.search(r"test R\^2: LinearRegressor (-?\d\.\d+), least squares (-?\d\.\d+)",
                                       out).groups())
    assert exact > 0.5 and abs(ours - exact) < 0.05, out
