"""Lossy compression of cross-device float32 edges (whitepaper 5.5): off by default, on with
GraphOptions(enable_bfloat16_sendrecv=True); values are the float32s truncated to 16 bits."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.passes.compression import COMPRESS, DECOMPRESS
from tensorweave.testing.fake_device import register_fake_devices

FAKE0 = "/device:FAKE:0"
PARTS = tw.RunOptions(output_partition_graphs=True)


@pytest.fixture(autouse=True)
def fake_devices():
    register_fake_devices(count=1)
    yield
    plugins._reset_for_tests()


def _config(on):
    return tw.ConfigProto(graph_options=tw.GraphOptions(enable_bfloat16_sendrecv=on))


def _truncated(x):
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def _graph():
    x = tw.placeholder(tw.float32, [1000], name="x")
    n = tw.placeholder(tw.int32, [4], name="n")
    with tw.device("/device:CPU:0"):
        a = tw.identity(x, name="a")          # float32, produced on the CPU
        k = tw.identity(n, name="k")          # int32, produced on the CPU
    with tw.device(FAKE0):
        y = tw.multiply(a, 1.0, name="y")     # consumes a on FAKE:0
        z = tw.add(a, a, name="z")            # a second consumer there: one transfer, one expansion
        m = tw.multiply(k, 3, name="m")
    return x, n, a, y, z, m


def _run(on, fetches, feed):
    md = tw.RunMetadata()
    with tw.Session(config=_config(on)) as s:
        out = s.run(fetches, feed, options=PARTS, run_metadata=md)
    return out, md


def test_float32_edges_carry_truncated_values_when_on():
    x, n, a, y, z, m = _graph()
    vals = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3
    feed = {x: vals, n: [1, 2, 3, 2**30]}
    (va, vy, vz, vm), md = _run(True, [a, y, z, m], feed)
    np.testing.assert_array_equal(va, vals)  # fetched where it was produced: exact
    np.testing.assert_array_equal(vy, _truncated(vals))
    np.testing.assert_array_equal(vz, 2 * _truncated(vals))
    assert np.max(np.abs(vy - vals) / np.abs(vals)) <= 2.0 ** -7
    np.testing.assert_array_equal(vm, np.array([3, 6, 9, 3 * 2**30], np.int64).astype(np.int32))  # int32 exact
    nodes = {gd["node"][0]["device"]: gd["node"] for gd in md.partition_graphs}
    cpu = next(v for k, v in nodes.items() if "CPU" in k)
    fake = next(v for k, v in nodes.items() if "FAKE" in k)
    assert [nd["op"] for nd in cpu].count(COMPRESS) == 1
    assert [nd["op"] for nd in fake].count(DECOMPRESS) == 1
    recv_types = sorted(nd["attr"]["tensor_type"]["type"] for nd in fake if nd["op"] == "_Recv")
    assert recv_types == ["int32", "uint16"]


def test_exact_and_untouched_when_off():
    x, n, a, y, z, m = _graph()
    vals = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    (vy, vz), md = _run(False, [y, z], {x: vals, n: [1, 2, 3, 4]})
    np.testing.assert_array_equal(vy, vals)
    np.testing.assert_array_equal(vz, 2 * vals)
    assert not any(nd["op"] in (COMPRESS, DECOMPRESS) for gd in md.partition_graphs for nd in gd["node"])
    assert tw.ConfigProto().graph_options.enable_bfloat16_sendrecv is False


def test_special_values_survive():
    x = tw.placeholder(tw.float32, [6], name="x")
    with tw.device("/device:CPU:0"):
        a = tw.identity(x)
    with tw.device(FAKE0):
        y = tw.identity(a) * 1.0
    vals = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40], np.float32)
    (vy,), _ = _run(True, [y], {x: vals})
    np.testing.assert_array_equal(vy[:2], vals[:2])
    assert np.isnan(vy[2]) and vy[3] == 0.0 and np.signbit(vy[4])
    assert vy[5] == _truncated(vals[5:])[0]


def test_edges_stay_uncompressed_where_a_device_has_no_kernel():
    x, n, a, y, z, m = _graph()
    kernels = plugins.registry().kernels
    key = (DECOMPRESS, "FAKE")
    saved = kernels._by_op_device.pop(key)
    try:
        vals = np.linspace(-1, 1, 1000, dtype=np.float32) * np.float32(np.pi)
        (vy,), md = _run(True, [y], {x: vals, n: [0, 0, 0, 0]})
    finally:
        kernels._by_op_device[key] = saved
    np.testing.assert_array_equal(vy, vals)
    assert not any(nd["op"] in (COMPRESS, DECOMPRESS) for gd in md.partition_graphs for nd in gd["node"])
