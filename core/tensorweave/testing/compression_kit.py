"""Checks for a device plugin's lossy-transfer-compression kernels (whitepaper 5.5;
``_CompressF32ToBF16``/``_DecompressBF16ToF32``, the pass in ``passes/compression.py``): the
device's kernels agree with the CPU's bit for bit, a round trip on the device is truncation,
and a plan CPU -> device -> CPU with ``enable_bfloat16_sendrecv=True`` converts on both sides
and moves half the bytes each way. A plugin's tests call them with its device name::

    from tensorweave.testing import compression_kit as kit

    def test_compress(): kit.check_compress_matches_cpu("/device:OPENCL:0", kit.special_floats())
"""

from __future__ import annotations

import numpy as np

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave.ops.compression_ops import COMPRESS, DECOMPRESS

CPU = "/device:CPU:0"
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


def special_floats() -> np.ndarray:
    return np.array(SPECIAL_BITS, np.uint32).view(np.float32)


def random_floats(n: int = 1 << 15, seed: int = 0) -> np.ndarray:
    """Every kind of float32: random bit patterns, and ordinary values of many magnitudes."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = (rng.standard_normal(n // 2) * 10.0 ** rng.integers(-30, 30, n // 2)).astype(np.float32)
    return np.concatenate([bits, normal])


def truncated(v) -> np.ndarray:
    return (np.asarray(v, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def convert(device: str, op: str, x):
    """``op`` on ``device`` of the fed ``x`` (checked to be placed there)."""
    x = np.asarray(x)
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


def check_compress_matches_cpu(device: str, x) -> None:
    got, want = convert(device, COMPRESS, x), convert(CPU, COMPRESS, x)
    assert got.dtype == want.dtype == np.uint16 and got.shape == want.shape == np.shape(x)
    np.testing.assert_array_equal(got, want)


def check_compress_keeps_specials(device: str) -> None:
    got = convert(device, COMPRESS, special_floats())
    bits = np.array(SPECIAL_BITS, np.uint32)
    nan = np.isnan(special_floats())
    np.testing.assert_array_equal(got[~nan], (bits[~nan] >> 16).astype(np.uint16))
    assert np.all(got[nan] == 0x7FC0)  # NaN stays NaN, even one that truncation would make inf


def check_decompress_every_uint16(device: str) -> None:
    c = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    got, want = convert(device, DECOMPRESS, c), convert(CPU, DECOMPRESS, c)
    assert got.dtype == want.dtype == np.float32 and got.shape == (256, 256)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(got.view(np.uint32), c.astype(np.uint32) << 16)


def check_round_trip_is_truncation(device: str) -> None:
    x = np.concatenate([special_floats(), random_floats(4096, seed=1)])
    g = tw.Graph()
    with g.as_default():
        ph = tw.placeholder(tw.float32, x.shape)
        with tw.device(device):
            y = apply_op(DECOMPRESS, [apply_op(COMPRESS, [ph])])
    with tw.Session(graph=g) as sess:
        got = sess.run(y, {ph: x})
    nan, finite = np.isnan(x), np.isfinite(x)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), x[~nan].view(np.uint32) & np.uint32(0xFFFF0000))
    assert np.isnan(got[nan]).all() and np.array_equal(np.signbit(got[finite]), np.signbit(x[finite]))
    normal = finite & (np.abs(x) >= np.finfo(np.float32).tiny)
    assert np.all(np.abs(got[normal] - x[normal]) <= np.abs(x[normal]) * 2.0 ** -7)


def _run_mixed(device, on, vals):
    """x -> a (CPU) -> b (device) -> c (CPU): one float32 edge each way."""
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [len(vals)], name="x")
        with tw.device(CPU):
            a = tw.multiply(x, 1.0, name="a")
        with tw.device(device):
            b = tw.multiply(a, 2.0, name="b")
        with tw.device(CPU):
            c = tw.multiply(b, 3.0, name="c")
    config = tw.ConfigProto(graph_options=tw.GraphOptions(enable_bfloat16_sendrecv=on))
    md = tw.RunMetadata()
    with tw.Session(graph=g, config=config) as sess:
        out = sess.run([b, c], {x: vals}, options=FULL, run_metadata=md)
    return out, md


def check_mixed_plan_sends_bfloat16_both_ways(device: str, device_type: str, n: int = 4096) -> None:
    """The plan converts on the sending and the receiving device each way, the values are
    the truncations (within 2**-7 of the uncompressed run), and half the bytes cross."""
    rng = np.random.default_rng(2)
    vals = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(np.float32)
    vals[:4] = [np.inf, -np.inf, -0.0, np.nan]
    (b_off, c_off), md_off = _run_mixed(device, False, vals)
    (b_on, c_on), md_on = _run_mixed(device, True, vals)

    parts = {(device_type if f"device:{device_type}:" in gd["node"][0]["device"] else "CPU"): gd["node"]
             for gd in md_on.partition_graphs}
    for dev in ("CPU", device_type):
        ops = [nd["op"] for nd in parts[dev]]
        assert ops.count(COMPRESS) == 1 and ops.count(DECOMPRESS) == 1, (dev, ops)
        assert all(f"device:{dev}:" in nd["device"] for nd in parts[dev] if nd["op"] in (COMPRESS, DECOMPRESS))
        assert [nd["attr"]["tensor_type"]["type"] for nd in parts[dev] if nd["op"] == "_Recv"] == ["uint16"]
    assert not any(nd["op"] in (COMPRESS, DECOMPRESS) for gd in md_off.partition_graphs for nd in gd["node"])

    np.testing.assert_array_equal(b_on, 2 * truncated(vals))
    np.testing.assert_array_equal(c_on, 3 * truncated(b_on))
    np.testing.assert_array_equal(b_off, 2 * vals)
    fin = np.isfinite(b_off) & (b_off != 0)
    assert np.all(np.abs(b_on[fin] - b_off[fin]) <= np.abs(b_off[fin]) * 2.0 ** -7)
    assert np.all(np.abs(c_on[fin] - c_off[fin]) <= np.abs(c_off[fin]) * (2 * 2.0 ** -7))
    assert np.isnan(c_on[3]) and list(c_on[:2]) == [np.inf, -np.inf] and np.signbit(c_on[2])

    def moved(md):
        return sorted((nd.op, nd.transfer.bytes) for ds in md.step_stats.dev_stats for nd in ds.node_stats
                      if nd.transfer is not None)
    assert moved(md_off) == sorted([("_Send", 4 * n), ("_Recv", 4 * n)] * 2)
    assert moved(md_on) == sorted([("_Send", 2 * n), ("_Recv", 2 * n)] * 2)
