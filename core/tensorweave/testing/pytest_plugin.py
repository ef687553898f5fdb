"""pytest plugin of the device and transport conformance kits (entry point ``pytest11: tensorweave``).

``pytest --tw-device=OPENCL`` adds, to whatever else is collected, one test per op and dtype
that compares the device's values with the CPU reference, and one per differentiable op that
compares gradients (see :mod:`tensorweave.testing.conformance`), and ends with a report:
how many ops were checked and failed, which ops have no example inputs ("not covered"), and
which ops the device lacks compared with the CPU. Without ``--tw-device`` the plugin only
adds its options: it builds no graphs and adds no tests.

Options: ``--tw-ops=MatMul,Relu`` limits the ops, ``--tw-no-gradients`` skips the gradient
checks, ``--tw-report=FILE`` also writes the report as JSON. A device that is registered at
run time (a test double, say) is registered from a ``conftest.py``'s ``pytest_configure``.

``pytest --tw-transport=grpc`` adds one test per check of the transport kit
(:mod:`tensorweave.testing.transport_kit`: real servers and channels of that transport, checked
against the contract in ``tensorweave.distributed.transport``) and ends with a report of
the checks passed, failed and skipped (with why). ``--tw-transport-checks=auth,deadlines``
limits the checks, ``--tw-transport-report=FILE`` also writes the report as JSON. Without
``--tw-transport`` nothing of it is collected.

"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorweave import plugins
from tensorweave.testing import conformance, transport_kit


def pytest_addoption(parser):
    group = parser.getgroup("tensorweave", "tensorweave device and transport conformance")
    group.addoption("--tw-device", action="store", default=None, metavar="TYPE",
                    help="check device type TYPE (e.g. OPENCL) against the CPU reference")
    group.addoption("--tw-ops", action="store", default=None, metavar="OP[,OP...]",
                    help="only check these ops")
    group.addoption("--tw-no-gradients", action="store_true", default=False,
                    help="skip the gradient checks")
    group.addoption("--tw-report", action="store", default=None, metavar="FILE",
                    help="write the conformance report as JSON to FILE")
    group.addoption("--tw-transport", action="store", default=None, metavar="NAME",
                    help="check the installed transport NAME (e.g. grpc) against the transport contract")
    group.addoption("--tw-transport-checks", action="store", default=None, metavar="CHECK[,CHECK...]",
                    help="only run these checks of the transport kit")
    group.addoption("--tw-transport-report", action="store", default=None, metavar="FILE",
                    help="write the transport kit's report as JSON to FILE")


def pytest_configure(config):
    config.addinivalue_line("markers", "tw_conformance: a tensorweave device conformance check")
    config.addinivalue_line("markers", "tw_transport: a check of the tensorweave transport kit")
    device = config.getoption("tw_device")
    if device:
        config.stash[_STASH] = _State(device.upper())
    transport = config.getoption("tw_transport")
    if transport:
        config.stash[_TRANSPORT_STASH] = _TransportState(transport)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    _collect_device_checks(session, config, items)
    _collect_transport_checks(session, config, items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    state = item.config.stash.get(_STASH, None)
    if state is not None and isinstance(item, ConformanceItem):
        _record(state, item, rep)
    transport_state = item.config.stash.get(_TRANSPORT_STASH, None)
    if transport_state is not None and isinstance(item, TransportCheckItem):
        _record_transport(transport_state, item, rep)
    return rep


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _device_summary(terminalreporter, config)
    _transport_summary(terminalreporter, config)


# ----------------------------------------------------------------------------------------
# The device kit


class ConformanceItem(pytest.Item):
    def __init__(self, *, check, **kw):
        super().__init__(**kw)
        self.check = check
        self.add_marker(pytest.mark.tw_conformance)

    def runtest(self):
        try:
            self.check.run()
        except conformance.Unsupported as e:
            pytest.skip(str(e))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, conformance.ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return Path(conformance.__file__), None, f"tensorweave conformance {self.name}"


class ConformanceCollector(pytest.Collector):
    def __init__(self, *, plan, **kw):
        super().__init__(**kw)
        self.plan = plan

    def collect(self):
        for check in self.plan.checks:
            yield ConformanceItem.from_parent(self, name=check.name, check=check)


class _State:
    def __init__(self, device_type):
        self.device_type = device_type
        self.plan = None
        self.outcomes: dict[str, dict[str, list]] = {}   # op -> outcome -> [check names]
        self.skips: dict[str, list] = {}


_STASH = pytest.StashKey["_State"]()


def _collect_device_checks(session, config, items):
    state = config.stash.get(_STASH, None)
    if state is None:
        return

    reg = plugins.registry()
    if state.device_type not in reg.device_factories:
        known = ", ".join(sorted(reg.device_factories)) or "none"
        raise pytest.UsageError(
            f"--tw-device={state.device_type}: no installed plugin provides device type {state.device_type} "
            f"(installed: {known}); see `tensorweave devices`")
    ops = config.getoption("tw_ops")
    ops = {o.strip() for o in ops.split(",") if o.strip()} if ops else None
    state.plan = conformance.plan(state.device_type, ops=ops, gradients=not config.getoption("tw_no_gradients"))
    name = f"tensorweave-conformance[{state.device_type}]"
    col = ConformanceCollector.from_parent(session, name=name, nodeid=name, plan=state.plan)
    new = list(col.collect())
    items.extend(new)


def _record(state, item, rep):
    op = item.check.op
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        kind = "failed" if rep.failed else "skipped" if rep.skipped else "passed"
        state.outcomes.setdefault(op, {}).setdefault(kind, []).append(item.check.name)
        if rep.skipped:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            state.skips.setdefault(op, []).append(f"{item.check.dtype}: {reason.removeprefix('Skipped: ')}")


def summary(state) -> dict:
    p = state.plan
    checked = sorted(op for op, o in state.outcomes.items() if o.get("passed") or o.get("failed"))
    failed = sorted(op for op, o in state.outcomes.items() if o.get("failed"))
    only_skipped = sorted(op for op, o in state.outcomes.items() if not o.get("passed") and not o.get("failed"))
    n_checks = sum(len(v) for o in state.outcomes.values() for k, v in o.items() if k != "skipped")
    return {
        "device_type": state.device_type,
        "ops_checked": len(checked),
        "checked": checked,
        "ops_failed": failed,
        "checks_run": n_checks,
        "failed_checks": sorted(c for o in state.outcomes.values() for c in o.get("failed", [])),
        "ops_all_skipped": only_skipped,
        "dtype_gaps": {op: sorted({s.split(":", 1)[0] for s in v}) for op, v in sorted(state.skips.items())},
        "not_covered": sorted(p.not_covered),
        "structural": sorted(p.structural),
        "auto_covered": sorted(p.auto_covered),
        "generator_errors": dict(p.errors),
        "missing": list(p.missing),
    }


def _wrap(names, width=100, indent="    "):
    lines, cur = [], indent
    for n in names:
        piece = n + ", "
        if len(cur) + len(piece) > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent
        cur += piece
    if cur.strip():
        lines.append(cur.rstrip().rstrip(","))
    return lines


def _device_summary(terminalreporter, config):
    state = config.stash.get(_STASH, None)
    if state is None or state.plan is None:
        return
    s = summary(state)
    tr = terminalreporter
    dev = s["device_type"]
    tr.section(f"tensorweave conformance: {dev} vs CPU")
    tr.write_line(f"{s['ops_checked']} ops checked, {len(s['ops_failed'])} failed ({s['checks_run']} checks run)")
    if s["ops_failed"]:
        tr.write_line("failed: " + ", ".join(s["ops_failed"]))
    if s["ops_all_skipped"]:
        tr.write_line(f"skipped for every dtype ({len(s['ops_all_skipped'])}): " + ", ".join(s["ops_all_skipped"]))
    if s["dtype_gaps"]:
        tr.write_line(f"dtypes without a {dev} kernel:")
        for line in _wrap([f"{op} ({', '.join(d)})" for op, d in s["dtype_gaps"].items()]):
            tr.write_line(line)
    tr.write_line(f"not covered (no input generator) ({len(s['not_covered'])}): "
                  + (", ".join(s["not_covered"]) or "none"))
    if s["auto_covered"]:
        tr.write_line("covered by the element-wise fallback: " + ", ".join(s["auto_covered"]))
    for op, err in s["generator_errors"].items():
        tr.write_line(f"input generator failed for {op}: {err}")
    tr.write_line(f"missing on {dev} compared with CPU ({len(s['missing'])}):" + ("" if s["missing"] else " none"))
    for line in _wrap(s["missing"]):
        tr.write_line(line)
    path = config.getoption("tw_report")
    if path:
        Path(path).write_text(json.dumps(s, indent=1, sort_keys=True))


# ----------------------------------------------------------------------------------------
# The transport kit


class TransportCheckItem(pytest.Item):
    def __init__(self, *, check, transport, **kw):
        super().__init__(**kw)
        self.check, self.transport = check, transport
        self.add_marker(pytest.mark.tw_transport)

    def runtest(self):
        try:
            transport_kit.run_check(self.transport, self.check)
        except transport_kit.Unsupported as e:
            pytest.skip(str(e))

    def repr_failure(self, excinfo, style=None):
        # From the kit down to the failure: pytest's own frames above it say nothing.
        excinfo.traceback = excinfo.traceback.cut(path=Path(transport_kit.__file__))
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return Path(transport_kit.__file__), None, f"tensorweave transport kit {self.name}: {self.check.doc}"


class TransportKitCollector(pytest.Collector):
    def __init__(self, *, transport, checks, **kw):
        super().__init__(**kw)
        self.transport, self.checks = transport, checks

    def collect(self):
        for check in self.checks:
            yield TransportCheckItem.from_parent(self, name=check.name, check=check, transport=self.transport)


class _TransportState:
    def __init__(self, name):
        self.name = name
        self.checks: list = []
        self.outcomes: dict[str, str] = {}      # check -> passed / failed / skipped
        self.skipped: dict[str, str] = {}       # check -> why


_TRANSPORT_STASH = pytest.StashKey["_TransportState"]()


@pytest.fixture
def tw_transport_kit():
    """``tw_transport_kit(name)`` -> a ``transport_kit.Kit`` for transport ``name`` (servers,
    channels, peer processes); after the test they are stopped, closed and reaped, and every
    thread they started must have ended."""
    kits = []

    def make(name):
        kits.append(transport_kit.open_kit(name))
        return kits[-1]

    yield make
    for kit in kits:
        kit.finish()


def _collect_transport_checks(session, config, items):
    state = config.stash.get(_TRANSPORT_STASH, None)
    if state is None:
        return

    installed = sorted(n for n, _ in plugins.registry().transports.items())
    if state.name not in installed:
        raise pytest.UsageError(f"--tw-transport={state.name}: no installed plugin registers transport "
                                f"{state.name!r} (installed: {', '.join(installed)}); see `tensorweave plugins`")
    wanted = config.getoption("tw_transport_checks")
    names = [n.strip() for n in wanted.split(",") if n.strip()] if wanted else list(transport_kit.CHECKS)
    unknown = [n for n in names if n not in transport_kit.CHECKS]
    if unknown:
        raise pytest.UsageError(f"--tw-transport-checks: no check named {', '.join(unknown)} "
                                f"(checks: {', '.join(transport_kit.CHECKS)})")
    state.checks = [transport_kit.CHECKS[n] for n in names]
    name = f"tensorweave-transport[{state.name}]"
    col = TransportKitCollector.from_parent(session, name=name, nodeid=name, transport=state.name, checks=state.checks)
    items.extend(col.collect())


def _record_transport(state, item, rep):
    if rep.when == "call" or not rep.passed:  # a failed setup or teardown fails the check too
        if state.outcomes.get(item.name) != "failed":
            state.outcomes[item.name] = "failed" if rep.failed else "skipped" if rep.skipped else "passed"
        if rep.skipped:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            state.skipped[item.name] = reason.removeprefix("Skipped: ")


def transport_summary(state) -> dict:
    by = {kind: [c.name for c in state.checks if state.outcomes.get(c.name) == kind]
          for kind in ("passed", "failed", "skipped")}
    return {"transport": state.name, "checks": [c.name for c in state.checks], "passed": by["passed"],
            "failed": by["failed"], "skipped": {n: state.skipped.get(n, "") for n in by["skipped"]},
            "not_run": [c.name for c in state.checks if c.name not in state.outcomes]}


def _transport_summary(tr, config):
    state = config.stash.get(_TRANSPORT_STASH, None)
    if state is None or not state.checks:
        return
    s = transport_summary(state)
    tr.section(f"tensorweave transport kit: {s['transport']}")
    tr.write_line(f"{len(s['checks'])} checks: {len(s['passed'])} passed, {len(s['failed'])} failed, "
                  f"{len(s['skipped'])} skipped"
                  + (f", {len(s['not_run'])} not run" if s["not_run"] else ""))
    if s["failed"]:
        tr.write_line("failed: " + ", ".join(s["failed"]))
    for name, why in s["skipped"].items():
        tr.write_line(f"skipped {name}: {why}")
    path = config.getoption("tw_transport_report")
    if path:
        Path(path).write_text(json.dumps(s, indent=1))
