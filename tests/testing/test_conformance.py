"""The device conformance kit: its pytest plugin run in subprocesses (CPU against itself, the
FAKE accelerator, a deliberately broken kernel) and the comparison helpers in-process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorweave import plugins
from tensorweave.testing import conformance

REPO = Path(__file__).resolve().parents[2]
FAKE_DIR = REPO / "tests" / "testing" / "fake"
STATEFUL = {"ApplyAdagrad", "ApplyAdam", "ApplyGradientDescent", "ApplyMomentum", "ApplyRMSProp", "Assign",
            "AssignAdd", "AssignSub", "IsVariableInitialized", "RandomShuffle", "RandomStandardNormal",
            "RandomUniform", "RandomUniformInt", "TruncatedNormal", "Variable", "SaveV2", "RestoreV2"}


def run_pytest(cwd, *args, timeout=300):
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("TENSORWEAVE_DISABLE_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def cpu_stateful_ops():
    """Stateful ops with a CPU kernel (queues, readers, savers, ... added by later issues too)."""
    reg = plugins.registry()
    return {op for op in reg.kernels.ops_for_device("CPU") if op in reg.ops and reg.ops.get(op).stateful}


def core_ops():
    return {name for name, op_def in plugins.registry().ops.items() if op_def.source == "tensorweave"}


def test_cpu_against_itself_passes_for_every_op(tmp_path):
    report = tmp_path / "report.json"
    rc, out = run_pytest(tmp_path, "--tw-device=CPU", f"--tw-report={report}", "-q")
    assert rc == 0, out[-3000:]
    r = json.loads(report.read_text())
    assert r["ops_checked"] == len(r["checked"]) >= 125
    assert core_ops() - set(r["structural"]) <= set(r["checked"])
    assert f"{r['ops_checked']} ops checked, 0 failed" in out
    assert r["ops_failed"] == [] and r["missing"] == [] and r["dtype_gaps"] == {}
    assert "missing on CPU compared with CPU (0): none" in out
    # every op the core defines has example inputs (only other plugins' ops may lack them)
    assert not set(r["not_covered"]) & core_ops()
    assert set(r["structural"]) == set(conformance.STRUCTURAL)


def test_fake_accelerator_matches_cpu_and_lacks_the_stateful_ops(tmp_path):
    report = tmp_path / "report.json"
    rc, out = run_pytest(REPO, FAKE_DIR, "--tw-device=FAKE", f"--tw-report={report}", "-q")
    assert rc == 0, out[-3000:]
    r = json.loads(report.read_text())
    assert r["ops_checked"] >= 110 and r["ops_failed"] == []
    assert f"{r['ops_checked']} ops checked, 0 failed" in out
    # the fake device wraps the stateless CPU kernels only
    # the fake device holds variables (the core's variable kernels run on every device type);
    # other stateful ops stay on CPU
    assert STATEFUL <= cpu_stateful_ops()
    variables = {"Variable", "Assign", "AssignAdd", "AssignSub", "IsVariableInitialized", "ScatterUpdate",
                 "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
                 "ScatterNdUpdate", "ScatterNdAdd"}
    # so do TensorArrays (the core's kernels, registered for every device type)
    tensor_arrays = {op for op in cpu_stateful_ops() if op.startswith("TensorArray")}
    assert set(r["missing"]) == (cpu_stateful_ops() - variables - tensor_arrays) | {"Placeholder"}
    assert f"missing on FAKE compared with CPU ({len(r['missing'])}):" in out


BROKEN_CONFTEST = '''
import numpy as np
from tensorweave import errors, plugins
from tensorweave.ops import shape_fns
from tensorweave.testing import conformance
from tensorweave.testing.fake_device import FakeTensor, register_fake_devices


class Throwaway:
    """A wrong FAKE kernel for Neg, and two ops of its own with CPU and FAKE kernels."""

    @plugins.hookimpl
    def tensorweave_register_ops(self, registry):
        registry.op("TimesThree", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32, float64}"],
                    shape_fn=shape_fns.unchanged)
        registry.op("Weird", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32}", "k: int"],
                    shape_fn=shape_fns.unchanged)

    @plugins.hookimpl
    def tensorweave_register_kernels(self, registry):
        registry.register("Neg", "FAKE", factory=lambda ctx: lambda x: FakeTensor(-x.array + 1, x.device),
                          override=True)
        for dev in ("CPU", "FAKE"):
            wrap = (lambda f: f) if dev == "CPU" else (lambda f: lambda x: FakeTensor(f(x.array), x.device))
            registry.register("TimesThree", dev, wrap(lambda x: x * 3))
            registry.register("Weird", dev, wrap(lambda x: x))


def pytest_configure(config):
    register_fake_devices(count=1, ops={"Neg", "Abs", "MatMul", "Const", "Identity", "Mul", "Sum", "AddN",
                                        "Reshape"})
    plugins.register_plugin(Throwaway(), name="throwaway")
'''


def test_a_broken_kernel_is_reported_as_a_failure_naming_the_op(tmp_path):
    (tmp_path / "conftest.py").write_text(BROKEN_CONFTEST)
    report = tmp_path / "report.json"
    rc, out = run_pytest(tmp_path, "--tw-device=FAKE", f"--tw-report={report}", "-q")
    assert rc == 1, out[-3000:]
    r = json.loads(report.read_text())
    assert r["ops_failed"] == ["Neg"]
    assert "failed: Neg" in out
    # 7 wrapped ops + TimesThree + the core's kernels for every device type: Identity, Reshape,
    # StopGradient, ExpandDims, Squeeze, Shape, Size, Rank, BroadcastGradientArgs and Variable,
    # Assign, AssignAdd, AssignSub, IsVariableInitialized and the 9 Scatter ops
    assert f"{r['ops_checked']} ops checked, 1 failed" in out and r["ops_checked"] == 31
    assert "FAILED tensorweave-conformance[FAKE]::Neg[float32]" in out
    assert "Neg (float32, values) on FAKE differs from the CPU reference:" in out
    assert "Neg[grad-float32]" in r["failed_checks"]            # Neg's gradient is a Neg on FAKE
    assert not [c for c in r["failed_checks"] if not c.startswith("Neg[")]
    assert r["not_covered"] == ["Weird"] and r["auto_covered"] == ["TimesThree"]
    assert "not covered (no input generator) (1): Weird" in out
    assert {"Cumsum", "Conv2D", "ApplyAdam"} <= set(r["missing"]) and "MatMul" not in r["missing"]


def test_ops_option_limits_the_checks(tmp_path):
    rc, out = run_pytest(tmp_path, "--tw-device=cpu", "--tw-ops=MatMul,Relu", "--tw-no-gradients", "-v")
    assert rc == 0, out[-3000:]
    assert "tensorweave-conformance[CPU]::MatMul[float32] PASSED" in out
    assert "grad-" not in out
    assert "2 ops checked, 0 failed" in out


def test_without_the_option_the_plugin_adds_nothing(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    rc, out = run_pytest(tmp_path, "-q")
    assert rc == 0, out
    assert "1 passed" in out and "conformance" not in out


def test_unknown_device_type_is_a_usage_error(tmp_path):
    rc, out = run_pytest(tmp_path, "--tw-device=NOPE")
    assert rc == 4
    assert "no installed plugin provides device type NOPE" in out and "CPU" in out


# ---------------------------------------------------------------------------------------
# in-process
def test_compare_checks_dtype_shape_and_tolerance():
    a = np.array([1.0, 2.0], np.float32)
    assert conformance.compare(a, a + 1e-6, np.float32) is None
    assert "differ" in conformance.compare(a, a + 1e-2, np.float32)
    assert "dtype float64" in conformance.compare(a.astype(np.float64), a, np.float32)
    assert "shape (1, 2)" in conformance.compare(a[None], a, np.float32)
    assert "1 of 2 elements differ" in conformance.compare(np.array([1, 2]), np.array([1, 3]), np.int64)
    nan = np.array([np.nan, 1.0])
    assert conformance.compare(nan, nan, np.float64) is None
    h = np.array([1.0], np.float16)
    assert conformance.compare(h, h * np.float16(1.004), np.float16) is None   # float16: 1e-2


def test_plan_covers_every_core_op_and_the_cpu_misses_nothing():
    p = conformance.plan("CPU")
    covered = {c.op for c in p.checks}
    assert core_ops() - covered - set(p.structural) == set()
    assert p.missing == [] and p.errors == {}
    names = {c.name for c in p.checks}
    assert {"MatMul[float32]", "MatMul[grad-float32]", "Cast[float32->int32]", "Conv2D[grad-float32]"} <= names
    assert "Equal[grad-float32]" not in names           # not differentiable
    assert conformance.missing_ops("CPU") == []


def test_check_run_passes_and_raises_for_a_dtype_without_kernel():
    p = conformance.plan("CPU", ops={"MatMul"})
    for check in p.checks:
        check.run()
    cases = conformance.matmul("float32", np.random.default_rng(0))
    conformance.Check("MatMul", "float32", "values", cases, "CPU").run()
    with pytest.raises(conformance.Unsupported, match="no NOPE kernel for MatMul with {'T': 'float32'}"):
        conformance.Check("MatMul", "float32", "values", cases, "NOPE").run()


def test_value_generators_respect_domains():
    rng = np.random.default_rng(0)
    assert (conformance.values((50,), "float32", rng, "pos") >= 0.5).all()
    assert (conformance.values((50,), "int32", rng, "nonzero") != 0).all()
    assert (conformance.values((50,), "uint8", rng, "any") >= 0).all()
    assert conformance.values((2, 3), "bool", rng).dtype == np.bool_
    z = conformance.values((4,), "complex64", rng, "pos")
    assert z.dtype == np.complex64 and (z.real >= 0.5).all()


@pytest.mark.parametrize("op", ["Softmax", "Conv2DBackpropInput", "AvgPoolGrad", "MaxPoolGrad", "StridedSlice"])
def test_table_shapes_build(op):
    p = conformance.plan("CPU", ops={op}, gradients=False)
    assert p.checks
    for check in p.checks:
        check.run()
