"""The ``tensorweave`` command, run as ``python -m tensorweave`` in a fresh interpreter."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

import tensorweave as tw
from tensorweave.tools import cli

TIMEOUT = 60
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def run_cli(*args, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TENSORWEAVE_DISABLE_PLUGINS"}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "tensorweave", *args], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def test_plugins_lists_core_and_cpu():
    proc = run_cli("plugins")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "STATUS", "REGISTERED", "NOTE"]
    # the core's own plugins, one per subsystem, listed like any other
    core = next(ln for ln in lines if ln.startswith("tensorweave.ops "))
    assert f"tensorweave {tw.__version__}" in core and "loaded" in core and re.search(r"\d+ ops", core)
    assert re.search(r"^tensorweave\.kernels\s.*\d+ kernels", proc.stdout, re.M)
    assert re.search(r"^tensorweave\.passes\s.*9 passes", proc.stdout, re.M)
    assert re.search(r"^tensorweave\.placer\s.*1 placer", proc.stdout, re.M)
    assert re.search(r"^tensorweave\.transport\s.*1 transport", proc.stdout, re.M)
    cpu = next(ln for ln in lines if ln.startswith("cpu "))
    assert "tensorweave-cpu" in cpu and "loaded" in cpu
    assert re.search(r"\d+ kernels, 1 device type, 2 allocators", cpu)
    assert re.search(r"^\d+ plugins: .*\d+ loaded", proc.stdout, re.M)


def test_plugins_verbose_shows_modules():
    proc = run_cli("plugins", "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert "MODULE" in proc.stdout.splitlines()[0]
    assert "tensorweave_cpu.plugin" in proc.stdout and "tensorweave.builtin" in proc.stdout


def test_devices_lists_the_cpu():
    proc = run_cli("devices")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert CPU0 in lines
    block = "\n".join(lines[lines.index(CPU0):lines.index(CPU0) + 5])
    assert re.search(r"^\s+type\s+CPU$", block, re.M)
    assert re.search(r"^\s+allocator\s+default \(CPUAllocator", block, re.M)
    assert re.search(r"^\s+plugin\s+tensorweave-cpu ", block, re.M)


def test_devices_without_a_device_plugin_fails_with_install_hint():
    # every device plugin off (the OpenCL and CUDA ones provide devices where they can)
    proc = run_cli("devices", TENSORWEAVE_DISABLE_PLUGINS="cpu,opencl,cuda")
    assert proc.returncode == 1
    assert "pip install tensorweave-cpu" in proc.stderr
    assert "TENSORWEAVE_DISABLE_PLUGINS=cpu,opencl,cuda" in proc.stderr


def test_doctor_reports_environment():
    proc = run_cli("doctor")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(rf"^Python\s+{re.escape('.'.join(map(str, sys.version_info[:3])))} ", out, re.M)
    import numpy as np
    assert re.search(rf"^NumPy\s+{re.escape(np.__version__)} ", out, re.M)
    assert re.search(r"^BLAS\s+\S", out, re.M)
    assert re.search(r"^OpenCL\s+(ICDs in|no ICD in) ", out, re.M)
    assert re.search(r"^nvcc\s+", out, re.M)
    assert re.search(r"^device types\s+.*CPU", out, re.M)


def test_doctor_never_sets_openblas_coretype():
    proc = run_cli("doctor", OPENBLAS_CORETYPE="SkylakeX")
    assert proc.returncode == 0, proc.stderr
    if "openblas" in proc.stdout.lower():
        assert "OPENBLAS_CORETYPE=SkylakeX" in proc.stdout


@pytest.mark.parametrize("args,expected", [
    # OpenBLAS on an AVX-512 x86 CPU with the variable unset: suggest it, never set it.
    (("scipy-openblas", None, "x86_64", True, "Haswell"), "OPENBLAS_CORETYPE=SkylakeX"),
    (("openblas", None, "x86_64", None, None), "only CPUs with AVX-512"),
    # Set to a non-AVX-512 core on an AVX-512 CPU: point out what it costs.
    (("openblas", "Haswell", "x86_64", True, "Haswell"), "OPENBLAS_CORETYPE=SkylakeX"),
    # Nothing to say: already set sensibly, an AVX-512 core picked, no AVX-512, not OpenBLAS, not x86.
    (("openblas", "SkylakeX", "x86_64", True, "SkylakeX"), None),
    (("openblas", None, "x86_64", True, "SkylakeX"), None),
    (("openblas", None, "x86_64", False, "Haswell"), None),
    (("accelerate", None, "x86_64", True, None), None),
    (("openblas", None, "aarch64", False, "NEOVERSEN1"), None),
])
def test_openblas_hint(args, expected):
    hint = cli.openblas_hint(*args)
    if expected is None:
        assert hint is None
    else:
        assert expected in hint and "measure before relying on it" in hint


def test_version():
    proc = run_cli("version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"tensorweave {tw.__version__}"
    assert run_cli("--version").stdout.strip() == f"tensorweave {tw.__version__}"


def test_no_command_is_a_usage_error():
    proc = run_cli()
    assert proc.returncode == 2
    assert "plugins" in proc.stderr and "devices" in proc.stderr and "doctor" in proc.stderr


def test_console_script_is_installed():
    script = shutil.which("tensorweave", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip(f"no `tensorweave` console script next to {sys.executable}")
    proc = subprocess.run([script, "version"], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.strip() == f"tensorweave {tw.__version__}"


def test_main_in_process_returns_exit_code(capsys):
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.strip() == f"tensorweave {tw.__version__}"
