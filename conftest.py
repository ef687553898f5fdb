"""How the test run is split between processes (tox.ini's ``test`` environment runs pytest
twice). Tests that start the servers or task processes of a cluster carry the ``serial``
mark and run alone, one after another, after everything else has run in two processes
(pytest-xdist, ``-n 2 -m "not serial"``). A cluster's health checks time out after a second
and the fault-tolerance tests have deadlines of a few seconds: on a 2-core machine shared
with a second pytest process their tasks were starved past them. Everything else does not
care what else runs beside it.

What is ``serial``: every test under the paths below (the distributed runtime, the network
transports, the transport kit), a ```python block of docs/ that starts a server, and the
tests marked ``@pytest.mark.serial`` where they are written (an example run as a cluster).
A new test that starts a cluster elsewhere must be marked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
SERIAL_PATHS = (
    "tests/distributed/",
    "tests/testing/test_transport_kit.py",
    "plugins/transport_grpc/",
    "plugins/transport_ucx/",
)


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: starts a cluster's servers or processes; runs alone (conftest.py)")


def _starts_a_server(item) -> bool:
    callspec = getattr(item, "callspec", None)
    code = callspec.params.get("code") if callspec is not None else None
    return isinstance(code, str) and "Server(" in code  # tests/test_docs.py's blocks


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            rel = Path(item.path).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            continue
        if rel.startswith(SERIAL_PATHS) or _starts_a_server(item):
            item.add_marker(pytest.mark.serial)


def pytest_sessionfinish(session, exitstatus):
    # The two runs select by mark: a run of some paths (`tox -e test -- tests/ops`) may have
    # nothing for one of them. That run has passed, not failed to collect.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and session.config.getoption("markexpr", ""):
        session.exitstatus = pytest.ExitCode.OK
