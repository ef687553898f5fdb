"""Train the digits MLP across a cluster: 1 ps task + 2 workers, synchronous or asynchronous.

    python examples/distributed_digits.py                          # sync, grpc, own local cluster
    python examples/distributed_digits.py --mode async --transport ucx
    python examples/distributed_digits.py --cluster cluster.toml   # a running cluster (2 workers)
    srun -n 3 python examples/distributed_digits.py --resolver slurm --jobs ps=1,worker=2   # one task each

Between-graph replication (whitepaper section 7): one client thread per worker task builds
the same graph under ``tw.train.replica_device_setter`` — the parameters live on the ps
task, each replica's forward and backward pass on its own worker task.

* ``--mode sync``: ``tw.train.SyncReplicasOptimizer`` averages the two replicas' gradients
  (each on half of a 64-example batch) before one Adam update: the same algorithm as the
  single-process ``examples/digits.py``.
* ``--mode async``: each replica applies its own Adam updates to the shared parameters as
  soon as its gradients are ready (batches of 32, twice as many updates).

Without ``--cluster`` the example starts its own local cluster (``tensorweave cluster up``'s
launcher: one process per task on free loopback ports) and stops it at the end; with
``--transport inproc`` the tasks are servers inside this process. With ``--resolver slurm``
(or ``kubernetes``, ``tf_config``) every task of the cluster runs this program: the resolver
says which task it is (``tw.distribute.cluster_resolver``); a ps task serves until every
worker is done, worker ``i`` trains replica ``i`` (worker 0, the chief, initializes and
reports). Prints the held-out accuracy; the single-process model reaches about 97-98%.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import digits  # noqa: E402  (the example next to this file: data and model)

import tensorweave as tw  # noqa: E402

STEP_TIMEOUT_MS = 60_000  # no step may hang the example


@contextlib.contextmanager
def local_cluster(transport: str, workers: int = 2, ps: int = 1):
    """Yield a cluster config for a fresh local cluster; stop it afterwards."""
    from tensorweave.distributed import cluster as cl

    if transport == "inproc":  # servers in this process (the transport cannot cross processes)
        from tensorweave.distributed.server import Server

        base = 47000 + os.getpid() % 1000 * 8
        spec = {"ps": [f"inproc-digits:{base + i}" for i in range(ps)],
                "worker": [f"inproc-digits:{base + ps + i}" for i in range(workers)]}
        config = cl.config_from_dict({"cluster": spec, "transport": "inproc"})
        servers = [Server(config, job, i) for job, n in (("ps", ps), ("worker", workers)) for i in range(n)]
        try:
            yield config
        finally:
            for s in servers:
                s.stop()
        return
    from tensorweave.distributed import launcher

    with launcher.temporary(workers=workers, ps=ps, transport=transport, prefix="tw-digits-cluster-") as config:
        yield config


def build(task: int, spec, mode: str, lr: float, replicas: int, seed: int):
    """One replica's graph: the model under replica_device_setter, its train op and hook."""
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(seed + task)
        setter = tw.train.replica_device_setter(cluster=spec, worker_device=f"/job:worker/task:{task}")
        with tw.device(setter):
            x = tw.placeholder(tw.float32, [None, 64], name="x")
            y = tw.placeholder(tw.int32, [None], name="y")
            keep_prob = tw.placeholder_with_default(np.float32(1.0), [], name="keep_prob")
            logits = digits.mlp(x, keep_prob)
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            correct = tw.equal(tw.cast(tw.argmax(logits, 1), tw.int32), y)
            accuracy = tw.reduce_mean(tw.cast(correct, tw.float32))
            global_step = tw.train.get_or_create_global_step()
            opt = tw.train.AdamOptimizer(lr)
            hook = None
            if mode == "sync":
                opt = tw.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=replicas, total_num_replicas=replicas)
                hook = opt.make_session_run_hook(is_chief=(task == 0), num_tokens=0)
            train_op = opt.minimize(loss, global_step=global_step)
        return dict(graph=g, x=x, y=y, keep_prob=keep_prob, loss=loss, accuracy=accuracy, train_op=train_op,
                    global_step=global_step, hook=hook, init=tw.global_variables_initializer(),
                    local_init=tw.local_variables_initializer())


def _replica(config, spec, task: int, mode: str, epochs: int, batch_size: int, seed: int, quiet: bool,
             wait_for_chief, chief_ready, stop: threading.Event, result: dict, finish=None) -> None:
    """One replica's training loop (worker ``task``), in a thread or a process of its own.

    ``wait_for_chief(sess, m)`` returns once the chief has initialized the variables (False:
    give up); ``chief_ready()`` is the chief saying so. The chief (task 0) puts the held-out
    accuracy and the global step in ``result``. ``finish(sess, graph, ok)``, when given, runs
    last in the replica's session, whether training went well (``ok``) or not."""
    ok = False
    replicas = len(spec["worker"])
    x_train, x_test, y_train, y_test = digits.load_data(seed)
    # Every replica walks the same permutation and takes its share of each batch of
    # batch_size: sync makes one update per batch, async one per replica and batch.
    steps = int(np.ceil(len(x_train) / batch_size))
    m = build(task, spec, mode, 2e-3, replicas, seed)
    rng = np.random.default_rng(seed)  # the same permutation in every replica
    coord = tw.train.Coordinator()
    options = tw.RunOptions(timeout_in_ms=STEP_TIMEOUT_MS)
    with m["graph"].as_default(), tw.Session(config) as sess:
        try:
            if task == 0:
                sess.run(m["init"])
            elif not wait_for_chief(sess, m):
                return
            sess.run(m["local_init"])
            if m["hook"] is not None:
                m["hook"].begin()
                m["hook"].after_create_session(sess, coord)
            if task == 0:
                chief_ready()
            for epoch in range(1, epochs + 1):
                t0 = time.perf_counter()
                order = rng.permutation(len(x_train))
                total = 0.0
                for i in range(steps):
                    if stop.is_set():
                        return
                    idx = order[i * batch_size:(i + 1) * batch_size]
                    idx = idx[task * len(idx) // replicas:(task + 1) * len(idx) // replicas]
                    _, lo = sess.run([m["train_op"], m["loss"]],
                                     {m["x"]: x_train[idx], m["y"]: y_train[idx], m["keep_prob"]: 0.8},
                                     options=options)
                    total += lo * len(idx)
                if task == 0 and not quiet:
                    print(f"[{mode}] epoch {epoch:3d}/{epochs}  loss {total / (len(x_train) / replicas):.4f}  "
                          f"global step {sess.run(m['global_step'])}  ({time.perf_counter() - t0:.1f}s)",
                          file=sys.stderr, flush=True)
            if task == 0:
                result["accuracy"] = float(sess.run(m["accuracy"], {m["x"]: x_test, m["y"]: y_test}))
                result["global_step"] = int(sess.run(m["global_step"]))
                result["test_size"] = len(x_test)
            ok = True
        finally:
            coord.request_stop()
            if m["hook"] is not None:
                coord.join(m["hook"].threads, stop_grace_period_secs=30)
            if finish is not None:
                finish(sess, m["graph"], ok)


def _report(mode: str, result: dict) -> None:
    print(f"[{mode}] {result['global_step']} updates; test accuracy on the held-out 20% "
          f"({result['test_size']} images): {result['accuracy']:.4f}", flush=True)


def train(config, mode: str = "sync", epochs: int = 40, batch_size: int = 64, seed: int = 0,
          quiet: bool = False, reset: bool = False) -> float:
    """Train with one client thread per worker task of ``config``; returns held-out accuracy."""
    from tensorweave.distributed.master import _cluster_dict

    spec = _cluster_dict(config)
    replicas = len(spec["worker"])
    if reset:  # a running cluster may hold state from an earlier run
        tw.Session.reset(config)
    chief_ready = threading.Event()
    stop = threading.Event()  # a failing replica stops the others (no thread waits forever)
    errors_seen, result = [], {}

    def replica(task: int):
        try:
            _replica(config, spec, task, mode, epochs, batch_size, seed, quiet,
                     lambda sess, m: _wait(chief_ready, stop), chief_ready.set, stop, result)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors_seen.append(e)
            stop.set()
            chief_ready.set()

    threads = [threading.Thread(target=replica, args=(t,), name=f"replica-{t}", daemon=True)
               for t in range(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors_seen:
        raise errors_seen[0]
    if not quiet:
        _report(mode, result)
    return result["accuracy"]


# ----------------------------------------------------------------------------------------
# One task per process: a cluster that a cluster manager started (srun, Kubernetes, TF_CONFIG)

def _done_queues(spec):
    """One queue per ps task, on that task: each worker puts a token in every one when it is
    done (or has failed), and each ps task serves until it has a token from every worker."""
    queues = []
    for i in range(len(spec["ps"])):
        with tw.device(f"/job:ps/task:{i}"):
            queues.append(tw.FIFOQueue(len(spec["worker"]), [tw.int32], shapes=[[]],
                                       shared_name=f"distributed_digits_done_{i}", name=f"done_{i}"))
    return queues


def _chief_has_initialized(timeout: float):
    """``wait_for_chief`` across processes: poll, with a deadline, until every variable of
    the replica's graph is initialized (the chief runs the initializers)."""
    def wait(sess, m):
        with m["graph"].as_default():
            ready = tw.reduce_all(tw.stack([tw.is_variable_initialized(v) for v in tw.global_variables()]))
        deadline = time.monotonic() + timeout
        while not sess.run(ready):
            if time.monotonic() > deadline:
                raise tw.errors.DeadlineExceededError(f"the chief did not initialize the variables in {timeout:g} s")
            time.sleep(0.1)  # polling another process's progress; there is nothing to block on
        return True
    return wait


def _wait_for_cluster(config, timeout: float) -> None:
    """Poll, with a deadline, until every task of the cluster accepts connections (the tasks
    of an srun step or a StatefulSet start in any order)."""
    from tensorweave.distributed.launcher import accepts_connections

    deadline = time.monotonic() + timeout
    waiting = [a for _, _, a in config.spec.all_tasks()]
    while waiting:
        waiting = [a for a in waiting if not accepts_connections(a)]
        if waiting and time.monotonic() > deadline:
            raise tw.errors.DeadlineExceededError(f"tasks at {', '.join(waiting)} did not come up in {timeout:g} s")
        if waiting:
            time.sleep(0.1)  # polling other processes' servers; there is nothing to block on


def run_task(resolver, mode: str = "sync", epochs: int = 40, batch_size: int = 64, seed: int = 0,
             quiet: bool = False, timeout: float = 3600.0) -> float | None:
    """Serve this process's task of the cluster ``resolver`` finds, and play its part: a ps
    task serves until every worker is done; worker ``i`` trains replica ``i`` (worker 0 is
    the chief: it initializes, and returns the held-out accuracy; the others return None)."""
    from tensorweave.distributed.master import _cluster_dict
    from tensorweave.distributed.server import Server

    config = resolver.cluster_config()
    job, task = config.task
    spec = _cluster_dict(config)
    if set(spec) != {"ps", "worker"}:
        raise tw.errors.InvalidArgumentError(f"the example needs jobs ps and worker, the cluster has {sorted(spec)}")
    server = Server(config, job, task)
    print(f"{server.target}: /job:{job}/task:{task} of {', '.join(f'{j}={len(t)}' for j, t in spec.items())}",
          file=sys.stderr, flush=True)
    try:
        _wait_for_cluster(config, timeout)  # a session needs every task of the cluster up
        if job == "ps":
            g = tw.Graph()
            with g.as_default():
                done = _done_queues(spec)[task].dequeue()
            with tw.Session(server.target, graph=g) as sess:
                deadline = time.monotonic() + timeout
                for _ in range(len(spec["worker"])):
                    left_ms = int((deadline - time.monotonic()) * 1000)
                    if left_ms <= 0:
                        raise tw.errors.DeadlineExceededError(f"the workers were not done in {timeout:g} s")
                    sess.run(done, options=tw.RunOptions(timeout_in_ms=left_ms))
            return None

        def finish(sess, graph, ok):
            # In the replica's own session: a new one would need every task up, and the
            # workers that are done have gone.
            with graph.as_default():
                tokens = [q.enqueue([task]) for q in _done_queues(spec)]
            try:
                sess.run(tokens, options=tw.RunOptions(timeout_in_ms=STEP_TIMEOUT_MS))
            except tw.errors.OpError as e:
                if ok:
                    raise
                print(f"/job:worker/task:{task}: could not tell the ps tasks that it stopped: {e}", file=sys.stderr)

        result: dict = {}
        _replica(config, spec, task, mode, epochs, batch_size, seed, quiet, _chief_has_initialized(timeout),
                 lambda: None, threading.Event(), result, finish)
        if task == 0:
            if not quiet:
                _report(mode, result)
            return result["accuracy"]
        return None
    finally:
        server.stop()


def _wait(event: threading.Event, stop: threading.Event, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while not event.wait(0.05):
        if stop.is_set() or time.monotonic() > deadline:
            return False
    return not stop.is_set()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["sync", "async"], default="sync")
    ap.add_argument("--transport", choices=["grpc", "ucx", "inproc"], default="grpc",
                    help="transport of the local cluster the example starts, or of the cluster --resolver finds "
                         "(ignored with --cluster)")
    ap.add_argument("--cluster", help="config (TOML) of a running cluster with a ps job and a worker job")
    ap.add_argument("--resolver", choices=["slurm", "kubernetes", "tf_config"],
                    help="run one task of a cluster a cluster manager started: every task runs this program "
                         "(srun -n 3 python distributed_digits.py --resolver slurm --jobs ps=1,worker=2)")
    ap.add_argument("--jobs", help="with --resolver slurm or kubernetes: the jobs, e.g. ps=1,worker=2")
    ap.add_argument("--port-base", type=int, help="with --resolver slurm: the first port on each node (8888)")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.resolver:
        from tensorweave.distributed import resolvers

        if args.transport == "inproc":
            ap.error("--resolver runs one task per process: use --transport grpc or ucx")
        resolver = resolvers.resolver_from_name(args.resolver, jobs=args.jobs, port_base=args.port_base,
                                                rpc_layer=args.transport)
        acc = run_task(resolver, args.mode, args.epochs, seed=args.seed)
        if acc is None:  # a ps task, or a worker other than the chief
            return 0
        where = f"a cluster found by the {args.resolver} resolver"
    elif args.cluster:
        from tensorweave.distributed import cluster as cl

        acc = train(cl.load_config(args.cluster), args.mode, args.epochs, seed=args.seed, reset=True)
        where = args.cluster
    else:
        with local_cluster(args.transport) as config:
            acc = train(config, args.mode, args.epochs, seed=args.seed)
        where = f"a local cluster over {args.transport}"
    print(f"done in {time.perf_counter() - t0:.1f}s on {where} (1 ps, 2 workers, {args.mode}): "
          f"accuracy {acc:.4f}")
    return 0 if acc >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
