"""``branches``: two independent chains of two 512x512 matmuls, added at the end.

Measures the dynamic executor (pending counts at run time, expensive nodes on the inter-op
thread pool) against the sequential one on a graph with parallelism to exploit. NumPy's
BLAS is itself multithreaded, so on few cores the gain is bounded; the point is that the
pool path costs little and helps where BLAS leaves cores idle.
"""

from __future__ import annotations

import numpy as np

from workloads.base import Workload

NAME = "branches"
N = 512


def build() -> Workload:
    import tensorweave as tw

    rng = np.random.default_rng(0)
    m = [(rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32) for _ in range(4)]
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [N, N], name="x")
        c = [tw.constant(a) for a in m]
        y = tw.matmul(tw.matmul(x, c[0]), c[1]) + tw.matmul(tw.matmul(x, c[2]), c[3])
    pooled = tw.Session(graph=g, config=tw.ConfigProto(inter_op_parallelism_threads=2))
    sequential = tw.Session(graph=g, config=tw.ConfigProto(inter_op_parallelism_threads=1))
    x0 = rng.standard_normal((N, N)).astype(np.float32)

    def np_step():
        return (x0 @ m[0]) @ m[1] + (x0 @ m[2]) @ m[3]

    def check():
        np.testing.assert_allclose(pooled.run(y, {x: x0}), np_step(), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(sequential.run(y, {x: x0}), np_step(), rtol=1e-3, atol=1e-3)

    def close():
        pooled.close()
        sequential.close()

    return Workload(NAME, "2 independent branches of 2 chained 512x512 matmuls, summed",
                    lambda: pooled.run(y, {x: x0}), np_step,
                    {"tensorweave (sequential executor)": lambda: sequential.run(y, {x: x0})},
                    check, close=close)
