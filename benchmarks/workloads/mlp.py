"""``mlp``: one SGD step of a 64->128->10 ReLU MLP with softmax cross-entropy, batch 64, on
scikit-learn's digits, against the same step written by hand in NumPy (forward, backward,
update)."""

from __future__ import annotations

import numpy as np

from workloads.base import Workload

NAME = "mlp"
BATCH, HIDDEN, LR = 64, 128, 0.1


def _data():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data[:BATCH] / 16.0).astype(np.float32), d.target[:BATCH].astype(np.int32)


def build(device: str | None = None) -> Workload:
    import tensorweave as tw

    xb, yb = _data()
    rng = np.random.default_rng(0)
    w1_0 = (rng.standard_normal((64, HIDDEN)) * 0.1).astype(np.float32)
    w2_0 = (rng.standard_normal((HIDDEN, 10)) * 0.1).astype(np.float32)

    g = tw.Graph()
    with g.as_default(), tw.device(device):
        x = tw.placeholder(tw.float32, [BATCH, 64], name="x")
        y = tw.placeholder(tw.int32, [BATCH], name="y")
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

    label = "64->128->10 ReLU MLP, softmax cross-entropy, batch 64: one SGD step per Session.run"
    others, closers, checks = {}, [sess.close], [check]
    opencl = _opencl_variant(build) if device is None else None
    if opencl is not None:
        others["tensorweave (OPENCL)"] = opencl.tensorweave
        closers.append(opencl.close)
        checks.append(opencl.check)
    return Workload(NAME, label, tw_step, np_step, others, lambda: [c() for c in checks],
                    close=lambda: [c() for c in closers])


def _opencl_variant(build):
    """The same step with every node on the first OpenCL device, when the OpenCL plugin is
    installed and found one (PoCL counts: there it measures the plugin's per-node overhead
    on the CPU rather than an accelerator)."""
    from tensorweave import plugins

    factory = plugins.registry().device_factories.get("OPENCL")
    if factory is None or factory.count() == 0:
        return None
    return build("/device:OPENCL:0")
