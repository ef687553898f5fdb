"""A task under a flood of requests a crashing or hostile client would send, and requests
with misspelled or ill-typed fields (docs/distributed.md, "Limits and hardening").

* Tables stay bounded: tens of thousands of AbortStep/CleanupStep for unknown steps,
  RegisterGraph without DeregisterGraph, steps never cleaned up, CreateSession never closed —
  past each bound unused entries give way, else ``ResourceExhaustedError`` naming the limit.
* Idle master-service sessions expire, and a thin client carries on with a new one.
* One health checker per process, however many sessions: a thread for all of them, one
  check per task and interval.
* Every method's header is checked against its schema (``wire.REQUEST_FIELDS``): a misspelled
  or null ``containers`` in ResetContainers resets nothing.

The worker's own logic runs in this process (``inproc``); what is about a real server — its
threads, its answers over the network — runs against a ``tensorweave worker`` process over
grpc (``LocalCluster``, always reaped).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import stat
import tempfile
import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed import cluster as cl
from tensorweave.distributed import launcher, wire
from tensorweave.distributed.launcher import pick_ports
from tensorweave.distributed.master import DistributedSession, HealthMonitor
from tensorweave.distributed.server import Server
from tensorweave.distributed.testing import LocalCluster
from tensorweave.distributed.testing import poll as _poll
from tensorweave.distributed.transport import Security, get_transport
from tensorweave.distributed.worker import Limits

DEV = "/job:worker/replica:0/task:0/device:CPU:0"
F32 = {"type": "float32"}
INITIAL = np.array([1.0, 2.0, 3.0], np.float32)
needs_grpc = pytest.mark.skipif("grpc" not in {n for n, _ in plugins.registry().transports.items()},
                                reason="needs the grpc transport (tensorweave-grpc)")


def _node(name, op, inputs=(), **attr):
    return {"name": name, "op": op, "input": list(inputs), "device": DEV, "attr": attr}


def _register(nodes, feeds=(), fetches=()):
    return {"partitions": [{"device": DEV, "graph_def": {"node": nodes}, "loops": {}}],
            "feeds": list(feeds), "fetches": list(fetches), "feed_types": {f: "float32" for f in feeds}}


VAR = _node("v", "Variable", container={"s": ""}, dtype=F32, shape={"shape": [3]}, shared_name={"s": "hardened"})
INIT = _register([VAR, _node("init", "Const", dtype=F32,
                            value={"tensor": {"dtype": "F32", "shape": [3], "data": "AACAPwAAAEAAAEBA"}}),
                  _node("assign", "Assign", ["v:0", "init:0"], T=F32, use_locking={"b": True},
                        validate_shape={"b": True})], fetches=["assign:0"])
READ = _register([VAR, _node("read", "Identity", ["v:0"], T=F32)], fetches=["read:0"])
# Reads a variable nothing initialises: every step fails (a failed step does not end by itself).
FAILING = _register([_node("u", "Variable", container={"s": ""}, dtype=F32, shape={"shape": [3]},
                           shared_name={"s": "never-initialised"}), _node("read_u", "Identity", ["u:0"], T=F32)],
                    fetches=["read_u:0"])


class Client:
    """A client's raw view of one task: encode, call, decode."""

    def __init__(self, transport, address, security=None):
        self.channel = get_transport(transport).channel(address, security or Security())
        self.steps = itertools.count(1 << 40)

    def raw(self, method, payload):
        return wire.decode_response(self.channel.call(method, payload, 30.0))

    def call(self, method, header, tensors=()):
        return self.raw(method, wire.encode_message(header, list(tensors)))

    def read(self, handle, step_id=None):
        step_id = next(self.steps) if step_id is None else step_id
        _, (value,) = self.call("RunGraph", {"handle": handle, "step_id": step_id})
        self.call("CleanupStep", {"step_id": step_id})
        return value

    def close(self):
        self.channel.close()


def _inproc_server(name, limits=None):
    return Server({"worker": [f"inproc-hardening-{name}:1"]}, "worker", 0, transport="inproc", limits=limits)


@pytest.fixture
def inproc():
    servers, clients = [], []

    def make(name, limits=None):
        srv = _inproc_server(name, limits)
        servers.append(srv)
        clients.append(Client("inproc", srv.address))
        return srv, clients[-1]
    try:
        yield make
    finally:
        for c in clients:
            c.close()
        for s in servers:
            s.stop()


# ----------------------------------------------------------------------------------------
# The worker's tables (its own logic, in this process)

def test_tens_of_thousands_of_aborts_and_cleanups_of_unknown_steps_stay_bounded(inproc):
    srv, client = inproc("ended")
    w, dispatch = srv.worker, srv.worker.dispatcher().call
    n = 25_000
    for i in range(n):  # straight into the service: the worker's own logic, no transport
        assert wire.decode_response(dispatch("AbortStep", wire.encode_message({"step_id": i, "message": "x"})))
        assert wire.decode_response(dispatch("CleanupStep", wire.encode_message({"step_id": n + i})))
    assert len(w._steps) == 0                                # an abort of an unknown step keeps no state
    assert len(w._ended) == w.limits.max_ended_steps == 4096  # only the most recent are remembered
    # A RunGraph of a recently aborted step fails at once and leaves nothing behind; the
    # worker serves the next step as usual.
    init = client.call("RegisterGraph", INIT)[0]["handle"]
    with pytest.raises(errors.AbortedError, match="x"):
        client.call("RunGraph", {"handle": init, "step_id": n - 1})
    assert len(w._steps) == 0
    client.read(init, 10 ** 9)
    read = client.call("RegisterGraph", READ)[0]["handle"]
    np.testing.assert_array_equal(client.read(read, 10 ** 9 + 1), INITIAL)
    health = client.call("Health", {})[0]
    assert (health["steps"], health["running_steps"]) == (0, 0)


def test_registered_graphs_are_bounded_and_idle_ones_give_way(inproc):
    srv, client = inproc("graphs", Limits(max_graphs=16))
    handles = [client.call("RegisterGraph", READ)[0]["handle"] for _ in range(16)]
    for _ in range(3):  # thousands would be refused alike, each at once, before any compiling
        with pytest.raises(errors.ResourceExhaustedError,
                           match=r"holds 16 registered graphs .*Limits.max_graphs=16.*DeregisterGraph"):
            client.call("RegisterGraph", READ)
    client.call("DeregisterGraph", {"handle": handles.pop(0)})
    handles.append(client.call("RegisterGraph", READ)[0]["handle"])
    assert srv.worker.limits.max_graphs == 16 and len(srv.worker._graphs) == 16

    # Graphs nobody ran for graph_idle_seconds give way, least recently used first.
    srv, client = inproc("graphs-idle", Limits(max_graphs=4, graph_idle_seconds=0.0))
    init = client.call("RegisterGraph", INIT)[0]["handle"]
    client.read(init, 1)
    first = [client.call("RegisterGraph", READ)[0]["handle"] for _ in range(3)]
    np.testing.assert_array_equal(client.read(first[0], 2), INITIAL)  # now the most recently used
    for _ in range(3):  # these take the places of init, first[1] and first[2]
        client.call("RegisterGraph", READ)
    np.testing.assert_array_equal(client.read(first[0], 3), INITIAL)
    with pytest.raises(errors.NotFoundError, match="no graph"):  # gone: a master registers it again
        client.read(first[1], 4)
    for _ in range(200):
        newest = client.call("RegisterGraph", READ)[0]["handle"]
    assert len(srv.worker._graphs) == 4
    np.testing.assert_array_equal(client.read(newest, 5), INITIAL)

    # Bytes count too: one message larger than all graphs may hold together is refused.
    srv, client = inproc("graphs-bytes", Limits(max_graph_bytes=4096))
    big = dict(READ, feed_types={f"pad{i}:0": "float32" for i in range(200)})
    with pytest.raises(errors.ResourceExhaustedError, match="max_graph_bytes"):
        client.call("RegisterGraph", big)
    client.call("RegisterGraph", READ)


def test_steps_never_cleaned_up_are_bounded(inproc):
    srv, client = inproc("steps", Limits(max_steps=8))
    handle = client.call("RegisterGraph", READ)[0]["handle"]
    failing = client.call("RegisterGraph", FAILING)[0]["handle"]
    init = client.call("RegisterGraph", INIT)[0]["handle"]
    client.read(init, 100)
    for step in range(8):  # failed steps of a master that died: nobody sends CleanupStep
        with pytest.raises(errors.FailedPreconditionError):
            client.call("RunGraph", {"handle": failing, "step_id": step})
    with pytest.raises(errors.ResourceExhaustedError, match=r"8 steps in progress.*Limits.max_steps"):
        client.call("RunGraph", {"handle": handle, "step_id": 8})
    client.call("CleanupStep", {"step_id": 0})
    np.testing.assert_array_equal(client.read(handle, 8), INITIAL)

    srv, client = inproc("steps-idle", Limits(max_steps=8, step_idle_seconds=0.0))
    failing = client.call("RegisterGraph", FAILING)[0]["handle"]
    for step in range(1000, 1500):  # steps nothing uses any more give way to new ones
        with pytest.raises(errors.FailedPreconditionError):
            client.call("RunGraph", {"handle": failing, "step_id": step})
    assert len(srv.worker._steps) <= 8
    with pytest.raises(errors.AbortedError, match="forgotten"):  # a late request of one fails at once
        client.call("RunGraph", {"handle": failing, "step_id": 1000})


def test_a_step_that_succeeded_ends_by_itself_without_cleanup_step(inproc):
    srv, client = inproc("steps-end")
    client.read(client.call("RegisterGraph", INIT)[0]["handle"], 100)
    handle = client.call("RegisterGraph", READ)[0]["handle"]
    for step in range(200, 300):  # no CleanupStep: the graph sends nothing to other tasks
        header, (value,) = client.call("RunGraph", {"handle": handle, "step_id": step})
        assert header["ends_here"] is True
        np.testing.assert_array_equal(value, INITIAL)
    assert srv.worker._steps == {}
    # a session's steps across tasks, whose values are pulled, end everywhere by themselves too
    spec = {"ps": ["inproc-steps-end:2"], "worker": ["inproc-steps-end:3"]}
    servers = [Server(spec, "ps", 0, transport="inproc"), Server(spec, "worker", 0, transport="inproc")]
    try:
        with tw.Graph().as_default() as g:
            with tw.device("/job:ps/task:0"):
                v = tw.Variable(0.0)
            with tw.device("/job:worker/task:0"):
                delta = tw.ones([])
            update = tw.assign_add(v, delta)
        with tw.Session(servers[1].target, graph=g) as sess:
            sess.run(v.initializer)
            methods = []
            for task in (("ps", 0), ("worker", 0)):
                client = sess._client(*task)

                def counting(method, *args, _call=client.call, **kw):
                    methods.append(method)
                    return _call(method, *args, **kw)
                client.call = counting
            for _ in range(20):
                sess.run(update)
            assert sess.run(v) == 20.0
            assert methods.count("RunGraph") == 41 and "CleanupStep" not in methods  # 20 x 2 tasks + the read
            assert all(s.worker._steps == {} for s in servers)
    finally:
        for s in servers:
            s.stop()


def test_one_health_checker_per_process_however_many_sessions():
    spec = {"worker": ["inproc-hardening-health:1", "inproc-hardening-health:2"]}
    servers = [Server(spec, "worker", i, transport="inproc") for i in range(2)]
    sessions, release = [], threading.Event()

    def health_threads():
        return [t for t in threading.enumerate() if t.name.startswith("tw-health")]
    try:
        _poll(lambda: not health_threads(), "no health checker left from earlier tests")
        for _ in range(40):
            sessions.append(DistributedSession(servers[0].target))
        monitor = HealthMonitor.get()
        # one check per task and interval for all 40 sessions: the same two targets
        assert sorted(t.address for t in monitor._targets.values()) == spec["worker"]
        assert all(len(t.watchers) == 40 for t in monitor._targets.values())
        # the monitor's thread, plus the calls' pool (about one per task); 40 x 2 before
        _poll(lambda: any(t.name == "tw-health-monitor" for t in health_threads()), "the monitor runs")
        assert len(health_threads()) <= 1 + len(spec["worker"]) + 1

        # Task 1 hangs (its Health never answers): every session watching it hears, and a
        # step that waits there fails within two intervals.
        dispatcher = servers[1]._server.dispatcher
        healthy = dispatcher.handlers["Health"]
        # (once released, the calls still waiting answer as a healthy task would: an invalid
        # answer would fail the session's next step)
        dispatcher.handlers["Health"] = lambda payload: (release.wait(60), healthy(payload))[1]
        g = tw.Graph()
        with g.as_default(), tw.device("/job:worker/task:1"):
            q = tw.FIFOQueue(1, tw.float32, shared_name="hardening_q")
            take, close = q.dequeue(), q.close()
        sessions.append(DistributedSession(servers[0].target, graph=g))
        started = time.monotonic()
        with pytest.raises(errors.UnavailableError, match="/job:worker/task:1 failed its health check"):
            sessions[-1].run(take, options=tw.RunOptions(timeout_in_ms=60000))
        assert time.monotonic() - started < 30
        dispatcher.handlers["Health"] = healthy
        release.set()
        sessions[-1].run(close)  # ends the dequeue still waiting on task 1
        _poll(lambda: servers[1].worker.running_steps == 0, "task 1 is idle again")
    finally:
        release.set()
        for s in sessions:
            s.close()
        for s in servers:
            s.stop()
    _poll(lambda: not health_threads(), "the health checker stops with the last session")


# ----------------------------------------------------------------------------------------
# A real server: a `tensorweave worker` process over grpc

@pytest.fixture(scope="module")
def task():
    if "grpc" not in {n for n, _ in plugins.registry().transports.items()}:
        pytest.skip("needs the grpc transport (tensorweave-grpc)")
    with LocalCluster({"worker": 1}, "grpc") as c:
        client = Client("grpc", c.address("worker", 0))
        try:
            yield c, client
        finally:
            client.close()


def _threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


@needs_grpc
def test_reset_containers_with_a_misspelled_or_null_field_resets_nothing(task):
    cluster, client = task
    client.read(client.call("RegisterGraph", INIT)[0]["handle"])
    read = client.call("RegisterGraph", READ)[0]["handle"]
    for header, needle in [({"contaners": ["x"]}, r"unknown field\(s\) \['contaners'\].*did you mean 'containers' for 'contaners'\?"),
                           ({"containers": None}, "field 'containers' must be a list of strings, got null"),
                           ({"containers": "all"}, "field 'containers' must be a list of strings"),
                           ({"containers": [1]}, "field 'containers'"),
                           ({"all": False}, "field 'all' must be true"),
                           ({}, "give exactly one of 'containers'"),
                           ({"containers": [], "all": True}, "give exactly one of 'containers'")]:
        with pytest.raises(errors.InvalidArgumentError, match=needle):
            client.call("ResetContainers", header)
        np.testing.assert_array_equal(client.read(read), INITIAL)  # the variable kept its value
    client.call("ResetContainers", {"containers": ["no-such-container"]})
    np.testing.assert_array_equal(client.read(read), INITIAL)


def _valid_requests(client):
    read = client.call("RegisterGraph", READ)[0]["handle"]
    constants = []
    g = tw.Graph()
    with g.as_default(), tw.device("/job:worker/task:0"):
        tw.constant(1.0, name="one")
    gd = wire.encode_graph_def(g, constants)
    return {
        "GetStatus": ({}, []), "Health": ({}, []),
        "RegisterGraph": (READ, []), "DeregisterGraph": ({"handle": "none"}, []),
        "RunGraph": ({"handle": read, "step_id": 7, "timeout": 10.0, "trace": False}, []),
        "AbortStep": ({"step_id": 8, "message": "m"}, []), "CleanupStep": ({"step_id": 8}, []),
        "ResetContainers": ({"containers": ["no-such-container"]}, []),
        "CreateSession": ({"graph_def": gd}, constants),
        "ExtendSession": ({"session": "s", "graph_def": gd}, constants),
        "RunStep": ({"session": "s", "feeds": [], "fetches": ["one:0"], "targets": []}, []),
        "CloseSession": ({"session": "s"}, []),
    }


WRONG = {"str": 5, "str_list": "x", "step_id": "1", "int": 1.5, "bool": 1, "true": 1, "dict": [],
         "str_map": {"a": 1}, "timeout": -1, "partitions": []}


@needs_grpc
def test_every_method_refuses_unknown_and_ill_typed_fields(task):
    cluster, client = task
    for method, (header, tensors) in _valid_requests(client).items():
        schema = wire.REQUEST_FIELDS[method]
        with pytest.raises(errors.InvalidArgumentError, match=rf"^{method}: unknown field\(s\) \['bogus'\]"):
            client.call(method, {**header, "bogus": 1}, tensors)
        for field, (kind, required) in schema.items():
            with pytest.raises(errors.InvalidArgumentError, match=rf"^{method}: field '{field}' must be"):
                client.call(method, {**header, field: WRONG[kind]}, tensors)
            if required:
                with pytest.raises(errors.InvalidArgumentError, match=rf"^{method}: field '{field}' .* is missing"):
                    client.call(method, {k: v for k, v in header.items() if k != field}, tensors)
        if method not in wire.REQUEST_TENSORS:
            with pytest.raises(errors.InvalidArgumentError, match="it takes none"):
                client.call(method, header, [np.ones(1)])
    with pytest.raises(errors.InvalidArgumentError, match=r"partitions\[0\]: unknown field\(s\) \['graphdef'\]"):
        client.call("RegisterGraph", dict(READ, partitions=[{"device": DEV, "graphdef": {}}]))
    assert client.call("Health", {})[0]["task"] == 0  # still serving


@needs_grpc
def test_what_the_master_sends_passes_the_schemas(task):
    """Every request the client-side master and the remote master send, end to end."""
    cluster, _ = task
    g = tw.Graph()
    with g.as_default(), tw.device("/job:worker/task:0"):
        v = tw.Variable([1.0, 2.0], name="v_master")
        x = tw.placeholder(tw.float32, [2])
        total = tw.reduce_sum(v * x)
    for config in (None, tw.ConfigProto(use_remote_master=True)):
        with tw.Session(cluster.target, graph=g, config=config) as sess:
            sess.run(v.initializer)
            assert sess.run(total, {x: [3.0, 4.0]}, options=tw.RunOptions(
                timeout_in_ms=30000, trace_level=tw.RunOptions.FULL_TRACE), run_metadata=tw.RunMetadata()) == 11.0
            with g.as_default():
                doubled = v * 2.0  # the graph grows: ExtendSession for the remote master
            assert sess.run(doubled).tolist() == [2.0, 4.0]
    with tw.Session(cluster.target, graph=g) as sess:  # ResetContainers of every container
        sess.reset_containers()
        with pytest.raises(errors.FailedPreconditionError):
            sess.run(total, {x: [1.0, 1.0]})


@needs_grpc
def test_hundreds_of_sessions_never_closed_are_bounded_without_a_thread_each(task):
    cluster, client = task
    pid = cluster.pid("worker", 0)
    constants = []
    g = tw.Graph()
    with g.as_default(), tw.device("/job:worker/task:0"):
        tw.constant(1.0, name="one")
    request = wire.encode_message({"graph_def": wire.encode_graph_def(g, constants)}, constants)
    before = _threads_of(pid)
    handles = [client.raw("CreateSession", request)[0]["session"] for _ in range(Limits.max_sessions)]
    during = _threads_of(pid)
    for _ in range(20):  # every thin client after the 256th is refused, clearly, at once
        with pytest.raises(errors.ResourceExhaustedError, match=r"holds 256 sessions.*unused for 600 s is closed"):
            client.raw("CreateSession", request)
    # Before: a health checker thread and its pool per session (2 x 256 more threads).
    assert during - before <= 8, (before, during)
    for h in handles:
        client.call("CloseSession", {"session": h})
    client.raw("CreateSession", request)  # room again (left open: it expires on its own)
    assert _threads_of(pid) - before <= 8


@needs_grpc
def test_idle_sessions_expire_and_a_thin_client_carries_on():
    for attempt in range(3):  # a port picked free may be taken before the server binds it
        address = f"127.0.0.1:{pick_ports(1)[0]}"
        try:
            server = Server({"worker": [address]}, "worker", 0, transport="grpc",
                            limits=Limits(session_idle_seconds=0.3))
            break
        except errors.UnavailableError:
            if attempt == 2:
                raise

    def master_threads():
        return [t for t in threading.enumerate() if t.name.startswith(("tw-master-", "tw-health"))]
    try:
        before = len(master_threads())
        g = tw.Graph()
        with g.as_default(), tw.device("/job:worker/task:0"):
            v = tw.Variable(5.0, name="v_thin")
            inc = v.assign_add(1.0)
        with tw.Session(server.target, graph=g, config=tw.ConfigProto(use_remote_master=True)) as sess:
            sess.run(v.initializer)
            assert sess.run(inc) == 6.0
            service = server._master
            assert service.sessions() == 1
            _poll(lambda: service.sessions() == 0, "the idle session expires")
            _poll(lambda: len(master_threads()) <= before, "its threads go with it")
            assert sess.run(inc) == 7.0  # a new session, transparently; the variable lives on the task
            assert service.sessions() == 1
    finally:
        server.stop()


# ----------------------------------------------------------------------------------------
# `tensorweave cluster up`: a private directory, a token by default, TLS on request

def test_cluster_up_refuses_a_world_writable_dir_and_symlinked_logs(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(errors.PermissionDeniedError, match=r"world-writable \(mode 777\)"):
        launcher.up(str(shared), workers=1, ps=0)
    assert os.listdir(shared) == []  # nothing written, nothing started
    with pytest.raises(errors.InvalidArgumentError, match="not a directory"):
        os.symlink(shared, tmp_path / "link")
        launcher.up(str(tmp_path / "link"), workers=1, ps=0)
    # A log planted as a symlink is refused, not written through.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    target = tmp_path / "victim"
    target.write_text("precious")
    os.symlink(target, private / "worker-0.log")
    with pytest.raises(errors.PermissionDeniedError, match="symlink"):
        launcher.start_task(str(private / "cluster.toml"), "worker", 0, "127.0.0.1:1", str(private / "worker-0.log"),
                            worker_argv=["/bin/false"])
    assert target.read_text() == "precious"


@needs_grpc
def test_cluster_up_makes_a_private_dir_a_token_and_tls(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes the default directory
    path, tasks = launcher.up(None, workers=1, ps=0, transport="grpc", tls=True, timeout=120)
    try:
        directory = os.path.dirname(path)
        assert os.path.basename(directory).startswith("tensorweave-cluster-")
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.join(directory, "token")).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.join(directory, "tls", "key.pem")).st_mode) == 0o600
        cfg = cl.load_config(path)
        address = cfg.task_address("worker", 0)
        good = cfg.security_for(role="client")
        assert good.token and good.tls_root

        def health(security, method="Health"):
            client = Client("grpc", address, security)
            try:
                return client.call(method, {})[0]
            finally:
                client.close()
        assert health(good, "GetStatus")["job"] == "worker"
        with pytest.raises(errors.UnauthenticatedError):
            health(dataclasses.replace(good, token=None))
        with pytest.raises(errors.UnauthenticatedError):
            health(dataclasses.replace(good, token="guess"))
        with pytest.raises(errors.UnavailableError):  # in clear to a TLS server: no answer
            health(Security(token=good.token))
        assert launcher.find_default_dir() == directory  # status and down find it without --dir
        assert all(r["alive"] for r in launcher.status()[1])
    finally:
        results = launcher.down(None, grace=10)
    assert [how for _, how in results] == ["stopped"]
    assert not any(launcher.is_alive(t["pid"]) for t in tasks)


def test_a_task_is_lost_after_two_silent_health_checks_in_a_row_or_one_refused_connection():
    # The monitor's verdicts (master.HealthMonitor._report), with a stand-in session: one
    # late answer is a busy machine (a loaded CI run stalled a worker past the 1 s deadline
    # once), two in a row are a lost task; a refused connection is one at once.
    from tensorweave.distributed import master

    class Session:
        def __init__(self):
            self.lost, self.seen = [], []
            self._clocks = type("Clocks", (), {"sample": lambda *a: None})()

        def _client(self, *task):
            return type("Client", (), {"renew": lambda self: None})()

        def task_lost(self, task, error):
            self.lost.append(type(error).__name__)

        def task_seen(self, task, incarnation):
            self.seen.append(incarnation)

    session = Session()
    checker = type("Checker", (), {"_stopped": False, "session": session})()
    target = master._Target(("k",), None, "127.0.0.1:1", None, 1.0, 1.0, time.monotonic())
    target.watchers[checker] = ("worker", 0)
    monitor = master.HealthMonitor.__new__(master.HealthMonitor)
    monitor._lock = threading.Lock()
    late = errors.DeadlineExceededError("no reply before the deadline (1 s)")
    monitor._report(target, None, late)
    assert session.lost == []                                  # one late answer
    monitor._report(target, {"started": 7}, None)
    assert session.seen == [7] and target.misses == 0          # answered: counting starts over
    monitor._report(target, None, late)
    monitor._report(target, None, late)
    assert session.lost == ["DeadlineExceededError"]           # two in a row
    monitor._report(target, None, errors.UnavailableError("connection refused"))
    assert session.lost == ["DeadlineExceededError", "UnavailableError"]
    assert master.MISSES_BEFORE_LOST == 2
