"""``convnet``: one SGD step of a small convolutional net as TF1 tutorials write it with raw
ops (28x28x1 input; conv 5x5x32 + ReLU + 2x2 max pool; conv 5x5x64 + ReLU + 2x2 max pool;
dense 10; softmax cross-entropy), batch 128, placeholders of [None, 28, 28, 1], default
settings; the same graph with the batch fixed to 128 is kept beside it ("static batch"). There
is no hand-written NumPy step (convolution gradients by hand would measure
that code, not NumPy), so the ratios are to TensorFlow when it is installed; JAX too.

The data is noise of MNIST's shape: the step's cost does not depend on the values.
"""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "convnet"
BATCH, LR = 128, 0.01


def _init():
    rng = np.random.default_rng(0)
    shapes = [(5, 5, 1, 32), (5, 5, 32, 64), (7 * 7 * 64, 10)]
    ws = [(rng.standard_normal(s) * 0.05).astype(np.float32) for s in shapes]
    bs = [np.zeros(s[-1], np.float32) for s in shapes]
    x = rng.random((BATCH, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, BATCH).astype(np.int32)
    return ws, bs, x, y


def _net(tf, x, ws, bs):
    h = x
    for w, b in zip(ws[:2], bs[:2]):
        h = tf.nn.relu(tf.nn.conv2d(h, w, strides=[1, 1, 1, 1], padding="SAME") + b)
        h = tf.nn.max_pool(h, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")
    return tf.matmul(tf.reshape(h, [-1, 7 * 7 * 64]), ws[2]) + bs[2]


def build(batch: int | None = None) -> Workload:
    """The workload; ``batch``: the placeholders' batch dimension (None as TF1 programs write
    it; the static variant is built with 128 and run beside it)."""
    import tensorweave as tw

    ws0, bs0, xb, yb = _init()
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [batch, 28, 28, 1], name="x")
        y = tw.placeholder(tw.int32, [batch], name="y")
        ws, bs = [tw.Variable(w) for w in ws0], [tw.Variable(b) for b in bs0]
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=_net(tw, x, ws, bs)))
        train = tw.train.GradientDescentOptimizer(LR).minimize(loss)
        init = tw.global_variables_initializer()
    # Default settings, but CPU only: the peers run on the CPU, and with the OpenCL plugin
    # installed the placer may put convolutions on PoCL (the same CPU, through OpenCL).
    sess = tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0}))
    sess.run(init)
    feed = {x: xb, y: yb}

    others, closers, tf_check = {}, [sess.close], None
    if batch is not None:
        return Workload(NAME, "static batch", lambda: sess.run(train, feed), None, close=sess.close)
    static = build(batch=BATCH)
    others["tensorweave (static batch)"] = static.tensorweave
    closers.append(static.close)
    v1 = peers.tf_v1()
    if v1 is not None:
        def tf_graph():
            tx = v1.placeholder(v1.float32, [None, 28, 28, 1])
            ty = v1.placeholder(v1.int32, [None])
            tws, tbs = [v1.Variable(w) for w in ws0], [v1.Variable(b) for b in bs0]
            tloss = v1.reduce_mean(v1.nn.sparse_softmax_cross_entropy_with_logits(labels=ty, logits=_net(v1, tx, tws, tbs)))
            return tx, ty, tloss, v1.train.GradientDescentOptimizer(LR).minimize(tloss)
        tsess, (tx, ty, tloss, ttrain) = peers.tf_session(v1, tf_graph)
        others[peers.TF_LABEL] = lambda: tsess.run(ttrain, {tx: xb, ty: yb})
        closers.append(tsess.close)

        def tf_check():  # the first losses agree (same weights, same data)
            np.testing.assert_allclose(sess.run(loss, feed), tsess.run(tloss, {tx: xb, ty: yb}), rtol=1e-4)
    jx = peers.jax()
    if jx is not None:
        jax, jnp = jx

        def jloss(p, x, y):
            h = x
            for w, b in zip(p[0][:2], p[1][:2]):
                h = jax.nn.relu(jax.lax.conv_general_dilated(h, w, (1, 1), "SAME",
                                                             dimension_numbers=("NHWC", "HWIO", "NHWC")) + b)
                h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")
            logits = h.reshape(h.shape[0], -1) @ p[0][2] + p[1][2]
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

        @jax.jit
        def jstep(p, x, y):
            gr = jax.grad(jloss)(p, x, y)
            return jax.tree_util.tree_map(lambda v, gg: v - LR * gg, p, gr)
        js = {"p": ([jnp.asarray(w) for w in ws0], [jnp.asarray(b) for b in bs0])}
        jxb, jyb = jnp.asarray(xb), jnp.asarray(yb)

        def jax_step():
            js["p"] = jstep(js["p"], jxb, jyb)
            js["p"][0][0].block_until_ready()
        others[peers.JAX_LABEL] = jax_step

    return Workload(NAME, "2x (conv 5x5 + ReLU + max pool) + dense, SGD, batch 128 of 28x28x1, default settings",
                    lambda: sess.run(train, feed), None, others, tf_check, close=lambda: [c() for c in closers])
