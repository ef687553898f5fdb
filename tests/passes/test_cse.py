"""Common subexpression elimination (whitepaper 5.1) on the plan graph."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave.passes import cse

PARTS = tw.RunOptions(output_partition_graphs=True)
# Element-wise fusion off: the nodes these tests count would become fused nodes.
NO_FUSION = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))


def _run(fetches, feed=None, config=None):
    """(values, {op type: count} of the optimised plan)."""
    md = tw.RunMetadata()
    with tw.Session(config=config or NO_FUSION) as s:
        out = s.run(fetches, feed, options=PARTS, run_metadata=md)
    counts = {}
    for gd in md.partition_graphs:
        for n in gd["node"]:
            counts[n["op"]] = counts.get(n["op"], 0) + 1
    return out, counts


def test_identical_nodes_are_merged_and_fetches_keep_working():
    x = tw.placeholder(tw.float32, [3], name="x")
    a = tw.exp(x * 2.0)
    b = tw.exp(x * 2.0)
    y = a + b
    feed = {x: [0.0, 1.0, 2.0]}
    (va, vb, vy), counts = _run([a, b, y], feed)
    np.testing.assert_allclose(va, np.exp(2.0 * np.array(feed[x])), rtol=1e-6)
    np.testing.assert_array_equal(va, vb)
    np.testing.assert_allclose(vy, 2 * va, rtol=1e-6)
    assert counts["Exp"] == 1 and counts["Mul"] == 1 and counts["Const"] == 1
    (_, _, vy2), counts_off = _run([a, b, y], feed, tw.ConfigProto(graph_options=tw.GraphOptions(
        enable_cse=False, enable_elementwise_fusion=False)))
    assert counts_off["Exp"] == 2 and counts_off["Mul"] == 2
    np.testing.assert_allclose(vy2, vy)


def test_stateful_ops_and_placeholders_are_never_merged():
    r1 = tw.random_uniform([5], seed=4)
    r2 = tw.random_uniform([5], seed=4)
    p1 = tw.placeholder(tw.float32, [], name="p1")
    p2 = tw.placeholder(tw.float32, [], name="p2")
    (v1, v2, q1, q2), counts = _run([r1, r2, p1 + 0.0, p2 + 0.0], {p1: 1.0, p2: 2.0})
    assert counts["RandomUniform"] == 2
    assert (q1, q2) == (1.0, 2.0)


def test_variables_and_their_updates_are_never_merged():
    v = tw.Variable(0.0, name="v")
    inc1 = v.assign_add(1.0)
    inc2 = v.assign_add(1.0)
    with tw.Session() as s:
        s.run(v.initializer)
        s.run([inc1, inc2])
        assert s.run(v) == 2.0


def test_different_attrs_devices_and_control_inputs_keep_nodes_apart():
    x = tw.placeholder(tw.float32, [2, 2], name="x")
    s0 = tw.reduce_sum(x, axis=0)
    s1 = tw.reduce_sum(x, axis=1)
    t0 = tw.transpose(x)
    with tw.device("/device:CPU:0"):
        t1 = tw.transpose(x)
    with tw.control_dependencies([s0]):
        c = tw.transpose(x)
    neg_zero = tw.constant(-0.0) + x
    pos_zero = tw.constant(0.0) + x
    (vs0, vs1, _, _, _, vn, vp), counts = _run([s0, s1, t0, t1, c, neg_zero, pos_zero], {x: [[1, 2], [3, 4]]})
    np.testing.assert_array_equal(vs0, [4, 6])
    np.testing.assert_array_equal(vs1, [3, 7])
    assert counts["Sum"] == 2 and counts["Transpose"] == 3
    assert counts["Add"] == 2  # -0.0 and 0.0 are different constants


def test_a_fed_duplicate_is_not_merged():
    x = tw.placeholder(tw.float32, [], name="x")
    a = tw.square(x)
    b = tw.square(x)
    (va, vb), _ = _run([a + 1.0, b + 1.0], {x: 3.0, b: 100.0})
    assert (va, vb) == (10.0, 101.0)


def test_control_flow_ops_are_never_merged():
    g = tw.Graph()
    with g.as_default():
        d = tw.placeholder(tw.float32, [], name="d")
        p = tw.placeholder(tw.bool, [], name="p")
        s1 = apply_op("Switch", [d, p])
        s2 = apply_op("Switch", [d, p])
        e1 = apply_op("Enter", [d], {"frame_name": "f"})
        e2 = apply_op("Enter", [d], {"frame_name": "f"})
    _, merged = cse.value_numbering(g.get_operations())
    assert not merged
    assert s1[0].op is not s2[0].op and e1.op is not e2.op


def test_merging_cascades_through_consumers():
    x = tw.placeholder(tw.float32, [4], name="x")
    chains = []
    for _ in range(3):
        h = x
        for _ in range(5):
            h = tw.tanh(h * 0.5)
        chains.append(h)
    _, counts = _run(tw.add_n(chains), {x: np.ones(4, np.float32)})
    assert counts["Tanh"] == 5 and counts["Mul"] == 5


@pytest.mark.parametrize("value", [np.float32(1.5), np.arange(6, dtype=np.int32).reshape(2, 3),
                                   np.array([b"a", b"bc"], dtype=object)])
def test_equal_constants_merge(value):
    g = tw.Graph()
    with g.as_default():
        a = tw.constant(value)
        b = tw.constant(value)
        c = tw.constant(np.asarray(value).astype(np.float64)) if np.asarray(value).dtype != object else tw.constant([b"a"])
    tmap, ops = cse.value_numbering(g.get_operations())
    assert ops == {b.op: a.op} and tmap == {b: a} and c.op not in ops
