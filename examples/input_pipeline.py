"""Train the digits MLP from record files through an input pipeline (whitepaper 4.5/4.6).

    python examples/input_pipeline.py [--epochs 40] [--files 4] [--keep DIR]

1. Writes scikit-learn's digits (the same stratified 80/20 split as examples/digits.py) to
   record files in a temporary directory: the training set split over ``--files`` files,
   the held-out set in one more. Each record is 264 bytes: the int64 label, then the 64
   float32 pixels (``ndarray.tobytes``).
2. Trains from the files: ``string_input_producer`` (filenames, reshuffled every epoch) ->
   ``TFRecordReader.read_up_to`` -> ``decode_raw`` -> ``shuffle_batch`` (a
   RandomShuffleQueue filled by two QueueRunner threads) -> the model. A Coordinator stops
   the threads; training ends when the producer's ``num_epochs`` run out
   (``OutOfRangeError``), as in TF1 input pipelines.
3. Evaluates on the held-out file (read back with ``tw.python_io.tf_record_iterator``) and
   prints the test accuracy.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from digits import load_data  # examples/digits.py: the same data and split as the demo

import tensorweave as tw

RECORD_BYTES = 8 + 64 * 4


def encode(x: np.ndarray, y: int) -> bytes:
    return np.int64(y).tobytes() + x.astype("<f4").tobytes()


def write_records(directory: str, x, y, n_files: int, prefix: str) -> list[str]:
    paths = []
    for i, part in enumerate(np.array_split(np.arange(len(x)), n_files)):
        path = os.path.join(directory, f"{prefix}-{i:05d}-of-{n_files:05d}.tfrecord")
        with tw.python_io.TFRecordWriter(path) as w:
            for j in part:
                w.write(encode(x[j], y[j]))
        paths.append(path)
    return paths


def read_records(path: str):
    xs, ys = [], []
    for rec in tw.python_io.tf_record_iterator(path):
        ys.append(np.frombuffer(rec[:8], "<i8")[0])
        xs.append(np.frombuffer(rec[8:], "<f4"))
    return np.stack(xs), np.array(ys, np.int32)


def decode(values):
    """A vector of records -> (features [n, 64] float32, labels [n] int32)."""
    as_float = tw.decode_raw(values, tw.float32)          # [n, 66]: 2 label words, 64 pixels
    as_int = tw.decode_raw(values, tw.int64)              # [n, 33]: the label, then pixel pairs
    features = tw.reshape(as_float[:, 2:], [-1, 64])
    labels = tw.cast(as_int[:, 0], tw.int32)
    return features, labels


def build(train_files, batch_size: int, epochs: int, seed: int, lr: float = 2e-3):
    tw.set_random_seed(seed)
    filenames = tw.train.string_input_producer(train_files, num_epochs=epochs, shuffle=True, seed=seed)
    reader = tw.TFRecordReader()
    _, values = reader.read_up_to(filenames, batch_size)
    features, labels = decode(values)
    x_batch, y_batch = tw.train.shuffle_batch(
        [features, labels], batch_size=batch_size, capacity=1500, min_after_dequeue=600, num_threads=2,
        seed=seed, enqueue_many=True)
    # Training reads the pipeline; evaluation feeds x/y instead (the queue is not touched).
    x = tw.placeholder_with_default(x_batch, [None, 64], name="x")
    y = tw.placeholder_with_default(y_batch, [None], name="y")
    keep_prob = tw.placeholder_with_default(np.float32(0.8), [], name="keep_prob")
    h = tw.layers.dense(x, 256, activation=tw.nn.relu, name="hidden")
    h = tw.nn.dropout(h, keep_prob)
    logits = tw.layers.dense(h, 10, name="logits")
    loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    accuracy = tw.reduce_mean(tw.cast(tw.equal(tw.cast(tw.argmax(logits, 1), tw.int32), y), tw.float32))
    train_op = tw.train.AdamOptimizer(lr).minimize(loss)
    return {"x": x, "y": y, "keep_prob": keep_prob, "loss": loss, "accuracy": accuracy, "train_op": train_op,
            "records": reader.num_records_produced()}


def run(epochs: int = 40, n_files: int = 4, batch_size: int = 64, seed: int = 0, keep: str | None = None) -> float:
    x_train, x_test, y_train, y_test = load_data(seed)
    with tempfile.TemporaryDirectory() as tmp:
        directory = keep or tmp
        os.makedirs(directory, exist_ok=True)
        t0 = time.perf_counter()
        train_files = write_records(directory, x_train, y_train, n_files, "train")
        (test_file,) = write_records(directory, x_test, y_test, 1, "test")
        t_write = time.perf_counter() - t0
        print(f"wrote {len(x_train)} training records to {n_files} files and {len(x_test)} held-out records "
              f"({RECORD_BYTES} bytes each) in {t_write:.2f}s")

        g = tw.Graph()
        with g.as_default():
            m = build(train_files, batch_size, epochs, seed)
            init = [tw.global_variables_initializer(), tw.local_variables_initializer()]
        with tw.Session(graph=g) as sess:
            sess.run(init)
            coord = tw.train.Coordinator()
            threads = tw.train.start_queue_runners(sess, coord)
            steps, t0 = 0, time.perf_counter()
            try:
                while not coord.should_stop():
                    sess.run(m["train_op"])
                    steps += 1
            except tw.errors.OutOfRangeError:
                pass  # num_epochs reached: the pipeline is drained
            finally:
                coord.request_stop()
                coord.join(threads, stop_grace_period_secs=10)
            t_train = time.perf_counter() - t0
            records = int(sess.run(m["records"]))
            print(f"trained {steps} steps of {batch_size} on {records} records read from files in "
                  f"{t_train:.1f}s ({records / t_train:.0f} records/s through the pipeline)")
            xt, yt = read_records(test_file)
            acc = float(sess.run(m["accuracy"], {m["x"]: xt, m["y"]: yt, m["keep_prob"]: 1.0}))
    print(f"[input pipeline] test accuracy on the held-out 20% ({len(yt)} images): {acc:.4f}")
    return acc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", default=None, help="write the record files here instead of a temporary directory")
    args = ap.parse_args(argv)
    run(args.epochs, args.files, seed=args.seed, keep=args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
