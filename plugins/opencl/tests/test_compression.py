"""Lossy transfer compression (whitepaper 5.5) on OPENCL: the two conversion kernels agree
with the CPU kernels bit for bit, and a plan CPU <-> OPENCL with
``enable_bfloat16_sendrecv=True`` converts on both devices and sends uint16 both ways."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave.ops.compression_ops import COMPRESS, DECOMPRESS

OPENCL0 = "/device:OPENCL:0"
CPU0 = "/device:CPU:0"
FULL = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE, output_partition_graphs=True)
SPECIAL_BITS = [
    0x00000000, 0x80000000,              # +0, -0
    0x00000001, 0x80000001,              # the smallest subnormals
    0x007FFFFF, 0x807FFFFF, 0x00010000,  # the largest subnormals; one that survives truncation
    0x00800000, 0x80800000,              # the smallest normals
    0x7F7FFFFF, 0xFF7FFFFF,              # max float, min (most negative) float
    0x7F800000, 0xFF800000,              # +inf, -inf
    0x7FC00000, 0xFFC00000,              # quiet NaNs
    0x7F800001, 0xFF800001, 0x7F80FFFF,  # NaNs whose payload is only in the low 16 bits
    0x7FA00000, 0x7FFFFFFF,              # a signalling NaN; the all-ones NaN
    0x3F800000, 0x3F80FFFF, 0xBF7FFFFF,  # 1.0, and values truncation moves the most
]


def _special_floats():
    return np.array(SPECIAL_BITS, np.uint32).view(np.float32)


def _random_floats(n=1 << 15, seed=0):
    """Every kind of float32: random bit patterns, and ordinary values of many magnitudes."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = (rng.standard_normal(n // 2) * 10.0 ** rng.integers(-30, 30, n // 2)).astype(np.float32)
    return np.concatenate([bits, normal])


def _convert(device, op, x):
    """``op`` on ``device`` of the fed ``x`` (the op must be placed there)."""
    g = tw.Graph()
    with g.as_default():
        ph = tw.placeholder(tw.as_dtype(x.dtype), x.shape, name="x")
        with tw.device(device):
            y = apply_op(op, [ph], name="y")
    md = tw.RunMetadata()
    with tw.Session(graph=g) as sess:
        out = sess.run(y, {ph: x}, run_metadata=md)
    assert device[len("/device:"):] in md.placement["y"], md.placement
    return out


@pytest.mark.parametrize("values", ["special", "random", "scalar", "empty"])
def test_compress_matches_the_cpu_kernel_bit_for_bit(values):
    x = {"special": _special_floats, "random": _random_floats,
         "scalar": lambda: np.float32(-np.pi), "empty": lambda: np.zeros((0, 3), np.float32)}[values]()
    got = _convert(OPENCL0, COMPRESS, np.asarray(x))
    want = _convert(CPU0, COMPRESS, np.asarray(x))
    assert got.dtype == want.dtype == np.uint16 and got.shape == want.shape == np.shape(x)
    np.testing.assert_array_equal(got, want)


def test_compress_keeps_specials_and_truncates():
    got = _convert(OPENCL0, COMPRESS, _special_floats())
    bits = np.array(SPECIAL_BITS, np.uint32)
    nan = np.isnan(_special_floats())
    np.testing.assert_array_equal(got[~nan], (bits[~nan] >> 16).astype(np.uint16))
    assert np.all(got[nan] == 0x7FC0)  # NaN stays NaN, even one that truncation would make inf


def test_decompress_matches_the_cpu_kernel_for_every_uint16():
    c = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    got = _convert(OPENCL0, DECOMPRESS, c)
    want = _convert(CPU0, DECOMPRESS, c)
    assert got.dtype == want.dtype == np.float32 and got.shape == (256, 256)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(got.view(np.uint32), c.astype(np.uint32) << 16)


def test_round_trip_on_opencl_is_truncation():
    x = np.concatenate([_special_floats(), _random_floats(4096, seed=1)])
    g = tw.Graph()
    with g.as_default():
        ph = tw.placeholder(tw.float32, x.shape)
        with tw.device(OPENCL0):
            y = apply_op(DECOMPRESS, [apply_op(COMPRESS, [ph])])
    with tw.Session(graph=g) as sess:
        got = sess.run(y, {ph: x})
    finite = np.isfinite(x)
    np.testing.assert_array_equal(got[~np.isnan(x)].view(np.uint32),
                                  x[~np.isnan(x)].view(np.uint32) & np.uint32(0xFFFF0000))
    assert np.isnan(got[np.isnan(x)]).all() and np.array_equal(np.signbit(got[finite]), np.signbit(x[finite]))
    normal = finite & (np.abs(x) >= np.finfo(np.float32).tiny)
    assert np.all(np.abs(got[normal] - x[normal]) <= np.abs(x[normal]) * 2.0 ** -7)


def _mixed_graph(n):
    """x -> a (CPU) -> b (OPENCL) -> c (CPU): one float32 edge each way."""
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [n], name="x")
        with tw.device(CPU0):
            a = tw.multiply(x, 1.0, name="a")
        with tw.device(OPENCL0):
            b = tw.multiply(a, 2.0, name="b")
        with tw.device(CPU0):
            c = tw.multiply(b, 3.0, name="c")
    return g, x, b, c


def _run_mixed(on, vals):
    g, x, b, c = _mixed_graph(len(vals))
    config = tw.ConfigProto(graph_options=tw.GraphOptions(enable_bfloat16_sendrecv=on))
    md = tw.RunMetadata()
    with tw.Session(graph=g, config=config) as sess:
        out = sess.run([b, c], {x: vals}, options=FULL, run_metadata=md)
    return out, md


def _truncated(v):
    return (np.asarray(v, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def test_plan_cpu_opencl_cpu_sends_bfloat16_both_ways():
    rng = np.random.default_rng(2)
    vals = (rng.standard_normal(4096) * 10.0 ** rng.integers(-8, 8, 4096)).astype(np.float32)
    vals[:4] = [np.inf, -np.inf, -0.0, np.nan]
    (b_off, c_off), md_off = _run_mixed(False, vals)
    (b_on, c_on), md_on = _run_mixed(True, vals)

    # The plan: a compression on the sending and an expansion on the receiving device, each way.
    parts = {("OPENCL" if "OPENCL" in gd["node"][0]["device"] else "CPU"): gd["node"] for gd in md_on.partition_graphs}
    for dev in ("CPU", "OPENCL"):
        ops = [nd["op"] for nd in parts[dev]]
        assert ops.count(COMPRESS) == 1 and ops.count(DECOMPRESS) == 1, (dev, ops)
        assert all(dev in nd["device"] for nd in parts[dev] if nd["op"] in (COMPRESS, DECOMPRESS))
        assert [nd["attr"]["tensor_type"]["type"] for nd in parts[dev] if nd["op"] == "_Recv"] == ["uint16"]
    assert not any(nd["op"] in (COMPRESS, DECOMPRESS) for gd in md_off.partition_graphs for nd in gd["node"])

    # Values: each crossing truncates to bfloat16 (exactly what the CPU kernels would give),
    # within 2**-7 relative error of the uncompressed run.
    np.testing.assert_array_equal(b_on, 2 * _truncated(vals))
    np.testing.assert_array_equal(c_on, 3 * _truncated(b_on))
    np.testing.assert_array_equal(b_off, 2 * vals)
    fin = np.isfinite(b_off) & (b_off != 0)
    assert np.all(np.abs(b_on[fin] - b_off[fin]) <= np.abs(b_off[fin]) * 2.0 ** -7)
    assert np.all(np.abs(c_on[fin] - c_off[fin]) <= np.abs(c_off[fin]) * (2 * 2.0 ** -7))
    assert np.isnan(c_on[3]) and list(c_on[:2]) == [np.inf, -np.inf] and np.signbit(c_on[2])

    # Half the bytes cross: each transfer carries 2 bytes per value instead of 4.
    def moved(md):
        return sorted((n.op, n.transfer.bytes) for ds in md.step_stats.dev_stats for n in ds.node_stats
                      if n.transfer is not None)
    assert moved(md_off) == sorted([("_Send", 4 * 4096), ("_Recv", 4 * 4096)] * 2)
    assert moved(md_on) == sorted([("_Send", 2 * 4096), ("_Recv", 2 * 4096)] * 2)


def test_device_holds_uint16(device):
    x = np.arange(0, 1 << 16, 7, dtype=np.uint16)
    t = device.to_device(x)
    assert t.dtype == np.uint16 and t.nbytes == x.nbytes
    np.testing.assert_array_equal(device.to_host(t), x)
