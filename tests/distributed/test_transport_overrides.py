"""Per-pair transport overrides and the cluster's health-check settings, seen from a client.

Every task serves its address over the cluster's control transport whatever its job's
``[transport_pairs]`` say, so a client reaches every task with ``tw.Session(config)``, a
``grpc://``/``ucx://`` target of any task, or the remote master; the overrides choose how
tasks exchange tensors (a traced step names the transport of each pull). A ``grpc://host:port``
client, which has no config, checks the tasks' health as often as their config says (they
announce it in ``GetStatus``). Servers in this process on loopback; one test with real task
processes (LocalCluster, always reaped)."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed import cluster as cl
from tensorweave.distributed.launcher import pick_ports
from tensorweave.distributed.server import Server
from tensorweave.distributed.testing import LocalCluster

FULL = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE, timeout_in_ms=60000)
PS, W0, W1 = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"
HAVE = {n for n, _ in plugins.registry().transports.items()}
needs_ucx = pytest.mark.skipif("ucx" not in HAVE or "grpc" not in HAVE,
                               reason="needs the grpc and ucx transports (tensorweave-grpc, tensorweave-ucx)")
needs_grpc = pytest.mark.skipif("grpc" not in HAVE, reason="needs the grpc transport (tensorweave-grpc)")

# docs/distributed.md's example of [transport_pairs], with the cluster's default kept and flipped.
DOCS_PAIRS = {"ps-worker": {"control": "grpc", "tensors": "ucx"}, "worker-worker": "ucx"}
FLIPPED_PAIRS = {"ps-worker": {"control": "ucx", "tensors": "grpc"}, "worker-worker": "grpc"}


def _servers(obj):
    """ps 0 and workers 0, 1 of the config ``obj`` (addresses added), serving in this process."""
    for attempt in range(3):  # a port picked free may be taken before the server binds it
        ports = pick_ports(3)
        config = cl.config_from_dict(dict(obj, cluster={"ps": [f"127.0.0.1:{ports[0]}"],
                                                        "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}))
        servers = []
        try:
            for job, task in (("ps", 0), ("worker", 0), ("worker", 1)):
                servers.append(Server(config, job, task))
            return config, servers
        except errors.UnavailableError:
            for s in servers:
                s.stop()
            if attempt == 2:
                raise


@pytest.fixture
def overridden(request):
    config, servers = _servers(request.param)
    try:
        yield config, servers
    finally:
        for s in servers:
            s.stop()


def _graph():
    g = tw.Graph()
    with g.as_default():
        with tw.device("/job:ps/task:0"):
            v = tw.Variable(np.arange(4, dtype=np.float32), name="v")
        with tw.device("/job:worker/task:0"):
            a = tw.multiply(v, 2.0, name="a")
        with tw.device("/job:worker/task:1"):
            y = tw.reduce_sum(a + 1.0, name="y")
    return g, v, y


def _pull_transports(stats) -> dict:
    """(src task, dst task) -> the transport each Recv pulled its value with."""
    return {(n.transfer.src_device.split("/device:")[0], n.transfer.dst_device.split("/device:")[0]):
            n.transfer.transport for n in stats if n.op == "_Recv"}


@needs_ucx
@pytest.mark.parametrize("overridden, default, other", [
    ({"transport": "grpc", "transport_pairs": DOCS_PAIRS}, "grpc", "ucx"),
    ({"transport": "ucx", "transport_pairs": FLIPPED_PAIRS}, "ucx", "grpc"),
], indirect=["overridden"], ids=["docs-example", "flipped"])
def test_every_client_reaches_every_task_and_tensors_take_the_pair_transport(overridden, default, other):
    config, servers = overridden
    assert config.control_transport == default
    assert [s.target for s in servers] == [f"{default}://{config.task_address(j, i)}"
                                           for j, i in (("ps", 0), ("worker", 0), ("worker", 1))]
    g, v, y = _graph()
    clients = {"config": (config, None), "ps target": (servers[0].target, None),
               "worker target": (servers[2].target, None),
               "remote master": (servers[1].target, tw.ConfigProto(use_remote_master=True))}
    for how, (target, proto) in clients.items():
        with tw.Session(target, graph=g, config=proto) as sess:
            sess.run(v.initializer, options=FULL)
            md = tw.RunMetadata()
            assert sess.run(y, options=FULL, run_metadata=md) == 16.0, how
            if proto is None:  # the remote master returns no step stats
                assert _pull_transports(md.step_stats) == {(PS, W0): other, (W0, W1): other}, how


def test_control_transport_and_the_check_at_start():
    config = cl.config_from_dict({"transport": {"control": "grpc", "tensors": "ucx"},
                                  "cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]},
                                  "transport_pairs": {"ps-worker": "ucx", "worker-worker": "inproc"}})
    assert config.control_transport == "grpc"
    assert config.transport_for("worker", "worker") == ("inproc", "inproc")
    # Every pair with job "worker" overrides the default, but its tasks still serve their
    # address with it: a missing control transport is named at start, never worked around.
    only_inproc = cl.config_from_dict({"transport": "no_such_net", "cluster": {"worker": ["127.0.0.1:2223"]},
                                       "transport_pairs": {"worker-worker": "inproc"}})
    with pytest.raises(errors.NotFoundError,
                       match=r"transport 'no_such_net' \(configured for every task's address \(the cluster's "
                             r"control transport\)\) is not installed"):
        cl.check_transports(only_inproc, "worker")


# --- the health-check settings of a cluster, for a client that only has an address ----------

def test_health_check_settings_come_from_the_config_or_the_tasks():
    config = cl.config_from_dict({"cluster": {"worker": ["127.0.0.1:2223"]}, "health_check_interval": 0.3,
                                  "timeouts": {"health_check": 0.2}})
    announced = cl.health_check_announcement(config)
    assert announced == {"interval": 0.3, "timeout": 0.2}
    assert cl.health_check_settings(config) == (0.3, 0.2)
    assert cl.health_check_settings(None, announced) == (0.3, 0.2)
    assert cl.health_check_settings(config, {"interval": 5.0, "timeout": 5.0}) == (0.3, 0.2)  # own config wins
    assert cl.health_check_settings(None, None) == (1.0, 1.0)
    assert cl.health_check_announcement(None) is None
    # Announced values are bounded: they come over the network.
    assert cl.health_check_settings(None, {"interval": 1e-9, "timeout": 1e9}) == (0.01, 3600.0)
    for bad in ({"interval": "1"}, {"interval": 1.0, "timeout": -1}, {"interval": True, "timeout": 1.0},
                {"interval": float("nan"), "timeout": 1.0}, [1.0, 1.0], {"interval": 1, "timeout": 1, "x": 1}):
        with pytest.raises(errors.InvalidArgumentError, match="GetStatus from test"):
            cl.health_check_settings(None, bad, "GetStatus from test")


@needs_grpc
@pytest.mark.parametrize("overridden", [{"transport": "grpc", "health_check_interval": 0.3,
                                         "timeouts": {"health_check": 0.2}}], indirect=True)
def test_an_address_target_checks_as_often_as_the_cluster_says(overridden):
    config, servers = overridden
    g, v, y = _graph()
    for target in (servers[0].target, servers[2].target, config):
        with tw.Session(target, graph=g) as sess:
            assert (sess._health.interval, sess._health.timeout) == (0.3, 0.2), target
            sess.run(v.initializer)
            assert sess.run(y) == 16.0


INTERVAL = 0.25


def _poll(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@needs_grpc
def test_a_hung_task_is_noticed_through_a_grpc_address_target():
    """SIGSTOP keeps a task's connections open: only the health checks notice it; a client
    that has only ``grpc://host:port`` uses the cluster's interval, not the default 1 s."""
    with LocalCluster({"ps": 1, "worker": 1}, "grpc", health_check_interval=INTERVAL) as c:
        with tw.device("/job:worker/task:0"):
            blocked = tw.FIFOQueue(1, tw.float32, shapes=[[]], name="never_fed").dequeue()
        with tw.device("/job:ps/task:0"):
            z = blocked + 1.0
        target = c.target
        assert target.startswith("grpc://") and c.tasks[0] == ("ps", 0)
        with tw.Session(target) as sess:
            assert (sess._health.interval, sess._health.timeout) == (INTERVAL, INTERVAL)
            box: dict = {}

            def run():
                try:
                    sess.run(z, options=tw.RunOptions(timeout_in_ms=60000))
                except errors.OpError as e:
                    box["error"] = e
                box["at"] = time.monotonic()

            t = threading.Thread(target=run, daemon=True)
            t.start()
            _poll(lambda: c.health("worker", 0, timeout=2.0).get("running_steps") == 1, 20,
                  "the step to start on the worker")
            stopped_at = time.monotonic()
            c.send_signal("worker", 0, signal.SIGSTOP)
            try:
                t.join(30)
                assert not t.is_alive(), "the client hung"
                assert isinstance(box.get("error"), errors.UnavailableError), box
                assert "/job:worker/task:0 failed its health check" in str(box["error"])
                # two intervals and scheduling slack on a loaded machine, far below the
                # default settings' 2 s only where the machine is idle: the settings above
                # are what this test checks, the time is reported.
                print(f"hung task noticed after {box['at'] - stopped_at:.2f} s")
            finally:
                c.kill("worker", 0)
