"""Replicated training (whitepaper 7): between-graph replication with replica_device_setter,
synchronous (SyncReplicasOptimizer, equal to one big batch) and asynchronous data
parallelism, in-graph replication and model parallelism across tasks, concurrent steps on one
DistributedSession; the ConditionalAccumulator and device functions they are built on.

Tasks run in this process (``Server(spec, job, task, transport=...)``); the tests that
exercise the runtime run over every installed transport. Every wait is bounded: steps run
with a RunOptions timeout and threads are joined with a deadline.
"""

import itertools
import threading
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.distributed.server import Server

STEP = tw.RunOptions(timeout_in_ms=60000)


def _transports():
    return sorted(n for n, _ in plugins.registry().transports.items())


@pytest.fixture(params=_transports())
def transport(request):
    return request.param


_inproc_ids = itertools.count()


def _free_addresses(n, transport):
    if transport == "inproc":
        base = 53000 + 10 * next(_inproc_ids)
        return [f"inproc-replicated:{base + i}" for i in range(n)]
    from tensorweave.distributed.launcher import pick_ports

    return [f"127.0.0.1:{p}" for p in pick_ports(n)]


@pytest.fixture
def cluster(transport):
    """Two ps tasks and two worker tasks, all in this process: (spec, {(job, task): Server})."""
    for attempt in range(3):
        # A port picked free may be taken before its server binds it (other processes, or
        # UCX's own listeners): start again on fresh ports.
        addrs = _free_addresses(4, transport)
        spec = {"ps": addrs[:2], "worker": addrs[2:]}
        servers = {}
        try:
            for job, n in (("ps", 2), ("worker", 2)):
                for i in range(n):
                    servers[(job, i)] = Server(spec, job, i, transport=transport)
            break
        except errors.UnavailableError:
            for s in servers.values():
                s.stop()
            if attempt == 2:
                raise
    try:
        yield spec, servers
    finally:
        for s in servers.values():
            s.stop()


def _run_threads(fns, timeout=120):
    """Run each fn in its own thread; re-raise the first failure; never hang."""
    errs, threads = [], []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
                errs.append(e)
        return run

    for fn in fns:
        t = threading.Thread(target=wrap(fn), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a replica thread did not finish in time"
    if errs:
        raise errs[0]


# ----------------------------------------------------------------------------------------
# a small float64 model and its data
W0 = np.linspace(-0.5, 0.5, 12).reshape(4, 3)
B0 = np.array([0.1, -0.2, 0.05])
V0 = np.linspace(0.3, -0.3, 6).reshape(3, 2)


def _model(x, y):
    w = tw.Variable(W0, name="w")
    b = tw.Variable(B0, name="b")
    v = tw.Variable(V0, name="v")
    h = tw.tanh(tw.matmul(x, w) + b)
    loss = tw.reduce_mean(tw.square(tw.matmul(h, v) - y))
    return [w, b, v], loss


def _data(steps, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(steps, n, 4)), rng.normal(size=(steps, n, 2))


def _reference(xs, ys, make_opt):
    """One process, the whole batch each step."""
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float64, [None, 4])
        y = tw.placeholder(tw.float64, [None, 2])
        variables, loss = _model(x, y)
        gs = tw.train.get_or_create_global_step()
        train = make_opt().minimize(loss, global_step=gs)
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            for k in range(len(xs)):
                sess.run(train, {x: xs[k], y: ys[k]})
            return sess.run(variables), sess.run(gs)


# ----------------------------------------------------------------------------------------
def test_sync_replicas_equal_one_big_batch(cluster):
    """N replicas with batches of b, aggregated: the same weights as batches of N*b."""
    spec, servers = cluster
    n_rep, b, steps = 2, 8, 5
    xs, ys = _data(steps, n_rep * b)

    def make_opt():
        return tw.train.AdamOptimizer(0.05)

    results, chief_ready = {}, threading.Event()

    def replica(i):
        g = tw.Graph()
        with g.as_default():
            setter = tw.train.replica_device_setter(cluster=spec, worker_device=f"/job:worker/task:{i}")
            with tw.device(setter):
                x = tw.placeholder(tw.float64, [None, 4])
                y = tw.placeholder(tw.float64, [None, 2])
                variables, loss = _model(x, y)
                gs = tw.train.get_or_create_global_step()
                opt = tw.train.SyncReplicasOptimizer(make_opt(), replicas_to_aggregate=n_rep,
                                                     total_num_replicas=n_rep)
                train = opt.minimize(loss, global_step=gs)
            hook = opt.make_session_run_hook(is_chief=(i == 0), num_tokens=0)
            hook.begin()
            coord = tw.train.Coordinator()
            with tw.Session(servers[("worker", i)].target) as sess:
                if i == 0:
                    sess.run(tw.global_variables_initializer())
                else:
                    assert chief_ready.wait(60)
                sess.run(tw.local_variables_initializer())
                hook.after_create_session(sess, coord)
                if i == 0:
                    chief_ready.set()
                for k in range(steps):
                    sess.run(train, {x: xs[k, i * b:(i + 1) * b], y: ys[k, i * b:(i + 1) * b]}, options=STEP)
                results[i] = sess.run(variables + [gs])
                coord.request_stop()
                coord.join(hook.threads, stop_grace_period_secs=30)
                if i == 0:
                    # Where things ran: variables round robin over the ps tasks, the
                    # accumulators with their variables, the model on this worker.
                    placement = sess.placement([train, loss], {x: xs[0, :b], y: ys[0, :b]})
                    assert placement["w"].startswith("/job:ps/replica:0/task:0")
                    assert placement["b"].startswith("/job:ps/replica:0/task:1")
                    assert placement["v"].startswith("/job:ps/replica:0/task:0")
                    assert placement[loss.op.name].startswith("/job:worker/replica:0/task:0")

    _run_threads([lambda i=i: replica(i) for i in range(n_rep)])
    ref_vars, ref_step = _reference(xs, ys, make_opt)
    for i in range(n_rep):
        *got, step = results[i]
        assert step == steps == ref_step
        for a, r in zip(got, ref_vars):
            np.testing.assert_allclose(a, r, rtol=1e-10, atol=1e-12)
    assert not np.allclose(ref_vars[0], W0)  # it did train


# ----------------------------------------------------------------------------------------
# the pieces: device functions, replica_device_setter, ConditionalAccumulator
def test_device_functions_follow_tf1_order():
    seen = []

    def fn(op):
        seen.append((op.name, op.device))
        return "/job:worker/task:3" if op.type != "Variable" else "/job:ps"

    with tw.device("/device:CPU:0"):
        with tw.device(fn):
            a = tw.constant(1.0, name="a")
            with tw.device("/task:1"):  # inner scope first: the function sees it (and overrides it)
                b = tw.constant(2.0, name="b")
            v = tw.Variable(1.0, name="v")
            with tw.device(None):
                c = tw.constant(3.0, name="c")
    # The outer string scope fills only the fields the function left unset.
    assert a.op.device == "/job:worker/task:3/device:CPU:0"
    assert ("b", "/task:1") in seen and b.op.device == "/job:worker/task:3/device:CPU:0"
    assert v.op.device == "/job:ps/device:CPU:0"
    assert v.initializer.device == v.op.device and v.value().op.device == v.op.device  # colocated
    assert c.op.device == ""


def test_replica_device_setter_round_robin_and_merging():
    cluster = tw.train.ClusterSpec({"ps": ["h:1", "h:2", "h:3"], "worker": ["h:4"]})
    setter = tw.train.replica_device_setter(cluster=cluster, worker_device="/job:worker/task:0")
    with tw.device(setter):
        vs = [tw.Variable(float(i), name=f"v{i}") for i in range(4)]
        y = vs[0] * 2.0
        with tw.device("/job:ps/task:2"):
            pinned = tw.Variable(0.0, name="pinned")  # a pinned task is kept
        with tw.device("/device:CPU:0"):
            z = y + 1.0
    assert [v.device for v in vs] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2", "/job:ps/task:0"]
    assert pinned.device == "/job:ps/task:2"
    assert y.op.device == "/job:worker/task:0"
    assert z.op.device == "/job:worker/task:0/device:CPU:0"
    assert tw.train.replica_device_setter(cluster={"worker": ["h:1"]}) is None  # no ps job
    assert tw.train.replica_device_setter(ps_tasks=0) is None
    with pytest.raises(errors.InvalidArgumentError, match="ps_tasks"):
        tw.train.replica_device_setter(ps_tasks=-1)
    with pytest.raises(errors.InvalidArgumentError, match="malformed device"):
        tw.train.replica_device_setter(ps_tasks=1, worker_device="/jobb:x")
    with pytest.raises(errors.InvalidArgumentError, match="ps_strategy"):
        with tw.device(tw.train.replica_device_setter(ps_tasks=2, ps_strategy=lambda op: "one")):
            tw.Variable(1.0)


def test_replica_device_setter_custom_strategy():
    setter = tw.train.replica_device_setter(ps_tasks=4, ps_strategy=lambda op: 3)
    with tw.device(setter):
        v = tw.Variable(1.0)
    assert v.device == "/job:ps/task:3"


def test_conditional_accumulator_semantics():
    acc = tw.ConditionalAccumulator(tw.float64, [2], shared_name="acc")
    g = tw.placeholder(tw.float64, [2])
    step = tw.placeholder(tw.int64, [])
    apply = acc.apply_grad(g, local_step=step)
    take = acc.take_grad(2)
    count = acc.num_accumulated()
    set_step = acc.set_global_step(step)
    with tw.Session() as sess:
        sess.run(apply, {g: [1, 2], step: 0})
        sess.run(apply, {g: [3, 6], step: 4})
        assert sess.run(count) == 2
        np.testing.assert_array_equal(sess.run(take), [2, 4])  # the mean; the step is now 1
        sess.run(apply, {g: [9, 9], step: 0})  # stale: dropped
        assert sess.run(count) == 0
        # A take waits (holding no thread) until enough gradients arrive.
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("v", sess.run(take, options=STEP)), daemon=True)
        t.start()
        sess.run(apply, {g: [1, 1], step: 1})
        sess.run(apply, {g: [2, 2], step: 7})
        t.join(30)
        np.testing.assert_array_equal(box["v"], [1.5, 1.5])
        sess.run(set_step, {step: 10})
        sess.run(apply, {g: [1, 1], step: 9})
        assert sess.run(count) == 0
        # A take that times out gives its wait back; the next one is served.
        with pytest.raises(errors.DeadlineExceededError):
            sess.run(take, options=tw.RunOptions(timeout_in_ms=100))
        with pytest.raises(errors.InvalidArgumentError, match="shape"):
            sess.run(acc.apply_grad(tw.constant([1.0, 2.0, 3.0], tw.float64), 10))
    with pytest.raises(errors.InvalidArgumentError, match="dtype"):
        tw.ConditionalAccumulator(tw.int32, [2])
    with pytest.raises(errors.InvalidArgumentError, match="shape"):
        acc.apply_grad(tw.constant([1.0], tw.float64))


def test_cancel_pending_takes_ends_a_waiting_take():
    acc = tw.ConditionalAccumulator(tw.float32, [], shared_name="acc")
    take, cancel = acc.take_grad(1), acc.cancel_pending_takes()
    with tw.Session() as sess:
        box = {}

        def waiter():
            try:
                sess.run(take, options=STEP)
            except errors.CancelledError as e:
                box["e"] = e
        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        # The take may not be parked yet when a cancel runs: cancel until it has ended.
        deadline = time.monotonic() + 30
        while t.is_alive() and time.monotonic() < deadline:
            sess.run(cancel)
            t.join(0.01)
        assert not t.is_alive()
        assert "cancel_pending_takes" in str(box["e"])


# ----------------------------------------------------------------------------------------
def test_async_replicas_each_apply_their_own_updates_and_converge(cluster):
    """Asynchronous data parallelism (Figure 7 bottom): one client thread per replica."""
    spec, servers = cluster
    rng = np.random.default_rng(1)
    true_w = rng.normal(size=(4, 1))
    xs = rng.normal(size=(400, 4))
    ys = xs @ true_w + 0.01 * rng.normal(size=(400, 1))
    steps, b = 60, 20
    losses, ready = {}, threading.Event()

    def replica(i):
        g = tw.Graph()
        with g.as_default():
            with tw.device(tw.train.replica_device_setter(cluster=spec, worker_device=f"/job:worker/task:{i}")):
                x = tw.placeholder(tw.float64, [None, 4])
                y = tw.placeholder(tw.float64, [None, 1])
                w = tw.Variable(np.zeros((4, 1)), name="w")
                loss = tw.reduce_mean(tw.square(tw.matmul(x, w) - y))
                gs = tw.train.get_or_create_global_step()
                train = tw.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
            with tw.Session(servers[("worker", i)].target) as sess:
                if i == 0:
                    sess.run(tw.global_variables_initializer())
                    ready.set()
                assert ready.wait(60)
                first = sess.run(loss, {x: xs, y: ys})
                for k in range(steps):
                    lo = ((k * 2 + i) * b) % len(xs)
                    sess.run(train, {x: xs[lo:lo + b], y: ys[lo:lo + b]}, options=STEP)
                losses[i] = (first, sess.run(loss, {x: xs, y: ys}), sess.run(gs))

    _run_threads([lambda i=i: replica(i) for i in range(2)])
    for first, last, _ in losses.values():
        assert last < 0.01 * first, losses
    # Both replicas' updates reached the shared global step on the ps (its increments are
    # unlocked, as in TF1's optimizers, so concurrent ones may overlap: at most 2 * steps).
    assert steps < max(s for _, _, s in losses.values()) <= 2 * steps


def test_in_graph_replication_equals_local(cluster):
    """One client, one graph: a tower per worker, gradients averaged on the ps (Figure 7 top)."""
    spec, servers = cluster
    xs, ys = _data(4, 16, seed=3)

    def build(towers):
        x = tw.placeholder(tw.float64, [None, 4])
        y = tw.placeholder(tw.float64, [None, 2])
        with tw.device("/job:ps/task:0" if towers else None):
            w = tw.Variable(W0, name="w")
            b = tw.Variable(B0, name="b")
            v = tw.Variable(V0, name="v")
        params = [w, b, v]
        grads = []
        xparts, yparts = tw.split(x, towers or 1), tw.split(y, towers or 1)
        for t in range(towers or 1):
            with tw.device(f"/job:worker/task:{t}" if towers else None):
                h = tw.tanh(tw.matmul(xparts[t], w) + b)
                loss = tw.reduce_mean(tw.square(tw.matmul(h, v) - yparts[t]))
                grads.append(tw.gradients(loss, params))
        with tw.device("/job:ps/task:1" if towers else None):
            avg = [tw.add_n(list(gs)) / float(len(grads)) for gs in zip(*grads)]
        opt = tw.train.MomentumOptimizer(0.1, 0.9)
        return x, y, params, opt.apply_gradients(list(zip(avg, params)))

    def train(target, towers):
        g = tw.Graph()
        with g.as_default():
            x, y, params, step = build(towers)
            with tw.Session(target) as sess:
                sess.run(tw.global_variables_initializer())
                if towers:
                    pl = sess.placement(step, {x: xs[0], y: ys[0]})
                    assert {d.split("/device")[0] for d in pl.values()} >= {
                        "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1", "/job:ps/replica:0/task:0"}
                for k in range(len(xs)):
                    sess.run(step, {x: xs[k], y: ys[k]}, options=STEP)
                return sess.run(params)

    dist = train(servers[("worker", 0)].target, towers=2)
    local = train("", towers=0)
    for a, r in zip(dist, local):
        np.testing.assert_allclose(a, r, rtol=1e-10, atol=1e-12)


def test_model_parallel_layers_on_different_tasks_equal_local(cluster):
    """Model parallelism (Figure 8): each layer on its own task, trained; same values as local."""
    spec, servers = cluster
    xs, ys = _data(3, 8, seed=5)

    def train(target, devices):
        g = tw.Graph()
        with g.as_default():
            x = tw.placeholder(tw.float64, [None, 4])
            y = tw.placeholder(tw.float64, [None, 2])
            with tw.device(devices[0]):
                w = tw.Variable(W0, name="w")
                h = tw.tanh(tw.matmul(x, w))
            with tw.device(devices[1]):
                v = tw.Variable(V0, name="v")
                out = tw.matmul(h, v)
            with tw.device(devices[2]):
                loss = tw.reduce_mean(tw.square(out - y))
            step = tw.train.AdamOptimizer(0.05).minimize(loss)
            with tw.Session(target) as sess:
                sess.run(tw.global_variables_initializer())
                values = []
                for k in range(len(xs)):
                    values.append(sess.run([loss, step], {x: xs[k], y: ys[k]}, options=STEP)[0])
                return values, sess.run([w, v, h], {x: xs[0]})

    dist = train(servers[("worker", 1)].target, ["/job:worker/task:0", "/job:worker/task:1", "/job:ps/task:1"])
    local = train("", [None, None, None])
    np.testing.assert_allclose(dist[0], local[0], rtol=1e-12)
    for a, r in zip(dist[1], local[1]):
        np.testing.assert_allclose(a, r, rtol=1e-12)


def test_concurrent_steps_on_one_session_do_not_mix(cluster):
    """Several client threads run steps at once on one DistributedSession (Figure 9): each
    step's transfers stay within the step, and concurrent updates are all applied."""
    spec, servers = cluster
    x = tw.placeholder(tw.float32, [None], name="x")
    with tw.device("/job:worker/task:0"):
        a = x * 2.0 + 1.0
    with tw.device("/job:worker/task:1"):
        b = tw.square(a)
    with tw.device("/job:ps/task:0"):
        counter = tw.Variable(0.0, name="counter")
        c = tw.reduce_sum(b)
        bump = tw.assign_add(counter, 1.0)
    n_threads, iters = 4, 40
    with tw.Session(servers[("worker", 0)].target) as sess:
        sess.run(counter.initializer)

        def client(i):
            for k in range(iters):
                xv = np.arange(3, dtype=np.float32) + 100 * i + k
                bv, cv, _ = sess.run([b, c, bump], {x: xv}, options=STEP)
                np.testing.assert_allclose(bv, (2 * xv + 1) ** 2)
                np.testing.assert_allclose(cv, ((2 * xv + 1) ** 2).sum(), rtol=1e-6)

        _run_threads([lambda i=i: client(i) for i in range(n_threads)])
        assert sess.run(counter) == n_threads * iters
