"""Constant folding on the plan graph: constant subgraphs are computed once, at plan time."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors

PARTS = tw.RunOptions(output_partition_graphs=True)
# (element-wise fusion off: the unfolded nodes would fuse into one)
NO_FOLD = tw.ConfigProto(graph_options=tw.GraphOptions(enable_constant_folding=False, enable_elementwise_fusion=False))


def _run(fetches, feed=None, config=None, sess=None):
    md = tw.RunMetadata()
    if sess is None:
        with tw.Session(config=config) as s:
            out = s.run(fetches, feed, options=PARTS, run_metadata=md)
    else:
        out = sess.run(fetches, feed, options=PARTS, run_metadata=md)
    nodes = [n for gd in md.partition_graphs for n in gd["node"]]
    return out, nodes


def _types(nodes):
    return sorted(n["op"] for n in nodes)


def test_constant_subgraph_becomes_one_constant():
    x = tw.placeholder(tw.float32, [3], name="x")
    k = tw.sqrt(tw.constant(16.0)) * tw.cast(tw.range(3), tw.float32) + 1.0  # [1, 5, 9]
    y = x * k
    out, nodes = _run(y, {x: [1.0, 1.0, 2.0]})
    np.testing.assert_allclose(out, [1.0, 5.0, 18.0])
    assert _types(nodes) == ["Const", "Mul", "Placeholder"] or _types(nodes) == ["Const", "Mul"]
    (const,) = [n for n in nodes if n["op"] == "Const"]
    assert const["name"].endswith("/folded")
    out_off, nodes_off = _run(y, {x: [1.0, 1.0, 2.0]}, NO_FOLD)
    np.testing.assert_allclose(out_off, out)
    assert {"Sqrt", "Range", "Cast"} <= set(_types(nodes_off))


def test_fetched_constant_expression_still_returns_its_value():
    k = tw.constant(2.0) * 3.0
    z = tw.zeros([2, 2]) + k
    with tw.Session() as s:
        a = s.run([k, z])
        b = s.run([k, z])
    assert a[0] == 6.0 and np.array_equal(a[1], np.full((2, 2), 6.0))
    assert a[1] is not b[1]  # a fetch is computed per step, not a shared constant


def test_folded_values_are_read_only():
    z = tw.zeros([3]) + 1.0
    y = z * 1.0
    x = tw.placeholder(tw.float32, [3])
    with tw.Session() as s:
        s.run(y + x, {x: np.zeros(3, np.float32)})
        plan = list(s._plans.values())[-1]
    consts = [op for op in plan.nodes if op.type == "Const" and op.name.endswith("/folded")]
    assert consts and all(not op.get_attr("value").flags.writeable for op in consts)


def test_stateful_and_fed_tensors_are_not_constants():
    r = tw.random_uniform([4], seed=1) * 2.0
    c = tw.constant(1.0, name="c")
    d = c * 10.0
    with tw.Session() as s:
        r1, r2 = s.run(r), s.run(r)
        assert not np.array_equal(r1, r2)
        assert s.run(d) == 10.0
        assert s.run(d, {c: 5.0}) == 50.0  # c is fed: c * 10 cannot have been folded for this plan


def test_control_inputs_block_folding():
    v = tw.Variable(1.0, name="v")
    with tw.control_dependencies([v.assign_add(1.0)]):
        k = tw.constant(2.0) * 3.0
    y = k + 0.0
    with tw.Session() as s:
        s.run(v.initializer)
        out, nodes = _run(y, sess=s)
        assert out == 6.0 and s.run(v) == 2.0  # the update ran: k kept its control input
    assert "AssignAdd" in _types(nodes)


def test_kernel_error_leaves_the_node_to_fail_at_run_time():
    q = tw.floordiv(tw.constant(7), tw.constant(0), name="bad_div")
    y = q + 1
    with tw.Session() as s:
        with pytest.raises(errors.InvalidArgumentError, match="bad_div"):
            s.run(y)


def test_large_results_are_not_folded():
    big = tw.fill([1700, 1700], 0.5)  # 11.6 MB of float32: over the 10 MiB limit
    total = tw.reduce_sum(big)
    small = tw.reduce_sum(tw.fill([100, 100], 1.0))
    out, nodes = _run([total, small + 0.0])
    assert out == [1445000.0, 10000.0]
    types = _types(nodes)
    assert types.count("Fill") == 1  # the big one is filled at run time; the small one folded


def test_nodes_pinned_to_another_device_type_are_not_folded():
    from tensorweave.passes import constant_folding

    g = tw.Graph()
    with g.as_default():
        with tw.device("/device:GPU:0"):
            a = tw.constant(1.0) + 2.0
        with tw.device("/device:CPU:0"):
            b = tw.constant(1.0) + 2.0
        c = tw.constant(1.0) + 2.0
    assert not constant_folding.foldable(a.op)
    assert constant_folding.foldable(b.op) and constant_folding.foldable(c.op)


def test_ones_like_of_a_known_shape_folds_and_the_loss_is_not_computed_for_its_gradient():
    # gradients() seeds with ones_like(loss): folded, a step that only trains never computes
    # the loss (a Mean here), and the mean's gradient (RealDiv/Reshape/BroadcastTo of shapes)
    # becomes a constant.
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    w = tw.Variable(np.ones((3, 2), np.float32), name="w")
    loss = tw.reduce_mean(tw.matmul(x, w), name="loss")
    train = tw.train.GradientDescentOptimizer(0.5).minimize(loss)
    feed = {x: np.arange(12, dtype=np.float32).reshape(4, 3)}
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        _, nodes = _run(train, feed, sess=s)
        types = _types(nodes)
        assert "OnesLike" not in types and "Mean" not in types and "BroadcastTo" not in types
        # d mean(x @ w) / dw = mean over the batch of x, per column, over 2 columns
        np.testing.assert_allclose(s.run(w), 1.0 - 0.5 * feed[x].mean(axis=0)[:, None] / 2 * np.ones((1, 2)),
                                   rtol=1e-6)
        # fetching the loss still computes it (and ones_like of it is not a constant then)
        assert s.run(loss, feed) == pytest.approx(float((feed[x] @ s.run(w)).mean()))


@pytest.mark.parametrize("op,value", [(tw.ones_like, 1), (tw.zeros_like, 0)])
def test_ones_and_zeros_like_fold_for_their_consumers_keeping_dtype(op, value):
    x = tw.placeholder(tw.int32, [None], name="x")
    y = op(x) * 3 + x
    out, nodes = _run(y, {x: np.array([1, 2], np.int32)})
    np.testing.assert_array_equal(out, np.array([1, 2]) + 3 * value)
    assert out.dtype == np.int32
    assert "OnesLike" not in _types(nodes) and "ZerosLike" not in _types(nodes)


def test_arithmetic_on_shapes_folds_on_a_pinned_device_but_arithmetic_on_constants_does_not():
    from tensorweave.passes import constant_folding

    g = tw.Graph()
    with g.as_default(), tw.device("/device:GPU:0"):
        a = tw.constant(1.0) + 2.0
    # the user's constants on a pinned device: computed there; values made of shapes fold
    assert not constant_folding.foldable(a.op)
    assert constant_folding.foldable(a.op, from_shapes=True)
