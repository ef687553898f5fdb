"""Placement by the cost model with a GPU and the CPU, no device constraints (issue 16).

A model whose heavy nodes are matrix products and whose input arrives as text: the greedy
placer must put the products on the GPU (the device reports its throughput from its SM count
and clock, far above the CPU's) and the string parsing, which only the CPU can run, on the
CPU — and the values must be the CPU-only run's. Runs on the emulator here and on the real
GPU where one is present (``gpu`` fixture).
"""

from __future__ import annotations

import numpy as np

import tensorweave as tw
from tensorweave.passes import cost_model

CPU = "/device:CPU:0"


def _model(n: int):
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    w2 = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    g = tw.Graph()
    with g.as_default():
        text = tw.placeholder(tw.string, [None], name="text")
        scale = tw.reduce_sum(tw.string_to_number(text, tw.float32), name="scale")  # CPU only
        x = tw.placeholder(tw.float32, [None, n], name="x")
        h = tw.nn.relu(tw.matmul(x, tw.constant(w1), name="mm1"), name="relu")
        y = tw.matmul(h, tw.constant(w2), name="mm2") * scale
        out = tw.reduce_sum(y, axis=1, name="out")
    return g, text, x, out


def _run(config, n, xs):
    g, text, x, out = _model(n)
    feeds = {text: np.array([b"0.5", b"1.5"], dtype=object), x: xs}
    with tw.Session(graph=g, config=config) as sess:
        placement = sess.placement(out, feeds)
        return sess.run(out, feeds), placement


def test_cost_model_puts_the_products_on_the_gpu_and_text_on_the_cpu(gpu, monkeypatch):
    if gpu.name == "emulator":
        # The emulator claims no throughput (it runs on the CPU's cores); give it a GPU's, so
        # that the placer's choice is what it would be on the real device.
        monkeypatch.setitem(cost_model.DEFAULT_FLOPS_PER_SECOND, gpu.device_type, 5e12)
    n = 512
    xs = np.random.default_rng(1).standard_normal((256, n)).astype(np.float32)
    # Only the backend under test besides the CPU (on a GPU machine the emulator's run would
    # otherwise see the real GPU too, and the placer rightly prefers it).
    other = "GPU" if gpu.name == "emulator" else "CUDAEMU"
    got, placement = _run(tw.ConfigProto(device_count={other: 0}), n, xs)
    want, cpu_only = _run(tw.ConfigProto(device_count={other: 0, gpu.device_type: 0}), n, xs)
    assert all("CPU" in d for d in cpu_only.values())
    for node in ("mm1", "mm2"):
        assert gpu.device_type in placement[node], f"{node} on {placement[node]}: expected the GPU"
    assert "CPU" in placement["StringToNumber"], placement["StringToNumber"]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3)
