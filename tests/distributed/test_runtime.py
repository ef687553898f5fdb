"""The distributed runtime (whitepaper 3.2.2, 3.3; Figure 3): master, workers, Send/Recv
between tasks. Every test runs over every installed transport; ``inproc`` keeps all tasks in
this process (the wire format is still used for every message), the others use loopback."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed.server import Server


def _transports():
    names = [n for n, _ in plugins.registry().transports.items()]
    return sorted(names)


@pytest.fixture(params=_transports())
def transport(request):
    return request.param


def _free_addresses(n, transport):
    if transport == "inproc":
        return [f"inproc-host:{p}" for p in range(52000 + 10 * n, 52000 + 11 * n)]
    from tensorweave.distributed.launcher import pick_ports

    return [f"127.0.0.1:{p}" for p in pick_ports(n)]


@pytest.fixture
def cluster(transport):
    """One ps and two worker tasks, all in this process."""
    servers = []
    for attempt in range(3):  # a port picked free may be taken before the server binds it
        addrs = _free_addresses(3, transport)
        spec = {"ps": [addrs[0]], "worker": addrs[1:]}
        try:
            for job, task in (("ps", 0), ("worker", 0), ("worker", 1)):
                servers.append(Server(spec, job, task, transport=transport))
            break
        except errors.UnavailableError:
            for srv in servers:
                srv.stop()
            servers = []
            if attempt == 2:
                raise
    try:
        yield spec, servers
    finally:
        for s in servers:
            s.stop()


def test_graph_split_across_tasks_matches_local(cluster):
    spec, servers = cluster
    x = tw.placeholder(tw.float32, [2, 3], name="x")
    with tw.device("/job:worker/task:0"):
        a = tw.matmul(x, tw.constant(np.arange(12, dtype=np.float32).reshape(3, 4)))
    with tw.device("/job:worker/task:1"):
        b = tw.nn.relu(a - 5.0) * 2.0
    with tw.device("/job:ps/task:0"):
        c = tw.reduce_sum(b, axis=1)
    xv = np.array([[1, 2, 3], [-1, 0, 1]], np.float32)
    ref_a = xv @ np.arange(12, dtype=np.float32).reshape(3, 4)
    ref_b = np.maximum(ref_a - 5, 0) * 2
    with tw.Session(servers[1].target) as sess:
        placement = sess.placement([c], {x: xv})
        assert placement[a.op.name].startswith("/job:worker/replica:0/task:0")
        assert placement[b.op.name].startswith("/job:worker/replica:0/task:1")
        assert placement[c.op.name].startswith("/job:ps/replica:0/task:0")
        for _ in range(3):
            av, bv, cv = sess.run([a, b, c], {x: xv})
            np.testing.assert_allclose(av, ref_a)
            np.testing.assert_allclose(bv, ref_b)
            np.testing.assert_allclose(cv, ref_b.sum(1))


def test_variables_live_on_ps_across_sessions(cluster):
    spec, servers = cluster
    with tw.device("/job:ps/task:0"):
        v = tw.Variable(np.zeros(3, np.float32), name="v")
    with tw.device("/job:worker/task:0"):
        inc = tw.ones([3]) * 1.0
    upd = tw.assign_add(v, inc)  # colocated with v on the ps
    with tw.Session(servers[0].target) as sess:
        sess.run(v.initializer)
        sess.run(upd)
        sess.run(upd)
    with tw.Session(servers[2].target) as sess:  # another client sees the ps's state
        np.testing.assert_allclose(sess.run(v), [2, 2, 2])


def test_while_loop_across_tasks(cluster):
    spec, servers = cluster

    def body(i, s):
        with tw.device("/job:worker/task:1"):
            s = s + tw.cast(i, tw.float32)
        return i + 1, s

    with tw.device("/job:worker/task:0"):
        _, s = tw.while_loop(lambda i, s: i < 10, body, [tw.constant(0), tw.constant(0.0)])
    with tw.Session(servers[1].target) as sess:
        assert sess.run(s, options=tw.RunOptions(timeout_in_ms=30000)) == 45.0


def test_kernel_error_on_one_task_fails_the_step_and_workers_keep_serving(cluster):
    spec, servers = cluster
    x = tw.placeholder(tw.float32, [None], name="x")
    with tw.device("/job:worker/task:0"):
        y = tw.check_numerics(tw.log(x), "bad log")
    with tw.device("/job:worker/task:1"):
        z = y * 2.0
    with tw.Session(servers[1].target) as sess:
        with pytest.raises(errors.InvalidArgumentError, match="bad log"):
            sess.run(z, {x: [-1.0]}, options=tw.RunOptions(timeout_in_ms=30000))
        np.testing.assert_allclose(sess.run(z, {x: [1.0]}), [0.0])


def test_unknown_task_in_device_scope_is_a_clear_error(cluster):
    spec, servers = cluster
    with tw.device("/job:worker/task:7"):
        y = tw.constant(1.0) + 1.0
    with tw.Session(servers[1].target) as sess:
        with pytest.raises(errors.InvalidArgumentError, match="task:7"):
            sess.run(y)


@pytest.mark.parametrize("tensors", ["inproc", "ucx"])
def test_control_and_tensors_on_different_transports(tensors):
    """{control = "grpc", tensors = X}: each task serves tensors on a second server whose
    address it announces in GetStatus; Recv pulls go over X."""
    from tensorweave.distributed.cluster import config_from_dict

    installed = {n for n, _ in plugins.registry().transports.items()}
    if not {"grpc", tensors} <= installed:
        pytest.skip(f"needs the grpc and {tensors} transports")
    addrs = _free_addresses(2, "grpc")
    cfg = config_from_dict({"transport": {"control": "grpc", "tensors": tensors},
                            "cluster": {"worker": addrs}})
    servers = [Server(cfg, "worker", 0), Server(cfg, "worker", 1)]
    try:
        x = tw.placeholder(tw.float32, [1000], name="x")
        with tw.device("/job:worker/task:0"):
            a = x * 2.0
        with tw.device("/job:worker/task:1"):
            b = tw.reduce_sum(a)
        with tw.Session(cfg) as sess:
            xv = np.arange(1000, dtype=np.float32)
            assert sess.run(b, {x: xv}) == pytest.approx(2 * xv.sum())
        assert set(servers[0]._tensor_servers) == {tensors}
    finally:
        for s in servers:
            s.stop()


def test_queue_ops_run_where_their_queue_lives(cluster):
    """Ops that use a queue's handle are colocated with the queue (its state is in one process)."""
    spec, servers = cluster
    with tw.device("/job:ps/task:0"):
        q = tw.FIFOQueue(10, [tw.float32], shapes=[[]], shared_name="shared_q")
    with tw.device("/job:worker/task:0"):
        enq = q.enqueue([tw.constant(3.0) * 2.0])
    with tw.device("/job:worker/task:1"):
        deq = q.dequeue() + 1.0
    with tw.Session(servers[1].target) as sess:
        placement = sess.placement(enq)
        assert placement[enq.name].startswith("/job:ps/")
        sess.run(enq)
        assert sess.run(deq, options=tw.RunOptions(timeout_in_ms=20000)) == 7.0


def test_remote_master_service_runs_steps_for_a_thin_client(cluster):
    """Every server also runs the master service: the client ships its graph once and sends
    one RunStep per step (ConfigProto(use_remote_master=True))."""
    spec, servers = cluster
    with tw.device("/job:ps/task:0"):
        v = tw.Variable(np.zeros(2, np.float32), name="v_remote")
    x = tw.placeholder(tw.float32, [2], name="x")
    with tw.device("/job:worker/task:1"):
        inc = x * 3.0
    upd = tw.assign_add(v, inc)
    cfg = tw.ConfigProto(use_remote_master=True)
    with tw.Session(servers[0].target, config=cfg) as sess:
        assert type(sess).__name__ == "RemoteMasterSession"
        sess.run(v.initializer)
        out = sess.run({"new": upd, "x3": inc}, {x: [1.0, 2.0]})
        np.testing.assert_allclose(out["new"], [3, 6])
        np.testing.assert_allclose(out["x3"], [3, 6])
        doubled = v * 2.0  # the graph grew: the session sends it again (ExtendSession)
        np.testing.assert_allclose(sess.run(doubled), [6, 12])
        with pytest.raises(errors.InvalidArgumentError):
            sess.run(tw.check_numerics(tw.log(x), "neg"), {x: [-1.0, 1.0]})
        np.testing.assert_allclose(sess.run(v), [3, 6])  # still serving
        # TF1 fetch semantics over RunStep too: NumPy scalars, a string scalar as bytes
        # (trailing NULs kept: the server sends it as a string tensor, not a fixed-width 'S').
        total, s = sess.run([tw.reduce_sum(v), tw.constant(b"ab\x00")])
        assert type(total) is np.float32 and total == 9.0
        assert type(s) is bytes and s == b"ab\x00"
