"""The element-wise fusion pass: which nodes it groups and why it cuts, the fused node's
expression, the kernel that runs it, and the switches. A recording fuser stands in for the
device plugins' compilers (their own tests check those: plugins/*/tests/test_fusion.py), so
what is checked here is the pass alone: values must be those of the unfused plan bit for
bit, since the recording fuser's kernel computes with the device's own kernels."""

import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.framework import serialization
from tensorweave.framework.graph import apply_op
from tensorweave.ops.fusion_ops import FUSED, FusedExpression, Step
from tensorweave.passes import fusion
from tensorweave.testing.fake_device import register_fake_devices

PARTS = tw.RunOptions(output_partition_graphs=True)
OFF = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


class RecordingFuser:
    """Fuses every op except ``refuse``; its 'compiled' kernel counts calls and computes step
    by step with the device's kernels."""

    def __init__(self, refuse=()):
        self.refuse = set(refuse)
        self.compiled = []   # describe() of each expression compiled
        self.calls = 0

    def supports(self, op, operand_types, result, num_elements):
        return op not in self.refuse

    def compile(self, expr, ctx):
        self.compiled.append(expr.describe())
        inner = fusion.stepwise(expr, ctx)

        def kernel(*xs):
            self.calls += 1
            return inner(*xs)
        return kernel


def _install(monkeypatch, device_type="CPU", **kw):
    f = RecordingFuser(**kw)
    monkeypatch.setitem(plugins.registry().fusers._entries, device_type, f)
    return f


@pytest.fixture
def fuser(monkeypatch):
    monkeypatch.delenv(fusion.ENV_SWITCH, raising=False)
    monkeypatch.setenv(fusion.ENV_COMPILE_AFTER, "0")
    return _install(monkeypatch)


def _run(fetches, feed=None, config=None):
    """(values, the plan's nodes as GraphDef dicts)."""
    md = tw.RunMetadata()
    with tw.Session(config=config) as s:
        out = s.run(fetches, feed, options=PARTS, run_metadata=md)
    return out, [n for gd in md.partition_graphs for n in gd["node"]]


def _fused(nodes):
    return [n for n in nodes if n["op"] == FUSED]


def _expr(node) -> FusedExpression:
    attrs = {k: serialization.decode_attr(v) for k, v in node["attr"].items()}
    return FusedExpression.from_attrs(attrs)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------------------
# grouping
def test_a_chain_becomes_one_node_with_its_scalars_as_literals(fuser):
    x = tw.placeholder(tw.float32, [4], name="x")
    y = x
    for _ in range(5):
        y = y * 1.0001 + 0.5
    feed = {x: np.linspace(-1, 1, 4, dtype=np.float32)}
    out, nodes = _run(y, feed)
    assert [n["op"] for n in nodes] == [FUSED]  # the constants became literals
    (node,) = nodes
    assert node["name"] == y.op.name  # the fused node takes its root's name
    expr = _expr(node)
    assert [s.op for s in expr.steps] == ["Mul", "Add"] * 5
    assert expr.input_types == (tw.float32,)
    assert sorted(v for v, _ in expr.literals) == [0.5, float(np.float32(1.0001))]
    assert all(dt is tw.float32 for _, dt in expr.literals)
    assert fuser.compiled == [expr.describe()] and fuser.calls == 1
    ref, nodes_off = _run(y, feed, OFF)
    assert not _fused(nodes_off)
    _same(out, ref)


def test_a_single_op_is_left_alone(fuser):
    x = tw.placeholder(tw.float32, [3], name="x")
    out, nodes = _run(x + 1.0, {x: [1, 2, 3]})
    assert sorted(n["op"] for n in nodes) == ["Add", "Const"] and not fuser.compiled
    np.testing.assert_array_equal(out, [2, 3, 4])


def test_a_fetched_intermediate_ends_a_group(fuser):
    x = tw.placeholder(tw.float32, [3], name="x")
    a = tw.exp(x * 2.0, name="a")
    b = tw.multiply(a + 1.0, 3.0, name="b")
    feed = {x: [0.0, 0.5, 1.0]}
    (va, vb), nodes = _run([a, b], feed)
    assert sorted(n["name"] for n in _fused(nodes)) == ["a", "b"]
    assert {n["name"]: [s.op for s in _expr(n).steps] for n in _fused(nodes)} == {
        "a": ["Mul", "Exp"], "b": ["Add", "Mul"]}
    (ra, rb), _ = _run([a, b], feed, OFF)
    _same(va, ra)
    _same(vb, rb)


def test_groups_stop_where_something_else_reads_a_value(fuser):
    x = tw.placeholder(tw.float32, [2, 3], name="x")
    h = tw.tanh(x * 2.0, name="h")
    s = tw.reduce_sum(h, name="s")     # not element-wise: h is the root of {Mul, Tanh}
    y = tw.add(h, s, name="y")         # alone: not worth a fused node
    feed = {x: np.arange(6, dtype=np.float32).reshape(2, 3) / 6}
    out, nodes = _run(y, feed)
    assert [n["name"] for n in _fused(nodes)] == ["h"]
    assert {"Sum", "Add"} <= {n["op"] for n in nodes}
    _same(out, _run(y, feed, OFF)[0])


def test_a_value_used_twice_in_a_group_is_computed_once(fuser):
    x = tw.placeholder(tw.float32, [3], name="x")
    d = x - 1.0
    y = d * d + d
    out, nodes = _run(y, {x: [1, 2, 3]})
    (node,) = _fused(nodes)
    expr = _expr(node)
    assert [s.op for s in expr.steps] == ["Sub", "Mul", "Add"]
    sub = expr.n_inputs + len(expr.literals)  # the reference to step 0
    assert expr.steps[1].args == (sub, sub) and sub in expr.steps[2].args
    np.testing.assert_array_equal(out, [0, 2, 6])


def test_control_dependencies_keep_their_nodes_out(fuser):
    x = tw.placeholder(tw.float32, [3], name="x")
    a = x * 2.0
    b = a + 1.0                       # something waits for b: it stays a node of its own
    with tw.control_dependencies([b.op]):
        c = x * 3.0                   # waits for b: stays a node of its own
    y = (c - 1.0) * (b + 0.0)
    feed = {x: [1, 2, 3]}
    out, nodes = _run(y, feed)
    names = {n["name"] for n in nodes}
    assert {a.op.name, b.op.name, c.op.name} <= names  # a: its one consumer, b, is not fused
    (node,) = _fused(nodes)
    assert node["name"] == y.op.name and node["input"] == [c.name, b.name]
    assert [s.op for s in _expr(node).steps] == ["Sub", "Add", "Mul"]
    _same(out, _run(y, feed, OFF)[0])


def test_a_fed_tensor_is_an_input_and_its_producer_is_not_fused(fuser):
    x = tw.placeholder(tw.float32, [3], name="x")
    a = x * 2.0
    b = tw.add(a, 1.0, name="b")
    y = (b * 3.0) - 1.0
    out, nodes = _run(y, {b: [1.0, 2.0, 3.0]})      # x need not be fed: b cuts the graph
    (node,) = _fused(nodes)
    assert node["input"] == ["b:0"] and [s.op for s in _expr(node).steps] == ["Mul", "Sub"]
    np.testing.assert_array_equal(out, [2.0, 5.0, 8.0])


def test_targets_and_refs_are_not_fused(fuser):
    v = tw.Variable(np.ones(3, np.float32))
    x = tw.placeholder(tw.float32, [3], name="x")
    y = (v * 2.0 + x) * 3.0          # reads the variable: an input of the fused node
    step = tw.assign_add(v, y)
    with tw.Session() as s:
        s.run(v.initializer)
        md = tw.RunMetadata()
        s.run(step, {x: [1, 2, 3]}, options=PARTS, run_metadata=md)
        np.testing.assert_array_equal(s.run(v), [10, 13, 16])
    nodes = [n for gd in md.partition_graphs for n in gd["node"]]
    (node,) = _fused(nodes)
    assert [s.op for s in _expr(node).steps] == ["Mul", "Add", "Mul"]


def test_a_non_scalar_constant_is_an_input_and_inputs_broadcast(fuser):
    x = tw.placeholder(tw.float32, [3, 1], name="x")
    y = tw.placeholder(tw.float32, [1, 4], name="y")
    z = (x * 2.0 + y) * tw.constant([1.0, 2.0, 3.0, 4.0])
    feed = {x: np.array([[1], [2], [3]], np.float32), y: np.array([[0, 1, 2, 3]], np.float32)}
    out, nodes = _run(z, feed)
    (node,) = _fused(nodes)
    expr = _expr(node)
    assert expr.n_inputs == 3 and [v for v, _ in expr.literals] == [2.0]
    assert out.shape == (3, 4)
    np.testing.assert_array_equal(out, (feed[x] * 2 + feed[y]) * [1, 2, 3, 4])
    assert node["attr"]["Tout"] == {"type": "float32"}


def test_addn_biasadd_and_identity_become_steps(fuser):
    x = tw.placeholder(tw.float32, [2, 3], name="x")
    b = tw.placeholder(tw.float32, [3], name="b")
    h = tw.nn.bias_add(x * 2.0, b)
    y = tw.add_n([h, tw.identity(x), tw.stop_gradient(h * 0.5)])
    feed = {x: np.arange(6, dtype=np.float32).reshape(2, 3), b: np.array([1, 2, 3], np.float32)}
    out, nodes = _run(y, feed)
    (node,) = _fused(nodes)
    assert [n["op"] for n in nodes] == [FUSED]
    assert [s.op for s in _expr(node).steps] == ["Mul", "Add", "Mul", "Add", "Add"]
    _same(out, _run(y, feed, OFF)[0])


def test_a_fuser_says_which_ops_it_fuses(monkeypatch):
    monkeypatch.setenv(fusion.ENV_COMPILE_AFTER, "0")
    f = _install(monkeypatch, refuse={"Exp"})
    x = tw.placeholder(tw.float32, [3], name="x")
    y = tw.exp(x * 2.0 + 1.0) * 3.0 - 1.0
    out, nodes = _run(y, {x: [0, 1, 2]})
    assert sorted(n["op"] for n in nodes) == ["Exp", FUSED, FUSED]
    assert sorted(f.compiled) == ["Add(Mul(x0, 2.0), 1.0)", "Sub(Mul(x0, 3.0), 1.0)"]


def test_devices_are_never_crossed(monkeypatch):
    register_fake_devices(count=1)
    try:
        monkeypatch.setenv(fusion.ENV_COMPILE_AFTER, "0")
        cpu = _install(monkeypatch, "CPU")
        fake = _install(monkeypatch, "FAKE")
        x = tw.placeholder(tw.float32, [3], name="x")
        with tw.device("/device:CPU:0"):
            a = tw.add(x * 2.0, 1.0, name="a")
        with tw.device("/device:FAKE:0"):
            b = tw.multiply(a - 1.0, a, name="b")
        with tw.device("/device:CPU:0"):
            c = tw.square(b + 1.0, name="c")
        feed = {x: [1.0, 2.0, 3.0]}
        md = tw.RunMetadata()
        with tw.Session() as s:
            out = s.run(c, feed, options=PARTS, run_metadata=md)
        by_device = {}
        for gd in md.partition_graphs:
            for n in _fused(gd["node"]):
                by_device.setdefault(n["device"].rsplit("/", 1)[-1], []).append(n["name"])
        assert by_device == {"device:CPU:0": ["a", "c"], "device:FAKE:0": ["b"]}
        assert sorted(cpu.compiled) == ["Add(Mul(x0, 2.0), 1.0)", "Square(Add(x0, 1.0))"]
        assert fake.compiled == ["Mul(Sub(x0, 1.0), x0)"]
        np.testing.assert_array_equal(out, [49.0, 441.0, 1849.0])  # a = [3, 5, 7], b = [6, 20, 42]
    finally:
        plugins._reset_for_tests()


def test_loops_fuse_inside_their_frame(fuser):
    x = tw.placeholder(tw.float32, [3], name="x")
    _, y = tw.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tw.tanh(v * 0.5 + 0.25)), [tw.constant(0), x])
    feed = {x: [0.0, 1.0, -1.0]}
    out, nodes = _run(y, feed)
    (node,) = _fused(nodes)
    assert [s.op for s in _expr(node).steps] == ["Mul", "Add", "Tanh"]
    _same(out, _run(y, feed, OFF)[0])
    z = tw.cond(tw.reduce_sum(x) > 0, lambda: x * 2.0 + 1.0, lambda: x * 3.0 - 1.0)
    for v in ([1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]):
        out, nodes = _run(z, {x: v})
        assert len(_fused(nodes)) == 2
        _same(out, _run(z, {x: v}, OFF)[0])


def test_placement_still_names_the_fused_nodes(fuser):
    x = tw.placeholder(tw.float32, [3], name="x")
    a = tw.multiply(x, 2.0, name="a")
    y = tw.add(a, 1.0, name="y")
    md = tw.RunMetadata()
    with tw.Session() as s:
        s.run(y, {x: [1, 2, 3]}, run_metadata=md)
    assert md.placement["a"] == md.placement["y"] == CPU


# ---------------------------------------------------------------------------------------
# the kernel
def test_a_fused_node_compiles_after_it_has_run_a_few_times(monkeypatch):
    monkeypatch.setenv(fusion.ENV_COMPILE_AFTER, "3")
    f = _install(monkeypatch)
    x = tw.placeholder(tw.float32, [3], name="x")
    y = x * 2.0 + 1.0
    with tw.Session() as s:
        for i in range(5):
            np.testing.assert_array_equal(s.run(y, {x: [i, i, i]}), [2 * i + 1] * 3)
            assert len(f.compiled) == (1 if i >= 3 else 0)  # three runs step by step, then compiled
    assert f.calls == 2  # runs 4 and 5


def test_a_device_without_a_fuser_is_left_alone(monkeypatch):
    monkeypatch.delitem(plugins.registry().fusers._entries, "CPU", raising=False)
    x = tw.placeholder(tw.float32, [3], name="x")
    _, nodes = _run(x * 2.0 + 1.0, {x: [1, 2, 3]})
    assert not _fused(nodes)


def test_a_fused_node_runs_step_by_step_without_a_fuser(monkeypatch):
    monkeypatch.delitem(plugins.registry().fusers._entries, "CPU", raising=False)
    x = tw.placeholder(tw.int32, [4], name="x")
    i32, b = tw.int32, tw.bool
    expr = FusedExpression((i32,), ((3.0, i32),), (Step("Mul", (0, 1), i32), Step("Greater", (2, 0), b),
                                                  Step("LogicalNot", (3,), b)))
    y = apply_op(FUSED, [[x]], expr.to_attrs())
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(y, {x: [-2, -1, 0, 5]}), [True, True, True, False])  # not 3x > x


def test_the_switch_and_the_environment(fuser, monkeypatch):
    x = tw.placeholder(tw.float32, [3], name="x")
    y = x * 2.0 + 1.0
    assert _fused(_run(y, {x: [1, 2, 3]})[1])
    assert not _fused(_run(y, {x: [1, 2, 3]}, OFF)[1])
    monkeypatch.setenv(fusion.ENV_SWITCH, "1")
    assert _fused(_run(y, {x: [1, 2, 3]}, OFF)[1])
    monkeypatch.setenv(fusion.ENV_SWITCH, "0")
    assert not _fused(_run(y, {x: [1, 2, 3]})[1])
    assert tw.GraphOptions().enable_elementwise_fusion


def test_a_training_step_gives_the_same_weights(fuser):
    rng = np.random.default_rng(0)
    data, labels = rng.normal(size=(16, 4)).astype(np.float32), rng.normal(size=(16, 1)).astype(np.float32)

    def train(config):
        g = tw.Graph()
        with g.as_default():
            x = tw.placeholder(tw.float32, [16, 4])
            t = tw.placeholder(tw.float32, [16, 1])
            w = tw.Variable(np.full((4, 1), 0.1, np.float32))
            h = tw.sigmoid(tw.matmul(x, w) * 0.5 + 0.1)
            loss = tw.reduce_mean(tw.square(h - t) * 2.0 + tw.abs(h) * 0.01)
            step = tw.train.GradientDescentOptimizer(0.5).minimize(loss)
            with tw.Session(graph=g, config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(5):
                    s.run(step, {x: data, t: labels})
                return s.run(w)

    fused = train(None)
    assert fuser.compiled  # the gradients' element-wise ops fused too
    _same(fused, train(OFF))


# ---------------------------------------------------------------------------------------
# the expression as data
def test_the_expression_round_trips_through_a_graph_def(fuser):
    x = tw.placeholder(tw.float64, [2], name="x")
    y = tw.cast(tw.maximum(x * -1.5, 0.25) > 0.5, tw.int64) + 7
    _, nodes = _run(y, {x: [1.0, -1.0]})
    (node,) = _fused(nodes)
    again = json.loads(json.dumps(node))
    expr = _expr(again)
    assert expr == _expr(node)
    assert expr.describe() == "Add(Cast(Greater(Maximum(Mul(x0, -1.5), 0.25), 0.5)), 7)"
    assert expr.output_type is tw.int64 and [dt.name for _, dt in expr.literals] == [
        "float64", "float64", "float64", "int64"]


@pytest.mark.parametrize("bad, message", [
    ({"ops": ["Frobnicate"], "args": [0], "types": ["float32"]}, "'Frobnicate' is not a fusable op"),
    ({"ops": ["Neg"], "args": [1], "types": ["float32"]}, "operands \\[1\\] must be 1 references"),
    ({"ops": ["Neg"], "args": [0], "types": ["int32"]}, "gives its operands' dtype float32, not int32"),
    ({"ops": ["Neg", "Add"], "args": [0, 1], "types": ["float32", "float32"]}, "operands \\[1\\] must be 2"),
    ({"ops": [], "args": [], "types": []}, "0 ops but 0 step types"),
    ({"ops": ["Neg"], "args": [0, 0], "types": ["float32"]}, "2 operand references, the steps take 1"),
])
def test_a_malformed_expression_is_refused_when_the_node_is_built(bad, message):
    x = tw.placeholder(tw.float32, [2], name="x")
    attrs = {"Tout": bad["types"][-1] if bad["types"] else "float32", **bad}
    with pytest.raises(tw.errors.InvalidArgumentError, match=message):
        apply_op(FUSED, [[x]], attrs)


def test_kernel_errors_name_the_users_node(monkeypatch):
    monkeypatch.setenv(fusion.ENV_COMPILE_AFTER, "100")  # step by step: the CPU kernels raise
    _install(monkeypatch)
    x = tw.placeholder(tw.int32, [2], name="x")
    q = tw.floordiv(x * 2, x - 1, name="q")
    r = tw.add(tw.floordiv(q, x - 3, name="inner"), 1, name="r")
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(q, {x: [2, 4]}), [4, 2])
        with pytest.raises(errors.InvalidArgumentError, match="^FloorDiv node 'q'.*integer division by zero") as e:
            s.run(q, {x: [1, 3]})
        assert e.value.op is q.op
        with pytest.raises(errors.InvalidArgumentError, match="^FloorDiv node 'inner'.*integer division by zero") as e:
            s.run(r, {x: [2, 3]})   # an inner step of the fused node
        assert e.value.op.name == "inner" and e.value.op.graph is tw.get_default_graph()
