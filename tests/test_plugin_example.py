"""Extending tensorweave needs no core change: the example third-party plugin
(examples/plugin_example) is pip-installed into a temporary target without network access,
and a fresh process finds it through its entry point, runs its op end to end, lists it in
`tensorweave plugins`, and passes the example's own tests and the conformance kit."""

import importlib.metadata as md
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "plugin_example"

SCRIPT = """
import numpy as np
import tensorweave as tw
from tensorweave import plugins
from tw_example_op import scaled_softsign

info = next(p for p in plugins.registry().plugins if p.name == "example_op")
assert info.status == "loaded" and info.distribution == "tensorweave-example-op", info
x = tw.placeholder(tw.float64, [None, 3])
y = scaled_softsign(x, scale=2.0)
(g,) = tw.gradients(tw.reduce_sum(y), [x])
with tw.Session() as sess:
    out, grad = sess.run([y, g], {x: [[-1.0, 0.5, 3.0]]})
np.testing.assert_allclose(out, [[-1.0, 2.0 / 3.0, 1.5]])
np.testing.assert_allclose(grad, [[0.5, 2.0 / 2.25, 0.125]])
print("example op ok", info.registered)
"""


def _offline_build_missing() -> str | None:
    """What this environment lacks to build the example without network, or None."""
    if importlib.util.find_spec("pip") is None:
        return "pip is not installed in this environment"
    try:
        version = tuple(int(p) for p in md.version("setuptools").split(".")[:2])
    except (md.PackageNotFoundError, ValueError):
        return "setuptools is not installed (--no-build-isolation builds with the environment's setuptools)"
    if version < (70, 1) and importlib.util.find_spec("wheel") is None:
        return f"setuptools {md.version('setuptools')} needs the `wheel` package to build wheels (or setuptools>=70.1)"
    return None


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The example installed into a --target directory; the source is copied first so the
    build leaves nothing (build/, *.egg-info) in the repository."""
    missing = _offline_build_missing()
    if missing:
        pytest.skip(f"cannot build the example offline: {missing}")
    root = tmp_path_factory.mktemp("plugin_example")
    src = root / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    target = root / "site"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
         str(src)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(target.glob("tensorweave_example_op-*.dist-info"))
    return src, target


def _run(installed, *args, cwd=None):
    src, target = installed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("TENSORWEAVE_DISABLE_PLUGINS", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300,
                          cwd=cwd or target.parent)


def test_installed_op_works_end_to_end(installed):
    proc = _run(installed, "-c", SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "example op ok {'ops': 1, 'kernels': 1}" in proc.stdout


def test_cli_lists_the_plugin(installed):
    proc = _run(installed, "-m", "tensorweave", "plugins")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("example_op"))
    assert "tensorweave-example-op 0.1.0" in line and "loaded" in line and "1 op, 1 kernel" in line
    assert "example op ScaledSoftsign" in line


def test_the_examples_own_tests_pass_against_the_installed_copy(installed):
    src, _ = installed
    proc = _run(installed, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(src / "tests"), cwd=src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "9 passed" in proc.stdout


def test_the_conformance_kit_covers_the_third_party_op(installed):
    proc = _run(installed, "-m", "pytest", "-p", "no:cacheprovider", "--tw-device=CPU", "--tw-ops=ScaledSoftsign")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 ops checked, 0 failed" in proc.stdout
    assert "covered by the element-wise fallback: ScaledSoftsign" in proc.stdout
