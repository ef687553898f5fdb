"""Synchronous data-parallel training of the digits MLP on worker processes: all-reduce
(``tw.train.AllReduceSyncOptimizer``, no parameter server) against ``SyncReplicasOptimizer``
through a ps task, in one run.

    python benchmarks/allreduce.py                          # 4 workers, grpc
    python benchmarks/allreduce.py --transports grpc,ucx --steps 60 --rounds 3

A local cluster of 1 ps and ``--workers`` worker tasks (separate processes on loopback,
started by the ``tensorweave cluster up`` launcher) serves both variants; this process runs
one client thread per worker task and variant (between-graph replication, each client with
its own graph and Session), the model of ``examples/digits.py`` (64-256-10 MLP, Adam 2e-3)
on batches of ``--batch`` examples per worker (one global batch of workers x batch per step).

* **all-reduce**: every worker holds the variables; its gradients (packed into one flat
  tensor) are averaged over the workers with a ring all-reduce among the worker tasks, then
  applied locally. The chief's initial values are broadcast first.
* **ps (SyncReplicasOptimizer)**: the variables live on the ps task; each worker pushes its
  gradients into accumulators there, the chief's sync op averages them, applies Adam on the ps
  and releases tokens (``num_tokens=0``: one gradient from each worker per update).

After ``--warmup`` steps, the variants alternate in ``--rounds`` rounds of ``--steps``
synchronous steps (all workers at once); steps/s per round, the best and the median round
count. Also printed: the mean loss of each variant's last round (both train the same model
on the same batches) and whether the all-reduce replicas ended bit for bit identical.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import digits  # noqa: E402  (the example's data and model)

import tensorweave as tw  # noqa: E402

STEP = tw.RunOptions(timeout_in_ms=120_000)


def _threads(fns, timeout=600):
    """Run each fn in a thread at once; their results; the first failure re-raised."""
    out, errs = [None] * len(fns), []

    def wrap(i, fn):
        def run():
            try:
                out[i] = fn()
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errs.append(e)
        return run
    threads = [threading.Thread(target=wrap(i, f), daemon=True) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errs:
        raise errs[0]
    if any(t.is_alive() for t in threads):
        raise RuntimeError("a client thread did not finish in time")
    return out


class Replica:
    """One worker's client for one variant: its graph, Session and batches."""

    def __init__(self, variant, task, config, spec, workers, batch, data, seed):
        self.variant, self.task, self.workers, self.batch = variant, task, workers, batch
        self.x_train, self.y_train = data
        self.rng = np.random.default_rng(seed)  # every replica: the same global batches
        self.hook = self.coord = None
        self.graph = g = tw.Graph()
        with g.as_default():
            tw.set_random_seed(seed + task)
            if variant == "all-reduce":
                scope = tw.device(f"/job:worker/task:{task}")
            else:
                scope = tw.device(tw.train.replica_device_setter(cluster=spec, worker_device=f"/job:worker/task:{task}"))
            with scope:
                self.x = tw.placeholder(tw.float32, [None, 64])
                self.y = tw.placeholder(tw.int32, [None])
                self.loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=self.y, logits=digits.mlp(self.x, 1.0)))
                step = tw.train.get_or_create_global_step()
                opt = tw.train.AdamOptimizer(2e-3)
                if variant == "all-reduce":
                    opt = tw.train.AllReduceSyncOptimizer(opt, num_workers=workers, timeout=120)
                    self.hook = opt.make_session_run_hook(is_chief=task == 0)
                else:
                    opt = tw.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=workers,
                                                         total_num_replicas=workers)
                    self.hook = opt.make_session_run_hook(is_chief=task == 0, num_tokens=0)
                self.train_op = opt.minimize(self.loss, global_step=step)
            self.hook.begin()
            self.init = tw.global_variables_initializer()
            self.local_init = tw.local_variables_initializer()
            self.weights = tw.trainable_variables()
        self.sess = tw.Session(config, graph=g)

    def start(self):
        if self.variant == "all-reduce" or self.task == 0:
            self.sess.run(self.init, options=STEP)
        self.sess.run(self.local_init, options=STEP)
        self.coord = tw.train.Coordinator()
        self.hook.after_create_session(self.sess, self.coord)

    def steps(self, n: int) -> list:
        losses = []
        for _ in range(n):
            idx = self.rng.choice(len(self.x_train), self.workers * self.batch, replace=False)
            idx = idx[self.task * self.batch:(self.task + 1) * self.batch]
            _, lo = self.sess.run([self.train_op, self.loss], {self.x: self.x_train[idx], self.y: self.y_train[idx]},
                                  options=STEP)
            losses.append(float(lo))
        return losses

    def close(self):
        if self.coord is not None:
            self.coord.request_stop()
            self.coord.join(getattr(self.hook, "threads", []), stop_grace_period_secs=30)
        self.sess.close()


def bench(transport: str, workers: int, steps: int, rounds: int, warmup: int, batch: int) -> dict:
    from tensorweave.distributed import launcher
    from tensorweave.distributed.master import _cluster_dict

    x_train, _, y_train, _ = digits.load_data(0)
    results: dict = {}
    with launcher.temporary(workers=workers, ps=1, transport=transport, prefix="tw-allreduce-bench-") as config:
        spec = _cluster_dict(config)
        variants = {}
        try:
            for name in ("all-reduce", "ps (SyncReplicasOptimizer)"):
                reps = [Replica(name, t, config, spec, workers, batch, (x_train, y_train), 0) for t in range(workers)]
                variants[name] = reps
                if name == "all-reduce":
                    _threads([r.start for r in reps])  # the chief's broadcast meets every replica
                else:
                    reps[0].start()  # the chief initialises the ps first
                    _threads([r.start for r in reps[1:]])
                _threads([lambda r=r: r.steps(warmup) for r in reps])
            for name in variants:
                results[name] = {"rates": [], "loss": None}
            for _ in range(rounds):
                for name, reps in variants.items():
                    t0 = time.perf_counter()
                    losses = _threads([lambda r=r: r.steps(steps) for r in reps])
                    results[name]["rates"].append(steps / (time.perf_counter() - t0))
                    results[name]["loss"] = float(np.mean(losses))
            ar = variants["all-reduce"]
            weights = _threads([lambda r=r: r.sess.run(r.weights) for r in ar])
            results["all-reduce"]["identical"] = all(
                np.array_equal(a, b) for w in weights for a, b in zip(w, weights[0]))
        finally:
            for reps in variants.values():
                for r in reps:
                    r.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transports", default="grpc", help="comma-separated transport names (default: grpc)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40, help="synchronous steps per round (default 40)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32, help="examples per worker and step (default 32)")
    args = ap.parse_args()
    print(f"digits MLP (64-256-10, Adam), {args.workers} worker processes + 1 ps on 127.0.0.1, batches of "
          f"{args.batch} per worker; {args.rounds} rounds of {args.steps} synchronous steps per variant, "
          f"interleaved ({os.cpu_count()} CPUs)")
    print(f"{'transport':10s} {'variant':28s} {'best steps/s':>13s} {'median steps/s':>15s} {'last loss':>10s}  notes")
    for transport in filter(None, (t.strip() for t in args.transports.split(","))):
        res = bench(transport, args.workers, args.steps, args.rounds, args.warmup, args.batch)
        base = statistics.median(res["ps (SyncReplicasOptimizer)"]["rates"])
        for name, r in res.items():
            med = statistics.median(r["rates"])
            notes = f"{med / base:.2f}x the ps variant (median)"
            if "identical" in r:
                notes += "; replicas identical" if r["identical"] else "; REPLICAS DIFFER"
            print(f"{transport:10s} {name:28s} {max(r['rates']):13.1f} {med:15.1f} {r['loss']:10.4f}  {notes}",
                  flush=True)


if __name__ == "__main__":
    main()
