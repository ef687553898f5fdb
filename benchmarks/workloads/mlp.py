"""``mlp``: one SGD step of a 64->128->10 ReLU MLP with softmax cross-entropy, batch 64, on
scikit-learn's digits, against the same step written by hand in NumPy (forward, backward,
update).

Written the way users write it: ``tw.placeholder(tw.float32, [None, 64])``; the variant with
the batch dimension fixed to 64 is kept beside it ("static batch"). TensorFlow's
``tf.compat.v1`` runs the same None-batch graph, JAX a ``jax.jit`` of the step, when
installed."""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "mlp"
BATCH, HIDDEN, LR = 64, 128, 0.1


def _data():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data[:BATCH] / 16.0).astype(np.float32), d.target[:BATCH].astype(np.int32)


def build(device: str | None = None, batch: int | None = None) -> Workload:
    import tensorweave as tw

    xb, yb = _data()
    rng = np.random.default_rng(0)
    w1_0 = (rng.standard_normal((64, HIDDEN)) * 0.1).astype(np.float32)
    w2_0 = (rng.standard_normal((HIDDEN, 10)) * 0.1).astype(np.float32)

    g = tw.Graph()
    with g.as_default(), tw.device(device):
        x = tw.placeholder(tw.float32, [batch, 64], name="x")
        y = tw.placeholder(tw.int32, [batch], name="y")
        w1 = tw.Variable(w1_0, name="w1")
        b1 = tw.Variable(np.zeros(HIDDEN, np.float32), name="b1")
        w2 = tw.Variable(w2_0, name="w2")
        b2 = tw.Variable(np.zeros(10, np.float32), name="b2")
        h = tw.nn.relu(tw.matmul(x, w1) + b1)
        logits = tw.matmul(h, w2) + b2
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tw.train.GradientDescentOptimizer(LR).minimize(loss)
        init = tw.global_variables_initializer()
    sess = tw.Session(graph=g)
    sess.run(init)
    feed = {x: xb, y: yb}

    def tw_step():
        return sess.run(train, feed)

    params = {"w1": w1_0.copy(), "b1": np.zeros(HIDDEN, np.float32), "w2": w2_0.copy(),
              "b2": np.zeros(10, np.float32)}
    onehot = np.eye(10, dtype=np.float32)[yb]

    def np_step(p=params):
        a1 = xb @ p["w1"] + p["b1"]
        h = np.maximum(a1, 0)
        z = h @ p["w2"] + p["b2"]
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        sm = e / e.sum(axis=1, keepdims=True)
        loss = -np.mean(np.log(sm[np.arange(BATCH), yb]))
        dz = (sm - onehot) / BATCH
        dw2 = h.T @ dz
        db2 = dz.sum(axis=0)
        dh = dz @ p["w2"].T
        da1 = dh * (a1 > 0)
        dw1 = xb.T @ da1
        db1 = da1.sum(axis=0)
        p["w1"] = p["w1"] - LR * dw1
        p["b1"] = p["b1"] - LR * db1
        p["w2"] = p["w2"] - LR * dw2
        p["b2"] = p["b2"] - LR * db2
        return loss

    def check():
        # Same initial values, same data: after 5 steps the weights agree.
        s2 = tw.Session(graph=g)
        s2.run(init)
        ref = {k: v.copy() for k, v in params.items()}
        ref["w1"], ref["w2"] = w1_0.copy(), w2_0.copy()
        ref["b1"], ref["b2"] = np.zeros(HIDDEN, np.float32), np.zeros(10, np.float32)
        for _ in range(5):
            s2.run(train, feed)
            np_step(ref)
        np.testing.assert_allclose(s2.run(w1), ref["w1"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(s2.run(b2), ref["b2"], rtol=1e-4, atol=1e-5)
        s2.close()

    label = ("64->128->10 ReLU MLP, softmax cross-entropy, batch 64 fed to [None, 64] placeholders: "
             "one SGD step per Session.run")
    others, closers, checks = {}, [sess.close], [check]
    if device is None and batch is None:
        static = build(batch=BATCH)
        others["tensorweave (static batch)"] = static.tensorweave
        closers.append(static.close)
        checks.append(static.check)
        opencl = _opencl_variant(build)
        if opencl is not None:
            # Compile its OpenCL programs now: PoCL's LLVM cannot build them once TensorFlow's
            # or JAX's LLVM is loaded into the process (peers below). Three steps: fused nodes
            # compile at their second run (passes/fusion.py).
            for _ in range(3):
                opencl.tensorweave()
            others["tensorweave (OPENCL)"] = opencl.tensorweave
            closers.append(opencl.close)
            checks.append(opencl.check)
        others.update(_peer_steps(xb, yb, w1_0, w2_0, closers))
    return Workload(NAME, label, tw_step, np_step, others, lambda: [c() for c in checks],
                    close=lambda: [c() for c in closers])


def _peer_steps(xb, yb, w1_0, w2_0, closers) -> dict:
    out = {}
    v1 = peers.tf_v1()
    if v1 is not None:
        def tf_graph():
            x = v1.placeholder(v1.float32, [None, 64])
            y = v1.placeholder(v1.int32, [None])
            w1, b1 = v1.Variable(w1_0), v1.Variable(np.zeros(HIDDEN, np.float32))
            w2, b2 = v1.Variable(w2_0), v1.Variable(np.zeros(10, np.float32))
            logits = v1.matmul(v1.nn.relu(v1.matmul(x, w1) + b1), w2) + b2
            loss = v1.reduce_mean(v1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            return x, y, v1.train.GradientDescentOptimizer(LR).minimize(loss)
        tsess, (tx, ty, ttrain) = peers.tf_session(v1, tf_graph)
        tfeed = {tx: xb, ty: yb}
        out[peers.TF_LABEL] = lambda: tsess.run(ttrain, tfeed)
        closers.append(tsess.close)
    jx = peers.jax()
    if jx is not None:
        jax, jnp = jx

        def loss_fn(p, x, y):
            h = jax.nn.relu(x @ p[0] + p[1])
            logits = h @ p[2] + p[3]
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

        @jax.jit
        def sgd(p, x, y):
            g = jax.grad(loss_fn)(p, x, y)
            return [a - LR * b for a, b in zip(p, g)]
        state = {"p": [jnp.asarray(w1_0), jnp.zeros(HIDDEN, jnp.float32), jnp.asarray(w2_0), jnp.zeros(10, jnp.float32)]}
        jxb, jyb = jnp.asarray(xb), jnp.asarray(yb)

        def jax_step():
            state["p"] = sgd(state["p"], jxb, jyb)
            state["p"][0].block_until_ready()
        out[peers.JAX_LABEL] = jax_step
    return out


def _opencl_variant(build):
    """The same step with every node on the first OpenCL device, when the OpenCL plugin is
    installed and found one (PoCL counts: there it measures the plugin's per-node overhead
    on the CPU rather than an accelerator)."""
    from tensorweave import plugins

    factory = plugins.registry().device_factories.get("OPENCL")
    if factory is None or factory.count() == 0:
        return None
    return build("/device:OPENCL:0")
