"""The transport conformance kit: its pytest plugin run in subprocesses (the in-process
transport, which must pass it; a deliberately careless transport, which must fail exactly
where it is careless; usage errors). The gRPC and UCX plugins run it in their own tests."""

import subprocess
import sys

from tensorweave.testing import transport_kit

CARELESS_CONFTEST = '''
import dataclasses

from tensorweave import plugins
from tensorweave.distributed.transport import InProcTransport, Security


class CarelessChannel:
    """Forwards to an in-process channel but never closes."""

    def __init__(self, inner):
        self.inner = inner

    def call(self, method, payload, timeout=None):
        return self.inner.call(method, payload, timeout)

    def fetch(self, method, payload, timeout=None):
        return self.inner.fetch(method, payload, timeout)

    def close(self):
        pass


class Careless(InProcTransport):
    """The in-process transport, but its servers ignore the token in their security settings
    and its channels cannot be closed."""

    name = "careless"

    def server(self, address, dispatcher, security=None):
        return super().server(address, dispatcher, dataclasses.replace(security or Security(), token=None))

    def channel(self, address, security=None):
        return CarelessChannel(super().channel(address, security))


class CarelessPlugin:
    @plugins.hookimpl
    def tensorweave_register_transports(self, registry):
        registry.register("careless", Careless)


def pytest_configure(config):
    plugins.register_plugin(CarelessPlugin(), name="careless")
'''


def _pytest_all(cwd, *arg_lists):
    """[(returncode, output)] of one pytest process per argument list, run concurrently."""
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for args in arg_lists]
    results = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            results.append((proc.returncode, out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def test_the_in_process_transport_passes_and_skips_what_needs_another_process(tmp_path):
    report, output = transport_kit.run_in_subprocess("inproc", tmp_path)
    assert report["failed"] == [] and report["not_run"] == [], output[-5000:]
    assert report["skipped"] == {
        "foreign_bytes": "the in-process transport has no port to send bytes to",
        "peer_process": "the in-process transport cannot reach another process",
        "killed_peer": "the in-process transport cannot reach another process",
    }
    assert set(report["passed"]) | set(report["skipped"]) == set(transport_kit.CHECKS)
    assert f"{len(transport_kit.CHECKS)} checks: {len(report['passed'])} passed, 0 failed, 3 skipped" in output


def test_a_careless_transport_fails_exactly_the_checks_it_breaks(tmp_path):
    (tmp_path / "conftest.py").write_text(CARELESS_CONFTEST)
    report, output = transport_kit.run_in_subprocess("careless", tmp_path)
    assert report["failed"] == ["auth", "closed_channel"], output[-5000:]
    assert "FAILED tensorweave-transport[careless]::auth" in output
    assert "expected UnauthenticatedError, nothing was raised" in output
    assert "failed: auth, closed_channel" in output


def test_usage_errors_and_nothing_collected_without_the_option(tmp_path):
    # The four runs are independent: started together, they share the cores.
    (rc1, out1), (rc2, out2), (rc3, out3), (rc4, out4) = _pytest_all(
        tmp_path, ["--tw-transport=nope"], ["--tw-transport=inproc", "--tw-transport-checks=auth,bogus"],
        ["--tw-transport=inproc", "--tw-transport-checks=auth,deadlines", "-q"], [])
    assert rc1 == 4 and "no installed plugin registers transport 'nope'" in out1 and "inproc" in out1, out1
    assert rc2 == 4 and "no check named bogus" in out2, out2
    assert rc3 == 0 and "2 checks: 2 passed, 0 failed, 0 skipped" in out3, out3
    assert rc4 == 5 and "no tests ran" in out4, out4  # pytest's "nothing collected"
