"""Matmul fusion (passes/matmul_fusion.py): MatMul -> bias add [-> Relu|Relu6] becomes one
_FusedMatMul node with the values of the nodes it replaces."""

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
