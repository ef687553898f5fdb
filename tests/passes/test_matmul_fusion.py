"""Matmul fusion (passes/matmul_fusion.py): MatMul -> bias add [-> Relu|Relu6] becomes one
_FusedMatMul node, NHWC Conv2D -> bias add [-> Relu|Relu6] one _FusedConv2D, with the values
of the nodes they replace."""

import numpy as np
import pytest

import tensorweave as tw

PARTS = tw.RunOptions(output_partition_graphs=True)
OFF = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))


def _run(fetch, feed, config=None):
    md = tw.RunMetadata()
    with tw.Session(config=config) as s:
        s.run(tw.global_variables_initializer())
        out = s.run(fetch, feed, options=PARTS, run_metadata=md)
    return out, sorted(n["op"] for gd in md.partition_graphs for n in gd["node"])


def _data(rng, ta=False, tb=False):
    a = rng.standard_normal((3, 5) if ta else (5, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3) if tb else (3, 4)).astype(np.float32)
    return a, b, rng.standard_normal(4).astype(np.float32)


@pytest.mark.parametrize("build,activation", [
    (lambda p, b: tw.nn.relu(p + b), "Relu"),
    (lambda p, b: tw.nn.relu6(b + p), "Relu6"),             # the bias first
    (lambda p, b: tw.nn.bias_add(p, b), None),
    (lambda p, b: tw.nn.relu(tw.nn.bias_add(p, b)), "Relu"),
])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_product_bias_and_activation_become_one_node_with_the_same_values(build, activation, ta, tb):
    a, b, bias = _data(np.random.default_rng(0), ta, tb)
    x = tw.placeholder(tw.float32, [None, 3] if not ta else [3, None], name="x")
    out = build(tw.matmul(x, tw.constant(b), transpose_a=ta, transpose_b=tb), tw.constant(bias))
    got, types = _run(out, {x: a})
    assert types.count("_FusedMatMul") == 1
    assert not {"MatMul", "Add", "AddV2", "BiasAdd", "Relu", "Relu6"} & set(types)
    want, types = _run(out, {x: a}, OFF)
    assert "_FusedMatMul" not in types
    np.testing.assert_array_equal(got, want)


def test_what_is_not_fused():
    rng = np.random.default_rng(1)
    a, b, bias = _data(rng)
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    p = tw.matmul(x, tw.constant(b), name="p")
    s = tw.nn.relu(p + tw.constant(bias))
    # the product is fetched: it stays a MatMul
    (pv, sv), types = _run([p, s], {x: a})
    assert "_FusedMatMul" not in types and "MatMul" in types
    np.testing.assert_allclose(sv, np.maximum(pv + bias, 0), rtol=1e-6)
    tw.reset_default_graph()
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    p = tw.matmul(x, tw.constant(b))
    full = tw.constant(rng.standard_normal((5, 4)).astype(np.float32))
    _, types = _run(tw.nn.relu(p + full), {x: a})          # not a bias: a matrix
    assert "_FusedMatMul" not in types
    tw.reset_default_graph()
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    p = tw.matmul(x, tw.constant(b))
    biased = p + tw.constant(bias)
    (r, q), types = _run([tw.nn.relu(biased), biased * 2.0], {x: a})   # the sum read twice
    assert types.count("_FusedMatMul") == 1 and "Relu" in types      # product + bias only
    np.testing.assert_allclose(r, np.maximum(q / 2.0, 0), rtol=1e-6)


def test_a_sum_that_another_element_wise_op_reads_is_left_to_element_wise_fusion():
    # sigmoid(x @ w + b): the add and the sigmoid in one fused pass beats an epilogue with
    # the add alone followed by a separate sigmoid
    a, b, bias = _data(np.random.default_rng(4))
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    out = tw.sigmoid(tw.matmul(x, tw.constant(b)) + tw.constant(bias))
    got, types = _run(out, {x: a})
    assert "_FusedMatMul" not in types and "MatMul" in types
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-(a @ b + bias))), rtol=1e-5)


def test_training_through_fused_layers_matches_unfused():
    def train(config):
        g = tw.Graph()
        with g.as_default():
            rng = np.random.default_rng(2)
            x = tw.placeholder(tw.float32, [None, 6])
            w1 = tw.Variable(rng.standard_normal((6, 8)).astype(np.float32))
            b1 = tw.Variable(rng.standard_normal(8).astype(np.float32))
            w2 = tw.Variable(rng.standard_normal((8, 1)).astype(np.float32))
            h = tw.nn.relu(tw.matmul(x, w1) + b1)
            loss = tw.reduce_mean(tw.square(tw.matmul(h, w2)))
            step = tw.train.GradientDescentOptimizer(0.01).minimize(loss)
            feed = {x: rng.standard_normal((7, 6)).astype(np.float32)}
            with tw.Session(config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(3):
                    s.run(step, feed)
                return s.run([w1, b1, w2, loss], feed)
    for a, b in zip(train(None), train(OFF)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_fused_matmul_rejects_what_it_cannot_compute():
    a = tw.constant(np.ones((2, 3), np.float32))
    b = tw.constant(np.ones((3, 4), np.float32))
    from tensorweave.framework.graph import apply_op

    with pytest.raises(tw.errors.InvalidArgumentError, match="fused_ops must be"):
        apply_op("_FusedMatMul", [a, b, [tw.constant(np.ones(4, np.float32))]], {"fused_ops": ["Relu"]})
    with pytest.raises(tw.errors.InvalidArgumentError, match="bias of length 5"):
        apply_op("_FusedMatMul", [a, b, [tw.constant(np.ones(5, np.float32))]], {"fused_ops": ["BiasAdd"]})


def _conv_data(rng):
    x = rng.standard_normal((2, 7, 8, 3)).astype(np.float32)
    x[0, 1, 2, 0] = np.nan  # NaN reaches the outputs whose windows hold it, through the ReLU too
    return x, rng.standard_normal((3, 3, 3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)


@pytest.mark.parametrize("build,activation", [
    (lambda c, b: tw.nn.relu(c + b), "Relu"),
    (lambda c, b: tw.nn.relu6(tw.nn.bias_add(c, b)), "Relu6"),
    (lambda c, b: b + c, None),
])
@pytest.mark.parametrize("strides,padding", [((1, 1), "SAME"), ((2, 1), "VALID")])
def test_convolution_bias_and_activation_become_one_node_with_the_same_values(build, activation, strides, padding):
    x0, w, bias = _conv_data(np.random.default_rng(5))
    x = tw.placeholder(tw.float32, [None, 7, 8, 3], name="x")
    out = build(tw.nn.conv2d(x, tw.constant(w), [1, *strides, 1], padding), tw.constant(bias))
    got, types = _run(out, {x: x0})
    assert types.count("_FusedConv2D") == 1
    assert not {"Conv2D", "Add", "AddV2", "BiasAdd", "Relu", "Relu6"} & set(types)
    want, types = _run(out, {x: x0}, OFF)
    assert "_FusedConv2D" not in types
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(got, want)  # bit for bit, NaN where the unfused nodes give NaN


def test_convolutions_that_are_not_fused():
    rng = np.random.default_rng(6)
    x0, w, bias = _conv_data(rng)
    nchw = x0.transpose(0, 3, 1, 2).copy()
    x = tw.placeholder(tw.float32, [None, 3, 7, 8], name="x")
    conv = tw.nn.conv2d(x, tw.constant(w), [1, 1, 1, 1], "SAME", data_format="NCHW")
    _, types = _run(tw.nn.relu(tw.nn.bias_add(conv, tw.constant(bias), data_format="NCHW")), {x: nchw})
    assert "_FusedConv2D" not in types and "Conv2D" in types  # NCHW: left alone
    tw.reset_default_graph()
    x = tw.placeholder(tw.float32, [None, 7, 8, 3], name="x")
    conv = tw.nn.conv2d(x, tw.constant(w), [1, 1, 1, 1], "SAME")
    (cv, rv), types = _run([conv, tw.nn.relu(conv + tw.constant(bias))], {x: x0})  # the convolution fetched
    assert "_FusedConv2D" not in types and "Conv2D" in types
    np.testing.assert_array_equal(rv, np.maximum(cv + bias, 0))


def test_training_through_fused_convolutions_matches_unfused():
    def train(config):
        g = tw.Graph()
        with g.as_default():
            rng = np.random.default_rng(7)
            x = tw.placeholder(tw.float32, [None, 6, 6, 2])
            w1 = tw.Variable(rng.standard_normal((3, 3, 2, 4)).astype(np.float32))
            b1 = tw.Variable(rng.standard_normal(4).astype(np.float32))
            h = tw.nn.relu(tw.nn.conv2d(x, w1, [1, 1, 1, 1], "SAME") + b1)
            loss = tw.reduce_mean(tw.square(h))
            step = tw.train.GradientDescentOptimizer(0.01).minimize(loss)
            feed = {x: rng.standard_normal((3, 6, 6, 2)).astype(np.float32)}
            with tw.Session(config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(3):
                    s.run(step, feed)
                return s.run([w1, b1, loss], feed)
    for a, b in zip(train(None), train(OFF)):
        np.testing.assert_array_equal(a, b)


def test_fused_conv2d_rejects_what_it_cannot_compute():
    from tensorweave.framework.graph import apply_op

    x = tw.constant(np.ones((1, 5, 5, 2), np.float32))
    w = tw.constant(np.ones((3, 3, 2, 4), np.float32))
    conv = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    with pytest.raises(tw.errors.InvalidArgumentError, match="fused_ops must be"):
        apply_op("_FusedConv2D", [x, w, [tw.constant(np.ones(4, np.float32))]], {**conv, "fused_ops": ["Tanh"]})
    with pytest.raises(tw.errors.InvalidArgumentError, match="bias of length 3 for a result with 4 channels"):
        apply_op("_FusedConv2D", [x, w, [tw.constant(np.ones(3, np.float32))]], {**conv, "fused_ops": ["BiasAdd"]})
    # a bias whose length is known only when the step runs: the kernel says what it expected
    b = tw.placeholder(tw.float32, [None])
    y = apply_op("_FusedConv2D", [x, w, [b]], {**conv, "fused_ops": ["BiasAdd", "Relu"]}, name="fc")
    with tw.Session() as s, pytest.raises(tw.errors.InvalidArgumentError, match="fc.*one value per output channel"):
        s.run(y, {b: np.ones(5, np.float32)})
