"""The serialisable graph form round-trips exactly and imports only registered ops."""

import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors

ALL_DTYPES = [tw.float16, tw.float32, tw.float64, tw.int8, tw.int16, tw.int32, tw.int64, tw.uint8,
              tw.uint16, tw.uint32, tw.uint64, tw.complex64, tw.complex128, tw.bool, tw.string]


def _build():
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    v = tw.Variable(np.arange(3, dtype=np.float32), name="v")
    with tw.device("/device:CPU:0"), tw.name_scope("layer"):
        y = tw.add(x, v, name="y")
    with tw.control_dependencies([v.initializer]):
        z = tw.identity(y * np.float32(np.inf), name="z")
    for dt in ALL_DTYPES:
        val = ["a", "bc"] if dt is tw.string else np.array([1, 0], dtype=dt.as_numpy_dtype)
        tw.constant(val, dtype=dt, name=f"c_{dt.name}")
    return x, z


def test_round_trip_is_exact_and_json_safe():
    _build()
    gd = tw.get_default_graph().as_graph_def()
    text = json.dumps(gd, allow_nan=False)  # strictly JSON: no NaN/Infinity tokens
    g2 = tw.Graph.from_graph_def(json.loads(text))
    assert g2.as_graph_def() == gd


def test_imported_graph_computes_the_same():
    x, z = _build()
    gd = tw.get_default_graph().as_graph_def()
    feed = np.ones((2, 3), np.float32)
    with tw.Session() as s:
        expect = s.run(z, {x: feed})
    g2 = tw.Graph.from_graph_def(gd)
    with tw.Session(graph=g2) as s:
        got = s.run("z:0", {"x:0": feed})
    np.testing.assert_array_equal(got, expect)
    for dt in ALL_DTYPES:
        g = tw.Graph.from_graph_def(gd)
        with tw.Session(graph=g) as s:
            val = s.run(f"c_{dt.name}:0")
        assert tw.as_dtype(val.dtype) is dt


def test_import_with_prefix_and_input_map():
    a = tw.placeholder(tw.float32, [2], name="a")
    tw.multiply(a, 2.0, name="double")
    gd = tw.get_default_graph().as_graph_def()
    g = tw.Graph()
    with g.as_default():
        src = tw.constant([1.0, 2.0], name="src")
        (out,) = tw.import_graph_def(gd, input_map={"a:0": src}, return_elements=["double:0"])
        assert out.name == "import/double:0"
        with tw.Session() as s:
            np.testing.assert_array_equal(s.run(out), [2.0, 4.0])


def test_unknown_op_in_graph_def_is_refused():
    gd = {"node": [{"name": "evil", "op": "os.system", "input": [], "attr": {}}]}
    with pytest.raises(errors.NotFoundError, match="not registered"):
        tw.Graph.from_graph_def(gd)


@pytest.mark.parametrize("gd, match", [
    ({"nodes": []}, "must be a dict with a 'node' list"),
    ({"node": [{"name": "a"}]}, "malformed node"),
    ({"node": [{"name": "a", "op": "Identity", "input": ["b:0"]}]}, "unknown node 'b'"),
    ({"node": [{"name": "a", "op": "Identity", "input": ["a:0"], "attr": {"T": {"type": "float32"}}}]}, "cycle"),
    ({"node": [{"name": "c", "op": "Const", "input": [], "attr": {
        "dtype": {"type": "float32"},
        "value": {"tensor": {"dtype": "F32", "shape": [4], "data": "AAAAAA=="}}}}]}, "do not hold 4 elements"),
    ({"node": [{"name": "c", "op": "Const", "attr": {"dtype": {"kind": 1, "x": 2}}}]}, "malformed attr"),
])
def test_malformed_graph_defs_raise_invalid_argument(gd, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        tw.Graph.from_graph_def(gd)
