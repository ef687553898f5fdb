"""Train the digits MLP across a cluster: 1 ps task + 2 workers, synchronous or asynchronous.

    python examples/distributed_digits.py                          # sync, grpc, own local cluster
    python examples/distributed_digits.py --mode async --transport ucx
    python examples/distributed_digits.py --cluster cluster.toml   # a running cluster (2 workers)

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
``--transport inproc`` the tasks are servers inside this process. Prints the held-out
accuracy; the single-process model reaches about 97-98%.
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


def train(config, mode: str = "sync", epochs: int = 40, batch_size: int = 64, seed: int = 0,
          quiet: bool = False, reset: bool = False) -> float:
    """Train with one client thread per worker task of ``config``; returns held-out accuracy."""
    from tensorweave.distributed.master import _cluster_dict

    spec = _cluster_dict(config)
    replicas = len(spec["worker"])
    x_train, x_test, y_train, y_test = digits.load_data(seed)
    if reset:  # a running cluster may hold state from an earlier run
        tw.Session.reset(config)
    # Every replica walks the same permutation and takes its share of each batch of
    # batch_size: sync makes one update per batch, async one per replica and batch.
    steps = int(np.ceil(len(x_train) / batch_size))
    chief_ready = threading.Event()
    stop = threading.Event()  # a failing replica stops the others (no thread waits forever)
    errors_seen, result = [], {}

    def replica(task: int):
        m = build(task, spec, mode, 2e-3, replicas, seed)
        rng = np.random.default_rng(seed)  # the same permutation in every replica
        coord = tw.train.Coordinator()
        options = tw.RunOptions(timeout_in_ms=STEP_TIMEOUT_MS)
        with m["graph"].as_default(), tw.Session(config) as sess:
            try:
                if task == 0:
                    sess.run(m["init"])
                elif not _wait(chief_ready, stop):
                    return
                sess.run(m["local_init"])
                if m["hook"] is not None:
                    m["hook"].begin()
                    m["hook"].after_create_session(sess, coord)
                if task == 0:
                    chief_ready.set()
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
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors_seen.append(e)
                stop.set()
                chief_ready.set()
            finally:
                coord.request_stop()
                if m["hook"] is not None:
                    coord.join(m["hook"].threads, stop_grace_period_secs=30)

    threads = [threading.Thread(target=replica, args=(t,), name=f"replica-{t}", daemon=True)
               for t in range(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors_seen:
        raise errors_seen[0]
    if not quiet:
        print(f"[{mode}] {result['global_step']} updates; test accuracy on the held-out 20% "
              f"({len(x_test)} images): {result['accuracy']:.4f}")
    return result["accuracy"]


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
                    help="transport of the local cluster the example starts (ignored with --cluster)")
    ap.add_argument("--cluster", help="config (TOML) of a running cluster with a ps job and a worker job")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.cluster:
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
