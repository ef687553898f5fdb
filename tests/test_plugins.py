"""Plugin discovery: broken plugins, conflicts, overrides, disabling, run-time registration.

Each scenario installs small throw-away distributions (a ``*.dist-info`` with METADATA and
entry_points.txt next to a module, on PYTHONPATH) and runs in a fresh interpreter, because
plugins load once per process and this process's registry must stay untouched. The run-time
registration test is in-process and resets the registry afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op

TIMEOUT = 60

CPU_KERNEL_CONFLICT = textwrap.dedent("""
    from tensorweave.plugins import hookimpl

    @hookimpl
    def tensorweave_register_kernels(registry):
        # Same key as tensorweave-cpu's Add: op "Add", device CPU, no dtype constraints.
        registry.register("Add", "CPU", lambda x, y: x * 10 + y{override})
""")


def make_dist(site, dist: str, ep_name: str, module: str, source: str, version: str = "1.0"):
    """Install a minimal distribution into ``site`` (a directory that goes on PYTHONPATH)."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[tensorweave]\n{ep_name} = {module}\n")
    return site


def _env(site=None, **extra):
    env = {k: v for k, v in os.environ.items() if k != "TENSORWEAVE_DISABLE_PLUGINS"}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def run_python(code: str, site=None, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_env(site, **extra),
                          capture_output=True, text=True, timeout=TIMEOUT)


def run_cli(*args, site=None, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorweave", *args], env=_env(site, **extra),
                          capture_output=True, text=True, timeout=TIMEOUT)


def last_json(proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
def test_broken_plugin_is_reported_and_the_rest_still_load(tmp_path):
    site = make_dist(tmp_path / "site", "tw-broken", "broken", "tw_broken_plugin",
                     'raise ImportError("libfrobnicate.so.3: cannot open shared object file")\n')
    proc = run_python("""
        import json
        import logging
        logging.basicConfig(level=logging.DEBUG)  # the library only logs; the program decides what shows
        import tensorweave as tw
        from tensorweave import plugins
        info = {p.name: p for p in plugins.registry().plugins}
        x = tw.placeholder(tw.float32, [2])
        with tw.Session() as s:
            out = s.run(tw.add(x, x), {x: [1.0, 2.0]})
        print(json.dumps({"broken": [info["broken"].status, info["broken"].distribution, info["broken"].error],
                          "cpu": info["cpu"].status, "out": out.tolist()}))
    """, site)
    got = last_json(proc)
    assert got["broken"][:2] == ["failed", "tw-broken"]
    assert got["broken"][2] == "ImportError: libfrobnicate.so.3: cannot open shared object file"
    assert got["cpu"] == "loaded"
    assert got["out"] == [2.0, 4.0]
    # the loader's warning, and at DEBUG the traceback
    assert "WARNING:tensorweave.plugins:" in proc.stderr and "'broken'" in proc.stderr
    assert "libfrobnicate.so.3" in proc.stderr and "Traceback (most recent call last)" in proc.stderr
    quiet = run_python("import tensorweave as tw; from tensorweave import plugins; plugins.registry()", site)
    assert quiet.returncode == 0 and quiet.stderr == ""  # no logging configured: a library prints nothing

    cli = run_cli("plugins", site=site)
    assert cli.returncode == 0, cli.stderr
    line = next(ln for ln in cli.stdout.splitlines() if ln.startswith("broken "))
    assert "tw-broken 1.0" in line and "failed" in line and "libfrobnicate.so.3" in line
    assert "1 failed" in cli.stdout
    assert "libfrobnicate" not in cli.stderr  # the table says it; the loader's warning would repeat it


@pytest.mark.parametrize("source,hook,why", [
    # a misspelled hook name, marked: it would load as "loaded" and register nothing
    ("""
        from tensorweave.plugins import hookimpl

        @hookimpl
        def tensorweave_register_kernel(registry):
            registry.register("Add", "CPU", lambda x, y: x + y)
    """, "tensorweave_register_kernel", "did you mean 'tensorweave_register_kernels'"),
    # the same without the marker (pytest's rule: a function named like a hook is one)
    ("""
        def tensorweave_register_op(registry):
            pass
    """, "tensorweave_register_op", "did you mean 'tensorweave_register_ops'"),
    # wrappers would silently do nothing: each plugin's registration hooks run on their own
    ("""
        from tensorweave.plugins import hookimpl

        @hookimpl(wrapper=True)
        def tensorweave_register_kernels(registry):
            return (yield)
    """, "tensorweave_register_kernels", "wrapper=True"),
    ("""
        from tensorweave.plugins import hookimpl

        @hookimpl(tryfirst=True)
        def tensorweave_register_ops(registry):
            pass
    """, "tensorweave_register_ops", "tryfirst=True"),
])
def test_invalid_hooks_are_errors_naming_the_plugin_and_hook(tmp_path, source, hook, why):
    site = make_dist(tmp_path / "site", "tw-typo", "typo", "tw_typo_plugin", source)
    cli = run_cli("plugins", site=site)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    line = next(ln for ln in cli.stdout.splitlines() if ln.startswith("typo "))
    assert "tw-typo 1.0" in line and "invalid" in line and hook in line and why in line
    assert "plugin 'typo' (tw-typo 1.0) does not match tensorweave's hooks" in cli.stderr
    # the others still load and work, and the invalid one registered nothing
    proc = run_python("""
        import json
        import tensorweave as tw
        from tensorweave import plugins
        info = {p.name: p for p in plugins.registry().plugins}
        with tw.Session() as s:
            out = s.run(tw.add(1.0, 2.0))
        print(json.dumps([info["typo"].status, info["typo"].registered, info["cpu"].status, float(out)]))
    """, site)
    assert last_json(proc) == ["invalid", {}, "loaded", 3.0]


def test_two_distributions_with_the_same_kernel_key_conflict(tmp_path):
    site = make_dist(tmp_path / "site", "tw-dup-add", "dup_add", "tw_dup_add",
                     CPU_KERNEL_CONFLICT.format(override=""))
    proc = run_python("""
        import json
        from tensorweave import plugins
        from tensorweave.framework import errors
        try:
            plugins.registry()
        except errors.PluginConflictError as e:
            print(json.dumps(str(e)))
        else:
            print(json.dumps(None))
    """, site)
    message = last_json(proc)
    assert message is not None, "expected a PluginConflictError"
    assert "'Add'" in message and "CPU" in message
    assert "tensorweave-cpu" in message and "tw-dup-add" in message

    cli = run_cli("plugins", site=site)
    assert cli.returncode == 1
    out = cli.stdout + cli.stderr
    assert "plugin conflict" in out
    assert "tensorweave-cpu" in out and "tw-dup-add" in out and "'Add'" in out

    devices = run_cli("devices", site=site)
    assert devices.returncode == 1 and "plugin conflict" in devices.stderr


def test_override_replaces_the_kernel_without_error(tmp_path):
    # The entry point is named so that it loads after "cpu" (plugins load in name order).
    site = make_dist(tmp_path / "site", "tw-better-add", "zz_better_add", "tw_better_add",
                     CPU_KERNEL_CONFLICT.format(override=", override=True"))
    proc = run_python("""
        import json
        import tensorweave as tw
        from tensorweave import plugins
        info = {p.name: p for p in plugins.registry().plugins}["zz_better_add"]
        x = tw.placeholder(tw.float32, [2])
        y = tw.placeholder(tw.float32, [2])
        with tw.Session() as s:
            out = s.run(tw.add(x, y), {x: [1.0, 2.0], y: [3.0, 4.0]})
        print(json.dumps({"status": info.status, "registered": info.registered, "out": out.tolist()}))
    """, site)
    got = last_json(proc)
    assert got["status"] == "loaded"
    assert got["registered"] == {}  # it replaced a kernel, it added none
    assert got["out"] == [13.0, 24.0]  # x * 10 + y: the override's kernel ran, not np.add

    cli = run_cli("plugins", site=site)
    assert cli.returncode == 0, cli.stderr


def test_two_distributions_defining_the_same_op_conflict(tmp_path):
    op_plugin = """
        from tensorweave.plugins import hookimpl

        @hookimpl
        def tensorweave_register_ops(registry):
            registry.op("Frobnicate", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32}"],
                        shape_fn=lambda op: [op.inputs[0].shape])
    """
    site = make_dist(tmp_path / "site", "tw-frob-one", "frob_one", "tw_frob_one", op_plugin)
    make_dist(site, "tw-frob-two", "frob_two", "tw_frob_two", op_plugin)
    proc = run_python("""
        import json
        from tensorweave import plugins
        from tensorweave.framework import errors
        try:
            plugins.registry()
        except errors.PluginConflictError as e:
            print(json.dumps(str(e)))
        else:
            print(json.dumps(None))
    """, site)
    message = last_json(proc)
    assert message is not None, "expected a PluginConflictError"
    assert "'Frobnicate'" in message
    assert "tw-frob-one 1.0" in message and "tw-frob-two 1.0" in message

    cli = run_cli("plugins", site=site)
    assert cli.returncode == 1
    assert "tw-frob-one" in cli.stderr and "tw-frob-two" in cli.stderr


def test_disabling_the_cpu_plugin(tmp_path):
    proc = run_python("""
        import json
        import tensorweave as tw
        from tensorweave import plugins
        from tensorweave.framework import errors
        x = tw.placeholder(tw.float32, [None, 3])
        y = tw.matmul(x, tw.constant([[1.0], [2.0], [3.0]]))  # graph construction needs no device
        out = {"shape": y.shape.as_list(), "cpu": {p.name: p for p in plugins.registry().plugins}["cpu"].status}
        try:
            tw.Session()
        except errors.FailedPreconditionError as e:
            out["error"] = str(e)
        print(json.dumps(out))
    """, TENSORWEAVE_DISABLE_PLUGINS="cpu,opencl,cuda")
    got = last_json(proc)
    assert got["shape"] == [None, 1]
    assert got["cpu"] == "disabled"
    assert "error" in got, "tw.Session() should fail without a device plugin"
    assert "tensorweave-cpu" in got["error"]

    cli = run_cli("devices", TENSORWEAVE_DISABLE_PLUGINS="cpu,opencl,cuda")
    assert cli.returncode == 1
    assert "tensorweave-cpu" in cli.stderr and "no devices are available" in cli.stderr

    listing = run_cli("plugins", TENSORWEAVE_DISABLE_PLUGINS="cpu")
    assert listing.returncode == 0
    assert "disabled" in next(ln for ln in listing.stdout.splitlines() if ln.startswith("cpu "))


# ---------------------------------------------------------------------------------------------
class TimesThreePlugin:
    """A third-party plugin: one op, its shape function and a CPU kernel."""

    @plugins.hookimpl
    def tensorweave_register_ops(self, registry):
        registry.op("TimesThree", inputs=["x: T"], outputs=["y: T"], attrs=["T: {float32, float64}"],
                    shape_fn=lambda op: [op.inputs[0].shape])

    @plugins.hookimpl
    def tensorweave_register_kernels(self, registry):
        registry.register("TimesThree", "CPU", lambda x: x * 3)

    @plugins.hookimpl
    def tensorweave_plugin_status(self):
        return "times three, on CPU only"


@pytest.fixture
def fresh_registry():
    plugins._reset_for_tests()
    yield
    plugins._reset_for_tests()


def test_runtime_registered_plugin_works_end_to_end(fresh_registry):
    info = plugins.register_plugin(TimesThreePlugin(), name="times_three", distribution="tw-times-three")
    assert info.status == "loaded", info.error
    assert info.registered == {"ops": 1, "kernels": 1}
    assert info.note == "times three, on CPU only"
    assert plugins.registry().ops.get("TimesThree").source == "tw-times-three"

    x = tw.placeholder(tw.float32, [None, 2])
    y = apply_op("TimesThree", [x])
    assert y.dtype == tw.float32 and y.shape.as_list() == [None, 2]
    with tw.Session() as s:
        out = s.run(tw.add(y, 1.0), {x: [[1, 2], [3, 4]]})
    np.testing.assert_array_equal(out, np.array([[4, 7], [10, 13]], np.float32))

    with pytest.raises(errors.InvalidArgumentError, match="TimesThree"):
        apply_op("TimesThree", [tw.constant([1, 2], dtype=tw.int32)])  # int32 is not in T's constraint
