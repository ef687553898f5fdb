"""Skip-gram word2vec on real English text, its embedding table partitioned over two ps tasks.

    python examples/word2vec.py                         # NCE, a local cluster (1 worker, 2 ps, grpc)
    python examples/word2vec.py --loss sampled_softmax
    python examples/word2vec.py --transport local       # one process, the same partitioned model
    python examples/word2vec.py --max-words 30000 --steps 300   # the small slice the tests run

The corpus is the plain English text of Debian's ``fortunes`` package
(``apt-get install fortunes``: quotations, jokes, literature; about 460,000 words), read
through tensorweave's own input pipeline (``tw.data.TextLineDataset``). The model is the
2013 skip-gram of Mikolov et al. as TensorFlow's word2vec tutorials write it: each word
predicts the words around it, the output layer trained with noise-contrastive estimation
(``tw.nn.nce_loss``) or sampled softmax (``tw.nn.sampled_softmax_loss``) against
log-uniform (Zipfian) negative samples.

Both tables (input embeddings and output weights) are partitioned variables
(``tw.fixed_size_partitioner(2)``) that ``tw.train.replica_device_setter`` spreads over the
two ps tasks; ``tw.nn.embedding_lookup`` reads only the rows a batch needs, and their
gradients are ``IndexedSlices``, so each step sends and updates only those rows. Progress
is printed every ``--log-every`` steps; at the end the nearest neighbours (cosine
similarity) of a few frequent words. The lookups use ``partition_strategy="div"``, the
layout the partitioner cut the tables in, so the concatenated table read at the end is
indexed by word id (TF's default ``"mod"`` would train just as well but scatter each word's
row to shard ``id % 2``).

What it learns (the whole corpus, 12,000 steps of 256 pairs: about 2 minutes with
``--transport local``, about 10 over the local grpc cluster, whose steps cost about 50 ms):
with ``nce`` "he" -> she, him, himself; "man" -> woman, person, girl, child; "good" -> bad;
"said" -> told, replied, asked; "three" -> few, two; with ``sampled_softmax`` "man" ->
woman, person; "good" -> bad; "said" -> told, replied; "three" -> few, two. Rarer probes
("god", "love") stay noisier: the corpus has 430,000 words.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time

import numpy as np
from fortunes_corpus import CORPUS_DIR, corpus_files, read_words

import tensorweave as tw

# Frequent words whose neighbours are printed at the end (those in the vocabulary).
PROBES = ("he", "she", "man", "day", "good", "love", "money", "three", "said", "never", "life", "god")
STEP_TIMEOUT_MS = 60_000  # no step may hang the example


def build_vocabulary(words: list[str], vocab_size: int, min_count: int):
    """Word ids by falling frequency; id 0 is UNK (rare words). Returns (ids, vocab, counts)."""
    counts = collections.Counter(words)
    common = [w for w, c in counts.most_common(vocab_size - 1) if c >= min_count]
    vocab = ["UNK"] + common
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.fromiter((index.get(w, 0) for w in words), dtype=np.int64, count=len(words))
    freq = np.bincount(ids, minlength=len(vocab))
    return ids, vocab, freq


def skipgram_pairs(ids: np.ndarray, freq: np.ndarray, window: int, rng, subsample: float = 1e-3):
    """(center, context) pairs of one epoch: frequent words subsampled as Mikolov et al.
    (keep probability sqrt(t/f) + t/f), a random window of 1..``window`` per word, UNK dropped."""
    f = freq[ids] / len(ids)
    keep = rng.random(len(ids)) < np.minimum(1.0, np.sqrt(subsample / f) + subsample / f)
    kept = ids[keep & (ids != 0)]
    centers, contexts = [], []
    reach = rng.integers(1, window + 1, size=len(kept))
    for offset in range(1, window + 1):
        # the center at i sees i + offset when its window reaches that far, and the center
        # at i + offset sees i under the same rule
        right = reach[:-offset] >= offset
        centers.append(kept[:-offset][right])
        contexts.append(kept[offset:][right])
        left = reach[offset:] >= offset
        centers.append(kept[offset:][left])
        contexts.append(kept[:-offset][left])
    return np.concatenate(centers), np.concatenate(contexts)


def build_model(counts, dim: int, num_sampled: int, loss_kind: str, lr: float, ps_tasks: int,
                setter_cluster=None, optimizer: str = "sgd", sampler: str = "unigram"):
    """The skip-gram graph over a vocabulary whose word counts are ``counts``; both tables
    partitioned in two and placed on the ps tasks."""
    vocab_size = len(counts)
    setter = tw.train.replica_device_setter(ps_tasks=ps_tasks, cluster=setter_cluster) if ps_tasks else None
    with contextlib.ExitStack() as stack:
        if setter is not None:
            stack.enter_context(tw.device(setter))
        centers = tw.placeholder(tw.int64, [None], name="centers")
        contexts = tw.placeholder(tw.int64, [None, 1], name="contexts")
        partitioner = tw.fixed_size_partitioner(2)
        # word2vec's own initialisation: small input vectors, output vectors zero
        embeddings = tw.get_variable("embeddings", [vocab_size, dim], partitioner=partitioner,
                                     initializer=tw.random_uniform_initializer(-0.5 / dim, 0.5 / dim))
        weights = tw.get_variable("softmax_weights", [vocab_size, dim], partitioner=partitioner,
                                  initializer=tw.zeros_initializer())
        biases = tw.get_variable("softmax_biases", [vocab_size], initializer=tw.zeros_initializer())
        # "div": id i lives in the shard whose row range holds it, as the partitioner cut the
        # table (TF's default "mod" would put it in shard i % 2, and the concatenated table
        # read at the end would no longer be indexed by word id)
        embedded = tw.nn.embedding_lookup(embeddings, centers, partition_strategy="div")
        # word2vec's noise: the unigram distribution raised to 3/4
        if sampler == "unigram":
            sampled = tw.nn.fixed_unigram_candidate_sampler(
                contexts, num_true=1, num_sampled=num_sampled, unique=True, range_max=vocab_size,
                distortion=0.75, unigrams=[int(c) for c in counts])
        else:
            sampled = None
        loss_fn = tw.nn.nce_loss if loss_kind == "nce" else tw.nn.sampled_softmax_loss
        per_example = loss_fn(weights, biases, labels=contexts, inputs=embedded, num_sampled=num_sampled,
                              num_classes=vocab_size, sampled_values=sampled, partition_strategy="div")
        loss = tw.reduce_mean(per_example, name="loss")
        global_step = tw.train.get_or_create_global_step()
        # the learning rate falls linearly to zero (word2vec's schedule): fed each step
        learning_rate = tw.placeholder_with_default(tw.constant(lr, tw.float32), [], name="learning_rate")
        if optimizer == "lazy_adam":  # Adam's moments, updated only on the rows a batch reads
            opt = tw.contrib.opt.LazyAdamOptimizer(learning_rate)
        elif optimizer == "adagrad":
            opt = tw.train.AdagradOptimizer(learning_rate)
        else:
            opt = tw.train.GradientDescentOptimizer(learning_rate)
        train_op = opt.minimize(loss, global_step=global_step)
        table = embeddings.as_tensor()
        normalized = table / tw.sqrt(tw.reduce_sum(tw.square(table), 1, keepdims=True) + 1e-12)
    return dict(centers=centers, contexts=contexts, loss=loss, train_op=train_op, normalized=normalized,
                learning_rate=learning_rate,
                global_step=global_step, embeddings=embeddings, init=tw.global_variables_initializer())


def nearest(normalized: np.ndarray, vocab: list[str], probes=PROBES, k: int = 6,
            among: int = 2000) -> dict[str, list[str]]:
    """The ``k`` nearest words (cosine similarity) of each probe among the ``among`` most
    frequent words: a rare word's vector has seen a handful of updates, and its cosine to
    anything is mostly noise."""
    index = {w: i for i, w in enumerate(vocab)}
    candidates = normalized[:among]
    out = {}
    for word in probes:
        if word not in index:
            continue
        sims = candidates @ normalized[index[word]]
        sims[0] = -np.inf  # not UNK
        if index[word] < among:
            sims[index[word]] = -np.inf  # nor the word itself
        out[word] = [vocab[i] for i in np.argsort(-sims)[:k]]
    return out


@contextlib.contextmanager
def local_cluster(transport: str):
    """A fresh local cluster of 1 worker and 2 ps tasks (one process per task); ``local``
    yields None: everything in this process."""
    if transport == "local":
        yield None
        return
    from tensorweave.distributed import launcher

    with launcher.temporary(workers=1, ps=2, transport=transport, prefix="tw-word2vec-cluster-") as config:
        yield config


def train(args) -> dict:
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    words = read_words(corpus_files(args.corpus), args.max_words)
    ids, vocab, freq = build_vocabulary(words, args.vocab_size, args.min_count)
    print(f"corpus: {len(words)} words, vocabulary {len(vocab)} (min count {args.min_count}); "
          f"read in {time.perf_counter() - t0:.1f}s", flush=True)
    with local_cluster(args.transport) as config:
        g = tw.Graph()
        with g.as_default():
            tw.set_random_seed(args.seed)
            spec = None
            if config is not None:
                from tensorweave.distributed.master import _cluster_dict

                spec = _cluster_dict(config)
            m = build_model(np.maximum(freq, 1), args.dim, args.num_sampled, args.loss, args.lr,
                            ps_tasks=2 if config is not None else 0, setter_cluster=spec, optimizer=args.optimizer, sampler=args.sampler)
        options = tw.RunOptions(timeout_in_ms=STEP_TIMEOUT_MS)
        history = []
        with tw.Session(config if config is not None else "", graph=g) as sess:
            sess.run(m["init"])
            step, total, seen, t_log = 0, 0.0, 0, time.perf_counter()
            while step < args.steps:
                centers, contexts = skipgram_pairs(ids, freq, args.window, rng)
                order = rng.permutation(len(centers))
                for start in range(0, len(order) - args.batch_size + 1, args.batch_size):
                    if step >= args.steps:
                        break
                    batch = order[start:start + args.batch_size]
                    lr_now = args.lr * max(1e-4, 1.0 - step / args.steps)
                    _, lo = sess.run([m["train_op"], m["loss"]],
                                     {m["centers"]: centers[batch], m["contexts"]: contexts[batch, None],
                                      m["learning_rate"]: lr_now}, options=options)
                    step += 1
                    total += lo
                    seen += 1
                    if step % args.log_every == 0 or step == args.steps:
                        rate = seen / (time.perf_counter() - t_log)
                        history.append(total / seen)
                        print(f"step {step:6d}/{args.steps}  {args.loss} loss {total / seen:.4f}  "
                              f"({rate:.0f} steps/s)", flush=True)
                        total, seen, t_log = 0.0, 0, time.perf_counter()
            normalized = sess.run(m["normalized"])
    neighbours = nearest(normalized, vocab)
    for word, near in neighbours.items():
        print(f"nearest to {word!r}: {', '.join(near)}")
    print(f"done in {time.perf_counter() - t0:.1f}s", flush=True)
    return dict(history=history, neighbours=neighbours, vocab=vocab)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss", choices=["nce", "sampled_softmax"], default="nce")
    ap.add_argument("--transport", choices=["grpc", "ucx", "local"], default="grpc",
                    help="the local cluster's transport, or 'local' for one process")
    ap.add_argument("--corpus", default=CORPUS_DIR)
    ap.add_argument("--max-words", type=int, default=None, help="read only the first N words")
    ap.add_argument("--vocab-size", type=int, default=10_000)
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--num-sampled", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--sampler", choices=["unigram", "log_uniform"], default="unigram")
    ap.add_argument("--optimizer", choices=["sgd", "lazy_adam", "adagrad"], default="sgd")
    ap.add_argument("--lr", type=float, default=6.4, help="of the mean loss over a batch (per pair: lr / batch size)")
    ap.add_argument("--steps", type=int, default=12_000)
    ap.add_argument("--log-every", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    train(ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
