"""``sparse``: one SGD step of an embedding lookup + sampled softmax (the word2vec / language
model output layer, OSDI 2016 section 4.2), dim 128, batch 128, 64 sampled classes, with a
vocabulary of 10^6 rows and of 10^4 rows. A sparse step reads and updates only the rows its
batch and its samples touch, so its time must not depend on the vocabulary (target: 10^6
within 1.3x of 10^4). Written as TF1 users write it: ``[None]`` id placeholders,
``tw.nn.embedding_lookup``, ``tw.nn.sampled_softmax_loss``, ``GradientDescentOptimizer``.

NumPy: the same step by hand (gather, logits of the true and sampled classes, softmax cross
entropy, ``np.add.at`` row updates) on the 10^6 tables, with the samples drawn once; its
sampler costs nothing here, so the ratio to NumPy includes our sampler's time.
"""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "sparse"
DIM, BATCH, SAMPLED, LR = 128, 128, 64, 0.1
BIG, SMALL = 1_000_000, 10_000


def _batch(vocab, rng):
    ids = rng.integers(0, vocab, BATCH).astype(np.int64)
    labels = rng.integers(0, vocab, (BATCH, 1)).astype(np.int64)
    return ids, labels


def _tw_step(vocab, seed=0):
    import tensorweave as tw

    rng = np.random.default_rng(seed)
    ids_v, labels_v = _batch(vocab, rng)
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(seed)
        ids = tw.placeholder(tw.int64, [None], name="ids")
        labels = tw.placeholder(tw.int64, [None, 1], name="labels")
        emb = tw.get_variable("embeddings", [vocab, DIM], initializer=tw.random_uniform_initializer(-0.05, 0.05))
        w = tw.get_variable("softmax_w", [vocab, DIM], initializer=tw.random_uniform_initializer(-0.05, 0.05))
        b = tw.get_variable("softmax_b", [vocab], initializer=tw.zeros_initializer())
        x = tw.nn.embedding_lookup(emb, ids)
        loss = tw.reduce_mean(tw.nn.sampled_softmax_loss(w, b, labels=labels, inputs=x, num_sampled=SAMPLED,
                                                         num_classes=vocab))
        train = tw.train.GradientDescentOptimizer(LR).minimize(loss)
        init = tw.global_variables_initializer()
    sess = tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0}))
    sess.run(init)
    feed = {ids: ids_v, labels: labels_v}
    return sess, (lambda: sess.run(train, feed))


def _tf_step(v1, vocab, seed=0):
    rng = np.random.default_rng(seed)
    ids_v, labels_v = _batch(vocab, rng)

    def graph():
        v1.set_random_seed(seed)
        ids = v1.placeholder(v1.int64, [None])
        labels = v1.placeholder(v1.int64, [None, 1])
        emb = v1.get_variable("embeddings", [vocab, DIM], initializer=v1.random_uniform_initializer(-0.05, 0.05))
        w = v1.get_variable("softmax_w", [vocab, DIM], initializer=v1.random_uniform_initializer(-0.05, 0.05))
        b = v1.get_variable("softmax_b", [vocab], initializer=v1.zeros_initializer())
        x = v1.nn.embedding_lookup(emb, ids)
        loss = v1.reduce_mean(v1.nn.sampled_softmax_loss(w, b, labels=labels, inputs=x, num_sampled=SAMPLED,
                                                         num_classes=vocab))
        return ids, labels, v1.train.GradientDescentOptimizer(LR).minimize(loss)
    sess, (ids, labels, train) = peers.tf_session(v1, graph)
    feed = {ids: ids_v, labels: labels_v}
    return sess, (lambda: sess.run(train, feed))


def _numpy_step(vocab, seed=0):
    rng = np.random.default_rng(seed)
    ids, labels = _batch(vocab, rng)
    emb = rng.uniform(-0.05, 0.05, (vocab, DIM)).astype(np.float32)
    w = rng.uniform(-0.05, 0.05, (vocab, DIM)).astype(np.float32)
    b = np.zeros(vocab, np.float32)
    # log-uniform samples and their expected counts, drawn once (see the module docstring)
    k = np.arange(vocab, dtype=np.float64)
    p = (np.log(k + 2) - np.log(k + 1)) / np.log(vocab + 1)
    sampled = rng.choice(vocab, SAMPLED, replace=False, p=p)
    log_q_true = np.log(p[labels[:, 0]] * SAMPLED).astype(np.float32)
    log_q_sampled = np.log(p[sampled] * SAMPLED).astype(np.float32)

    def step():
        x = emb[ids]                                           # [B, D]
        cols = np.concatenate([labels[:, 0], sampled])         # true rows, then the sampled rows
        wc = w[cols]
        true_logit = np.einsum("bd,bd->b", x, wc[:BATCH]) + b[labels[:, 0]] - log_q_true
        samp_logit = x @ wc[BATCH:].T + b[sampled] - log_q_sampled
        logits = np.concatenate([true_logit[:, None], samp_logit], axis=1)
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        d = probs
        d[:, 0] -= 1.0
        d /= BATCH
        g_true, g_samp = d[:, 0], d[:, 1:]
        gx = g_true[:, None] * wc[:BATCH] + g_samp @ wc[BATCH:]
        gw_true = g_true[:, None] * x
        gw_samp = g_samp.T @ x
        np.subtract.at(w, labels[:, 0], LR * gw_true)
        np.subtract.at(w, sampled, LR * gw_samp)
        np.subtract.at(b, labels[:, 0], LR * g_true)
        np.subtract.at(b, sampled, LR * g_samp.sum(axis=0))
        np.subtract.at(emb, ids, LR * gx)
    return step


def build() -> Workload:
    big_sess, big = _tw_step(BIG)
    small_sess, small = _tw_step(SMALL)
    others = {"tensorweave (vocab 10^4)": small}
    closers = [big_sess.close, small_sess.close]
    v1 = peers.tf_v1()
    if v1 is not None:
        tsess, tstep = _tf_step(v1, BIG)
        tsess_small, tstep_small = _tf_step(v1, SMALL)
        others[peers.TF_LABEL] = tstep
        others["tensorflow (vocab 10^4)"] = tstep_small
        closers += [tsess.close, tsess_small.close]
    return Workload(NAME, "embedding_lookup + sampled softmax SGD step, dim 128, batch 128, 64 samples; "
                          "vocabulary 10^6 (10^4 beside it)",
                    big, _numpy_step(BIG), others, None, close=lambda: [c() for c in closers])
