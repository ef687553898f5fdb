"""``matmul``: four chained 1024x1024 float32 matrix products in one Session.run.

Here BLAS does nearly all the work; the ratio shows that the runtime adds nothing on top.
"""

from __future__ import annotations

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "matmul"
N = 1024


def build() -> Workload:
    import tensorweave as tw

    rng = np.random.default_rng(0)
    mats = [(rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32) for _ in range(5)]
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [N, N], name="x")
        ws = [tw.constant(m) for m in mats[1:]]
        y = x
        for w in ws:
            y = tw.matmul(y, w)
    sess = tw.Session(graph=g)

    def tw_step():
        return sess.run(y, {x: mats[0]})

    def np_step():
        v = mats[0]
        for m in mats[1:]:
            v = v @ m
        return v

    others = {}
    try:
        import torch

        tm = [torch.from_numpy(m) for m in mats]

        def torch_step():
            v = tm[0]
            for m in tm[1:]:
                v = v @ m
            return v
        others["torch"] = torch_step
    except ImportError:
        pass

    closers = [sess.close]
    v1 = peers.tf_v1()
    if v1 is not None:
        def tf_graph():
            tx = v1.placeholder(v1.float32, [N, N])
            ty = tx
            for m in mats[1:]:
                ty = v1.matmul(ty, v1.constant(m))
            return tx, ty
        tsess, (tx, ty) = peers.tf_session(v1, tf_graph)
        others[peers.TF_LABEL] = lambda: tsess.run(ty, {tx: mats[0]})
        closers.append(tsess.close)
    jx = peers.jax()
    if jx is not None:
        jax, jnp = jx
        jm = [jnp.asarray(m) for m in mats[1:]]
        jchain = jax.jit(lambda v: v @ jm[0] @ jm[1] @ jm[2] @ jm[3])
        others[peers.JAX_LABEL] = lambda: np.asarray(jchain(mats[0]))  # fed from and fetched to NumPy, like a Session

    def check():
        np.testing.assert_allclose(tw_step(), np_step(), rtol=1e-3, atol=1e-3)

    return Workload(NAME, "4 chained 1024x1024 float32 matmuls per Session.run", tw_step, np_step,
                    others, check, close=lambda: [c() for c in closers])
