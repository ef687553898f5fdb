"""Pool-gradient fusion (passes/pool_grad_fusion.py): MaxPoolGrad -> ReluGrad, where the ReLU's
output is what was pooled, becomes one _MaxPoolGradReluGrad node with the values of the two
nodes it replaces; what does not match the pattern is left alone."""

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
    assert types.count("_MaxPoolGradReluGrad") == 1
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
    assert "_MaxPoolGradReluGrad" not in types and "MaxPoolGrad" in types
    np.testing.assert_array_equal(dxv, drv * (x0 > 0))
    tw.reset_default_graph()
    # the pooled tensor is not the ReLU's output (a ReLU after the pool): nothing to fuse
    x = tw.placeholder(tw.float32, [None, 8, 6, 4], name="x")
    out = tw.nn.relu(tw.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"))
    (dx,) = tw.gradients(out, [x], grad_ys=tw.constant(g0))
    got, types = _run(dx, {x: x0})
    assert "_MaxPoolGradReluGrad" not in types and "MaxPoolGrad" in types
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
