"""``autoencoder``: one RMSProp step of the TF1 tutorial autoencoder (784-256-128-256-784,
sigmoid everywhere, mean squared error, batch 256) on MNIST-shaped data, with default
settings (no threading options), placeholders of [None, 784] as the tutorial writes them
(the same graph with the batch fixed to 256 beside it, "static batch"); against the same
step by hand in NumPy, and TensorFlow / JAX when installed.

The data is uniform noise of MNIST's shape (nothing is downloaded): the step's cost does not
depend on the values.
"""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "autoencoder"
BATCH, SIZES, LR, DECAY, EPS = 256, (784, 256, 128, 256, 784), 0.01, 0.9, 1e-10


def _init():
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((a, b)) * 0.05).astype(np.float32) for a, b in zip(SIZES, SIZES[1:])]
    bs = [np.zeros(b, np.float32) for b in SIZES[1:]]
    return ws, bs, rng.random((BATCH, SIZES[0]), dtype=np.float32)


def build(batch: int | None = None) -> Workload:
    """The workload; ``batch``: the placeholder's batch dimension (None as the tutorial writes
    it; the static variant is built with 256 and run beside it)."""
    import tensorweave as tw

    ws0, bs0, xb = _init()
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [batch, SIZES[0]], name="x")
        ws = [tw.Variable(w) for w in ws0]
        bs = [tw.Variable(b) for b in bs0]
        h = x
        for w, b in zip(ws, bs):
            h = tw.nn.sigmoid(tw.matmul(h, w) + b)
        loss = tw.reduce_mean(tw.pow(x - h, 2))
        train = tw.train.RMSPropOptimizer(LR, decay=DECAY, epsilon=EPS).minimize(loss)
        init = tw.global_variables_initializer()
    # Default settings, but CPU only: the peers run on the CPU, and with the OpenCL plugin
    # installed the placer may put convolutions on PoCL (the same CPU, through OpenCL).
    sess = tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0}))
    sess.run(init)

    state = {"w": [w.copy() for w in ws0], "b": [b.copy() for b in bs0],
             "ms_w": [np.ones_like(w) for w in ws0], "ms_b": [np.ones_like(b) for b in bs0]}

    def np_step(s=state):
        acts = [xb]
        for w, b in zip(s["w"], s["b"]):
            acts.append(1.0 / (1.0 + np.exp(-(acts[-1] @ w + b))))
        d = 2.0 * (acts[-1] - xb) / np.float32(xb.size)
        for i in reversed(range(len(s["w"]))):
            d = d * acts[i + 1] * (1.0 - acts[i + 1])
            gw, gb = acts[i].T @ d, d.sum(axis=0)
            if i:
                d = d @ s["w"][i].T
            for key, grad in (("w", gw), ("b", gb)):
                ms = s["ms_" + key]
                ms[i] = DECAY * ms[i] + (1 - DECAY) * grad * grad
                s[key][i] = s[key][i] - LR * grad / np.sqrt(ms[i] + EPS)

    if batch is not None:
        return Workload(NAME, "static batch", lambda: sess.run(train, {x: xb}), None, close=sess.close)
    others, closers = {}, [sess.close]
    static = build(batch=BATCH)
    others["tensorweave (static batch)"] = static.tensorweave
    closers.append(static.close)
    v1 = peers.tf_v1()
    if v1 is not None:
        def tf_graph():
            tx = v1.placeholder(v1.float32, [None, SIZES[0]])
            h = tx
            for w, b in zip(ws0, bs0):
                h = v1.nn.sigmoid(v1.matmul(h, v1.Variable(w)) + v1.Variable(b))
            tloss = v1.reduce_mean(v1.pow(tx - h, 2))
            return tx, v1.train.RMSPropOptimizer(LR, decay=DECAY, epsilon=EPS).minimize(tloss)
        tsess, (tx, ttrain) = peers.tf_session(v1, tf_graph)
        others[peers.TF_LABEL] = lambda: tsess.run(ttrain, {tx: xb})
        closers.append(tsess.close)
    jx = peers.jax()
    if jx is not None:
        jax, jnp = jx

        def jloss(p, x):
            h = x
            for w, b in zip(p[0], p[1]):
                h = jax.nn.sigmoid(h @ w + b)
            return jnp.mean((x - h) ** 2)

        @jax.jit
        def jstep(p, ms, x):
            g = jax.grad(jloss)(p, x)
            ms = jax.tree_util.tree_map(lambda m, gg: DECAY * m + (1 - DECAY) * gg * gg, ms, g)
            p = jax.tree_util.tree_map(lambda v, gg, m: v - LR * gg / jnp.sqrt(m + EPS), p, g, ms)
            return p, ms
        js = {"p": ([jnp.asarray(w) for w in ws0], [jnp.asarray(b) for b in bs0])}
        js["ms"] = jax.tree_util.tree_map(jnp.ones_like, js["p"])
        jxb = jnp.asarray(xb)

        def jax_step():
            js["p"], js["ms"] = jstep(js["p"], js["ms"], jxb)
            js["p"][0][0].block_until_ready()
        others[peers.JAX_LABEL] = jax_step

    def check():
        s2 = tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0}))
        s2.run(init)
        ref = {"w": [w.copy() for w in ws0], "b": [b.copy() for b in bs0],
               "ms_w": [np.ones_like(w) for w in ws0], "ms_b": [np.ones_like(b) for b in bs0]}
        for _ in range(3):
            s2.run(train, {x: xb})
            np_step(ref)
        np.testing.assert_allclose(s2.run(ws[0]), ref["w"][0], rtol=1e-3, atol=1e-5)
        s2.close()

    return Workload(NAME, "autoencoder 784-256-128-256-784 (sigmoid, MSE), RMSProp, batch 256, default settings",
                    lambda: sess.run(train, {x: xb}), np_step, others, check,
                    close=lambda: [c() for c in closers])
