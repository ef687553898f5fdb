"""An op that takes a variable by reference (or a resource by its handle) runs where the
variable is: its ref edge wins over the device it asked for (``tw.device`` scopes,
``replica_device_setter``), as in TensorFlow's placer, and ``log_device_placement`` says so.
Local sessions with two CPU devices, and distributed sessions over inproc and grpc."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed.server import Server
from tensorweave.framework.graph import apply_op
from tensorweave.passes.placement import DefaultPlacer

LOCAL = "/job:localhost/replica:0/task:0"
CPU0, CPU1 = f"{LOCAL}/device:CPU:0", f"{LOCAL}/device:CPU:1"
PS = "/job:ps/replica:0/task:0/device:CPU:0"
LOGGER = "tensorweave.placement"


def _two_cpus(**kw):
    return tw.Session(config=tw.ConfigProto(device_count={"CPU": 2}, **kw))


def _moved(caplog, node, level=logging.INFO):
    """The placement log's records saying ``node`` was moved to its variable's device."""
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == level and f"node '{node}'" in r.getMessage()
            and "Ignoring device specification" in r.getMessage()]


# --- local, two CPU devices ---------------------------------------------------------------

def test_updates_and_checks_under_another_device_run_on_the_variables(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with tw.device("/device:CPU:1"):
        v = tw.Variable(1.0, name="v")
    with tw.device("/device:CPU:0"):
        x = tw.placeholder(tw.float32, [], name="x")
        inc = tw.multiply(x, 2.0, name="inc")          # no ref input: stays where it asked
        up = tw.assign_add(v, inc, name="up")
        down = tw.assign_sub(v, 1.0, name="down")
        ready = tw.is_variable_initialized(v, name="ready")
    with _two_cpus(log_device_placement=True) as sess:
        assert not sess.run(ready)
        sess.run(v.initializer)
        assert sess.run(ready)
        assert sess.run(up, {x: 1.5}) == 4.0
        assert sess.run(down) == 3.0
        assert sess.run(v) == 3.0
        where = sess.placement([up, down, ready], {x: 0})
    assert where["v"] == where["up"] == where["down"] == where["ready"] == CPU1
    assert where["inc"] == CPU0
    for node in ("up", "down", "ready"):
        (msg,) = set(_moved(caplog, node))
        assert "'v'" in msg and "reference" in msg and f"moved to the variable's device {CPU1}" in msg
        assert "/device:CPU:0" in msg  # the request it ignored
    assert not _moved(caplog, "inc")


def test_the_override_is_logged_at_debug_without_log_device_placement(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with tw.device("/device:CPU:1"):
        v = tw.Variable(1.0, name="v")
    with tw.device("/device:CPU:0"):
        up = tw.assign_add(v, 1.0, name="up")
    with _two_cpus() as sess:
        sess.run(v.initializer)
        assert sess.run(up) == 2.0
    assert not _moved(caplog, "up", logging.INFO)
    assert _moved(caplog, "up", logging.DEBUG)


def test_a_request_the_variable_can_follow_narrows_the_group(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    v = tw.Variable(1.0, name="v")                       # no device of its own
    with tw.device("/device:CPU:1"):
        up = tw.assign_add(v, 1.0, name="up")
    with _two_cpus() as sess:
        where = sess.placement([up, v.initializer])
        sess.run(v.initializer)
        assert sess.run(up) == 2.0
    assert where["v"] == where["up"] == where["v/Assign"] == CPU1
    assert not _moved(caplog, "up", logging.DEBUG)


def test_saver_and_optimizer_built_under_another_device(tmp_path):
    with tw.device("/device:CPU:1"):
        w = tw.Variable(np.array([1.0, 2.0], np.float32), name="w")
    with tw.device("/device:CPU:0"):
        loss = tw.reduce_sum(tw.square(w))
        step = tw.train.get_or_create_global_step()       # on CPU:0 as well
        train = tw.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=step)
        saver = tw.train.Saver([w])
        clobber = tw.assign(w, [7.0, 7.0], name="clobber")
    with _two_cpus() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run(train)
        np.testing.assert_allclose(sess.run(w), [0.5, 1.0])
        path = saver.save(sess, str(tmp_path / "ckpt"))
        sess.run(clobber)
        saver.restore(sess, path)
        np.testing.assert_allclose(sess.run(w), [0.5, 1.0])
        where = sess.placement(saver.restore_op)
    restores = [n for n, op in ((n, tw.get_default_graph().get_operation_by_name(n)) for n in where)
                if op.type == "Assign"]
    assert restores and all(where[n] == CPU1 for n in restores)
    assert where["save/RestoreV2"] == CPU0


def test_an_op_using_a_queue_handle_follows_the_queue(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with tw.device("/device:CPU:1"):
        q = tw.FIFOQueue(4, tw.float32, shapes=[[]], name="q")
    enq = q.enqueue(3.0, name="enq")  # the wrapper colocates it with the queue itself
    with tw.device("/device:CPU:0"):
        # A raw op on the handle, as a GraphDef import or another front end would build it.
        size = apply_op("QueueSizeV2", [q.queue_ref], name="size")
    with _two_cpus(log_device_placement=True) as sess:
        sess.run(enq)
        assert sess.run(size) == 1
        where = sess.placement([enq, size])
    assert where["q"] == where["enq"] == where["size"] == CPU1
    (msg,) = set(_moved(caplog, "size"))
    assert "resource connection" in msg and f"moved to the resource's device {CPU1}" in msg


def test_soft_placement_relaxes_a_device_index_conflict_under_colocate_with(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with tw.device("/device:CPU:1"):
        a = tw.constant(2.0, name="a")
    with tw.colocate_with(a), tw.device("/device:CPU:0"):
        b = tw.negative(a, name="b")
    with _two_cpus() as sess, pytest.raises(errors.InvalidArgumentError, match=r"cannot colocate nodes 'a'.*'b'"):
        sess.run(b)
    with _two_cpus(allow_soft_placement=True, log_device_placement=True) as sess:
        assert sess.run(b) == -2.0
        where = sess.placement(b)
    assert where["a"] == where["b"] == CPU1
    (msg,) = set(_moved(caplog, "b"))
    assert "allow_soft_placement" in msg and CPU1 in msg


def test_a_request_no_device_meets_is_an_error_unless_soft(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with tw.device("/device:CPU:1"):
        v = tw.Variable(1.0, name="v")
    with tw.device("/device:CPU:7"):     # not a conflict with v: a device that does not exist
        up = tw.assign_add(v, 1.0, name="up")
    with _two_cpus() as sess:
        sess.run(v.initializer)
        with pytest.raises(errors.InvalidArgumentError, match=r"AssignAdd node 'up'.*'/device:CPU:7' matches no device"):
            sess.run(up)
    with _two_cpus(allow_soft_placement=True, log_device_placement=True) as sess:
        sess.run(v.initializer)
        assert sess.run(up) == 2.0
        assert sess.placement(up)["up"] == CPU1
    (msg,) = set(_moved(caplog, "up"))
    assert "allow_soft_placement" in msg and CPU1 in msg


# --- errors, with FAKE devices (tests/passes/conftest.py) ------------------------------------

def test_an_update_with_no_kernel_on_the_variables_device_names_both(cpu, fake, kernels):
    with tw.device("/device:FAKE:0"):
        v = tw.Variable(tw.zeros([2]), name="v")
    with tw.device("/device:CPU:0"):
        apply_op("ApplyGradientDescent", [v, 0.1, tw.ones([2])], name="upd")  # CPU kernel only
    nodes = tw.get_default_graph().get_operations()
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"cannot colocate nodes .*'v'.*'upd'.*ApplyGradientDescent node 'upd' has no kernel on "
                             r"\['/job:localhost/replica:0/task:0/device:FAKE:0'\]") as e:
        DefaultPlacer().place(nodes, [cpu, fake(0)], kernels)
    assert e.value.op.name in ("v", "upd")


def test_soft_placement_does_not_merge_different_tasks(cpu, fake, kernels):
    with tw.device("/job:localhost/device:FAKE:0"):
        a = tw.constant(1.0, name="a")
    with tw.colocate_with(a), tw.device("/job:worker/task:1"):
        tw.negative(a, name="b")
    devices = [cpu, fake(0), fake(0, prefix="/job:worker/replica:0/task:1")]
    with pytest.raises(errors.InvalidArgumentError, match=r"cannot colocate nodes 'a' .*'b'"):
        DefaultPlacer().place(tw.get_default_graph().get_operations(), devices, kernels,
                              tw.ConfigProto(allow_soft_placement=True))


# --- distributed: ps + 2 workers, every task in this process ------------------------------

def _transports():
    have = {n for n, _ in plugins.registry().transports.items()}
    return [t for t in ("inproc", "grpc") if t in have]


@pytest.fixture(params=_transports())
def cluster(request):
    transport = request.param
    servers = []
    for attempt in range(3):  # a port picked free may be taken before the server binds it
        if transport == "inproc":
            addrs = [f"inproc-refcoloc-{attempt}:{i}" for i in range(1, 4)]
        else:
            from tensorweave.distributed.launcher import pick_ports

            addrs = [f"127.0.0.1:{p}" for p in pick_ports(3)]
        spec = {"ps": addrs[:1], "worker": addrs[1:]}
        try:
            for job, task in (("ps", 0), ("worker", 0), ("worker", 1)):
                servers.append(Server(spec, job, task, transport=transport))
            break
        except errors.UnavailableError:
            for s in servers:
                s.stop()
            servers = []
            if attempt == 2:
                raise
    try:
        yield spec, servers
    finally:
        for s in servers:
            s.stop()


@pytest.mark.serial  # starts a cluster's servers (conftest.py)
def test_distributed_update_under_a_worker_scope_runs_on_the_ps(cluster, caplog):
    spec, servers = cluster
    caplog.set_level(logging.INFO, logger=LOGGER)
    with tw.device("/job:ps/task:0"):
        v = tw.Variable(np.zeros(3, np.float32), name="v")
    with tw.device("/job:worker/task:1"):
        x = tw.placeholder(tw.float32, [3], name="x")
        up = v.assign_add(x * 2.0)
        ready = tw.is_variable_initialized(v, name="ready")
    with tw.Session(servers[1].target, config=tw.ConfigProto(log_device_placement=True)) as sess:
        assert not sess.run(ready)
        sess.run(v.initializer)
        np.testing.assert_allclose(sess.run(up, {x: [1, 2, 3]}), [2, 4, 6])
        assert sess.run(ready)
        where = sess.placement([up, ready], {x: 0})
    with tw.Session(servers[2].target) as sess:  # the value lives on the ps
        np.testing.assert_allclose(sess.run(v), [2, 4, 6])
    assert where[up.op.name] == where["ready"] == where["v"] == PS
    assert where["Mul"].startswith("/job:worker/replica:0/task:1/")
    (msg,) = set(_moved(caplog, up.op.name))
    assert "/job:worker/task:1" in msg and f"moved to the variable's device {PS}" in msg


@pytest.mark.serial  # starts a cluster's servers (conftest.py)
def test_replica_device_setter_init_checks_saver_and_training(cluster):
    spec, servers = cluster
    setter = tw.train.replica_device_setter(cluster=spec, worker_device="/job:worker/task:0")
    with tw.device(setter):
        w = tw.Variable(np.array([1.0, -1.0], np.float32), name="w")     # /job:ps/task:0
        step = tw.train.get_or_create_global_step()
        loss = tw.reduce_sum(tw.square(w))
        train = tw.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=step)
        ready = [tw.is_variable_initialized(w), tw.is_variable_initialized(step)]  # on the worker, asked
        saver = tw.train.Saver([w, step])
    with tw.Session(servers[1].target) as sess:
        assert sess.run(ready) == [False, False]
        sess.run(tw.global_variables_initializer())
        assert sess.run(ready) == [True, True]
        sess.run(train)
        np.testing.assert_allclose(sess.run(w), [0.5, -0.5])
        assert sess.run(step) == 1
        where = sess.placement(saver.restore_op)
        where.update(sess.placement(ready))
    assert where[ready[0].op.name] == where[ready[1].op.name] == PS
    g = tw.get_default_graph()
    restores = [n for n in where if g.get_operation_by_name(n).type == "Assign"]
    assert len(restores) == 2 and all(where[n] == PS for n in restores)
    assert where["save/RestoreV2"].startswith("/job:worker/replica:0/task:0/")
