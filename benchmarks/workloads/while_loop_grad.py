"""``while_loop_grad``: the gradient of the ``while_loop`` workload's loop (1000 iterations of
x = x*1.0001 + 0.5 on 4 floats) with respect to its input: the forward loop, which pushes what
the backward loop needs on a stack, then the backward loop of 1000 iterations that pops it.

NumPy's column is the same computation written by hand (a forward loop, then a backward loop
multiplying the incoming gradient by 1.0001). The issue's target: this step at most twice
the forward loop's (``while_loop``) time.
"""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "while_loop_grad"
N = 1000


def build() -> Workload:
    import tensorweave as tw

    x0 = np.ones(4, np.float32)

    def loop(tf, x):
        _, y = tf.while_loop(lambda i, v: i < N, lambda i, v: (i + 1, v * 1.0001 + 0.5), [tf.constant(0), x])
        return tf.gradients(tf.reduce_sum(y), x)[0]

    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [4], name="x")
        dx = loop(tw, x)
    sess = tw.Session(graph=g)

    def tw_step():
        return sess.run(dx, {x: x0})

    def np_step():
        i, v = 0, x0
        while i < N:  # the forward pass (its values are not needed by this gradient)
            i, v = i + 1, v * np.float32(1.0001) + np.float32(0.5)
        grad = np.ones(4, np.float32)
        for _ in range(N):
            grad = grad * np.float32(1.0001)
        return grad

    others = {}
    closers = [sess.close]
    v1 = peers.tf_v1()
    if v1 is not None:
        def tf_graph():
            tx = v1.placeholder(v1.float32, [4])
            return tx, loop(v1, tx)
        tsess, (tx, tdx) = peers.tf_session(v1, tf_graph)
        others[peers.TF_LABEL] = lambda: tsess.run(tdx, {tx: x0})
        closers.append(tsess.close)
    jx = peers.jax()
    if jx is not None:
        jax, jnp = jx

        def f(v):
            return jnp.sum(jax.lax.fori_loop(0, N, lambda i, v: v * np.float32(1.0001) + np.float32(0.5), v))
        jgrad = jax.jit(jax.grad(f))
        jx0 = jnp.asarray(x0)
        others[peers.JAX_LABEL] = lambda: jgrad(jx0).block_until_ready()

    def check():
        np.testing.assert_allclose(tw_step(), np_step(), rtol=1e-4)

    return Workload(NAME, "gradient of the 1000-iteration tw.while_loop (forward with stack pushes, backward with pops)",
                    tw_step, np_step, others, check, close=lambda: [c() for c in closers])
