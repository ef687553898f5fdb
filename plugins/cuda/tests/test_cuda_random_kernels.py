"""random.cu against the CPU's Philox streams (``tensorweave.kernels.random``): uniform floats
and integers bit for bit, normals and truncated normals to float rounding (the device's
logf/cosf/sinf against NumPy's), runs continuing the stream, and the wrappers placed on the
device without soft placement.

Each test runs on the ``gpu`` backends of conftest.py: a real GPU when present (else skipped
with the probe's reason) and the CPU emulator of the driver layer.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave.kernels import random as philox
from tensorweave_cuda.kernels import catalog

CPU0 = "/device:CPU:0"
# A few ulp: CUDA's logf/cosf/sinf are within 2 ulp, glibc's (the emulator) within 1.
TOL = {tw.float32: dict(rtol=2e-6, atol=1e-7), tw.float64: dict(rtol=4e-15, atol=1e-16)}
_STRICT = tw.ConfigProto(allow_soft_placement=False)


def _values(device, op, shape, dtype=tw.float32, seed=5, seed2=9, runs=2, extra=()):
    g = tw.Graph()
    with g.as_default(), tw.device(device):
        if op == "RandomUniformInt":
            out = apply_op(op, [tw.constant(shape)] + [tw.constant(v) for v in extra], {"seed": seed, "seed2": seed2})
        else:
            out = apply_op(op, [tw.constant(shape)], {"seed": seed, "seed2": seed2, "dtype": dtype})
    with tw.Session(graph=g, config=_STRICT) as s:
        md = tw.RunMetadata()
        vals = [s.run(out, run_metadata=md) for _ in range(runs)]
    assert device.split(":")[-2] in md.placement[out.op.name], md.placement[out.op.name]
    return vals


def test_the_kernels_and_the_core_share_the_truncation_schedule():
    assert catalog.TRUNC_ROUNDS == philox.TRUNC_ROUNDS


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
def test_uniform_is_bitwise_the_cpus(gpu, dtype):
    got = _values(gpu.device(), "RandomUniform", [301, 13], dtype, seed=(1 << 40) + 3, seed2=-7)
    want = _values(CPU0, "RandomUniform", [301, 13], dtype, seed=(1 << 40) + 3, seed2=-7)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert not np.array_equal(got[0], got[1])


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
@pytest.mark.parametrize("op", ["RandomStandardNormal", "TruncatedNormal"])
def test_normals_match_the_cpu_to_rounding(gpu, op, dtype):
    got = _values(gpu.device(), op, [257, 99], dtype, seed=17, seed2=3)
    want = _values(CPU0, op, [257, 99], dtype, seed=17, seed2=3)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_uniform_int_is_bitwise_the_cpus(gpu, dtype):
    big = np.iinfo(dtype)
    for lo, hi in ((-3, 9), (big.min, big.max)):
        bounds = (np.asarray(lo, dtype), np.asarray(hi, dtype))
        got = _values(gpu.device(), "RandomUniformInt", [101, 3], extra=bounds)
        want = _values(CPU0, "RandomUniformInt", [101, 3], extra=bounds)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_wrappers_and_dropout_place_on_the_device(gpu):
    def run(device):
        g = tw.Graph()
        with g.as_default(), tw.device(device):
            tw.set_random_seed(4)
            outs = [tw.random_uniform([40, 30], -1.0, 2.0), tw.truncated_normal([5, 5], stddev=0.1),
                    tw.random_uniform([20], 0, 10, dtype=tw.int64), tw.nn.dropout(tw.ones([64, 32]), keep_prob=0.75)]
        with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=True)) as s:
            md = tw.RunMetadata()
            vals = s.run(outs, run_metadata=md)
        randoms = [op.name for op in g.get_operations() if op.type.startswith(("Random", "TruncatedNormal"))]
        return vals, {n: md.placement[n] for n in randoms}

    got, placed = run(gpu.device())
    want, _ = run(CPU0)
    assert len(placed) == 4 and all(gpu.device_type in d for d in placed.values()), placed
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[3], want[3])
