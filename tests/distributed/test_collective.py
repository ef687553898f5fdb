"""Collective ops (all-reduce, all-gather, broadcast) and AllReduceSyncOptimizer.

Across real worker processes (``LocalCluster``, 3 workers, over grpc and over ucx), each
worker with its own client thread and graph (between-graph replication): values against
NumPy for several shapes and dtypes, repeated executions of the same instances, a member that
never comes (a timeout naming the group, the instance and who had joined), members that
disagree on shapes, the step's own timeout, an abort of the step, and data-parallel training
of the digits MLP whose replicas stay bit for bit identical. In this process: a local
Session with several CPU devices, the in-process transport, the leader's table, the bounded
table of early values and the request schemas.

Every wait is bounded (step timeouts, op timeouts, thread joins with a deadline); every
process is reaped by its LocalCluster.
"""

import os
import sys
import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed import wire
from tensorweave.distributed.server import Server
from tensorweave.runtime import collectives

STEP = tw.RunOptions(timeout_in_ms=60000)
N = 3  # workers of the process clusters
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _installed(name):
    return name in {n for n, _ in plugins.registry().transports.items()}


def _run_threads(fns, timeout=120):
    """Run each fn in its own thread; return their results; re-raise the first failure."""
    results, errs, threads = [None] * len(fns), [], []

    def wrap(i, fn):
        def run():
            try:
                results[i] = fn()
            except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
                errs.append(e)
        return run

    for i, fn in enumerate(fns):
        t = threading.Thread(target=wrap(i, fn), daemon=True)
        t.start()
        threads.append(t)
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a member's thread did not finish in time"
    if errs:
        raise errs[0]
    return results


def _outcome(fn):
    """fn's result, or the tw error it raised (for tests where members fail)."""
    def run():
        try:
            return fn()
        except errors.OpError as e:
            return e
    return run


@pytest.fixture(scope="module", params=["grpc", "ucx"])
def cluster(request):
    """3 worker processes over the transport: (transport, [target of each worker])."""
    if not _installed(request.param):
        pytest.skip(f"transport {request.param!r} is not installed")
    from tensorweave.distributed.testing import LocalCluster

    with LocalCluster({"worker": N}, request.param) as c:
        yield request.param, [f"{request.param}://{c.address('worker', i)}" for i in range(N)]


def _member(target, task, build, feeds_for, runs=1, options=STEP):
    """One worker's client: builds its graph on /job:worker/task:<task>, runs it ``runs``
    times (feeds from ``feeds_for(run, placeholders)``); the fetched values of every run."""
    g = tw.Graph()
    with g.as_default(), tw.device(f"/job:worker/task:{task}"):
        fetches, placeholders = build(task)
    with tw.Session(target, graph=g) as sess:
        return [sess.run(fetches, feeds_for(r, placeholders), options=options) for r in range(runs)]


# ----------------------------------------------------------------------------------------
# values across processes

CASES = [((), np.float32), ((7,), np.float32), ((2, 5), np.float64), ((1,), np.float64), ((4, 3), np.int32),
         ((0,), np.float32), ((11,), np.int32)]


def _value(task, run, shape, dtype):
    rng = np.random.default_rng(1000 * run + 10 * task + len(shape))
    v = rng.integers(-50, 50, shape) if np.dtype(dtype).kind == "i" else rng.normal(size=shape)
    return np.asarray(v, dtype=dtype)


def test_all_reduce_equals_numpy_across_worker_processes(cluster):
    """Sum and mean of every case from 3 processes, three executions of the same instances;
    all-gather and broadcast in the same steps; every member gets the same bytes."""
    _, targets = cluster

    def build(task):
        xs, outs = [], []
        for k, (shape, dtype) in enumerate(CASES):
            x = tw.placeholder(dtype, shape)
            xs.append(x)
            outs.append(tw.collective_ops.all_reduce(x, N, 1, 10 + k, merge_op="Add", final_op="Id"))
            outs.append(tw.collective_ops.all_reduce(x, N, 1, 30 + k, merge_op="Add", final_op="Div"))
        xs.append(tw.placeholder(tw.int32, [2, 3]))
        outs.append(tw.collective_ops.all_gather(xs[-1], N, 1, 50))
        if task == 1:
            outs.append(tw.collective_ops.broadcast_send(tw.constant([[1.5, -2.0]], tw.float64), [1, 2], tw.float64,
                                                         N, 1, 51))
        else:
            outs.append(tw.collective_ops.broadcast_recv([1, 2], tw.float64, N, 1, 51))
        return outs, xs

    def feeds(task):
        def f(run, xs):
            vals = [_value(task, run, s, d) for s, d in CASES] + [np.full((2, 3), 10 * run + task, np.int32)]
            return dict(zip(xs, vals))
        return f

    got = _run_threads([lambda t=t: _member(targets[t], t, build, feeds(t), runs=3) for t in range(N)])
    for run in range(3):
        for k, (shape, dtype) in enumerate(CASES):
            total = sum(_value(t, run, shape, dtype).astype(np.float64) for t in range(N))
            sums = [got[t][run][2 * k] for t in range(N)]
            means = [got[t][run][2 * k + 1] for t in range(N)]
            for s, m in zip(sums, means):
                assert s.dtype == dtype and s.shape == shape and m.dtype == dtype and m.shape == shape
                assert all(np.array_equal(s, o) for o in sums) and all(np.array_equal(m, o) for o in means)
            if np.dtype(dtype).kind == "i":
                np.testing.assert_array_equal(sums[0], total.astype(dtype))
                np.testing.assert_array_equal(means[0], np.trunc(total / N).astype(dtype))  # TF's integer Div
            else:
                np.testing.assert_allclose(sums[0], total, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(means[0], total / N, rtol=1e-5, atol=1e-6)
        gathered = np.concatenate([np.full((2, 3), 10 * run + t, np.int32) for t in range(N)])
        for t in range(N):
            np.testing.assert_array_equal(got[t][run][-2], gathered)  # rank order = task order
            np.testing.assert_array_equal(got[t][run][-1], [[1.5, -2.0]])


def test_a_member_that_never_comes_times_out_naming_group_and_instance(cluster):
    _, targets = cluster

    def build(task):
        x = tw.placeholder(tw.float32, [3])
        return tw.collective_ops.all_reduce(x, N, 2, 7, timeout=1.0), [x]

    t0 = time.monotonic()
    got = _run_threads([_outcome(lambda t=t: _member(targets[t], t, build, lambda r, xs: {xs[0]: np.ones(3)}))
                        for t in range(N - 1)])  # the last worker never runs it
    assert time.monotonic() - t0 < 30
    for e in got:
        assert isinstance(e, errors.DeadlineExceededError), e
        assert "group_key=2, instance_key=7" in str(e) and "timed out after 1 s" in str(e)
        assert "2 of 3 have" in str(e) and "task:1/device:CPU:0" in str(e), e


def test_members_that_disagree_on_shape_all_fail_at_once(cluster):
    _, targets = cluster

    def build(task):
        x = tw.placeholder(tw.float32, [4 if task == 2 else 3])
        return tw.collective_ops.all_reduce(x, N, 3, 1, timeout=30.0), [x]

    t0 = time.monotonic()
    got = _run_threads([_outcome(lambda t=t: _member(targets[t], t, build,
                                                     lambda r, xs, t=t: {xs[0]: np.ones(4 if t == 2 else 3)}))
                        for t in range(N)])
    assert time.monotonic() - t0 < 20  # not the op's 30 s timeout: the member that sees it tells the others
    for e in got:
        assert isinstance(e, errors.InvalidArgumentError), e
        assert "members disagree" in str(e) and "float32[3]" in str(e) and "float32[4]" in str(e), e
        assert "group_key=3, instance_key=1" in str(e)


def test_the_step_timeout_and_an_abort_end_a_collective(cluster):
    """The step's timeout_in_ms ends a wait for a member that never comes; a step failing on
    another task aborts the collective waiting in it at once (AbortStep)."""
    transport, targets = cluster

    def build(task):
        x = tw.placeholder(tw.float32, [2])
        return tw.collective_ops.all_reduce(x, N, 4, 1), [x]

    t0 = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError):
        _member(targets[0], 0, build, lambda r, xs: {xs[0]: np.ones(2)}, options=tw.RunOptions(timeout_in_ms=1000))
    assert time.monotonic() - t0 < 30

    g = tw.Graph()
    with g.as_default():
        with tw.device("/job:worker/task:0"):
            y = tw.collective_ops.all_reduce(tw.constant([1.0, 2.0]), N, 5, 1)  # nobody else comes
        with tw.device("/job:worker/task:1"):
            bad = tw.reshape(tw.placeholder(tw.float32, [None]), [3])
    with tw.Session(targets[0], graph=g) as sess:
        t0 = time.monotonic()
        with pytest.raises(errors.InvalidArgumentError, match="3"):
            sess.run([y, bad], {"Placeholder:0": np.ones(5, np.float32)}, options=STEP)
        assert time.monotonic() - t0 < 30  # not the step's 60 s
        # the aborted member told nobody else and left nothing waiting: the task serves on
        assert sess.run(tw.constant(1.0, name="after"), options=STEP) == 1.0


def test_all_reduce_optimizer_keeps_replicas_identical_and_trains_digits(cluster):
    sys.path.insert(0, EXAMPLES)
    try:
        import digits
    finally:
        sys.path.remove(EXAMPLES)
    _, targets = cluster
    x_train, _, y_train, _ = digits.load_data(0)
    steps, batch = 40, 32

    def replica(task):
        g = tw.Graph()
        with g.as_default():
            tw.set_random_seed(100 + task)  # different initial values: the chief's are broadcast
            with tw.device(f"/job:worker/task:{task}"):
                x = tw.placeholder(tw.float32, [None, 64])
                y = tw.placeholder(tw.int32, [None])
                loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=digits.mlp(x, 1.0)))
                global_step = tw.train.get_or_create_global_step()
                opt = tw.train.AllReduceSyncOptimizer(tw.train.AdamOptimizer(2e-3), num_workers=N, timeout=60)
                train_op = opt.minimize(loss, global_step=global_step)
            hook = opt.make_session_run_hook(is_chief=(task == 0))
            hook.begin()
            init = tw.global_variables_initializer()
            weights = tw.trainable_variables()
        with tw.Session(targets[task], graph=g) as sess:
            sess.run(init)
            hook.after_create_session(sess, None)
            start = sess.run(weights)
            rng = np.random.default_rng(0)  # every replica: the same batches, its own share
            losses = []
            for _ in range(steps):
                idx = rng.choice(len(x_train), N * batch, replace=False)[task * batch:(task + 1) * batch]
                _, lo = sess.run([train_op, loss], {x: x_train[idx], y: y_train[idx]}, options=STEP)
                losses.append(lo)
            return start, sess.run(weights), sess.run(global_step), losses

    got = _run_threads([lambda t=t: replica(t) for t in range(N)], timeout=180)
    for start, end, step, _ in got:
        assert all(np.array_equal(a, b) for a, b in zip(start, got[0][0]))  # the broadcast
        assert all(np.array_equal(a, b) for a, b in zip(end, got[0][1]))    # bit for bit, after 40 updates
        assert step == steps
    first = np.mean([lo for _, _, _, ls in got for lo in ls[:5]])
    last = np.mean([lo for _, _, _, ls in got for lo in ls[-5:]])
    assert last < 0.6 * first, (first, last)


# ----------------------------------------------------------------------------------------
# in this process


def test_local_session_with_several_devices():
    g = tw.Graph()
    with g.as_default():
        outs, gathers, maxes = [], [], []
        for i in range(4):
            with tw.device(f"/device:CPU:{i}"):
                x = tw.constant(np.arange(10, dtype=np.float64) * (i + 1))
                outs.append(tw.collective_ops.all_reduce(x, 4, 100, 1, final_op="Div"))
                maxes.append(tw.collective_ops.all_reduce(tw.constant([i, -i], tw.int64), 4, 100, 2, merge_op="Max"))
                gathers.append(tw.collective_ops.all_gather(tw.constant([[i]], tw.int32), 4, 100, 3))
        assert gathers[0].shape.as_list() == [4, 1]
    with tw.Session(graph=g, config=tw.ConfigProto(device_count={"CPU": 4})) as sess:
        for _ in range(2):
            o, m, ga = sess.run([outs, maxes, gathers])
            for i in range(4):
                np.testing.assert_allclose(o[i], np.arange(10) * 2.5)
                assert m[i].tolist() == [3, 0] and ga[i].ravel().tolist() == [0, 1, 2, 3]


def test_group_size_one_and_bad_attrs():
    with tw.Graph().as_default():
        y = tw.collective_ops.all_reduce(tw.constant([[1, 2]], tw.int32), 1, 101, 1, final_op="Div")
        with tw.Session() as sess:
            assert sess.run(y).tolist() == [[1, 2]]
        x = tw.constant([1.0])
        for kwargs, match in ((dict(group_size=0), "group_size must be at least 1"),
                              (dict(merge_op="Avg"), "merge_op"), (dict(final_op="Mean"), "final_op"),
                              (dict(group_key=1.5), "group_key must be a Python int"), (dict(timeout=-1), "timeout")):
            args = {"group_size": 2, "group_key": 1, "instance_key": 1, **kwargs}
            with pytest.raises(errors.InvalidArgumentError, match=match):
                tw.collective_ops.all_reduce(x, **args)
        with pytest.raises(errors.InvalidArgumentError):
            tw.collective_ops.all_reduce(tw.constant([True]), 2, 1, 1)  # bool: not a collective dtype
        with pytest.raises(errors.InvalidArgumentError, match="rank >= 1"):
            tw.collective_ops.all_gather(tw.constant(1.0), 2, 1, 1)
        with pytest.raises(errors.InvalidArgumentError, match="fully defined"):
            tw.collective_ops.broadcast_recv([None, 2], tw.float32, 2, 1, 1)


def _inproc_cluster(n, name):
    spec = {"worker": [f"inproc-collective-{name}:{i + 1}" for i in range(n)]}
    return [Server(spec, "worker", i, transport="inproc") for i in range(n)]


def test_inproc_transport_and_the_optimizer_with_one_worker():
    servers = _inproc_cluster(4, "ar")
    try:
        def build(task):
            x = tw.placeholder(tw.float32, [5])
            return tw.collective_ops.all_reduce(x, 4, 1, 1, merge_op="Mul"), [x]
        got = _run_threads([lambda t=t: _member(servers[t].target, t, build,
                                                lambda r, xs, t=t: {xs[0]: np.full(5, t + 1.0)}, runs=2)
                            for t in range(4)])
        assert all(v.tolist() == [24.0] * 5 for runs in got for v in runs)
    finally:
        for s in servers:
            s.stop()
    with tw.Graph().as_default():  # one worker: the wrapped optimizer, no collective
        v = tw.Variable([1.0, 2.0])
        opt = tw.train.AllReduceSyncOptimizer(tw.train.GradientDescentOptimizer(0.5), num_workers=1)
        train = opt.minimize(tw.reduce_sum(tw.square(v)))
        assert not [op for op in tw.get_default_graph().get_operations() if op.type.startswith("Collective")]
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            sess.run(train)
            assert sess.run(v).tolist() == [0.0, 0.0]


def test_group_table():
    table = collectives.GroupTable(max_groups=2)
    seen = {}

    def cb(name):
        return lambda devices, error: seen.__setitem__(name, (devices, error))
    dev = [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(3)]
    table.join(1, 2, dev[1], cb("a"))
    assert "a" not in seen and table.arrived(1) == [dev[1]]
    table.join(1, 2, dev[0], cb("b"))
    assert seen["a"] == ([dev[0], dev[1]], None) and seen["b"] == ([dev[0], dev[1]], None)  # in rank order
    table.join(1, 2, dev[2], cb("c"))
    assert isinstance(seen["c"][1], errors.InvalidArgumentError) and "not one of them" in str(seen["c"][1])
    table.join(2, 3, dev[0], cb("d"))
    table.join(2, 2, dev[1], cb("e"))  # disagrees on the size: everyone fails, and later joiners too
    for name in ("d", "e"):
        assert isinstance(seen[name][1], errors.InvalidArgumentError) and "disagree on group_size" in str(seen[name][1])
    table.join(2, 3, dev[2], cb("f"))
    assert "disagree on group_size" in str(seen["f"][1])
    table.join(3, 2, dev[0], cb("g"))  # the table is full: a group nobody waits on gives way
    table.join(4, 2, dev[0], cb("h"))
    with pytest.raises(errors.ResourceExhaustedError, match="max_groups"):
        table.join(5, 2, dev[0], cb("i"))
    with pytest.raises(errors.InvalidArgumentError, match="full device name"):
        table.join(6, 2, "/job:worker/task:0", cb("j"))


def test_early_values_are_bounded_and_late_ones_dropped():
    ex = collectives.CollectiveExecutor("test", collectives.CollectiveLimits(max_pending=2, max_pending_bytes=1 << 20))
    dst = "/job:localhost/replica:0/task:0/device:CPU:0"
    header = {"group_key": 1, "instance_key": 1, "round": 0, "src": dst, "dst": dst, "signature": {}}
    ex.put(dict(header, exec=0), np.ones(3))
    ex.put(dict(header, exec=1), np.ones(3))
    with pytest.raises(errors.ResourceExhaustedError, match="max_pending=2"):
        ex.put(dict(header, exec=2), np.ones(3))
    with pytest.raises(errors.ResourceExhaustedError, match="max_pending_bytes"):
        ex.put(dict(header, exec=0, round=1), np.ones(1 << 18))  # one slot, too many bytes
    done = threading.Event()
    ex.start(None, collectives.Instance("CollectiveReduce", 1, 1, 1), dst, np.ones(3), lambda *a: done.set())
    assert done.wait(30)
    ex.put(dict(header, exec=0, round=1), np.ones(3))  # for an execution that ended here: dropped
    assert (dst, 1, 1, 0) not in ex._slots and (dst, 1, 1, 1) in ex._slots
    ex.close()


def test_request_schemas_and_checks():
    with pytest.raises(errors.InvalidArgumentError, match=r"CollectivePut: unknown field\(s\) \['bogus'\]"):
        wire.check_request("CollectivePut", {"group_key": 1, "instance_key": 1, "exec": 0, "round": 0,
                                             "src": "a", "dst": "b", "bogus": 1})
    with pytest.raises(errors.InvalidArgumentError, match="'group_size' .* is missing"):
        wire.check_request("CompleteGroup", {"group_key": 1, "device": "d"})
    with pytest.raises(errors.InvalidArgumentError, match="it takes none"):
        wire.check_request("CompleteGroup", {"group_key": 1, "group_size": 2, "device": "d"}, 1)
    servers = _inproc_cluster(2, "schemas")
    try:
        w0, w1 = servers[0].worker.collectives, servers[1].worker.collectives
        d0 = "/job:worker/replica:0/task:0/device:CPU:0"
        put = {"group_key": 1, "instance_key": 1, "exec": 0, "round": 0, "src": d0, "dst": d0, "signature": {}}
        with pytest.raises(errors.InvalidArgumentError, match="is not a device of"):
            w1.collective_put(wire.encode_message(put, [np.ones(2)]))
        with pytest.raises(errors.InvalidArgumentError, match="expected one tensor"):
            w0.collective_put(wire.encode_message(put, [np.array([True])]))
        with pytest.raises(errors.InvalidArgumentError, match="'exec' must be in"):
            w0.collective_put(wire.encode_message(dict(put, exec=-1), [np.ones(2)]))
        with pytest.raises(errors.InvalidArgumentError, match="'error' must be"):
            w0.collective_put(wire.encode_message(dict(put, error={"code": "x"})))
        with pytest.raises(errors.InvalidArgumentError, match="full device name"):
            w0.collective_put(wire.encode_message(dict(put, src="/job:worker"), [np.ones(2)]))
        join = {"group_key": 1, "group_size": 2, "device": d0, "timeout": 0.01}
        with pytest.raises(errors.FailedPreconditionError, match="not the collective group leader"):
            w1.complete_group(wire.encode_message(join))
        with pytest.raises(errors.InvalidArgumentError, match="not a device of a task of this cluster"):
            w0.complete_group(wire.encode_message(dict(join, device="/job:ps/replica:0/task:0/device:CPU:0")))
        header, _ = wire.decode_response(w0.complete_group(wire.encode_message(join)))
        assert header == {"pending": True, "arrived": [d0]}
    finally:
        for s in servers:
            s.stop()
