"""Pool-gradient fusion (passes/pool_grad_fusion.py): MaxPoolGrad -> ReluGrad, where the ReLU's
output is what was pooled, becomes one _MaxPoolGradReluGrad node with the values of the two
nodes it replaces; where the windows tile the input, the pool and its gradient then become
_MaxPoolArgmax and _MaxPoolGradArgmax, the same values again; what does not match the
patterns is left alone."""

import numpy as np
import pytest

import tensorweave as tw

PARTS = tw.RunOptions(output_partition_graphs=True)
OFF = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))


def _run(fetch, feed, config=None):
    md = tw.RunMetadata()
    with tw.Session(config=config) as s:
        out = s.run(fetch, feed, options=PARTS, run_metadata=md)
    return out, sorted(n["op"] for gd in md.partition_graphs for n in gd["node"])


def _data(rng, shape=(3, 8, 6, 4)):
    x = rng.integers(-3, 4, shape).astype(np.float32)  # ties, zeros and negatives: the mask matters
    return x


@pytest.mark.parametrize("k,s,padding", [(2, 2, "SAME"), (2, 2, "VALID"), (3, 2, "SAME"), (3, 3, "VALID")])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_pool_and_relu_gradients_become_one_node_with_the_same_values(k, s, padding, data_format):
    rng = np.random.default_rng(k * 10 + s)
    x0 = _data(rng)
    if data_format == "NCHW":
        x0 = x0.transpose(0, 3, 1, 2).copy()
    x = tw.placeholder(tw.float32, [None, *x0.shape[1:]], name="x")
    ksize = [1, k, k, 1] if data_format == "NHWC" else [1, 1, k, k]
    strides = [1, s, s, 1] if data_format == "NHWC" else [1, 1, s, s]
    pooled = tw.nn.max_pool(tw.nn.relu(x), ksize, strides, padding, data_format=data_format)
    g0 = rng.standard_normal((x0.shape[0], *pooled.shape.as_list()[1:])).astype(np.float32)
    g0.flat[:3] = [np.inf, -np.inf, np.nan]  # an infinite gradient times a zero mask is NaN, as ReluGrad gives
    (dx,) = tw.gradients(pooled, [x], grad_ys=tw.constant(g0))
    got, types = _run(dx, {x: x0})
    if k == s:  # windows that tile: the argmax form
        assert types.count("_MaxPoolGradArgmax") == types.count("_MaxPoolArgmax") == 1
        assert "MaxPool" not in types and "_MaxPoolGradReluGrad" not in types
    else:
        assert types.count("_MaxPoolGradReluGrad") == 1 and "_MaxPoolGradArgmax" not in types
    assert "MaxPoolGrad" not in types and "ReluGrad" not in types
    want, types = _run(dx, {x: x0}, OFF)
    assert "MaxPoolGrad" in types and "ReluGrad" in types
    np.testing.assert_array_equal(got, want)  # bit for bit, NaN where the two nodes give NaN


def test_what_is_not_fused():
    rng = np.random.default_rng(1)
    x0 = _data(rng)
    x = tw.placeholder(tw.float32, [None, 8, 6, 4], name="x")
    r = tw.nn.relu(x)
    pooled = tw.nn.max_pool(r, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    g0 = rng.standard_normal((3, 4, 3, 4)).astype(np.float32)
    g = tw.constant(g0)
    # the pool's input gradient is fetched too: it stays a MaxPoolGrad
    (dr,) = tw.gradients(pooled, [r], grad_ys=g)
    (dx,) = tw.gradients(r, [x], grad_ys=dr)
    (drv, dxv), types = _run([dr, dx], {x: x0})
    assert "_MaxPoolGradReluGrad" not in types and "_MaxPoolGradArgmax" in types  # (the argmax form, no mask)
    np.testing.assert_array_equal(dxv, drv * (x0 > 0))
    tw.reset_default_graph()
    # the pooled tensor is not the ReLU's output (a ReLU after the pool): nothing to fuse
    x = tw.placeholder(tw.float32, [None, 8, 6, 4], name="x")
    out = tw.nn.relu(tw.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"))
    (dx,) = tw.gradients(out, [x], grad_ys=tw.constant(g0))
    got, types = _run(dx, {x: x0})
    assert "_MaxPoolGradReluGrad" not in types and "_MaxPoolGradArgmax" in types
    np.testing.assert_array_equal(got, _run(dx, {x: x0}, OFF)[0])


def test_training_a_conv_relu_pool_layer_matches_unfused():
    def train(config):
        g = tw.Graph()
        with g.as_default():
            rng = np.random.default_rng(2)
            x = tw.placeholder(tw.float32, [None, 8, 8, 2])
            w = tw.Variable(rng.standard_normal((3, 3, 2, 4)).astype(np.float32))
            b = tw.Variable(rng.standard_normal(4).astype(np.float32))
            h = tw.nn.max_pool(tw.nn.relu(tw.nn.conv2d(x, w, [1, 1, 1, 1], "SAME") + b), [1, 2, 2, 1], [1, 2, 2, 1],
                               "SAME")
            loss = tw.reduce_mean(tw.square(h))
            step = tw.train.GradientDescentOptimizer(0.01).minimize(loss)
            feed = {x: rng.standard_normal((3, 8, 8, 2)).astype(np.float32)}
            with tw.Session(config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(3):
                    s.run(step, feed)
                return s.run([w, b, loss], feed)
    for a, b in zip(train(None), train(OFF)):
        np.testing.assert_array_equal(a, b)


def test_the_fused_op_checks_its_shapes():
    from tensorweave.framework.graph import apply_op

    x = tw.constant(np.ones((1, 4, 4, 2), np.float32))
    y = tw.constant(np.ones((1, 3, 2, 2), np.float32))
    attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}
    with pytest.raises(tw.errors.InvalidArgumentError, match="orig_output has shape"):
        apply_op("_MaxPoolGradReluGrad", [x, y, y], attrs)


def _partition_nodes(fetch, feed, config=None):
    md = tw.RunMetadata()
    with tw.Session(config=config) as s:
        out = s.run(fetch, feed, options=PARTS, run_metadata=md)
    return out, {n["name"]: n for gd in md.partition_graphs for n in gd["node"]}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [True, False])
def test_the_argmax_form_reads_no_pooled_tensor_and_keeps_every_value(dtype, relu):
    """The pool's output is fetched too (it keeps its name), a window holds a NaN (no input
    equals its maximum: no gradient), ties go to the first maximum, an infinite gradient
    meets a zero mask; the gradient node reads the pool's outputs and the gradient, not the
    pooled tensor."""
    rng = np.random.default_rng(5)
    x0 = rng.integers(-3, 4, (2, 7, 9, 3)).astype(dtype)  # VALID on odd sizes: a row and a column uncovered
    x0[0, 0, 0, 0] = np.nan
    x = tw.placeholder(dtype, [None, 7, 9, 3], name="x")
    h = tw.nn.relu(x) if relu else x
    pooled = tw.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "VALID", name="pool")
    g0 = rng.standard_normal((2, 3, 4, 3)).astype(dtype)
    g0[0, 0, 1, :] = [np.inf, -np.inf, np.nan]
    (dx,) = tw.gradients(pooled, [x], grad_ys=tw.constant(g0))
    (got_dx, got_pooled), nodes = _partition_nodes([dx, pooled], {x: x0})
    pool = nodes["pool"]
    assert pool["op"] == "_MaxPoolArgmax"
    (grad,) = [n for n in nodes.values() if n["op"] == "_MaxPoolGradArgmax"]
    assert grad["input"][:2] == ["pool:0", "pool:1"] and len(grad["input"]) == 3
    assert grad["input"][2].split(":")[0] != h.op.name
    (want_dx, want_pooled), off = _partition_nodes([dx, pooled], {x: x0}, OFF)
    assert "MaxPool" in {n["op"] for n in off.values()}
    assert got_pooled.tobytes() == want_pooled.tobytes()
    np.testing.assert_array_equal(got_dx, want_dx)
    assert np.isnan(got_pooled[0, 0, 0, 0]) and not got_dx[0, :2, :2, 0].any()


def test_what_keeps_the_pooled_tensor(monkeypatch):
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    g0 = rng.standard_normal((2, 4, 4, 3)).astype(np.float32)
    # overlapping windows: several outputs may share an input
    x = tw.placeholder(tw.float32, [None, 8, 8, 3])
    (dx,) = tw.gradients(tw.nn.max_pool(x, [1, 3, 3, 1], [1, 2, 2, 1], "SAME"), [x], grad_ys=tw.constant(g0))
    _, types = _run(dx, {x: x0})
    assert "MaxPoolGrad" in types and "_MaxPoolArgmax" not in types
    tw.reset_default_graph()
    # (a placeholder of unknown height and width: the plan specialised to the fed shape knows them)
    x = tw.placeholder(tw.float32, [None, None, None, 3])
    (dx,) = tw.gradients(tw.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"), [x], grad_ys=tw.constant(g0))
    got, types = _run(dx, {x: x0})
    assert "_MaxPoolGradArgmax" in types
    np.testing.assert_array_equal(got, _run(dx, {x: x0}, OFF)[0])
    # ... but a plan that is not specialised does not: the gradient's size is not known
    from tensorweave.client import plan

    monkeypatch.setattr(plan, "MAX_SPECIALIZED", 0)
    got, types = _run(dx, {x: x0})
    assert "MaxPoolGrad" in types and "_MaxPoolArgmax" not in types
    np.testing.assert_array_equal(got, _run(dx, {x: x0}, OFF)[0])
    tw.reset_default_graph()
    # a MaxPoolGrad whose orig_output is not a pool of its orig_input
    from tensorweave.framework.graph import apply_op

    x = tw.placeholder(tw.float32, [None, 8, 8, 3])
    attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}
    other = tw.nn.max_pool(x * 2, attrs["ksize"], attrs["strides"], "SAME")
    dx = apply_op("MaxPoolGrad", [x, other, tw.constant(g0)], attrs)
    _, types = _run(dx, {x: x0})
    assert "MaxPoolGrad" in types and "_MaxPoolArgmax" not in types


def test_the_argmax_ops_check_their_attrs_and_shapes():
    from tensorweave.framework.graph import apply_op

    x = tw.constant(np.ones((1, 4, 4, 2), np.float32))
    with pytest.raises(tw.errors.InvalidArgumentError, match="must tile the input"):
        apply_op("_MaxPoolArgmax", [x], {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"})
    with pytest.raises(tw.errors.InvalidArgumentError, match="fewer than 255 positions"):
        apply_op("_MaxPoolArgmax", [x], {"ksize": [1, 16, 16, 1], "strides": [1, 16, 16, 1], "padding": "SAME"})
    attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}
    y, arg = apply_op("_MaxPoolArgmax", [x], attrs)
    assert y.shape.as_list() == [1, 2, 2, 2] and arg.dtype == tw.uint8
    dx = apply_op("_MaxPoolGradArgmax", [y, arg, y], {**attrs, "input_size": [5, 5]})
    assert dx.shape.as_list() == [1, 5, 5, 2]
    with pytest.raises(tw.errors.InvalidArgumentError, match="gives 3x3, not the 2x2"):
        apply_op("_MaxPoolGradArgmax", [y, arg, y], {**attrs, "input_size": [6, 6]})
    with pytest.raises(tw.errors.InvalidArgumentError, match="must have one shape"):
        apply_op("_MaxPoolGradArgmax", [y, arg, tw.constant(np.ones((1, 3, 3, 2), np.float32))],
                 {**attrs, "input_size": [4, 4]})


def _fused_ops(node):
    return [v["s"] for v in node["attr"]["fused_ops"]["list"]]


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_the_relu_of_a_convolution_moves_into_its_pool(padding):
    """conv + bias -> ReLU -> 2 x 2 pool, trained: the _FusedConv2D ends with its bias add,
    the _MaxPoolArgmax rectifies (relu), and the values are those of the unfused graph, bit
    for bit (a NaN in the input: Relu keeps it, and so does the pool that rectifies)."""
    rng = np.random.default_rng(8)
    x0 = rng.integers(-2, 3, (2, 7, 7, 2)).astype(np.float32)  # zeros, negatives and ties
    x0[1, 3, 3, 1] = np.nan
    x = tw.placeholder(tw.float32, [None, 7, 7, 2], name="x")
    w = tw.constant(rng.integers(-1, 2, (3, 3, 2, 4)).astype(np.float32))
    b = tw.constant(np.array([0.0, -1.0, 1.0, -0.5], np.float32))
    h = tw.nn.relu(tw.nn.conv2d(x, w, [1, 1, 1, 1], "SAME") + b, name="act")
    pooled = tw.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], padding, name="pool")
    loss = tw.reduce_sum(pooled * pooled)
    fetches = [pooled, *tw.gradients(loss, [x, w, b])]
    got, nodes = _partition_nodes(fetches, {x: x0})
    assert nodes["pool"]["op"] == "_MaxPoolArgmax" and nodes["pool"]["attr"]["relu"] == {"b": True}
    assert nodes["act"]["op"] == "_FusedConv2D" and _fused_ops(nodes["act"]) == ["BiasAdd"]
    assert nodes["pool"]["input"] == ["act:0"]
    want, _ = _partition_nodes(fetches, {x: x0}, OFF)
    for a, c in zip(got, want):
        assert a.tobytes() == c.tobytes()  # (NaN where the unfused graph has NaN)
    assert np.isnan(got[0]).any()


def test_the_relu_stays_where_something_else_reads_it():
    rng = np.random.default_rng(9)
    x0 = rng.standard_normal((2, 8, 8, 2)).astype(np.float32)
    x = tw.placeholder(tw.float32, [None, 8, 8, 2])
    w = tw.constant(rng.standard_normal((3, 3, 2, 4)).astype(np.float32))
    b = tw.constant(rng.standard_normal(4).astype(np.float32))
    h = tw.nn.relu(tw.nn.conv2d(x, w, [1, 1, 1, 1], "SAME") + b, name="act")
    pooled = tw.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME", name="pool")
    (dx,) = tw.gradients(tw.reduce_sum(pooled), [x])
    got, nodes = _partition_nodes([dx, h], {x: x0})  # the ReLU's output is fetched
    assert nodes["pool"]["op"] == "_MaxPoolArgmax" and nodes["pool"]["attr"]["relu"] == {"b": False}
    assert _fused_ops(nodes["act"]) == ["BiasAdd", "Relu"]
    want, _ = _partition_nodes([dx, h], {x: x0}, OFF)
    for a, c in zip(got, want):
        np.testing.assert_array_equal(a, c)
