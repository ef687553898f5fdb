"""``chain``: 100 x (x*1.0001 + 0.5) on a 4-element float32 vector, one Session.run per step.

It measures per-node and per-run overhead: the arithmetic is negligible, so the time is what
the runtime spends scheduling 200 nodes and handling one feed and one fetch.
"""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "chain"
N = 100


def build() -> Workload:
    import tensorweave as tw

    x0 = np.ones(4, np.float32)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [4], name="x")
        y = x
        for _ in range(N):
            y = y * 1.0001 + 0.5
    sess = tw.Session(graph=g)

    def tw_step():
        return sess.run(y, {x: x0})

    def np_step():
        v = x0
        for _ in range(N):
            v = v * 1.0001 + 0.5
        return v

    a, b = np.float32(1.0001), np.float32(0.5)

    def np_prebound_step():
        # The same loop with the scalars converted once (what the graph's constants are).
        v = x0
        for _ in range(N):
            v = np.add(np.multiply(v, a), b)
        return v

    others = {"numpy (prebound scalars)": np_prebound_step}
    try:
        import torch

        tx = torch.ones(4)

        def torch_step():
            v = tx
            for _ in range(N):
                v = v * 1.0001 + 0.5
            return v
        others["torch (eager)"] = torch_step
    except ImportError:
        pass

    closers = [sess.close]
    v1 = peers.tf_v1()
    if v1 is not None:
        def tf_graph():
            tx = v1.placeholder(v1.float32, [4])
            ty = tx
            for _ in range(N):
                ty = ty * 1.0001 + 0.5
            return tx, ty
        tsess, (tx, ty) = peers.tf_session(v1, tf_graph)
        others[peers.TF_LABEL] = lambda: tsess.run(ty, {tx: x0})
        closers.append(tsess.close)
    jx = peers.jax()
    if jx is not None:
        jax, jnp = jx

        @jax.jit
        def jchain(v):
            for _ in range(N):
                v = v * np.float32(1.0001) + np.float32(0.5)
            return v
        jx0 = jnp.asarray(x0)
        others[peers.JAX_LABEL] = lambda: jchain(jx0).block_until_ready()

    def check():
        np.testing.assert_allclose(tw_step(), np_step(), rtol=1e-5)

    return Workload(NAME, "100 x (x*1.0001+0.5), 4-element float32, one Session.run per step",
                    tw_step, np_step, others, check, close=lambda: [c() for c in closers])
