"""``while_loop``: a tw.while_loop of 1000 tiny iterations (i += 1; x = x*1.0001 + 0.5 on a
4-element vector), one Session.run per step, against the same Python loop over NumPy.

It measures the executor's per-iteration cost for control flow (4.4): frames, tags, deadness
and the Merge/Switch/NextIteration routing, since the arithmetic is negligible. Divide the
step time by 1000 for the time per iteration.
"""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "while_loop"
N = 1000


def build() -> Workload:
    import tensorweave as tw

    x0 = np.ones(4, np.float32)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [4], name="x")
        _, y = tw.while_loop(lambda i, v: i < N, lambda i, v: (i + 1, v * 1.0001 + 0.5),
                             [tw.constant(0), x])
    sess = tw.Session(graph=g)

    def tw_step():
        return sess.run(y, {x: x0})

    def np_step():
        i, v = 0, x0
        while i < N:
            i, v = i + 1, v * 1.0001 + 0.5
        return v

    others = {}
    try:
        import torch

        tx = torch.ones(4)

        def torch_step():
            i, v = 0, tx
            while i < N:
                i, v = i + 1, v * 1.0001 + 0.5
            return v
        others["torch (eager)"] = torch_step
    except ImportError:
        pass

    closers = [sess.close]
    v1 = peers.tf_v1()
    if v1 is not None:
        def tf_graph():
            tx = v1.placeholder(v1.float32, [4])
            _, ty = v1.while_loop(lambda i, v: i < N, lambda i, v: (i + 1, v * 1.0001 + 0.5), [v1.constant(0), tx])
            return tx, ty
        tsess, (tx, ty) = peers.tf_session(v1, tf_graph)
        others[peers.TF_LABEL] = lambda: tsess.run(ty, {tx: x0})
        closers.append(tsess.close)
    jx = peers.jax()
    if jx is not None:
        jax, jnp = jx
        jloop = jax.jit(lambda v: jax.lax.fori_loop(0, N, lambda i, v: v * np.float32(1.0001) + np.float32(0.5), v))
        jx0 = jnp.asarray(x0)
        others[peers.JAX_LABEL] = lambda: jloop(jx0).block_until_ready()

    def check():
        np.testing.assert_allclose(tw_step(), np_step(), rtol=1e-4)

    return Workload(NAME, "tw.while_loop of 1000 tiny iterations vs a Python loop over NumPy",
                    tw_step, np_step, others, check, close=lambda: [c() for c in closers])
