"""Input pipeline throughput: a ``tw.data`` pipeline feeding the digits MLP, in examples per
second, against feeding NumPy arrays through ``feed_dict``, and against TensorFlow's
``tf.data`` (same pipeline, same model, TF1 graph mode) when ``tensorflow`` is importable.

The pipeline: scikit-learn's digits written once to a TFRecord file (each record the raw bytes
of 64 float32 pixels and an int64 label) -> ``TFRecordDataset`` -> ``map(parse,
num_parallel_calls=2)`` (``decode_raw``, slice, reshape) -> ``shuffle(1000)`` -> ``repeat`` ->
``batch(64)`` -> ``prefetch(2)`` -> one SGD step of a 64->128->10 ReLU MLP per batch. The
``feed_dict`` variant trains the same model on batches sliced from a NumPy array shuffled
every epoch. "pipeline only" runs ``get_next()`` alone (no model): what the pipeline can
deliver. "in-memory" trains from ``from_tensor_slices`` of the arrays (shuffle, repeat, batch,
prefetch): no files and no per-element function. Timing as in ``run.py`` (warm-up, then rounds interleaved across variants, best
round), with rounds of ``--seconds`` each: a prefetching pipeline starts every round with full
buffers, which must stay a small part of a round.

    python benchmarks/data_pipeline.py [--rounds 5] [--seconds 1.0] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import machine_info, time_variants  # noqa: E402

HIDDEN, LR, SHUFFLE = 128, 0.1, 1000


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def write_records(path, x, y) -> None:
    import tensorweave as tw

    with tw.python_io.TFRecordWriter(path) as w:
        for xi, yi in zip(x, y):
            w.write(xi.tobytes() + yi.tobytes())  # 256 bytes of pixels, 8 of label


def initial_weights():
    rng = np.random.default_rng(0)
    return ((rng.standard_normal((64, HIDDEN)) * 0.1).astype(np.float32), np.zeros(HIDDEN, np.float32),
            (rng.standard_normal((HIDDEN, 10)) * 0.1).astype(np.float32), np.zeros(10, np.float32))


def mlp_loss(tf, x, y, variable):
    w1, b1, w2, b2 = (variable(v) for v in initial_weights())
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32), logits=logits))
    return loss


class NumpyBatches:
    """Batches of a NumPy array, reshuffled every epoch: what a feed_dict loop feeds."""

    def __init__(self, x, y, batch):
        self.x, self.y, self.batch = x, y, batch
        self.rng = np.random.default_rng(0)
        self.order, self.pos = self.rng.permutation(len(y)), 0

    def next(self):
        if self.pos + self.batch > len(self.order):
            self.order, self.pos = self.rng.permutation(len(self.y)), 0
        idx = self.order[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return self.x[idx], self.y[idx]


def tensorweave_variants(path, x, y, batch):
    import tensorweave as tw
    from tensorweave import data as tw_data

    def parse(record):
        values = tw.decode_raw(record, tw.float32)
        return tw.reshape(values[:64], [64]), tw.reshape(tw.decode_raw(record, tw.int64)[32:], [])

    def pipeline():
        return (tw_data.TFRecordDataset(path).map(parse, num_parallel_calls=2).shuffle(SHUFFLE).repeat()
                .batch(batch).prefetch(2))

    sessions = []
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(0)
        xb, yb = pipeline().make_one_shot_iterator().get_next()
        loss = mlp_loss(tw, xb, yb, tw.Variable)
        train = tw.train.GradientDescentOptimizer(LR).minimize(loss)
        init = tw.global_variables_initializer()
    s1 = tw.Session(graph=g)
    s1.run(init)
    sessions.append(s1)

    g2 = tw.Graph()
    with g2.as_default():
        xp = tw.placeholder(tw.float32, [batch, 64])
        yp = tw.placeholder(tw.int64, [batch])
        loss2 = mlp_loss(tw, xp, yp, tw.Variable)
        train2 = tw.train.GradientDescentOptimizer(LR).minimize(loss2)
        init2 = tw.global_variables_initializer()
    s2 = tw.Session(graph=g2)
    s2.run(init2)
    sessions.append(s2)
    batches = NumpyBatches(x, y, batch)

    def feed_step():
        bx, by = batches.next()
        s2.run(train2, {xp: bx, yp: by})

    g3 = tw.Graph()
    with g3.as_default():
        nxt = pipeline().make_one_shot_iterator().get_next()
    s3 = tw.Session(graph=g3)
    sessions.append(s3)

    g4 = tw.Graph()
    with g4.as_default():
        tw.set_random_seed(0)
        mem = tw_data.Dataset.from_tensor_slices((x, y)).shuffle(SHUFFLE).repeat().batch(batch).prefetch(2)
        xm, ym = mem.make_one_shot_iterator().get_next()
        train4 = tw.train.GradientDescentOptimizer(LR).minimize(mlp_loss(tw, xm, ym, tw.Variable))
        init4 = tw.global_variables_initializer()
    s4 = tw.Session(graph=g4)
    s4.run(init4)
    sessions.append(s4)

    variants = {"tensorweave: tw.data -> MLP": lambda: s1.run(train),
                "tensorweave: feed_dict -> MLP": feed_step,
                "tensorweave: tw.data pipeline only": lambda: s3.run(nxt),
                "tensorweave: in-memory tw.data -> MLP": lambda: s4.run(train4)}
    return variants, lambda: [s.close() for s in sessions]


def tensorflow_variants(path, x, y, batch):
    try:
        import tensorflow as tf
    except ImportError:
        return {}, lambda: None
    tf1 = tf.compat.v1

    def parse(record):
        values = tf.io.decode_raw(record, tf.float32)
        return tf.reshape(values[:64], [64]), tf.reshape(tf.io.decode_raw(record, tf.int64)[32:], [])

    def pipeline():
        return (tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=2).shuffle(SHUFFLE).repeat()
                .batch(batch).prefetch(2))

    def variable(v):
        return tf1.Variable(v)

    sessions = []
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(0)
        xb, yb = tf1.data.make_one_shot_iterator(pipeline()).get_next()
        train = tf1.train.GradientDescentOptimizer(LR).minimize(mlp_loss(tf, xb, yb, variable))
        init = tf1.global_variables_initializer()
    s1 = tf1.Session(graph=g)
    s1.run(init)
    sessions.append(s1)
    g2 = tf.Graph()
    with g2.as_default():
        xp = tf1.placeholder(tf.float32, [batch, 64])
        yp = tf1.placeholder(tf.int64, [batch])
        train2 = tf1.train.GradientDescentOptimizer(LR).minimize(mlp_loss(tf, xp, yp, variable))
        init2 = tf1.global_variables_initializer()
    s2 = tf1.Session(graph=g2)
    s2.run(init2)
    sessions.append(s2)
    batches = NumpyBatches(x, y, batch)

    def feed_step():
        bx, by = batches.next()
        s2.run(train2, {xp: bx, yp: by})

    g3 = tf.Graph()
    with g3.as_default():
        nxt = tf1.data.make_one_shot_iterator(pipeline()).get_next()
    s3 = tf1.Session(graph=g3)
    sessions.append(s3)
    g4 = tf.Graph()
    with g4.as_default():
        tf1.set_random_seed(0)
        mem = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(SHUFFLE).repeat().batch(batch).prefetch(2)
        xm, ym = tf1.data.make_one_shot_iterator(mem).get_next()
        train4 = tf1.train.GradientDescentOptimizer(LR).minimize(mlp_loss(tf, xm, ym, variable))
        init4 = tf1.global_variables_initializer()
    s4 = tf1.Session(graph=g4)
    s4.run(init4)
    sessions.append(s4)
    variants = {"tensorflow: tf.data -> MLP": lambda: s1.run(train),
                "tensorflow: feed_dict -> MLP": feed_step,
                "tensorflow: tf.data pipeline only": lambda: s3.run(nxt),
                "tensorflow: in-memory tf.data -> MLP": lambda: s4.run(train4)}
    return variants, lambda: [s.close() for s in sessions]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="approximate time per round per variant")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    x, y = digits()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "digits.tfrecord")
        write_records(path, x, y)
        tw_vars, tw_close = tensorweave_variants(path, x, y, args.batch)
        tf_vars, tf_close = tensorflow_variants(path, x, y, args.batch)
        try:
            variants = {**tw_vars, **tf_vars}
            print(f"timing {len(variants)} variants x {args.rounds} rounds ...", file=sys.stderr, flush=True)
            # run.py's calibration aims a round at a tenth of its target
            best = time_variants(variants, args.rounds, 10 * args.seconds)
        finally:
            tw_close()
            tf_close()
    rate = {k: args.batch / t for k, t in best.items()}
    base = rate["tensorweave: feed_dict -> MLP"]
    print(f"Measured on: {machine_info()}")
    print(f"batch {args.batch}; examples per second (best of {args.rounds} rounds)" +
          ("" if tf_vars else "; tensorflow is not importable: its rows are left out"))
    print()
    print("| pipeline | examples/s | ratio to tensorweave feed_dict |")
    print("| --- | ---: | ---: |")
    for k, r in rate.items():
        print(f"| {k} | {r:,.0f} | {r / base:.2f}x |")
    if tf_vars:
        print()
        for what in ("tw.data -> MLP", "feed_dict -> MLP", "tw.data pipeline only", "in-memory tw.data -> MLP"):
            tw_k = f"tensorweave: {what}"
            tf_k = "tensorflow: " + what.replace("tw.data", "tf.data")
            print(f"{what}: tensorweave / tensorflow = {rate[tw_k] / rate[tf_k]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
