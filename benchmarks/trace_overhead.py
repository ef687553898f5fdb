"""What ``RunOptions(trace_level=FULL_TRACE)`` costs a step: the ``mlp`` workload's SGD step
(64->128->10, batch 64; a placeholder batch of ``None``, as users write it) untraced, traced
into a fresh ``RunMetadata``, and traced with its ``step_stats`` read. Best of interleaved
rounds, as ratios to the untraced step measured in the same rounds.

    python benchmarks/trace_overhead.py [--rounds 9] [--steps 300] [--static]

``--static``: the placeholders say batch 64 (the static-shape variant).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def build(batch=None):
    from sklearn.datasets import load_digits

    import tensorweave as tw

    d = load_digits()
    xb, yb = (d.data[:64] / 16.0).astype(np.float32), d.target[:64].astype(np.int32)
    rng = np.random.default_rng(0)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [batch, 64], name="x")
        y = tw.placeholder(tw.int32, [batch], name="y")
        w1 = tw.Variable((rng.standard_normal((64, 128)) * 0.1).astype(np.float32), name="w1")
        b1 = tw.Variable(np.zeros(128, np.float32), name="b1")
        w2 = tw.Variable((rng.standard_normal((128, 10)) * 0.1).astype(np.float32), name="w2")
        b2 = tw.Variable(np.zeros(10, np.float32), name="b2")
        logits = tw.matmul(tw.nn.relu(tw.matmul(x, w1) + b1), w2) + b2
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tw.global_variables_initializer()
    sess = tw.Session(graph=g)
    sess.run(init)
    feed = {x: xb, y: yb}
    opts = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE)

    def untraced():
        sess.run(train, feed)

    def traced():
        sess.run(train, feed, options=opts, run_metadata=tw.RunMetadata())

    def traced_read():
        md = tw.RunMetadata()
        sess.run(train, feed, options=opts, run_metadata=md)
        assert md.step_stats.dev_stats

    return sess, {"untraced": untraced, "FULL_TRACE, into a fresh RunMetadata": traced,
                  "FULL_TRACE, then reading step_stats": traced_read}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--static", action="store_true", help="placeholders of batch 64 instead of None")
    args = ap.parse_args(argv)
    sess, variants = build(64 if args.static else None)
    best = {k: float("inf") for k in variants}
    for fn in variants.values():  # warm up: plans built, caches filled
        for _ in range(20):
            fn()
    for _ in range(args.rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
    sess.close()
    base = best["untraced"]
    print(f"batch dimension {'64 (static)' if args.static else 'None'}; best of {args.rounds} rounds of {args.steps} steps")
    print("| `sess.run(train, feed)` | time per step | ratio |")
    print("| --- | ---: | ---: |")
    for name, t in best.items():
        print(f"| {name} | {t * 1e6:.0f} us | {t / base:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
