"""The random kernels on OPENCL against the CPU's Philox streams (``tensorweave.kernels.random``):
uniform floats and integers bit for bit, normals and truncated normals within a few ulp (log,
cos, sin and sqrt round differently in PoCL's math library and NumPy's), runs continuing the
stream, placement without soft placement (the wrappers and dropout included)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op

OPENCL0, CPU0 = "/device:OPENCL:0", "/device:CPU:0"
# Measured on PoCL against NumPy: at most 4 ulp (float32), 3 ulp (float64).
TOL = {tw.float32: dict(rtol=2e-6, atol=1e-7), tw.float64: dict(rtol=4e-15, atol=1e-16)}
_STRICT = tw.ConfigProto(allow_soft_placement=False)
_RANDOM_OPS = ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt")


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


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
@pytest.mark.parametrize("shape", [[1001, 37], [3], [0, 4]])
def test_uniform_is_bitwise_the_cpus(dtype, shape):
    got = _values(OPENCL0, "RandomUniform", shape, dtype)
    want = _values(CPU0, "RandomUniform", shape, dtype)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    if got[0].size:
        assert not np.array_equal(got[0], got[1])  # the second run continues the stream


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
@pytest.mark.parametrize("op", ["RandomStandardNormal", "TruncatedNormal"])
def test_normals_match_the_cpu_to_rounding(op, dtype):
    got = _values(OPENCL0, op, [513, 999], dtype, seed=17, seed2=3)  # not a multiple of 4
    want = _values(CPU0, op, [513, 999], dtype, seed=17, seed2=3)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **TOL[dtype])
    if op == "TruncatedNormal":
        assert (np.abs(got[0]) <= 2).all() and np.count_nonzero(got[0] == 0) < 3


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_uniform_int_is_bitwise_the_cpus(dtype):
    big = np.iinfo(dtype)
    for lo, hi in ((-3, 9), (big.min, big.max), (0, 1)):
        bounds = (np.asarray(lo, dtype), np.asarray(hi, dtype))
        got = _values(OPENCL0, "RandomUniformInt", [301, 7], extra=bounds)
        want = _values(CPU0, "RandomUniformInt", [301, 7], extra=bounds)
        for g, w in zip(got, want):
            assert g.dtype == dtype
            np.testing.assert_array_equal(g, w)
            assert (g >= lo).all() and (g < hi).all()


def test_wrappers_place_on_opencl_without_soft_placement():
    def run(device):
        g = tw.Graph()
        with g.as_default(), tw.device(device):
            tw.set_random_seed(4)
            outs = [tw.random_uniform([40, 30], -1.0, 2.0), tw.random_normal([17], 3.0, 2.0, dtype=tw.float64),
                    tw.truncated_normal([5, 5], stddev=0.1), tw.random_uniform([20], 0, 10, dtype=tw.int32),
                    tw.nn.dropout(tw.ones([64, 32]), keep_prob=0.75)]
        randoms = [op.name for op in g.get_operations() if op.type in _RANDOM_OPS]
        with tw.Session(graph=g, config=_STRICT) as s:
            md = tw.RunMetadata()
            vals = s.run(outs, run_metadata=md)
        return vals, md.placement, randoms

    got, placement, randoms = run(OPENCL0)
    want, _, _ = run(CPU0)
    assert len(randoms) == 5 and all("OPENCL" in placement[n] for n in randoms), {n: placement[n] for n in randoms}
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-14, atol=1e-14)  # after * 2 + 3
    np.testing.assert_allclose(got[2], want[2], rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(got[3], want[3])
    np.testing.assert_array_equal(got[4], want[4])  # dropout's mask: uniforms, so bit for bit
    assert abs(np.mean(got[4] != 0) - 0.75) < 0.05


def test_bad_arguments_are_errors():
    with pytest.raises(tw.errors.InvalidArgumentError, match="minval < maxval"):
        g = tw.Graph()
        with g.as_default(), tw.device(OPENCL0):
            lo = tw.placeholder(tw.int32, [])
            out = apply_op("RandomUniformInt", [tw.constant([3]), lo, tw.constant(2)], {"seed": 1, "seed2": 2})
        with tw.Session(graph=g, config=_STRICT) as s:
            s.run(out, {lo: 5})
