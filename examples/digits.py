"""Train digit classifiers (an MLP and a small CNN) on scikit-learn's handwritten digits.

    python examples/digits.py                 # both models
    python examples/digits.py --model cnn --epochs 30
    python examples/digits.py --device /device:GPU:0   # every node on that device
    python examples/digits.py --trace /tmp/digits-trace  # also a timeline of one training step

The data set ships inside scikit-learn (1797 8x8 images, no download). 20% of it, stratified,
is held out for the final test accuracy. Prints a progress bar (on a terminal) or one line
per epoch (in logs), per-epoch loss and accuracy, and the final test accuracy.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

import tensorweave as tw
from tensorweave.tools.timeline import Timeline


def load_data(seed: int = 0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    return train_test_split(x, y, test_size=0.2, stratify=y, random_state=seed)


def mlp(x, training_keep_prob):
    h = tw.layers.dense(x, 256, activation=tw.nn.relu, name="hidden")
    h = tw.nn.dropout(h, training_keep_prob)
    return tw.layers.dense(h, 10, name="logits")


def cnn(x, training_keep_prob):
    img = tw.reshape(x, [-1, 8, 8, 1])
    h = tw.layers.conv2d(img, 32, 3, padding="same", activation=tw.nn.relu, name="conv1")
    h = tw.layers.conv2d(h, 32, 3, padding="same", activation=tw.nn.relu, name="conv2")
    h = tw.layers.max_pooling2d(h, 2, 2)                        # 4x4x32
    h = tw.layers.conv2d(h, 64, 3, padding="same", activation=tw.nn.relu, name="conv3")
    h = tw.layers.max_pooling2d(h, 2, 2)                        # 2x2x64
    h = tw.layers.flatten(h)
    h = tw.layers.dense(h, 128, activation=tw.nn.relu, name="fc")
    h = tw.nn.dropout(h, training_keep_prob)
    return tw.layers.dense(h, 10, name="logits")


MODELS = {"mlp": (mlp, 40, 2e-3), "cnn": (cnn, 40, 2e-3)}


class Progress:
    """A progress bar on a terminal; one summary line per epoch otherwise (CI logs)."""

    def __init__(self, total_epochs: int, steps: int, label: str, quiet: bool = False):
        self.total, self.steps, self.label, self.quiet = total_epochs, steps, label, quiet
        self.tty = sys.stderr.isatty()

    def step(self, epoch: int, i: int):
        if self.tty and not self.quiet:
            done = int(30 * (i + 1) / self.steps)
            sys.stderr.write(f"\r{self.label} epoch {epoch:3d}/{self.total} [{'#' * done}{'.' * (30 - done)}]")
            sys.stderr.flush()

    def epoch(self, epoch: int, loss: float, acc: float, seconds: float):
        if self.quiet:
            return
        end = "\r" if self.tty else ""
        line = (f"{self.label} epoch {epoch:3d}/{self.total}  loss {loss:.4f}  train accuracy {acc:.4f}"
                f"  ({seconds:.1f}s)")
        sys.stderr.write(end + line + " " * 10 + "\n")
        sys.stderr.flush()


def train(model: str = "mlp", epochs: int | None = None, batch_size: int = 64, seed: int = 0,
          quiet: bool = False, device: str | None = None, trace: str | None = None,
          logdir: str | None = None) -> float:
    """Train one model; returns its accuracy on the held-out 20%.

    ``device`` (e.g. ``"/device:GPU:0"``) puts every node of the graph there, with soft
    placement off: a node without a kernel for it is an error naming the node, never a silent
    fallback to the CPU. ``trace``: a directory to write the Chrome trace of the last
    training step to (``<model>_step.json``; open it in https://ui.perfetto.dev). ``logdir``:
    write TensorBoard summaries there (loss and accuracy every step, weight histograms every
    epoch, the graph with each node's device, and the traced step's run metadata; needs
    ``pip install 'tensorweave[tensorboard]'``)."""
    build, default_epochs, lr = MODELS[model]
    epochs = epochs or default_epochs
    x_train, x_test, y_train, y_test = load_data(seed)
    g = tw.Graph()
    with g.as_default(), tw.device(device):
        tw.set_random_seed(seed)
        x = tw.placeholder(tw.float32, [None, 64], name="x")
        y = tw.placeholder(tw.int32, [None], name="y")
        keep_prob = tw.placeholder_with_default(np.float32(1.0), [], name="keep_prob")
        logits = build(x, keep_prob)
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        correct = tw.equal(tw.cast(tw.argmax(logits, 1), tw.int32), y)
        accuracy = tw.reduce_mean(tw.cast(correct, tw.float32))
        global_step = tw.train.get_or_create_global_step()
        train_op = tw.train.AdamOptimizer(lr).minimize(loss, global_step=global_step)
        init = tw.global_variables_initializer()
        if logdir is not None:
            step_summary = tw.summary.merge([tw.summary.scalar("loss", loss), tw.summary.scalar("accuracy", accuracy)])
            epoch_summary = tw.summary.merge([tw.summary.histogram(f"weights/{v.op.name}", v) for v in tw.trainable_variables()])
    rng = np.random.default_rng(seed)
    steps = int(np.ceil(len(x_train) / batch_size))
    progress = Progress(epochs, steps, f"[{model}]", quiet)
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=False)) as sess:
        if device is not None and not quiet:
            feeds = {x: x_train[:1], y: y_train[:1], keep_prob: 0.8}
            where = collections.Counter(sess.placement([train_op, loss, accuracy], feeds).values())
            print(f"[{model}] nodes per device: " + ", ".join(f"{d}: {n}" for d, n in sorted(where.items())))
        sess.run(init)
        writer = None
        if logdir is not None:
            feeds = {x: x_train[:1], y: y_train[:1], keep_prob: 0.8}
            writer = tw.summary.FileWriter(os.path.join(logdir, model))
            writer.add_graph(g, placement=sess.placement([train_op, loss, accuracy], feeds))
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            order = rng.permutation(len(x_train))
            total_loss = total_correct = 0.0
            for i in range(steps):
                idx = order[i * batch_size:(i + 1) * batch_size]
                # The last step, warmed up, is the one traced.
                traced = trace is not None and epoch == epochs and i == steps - 1
                md = tw.RunMetadata() if traced else None
                fetches = [train_op, loss, accuracy] + ([step_summary] if writer is not None else [])
                _, batch_loss, batch_acc, *summ = sess.run(
                    fetches, {x: x_train[idx], y: y_train[idx], keep_prob: 0.8},
                    options=tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE) if traced else None,
                    run_metadata=md)
                if writer is not None:
                    n = (epoch - 1) * steps + i
                    writer.add_summary(summ[0], n)
                    if traced:
                        writer.add_run_metadata(md, f"step{n}", n)
                if traced:
                    os.makedirs(trace, exist_ok=True)
                    path = os.path.join(trace, f"{model}_step.json")
                    with open(path, "w") as f:
                        f.write(Timeline(md.step_stats, graph=g).generate_chrome_trace_format(show_memory=True))
                    if not quiet:
                        print(f"[{model}] timeline of one training step ({len(md.step_stats)} nodes): {path}")
                total_loss += batch_loss * len(idx)
                total_correct += batch_acc * len(idx)
                progress.step(epoch, i)
            progress.epoch(epoch, total_loss / len(x_train), total_correct / len(x_train), time.perf_counter() - t0)
            if writer is not None:
                writer.add_summary(sess.run(epoch_summary), epoch * steps)
        test_acc = float(sess.run(accuracy, {x: x_test, y: y_test}))
        if writer is not None:
            writer.close()
    if not quiet:
        print(f"[{model}] test accuracy on the held-out 20% ({len(x_test)} images): {test_acc:.4f}")
    return test_acc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="put every node on this device, e.g. /device:GPU:0")
    ap.add_argument("--logdir", metavar="DIR", default=None,
                    help="write TensorBoard summaries to DIR/<model> (then: tensorboard --logdir DIR)")
    ap.add_argument("--trace", metavar="DIR", default=None,
                    help="write a Chrome trace of one training step per model to DIR (Perfetto UI, chrome://tracing)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = {m: train(m, args.epochs, seed=args.seed, device=args.device, trace=args.trace, logdir=args.logdir)
               for m in (["mlp", "cnn"] if args.model == "both" else [args.model])}
    print(f"done in {time.perf_counter() - t0:.1f}s: " + ", ".join(f"{m} {a:.4f}" for m, a in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
