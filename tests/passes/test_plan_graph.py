"""The plan graph: plans run a private copy of the user's nodes, which passes rewrite at
their stage; the user's graph, errors, placement and stateful kernels behave as before."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.passes import plan_graph


def _plan(sess):
    return list(sess._plans.values())[-1]


def test_plan_runs_a_copy_and_leaves_the_user_graph_alone():
    x = tw.placeholder(tw.float32, [3], name="x")
    a = x * 2.0
    b = x * 2.0  # a duplicate CSE merges in the plan
    y = tw.add(a, b, name="y")
    g = tw.get_default_graph()
    before = (g.version, [op.name for op in g.get_operations()], [list(op.inputs) for op in g.get_operations()])
    with tw.Session() as s:
        np.testing.assert_allclose(s.run(y, {x: [1, 2, 3]}), [4, 8, 12])
        plan = _plan(s)
    assert (g.version, [op.name for op in g.get_operations()], [list(op.inputs) for op in g.get_operations()]) == before
    assert plan.graph is not g and plan.graph.source_graph is g
    assert all(op.graph is plan.graph for op in plan.nodes)
    # Copies keep names, creation order and attrs; origin maps them back.
    ys = [op for op in plan.nodes if op.name == "y"]
    assert len(ys) == 1 and plan.origin[ys[0]] is y.op and ys[0]._id == y.op._id
    assert plan.feeds[0].name == "x:0" and plan.feeds[0] is not x


def test_feeding_an_intermediate_tensor_uses_a_stub_producer():
    x = tw.placeholder(tw.float32, [2], name="x")
    h = tw.exp(x, name="h")
    y = h + 1.0
    with tw.Session() as s:
        # x need not be fed: h cuts the graph.
        np.testing.assert_allclose(s.run(y, {h: [1.0, 2.0]}), [2.0, 3.0])
        np.testing.assert_allclose(s.run(y, {"h:0": [0.0, 0.0]}), [1.0, 1.0])
        plan = _plan(s)
    assert [op.name for op in plan.stubs] == ["h"] and plan.stubs[0] not in plan.nodes


def test_control_dependencies_targets_and_variables_survive_the_copy():
    v = tw.Variable(1.0, name="v")
    with tw.control_dependencies([v.assign_add(2.0)]):
        r = v.read_value() * 1.0
    with tw.Session() as s:
        s.run(v.initializer)
        assert s.run(r) == 3.0
        assert s.run(r) == 5.0
        s.run(v.assign(0.0).op)  # an Operation as a target
        assert s.run(v) == 0.0


def test_stateful_kernels_keep_their_state_across_plan_rebuilds():
    t = tw.random_uniform([4], seed=3, name="r")
    with tw.Session() as s:
        first = s.run(t)
        second = s.run([t])[0]  # another fetch structure: a new plan, new copies of the nodes
        tw.constant(1.0)  # the graph grows: every plan is rebuilt
        third = s.run(t)
    with tw.Session() as s:
        fresh = [s.run(t) for _ in range(3)]
    np.testing.assert_array_equal(np.stack([first, second, third]), np.stack(fresh))
    assert not np.array_equal(first, second)


def test_errors_name_the_users_node():
    p = tw.placeholder(tw.float32, None, name="p")
    m = tw.matmul(p, p, name="mm")
    with tw.Session() as s:
        with pytest.raises(errors.InvalidArgumentError, match="MatMul node 'mm'") as info:
            s.run(m, {p: np.ones((2, 3), np.float32)})
    assert info.value.op is m.op


def test_placement_reports_merged_and_folded_nodes():
    x = tw.placeholder(tw.float32, [2], name="x")
    a = tw.multiply(x, 3.0, name="a")
    b = tw.multiply(x, 3.0, name="b")  # merged into a
    k = tw.add(tw.constant(1.0), tw.constant(2.0), name="k")  # folded
    y = tw.add(a + b, k, name="y")
    with tw.Session() as s:
        placement = s.placement(y, {x: None})
        md = tw.RunMetadata()
        s.run(y, {x: [1.0, 1.0]}, run_metadata=md)
    for name in ("a", "b", "k", "y"):
        assert placement[name].endswith("CPU:0"), name
    assert md.placement == placement


def test_make_callable_and_partition_graphs():
    x = tw.placeholder(tw.float32, [2], name="x")
    y = tw.square(x) + tw.square(x)
    no_fusion = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
    with tw.Session(config=no_fusion) as s:  # (fused, the Square would be a step of one node)
        f = s.make_callable(y, [x])
        np.testing.assert_allclose(f(np.array([1.0, 2.0], np.float32)), [2.0, 8.0])
        md = tw.RunMetadata()
        s.run(y, {x: [3.0, 3.0]}, options=tw.RunOptions(output_partition_graphs=True), run_metadata=md)
    (gd,) = md.partition_graphs
    assert sum(n["op"] == "Square" for n in gd["node"]) == 1


def test_topological_order_honours_control_edges():
    g = tw.Graph()
    with g.as_default():
        a = tw.constant(1.0, name="a")
        b = tw.identity(a, name="b")
        c = tw.identity(a, name="c")
        b.op._add_control_input(c.op)  # c was created after b
    order = [op.name for op in plan_graph.topological(g.get_operations())]
    assert order.index("c") < order.index("b")


class _StagePlugin:
    """A third-party plugin with a pass at every stage; records what each one saw."""

    def __init__(self):
        self.seen = []

    @plugins.hookimpl
    def tensorweave_register_passes(self, registry):
        registry.register("test_pre", self.pre, stage="pre_placement", order=50)
        registry.register("test_post", self.post, stage="post_placement")
        registry.register("test_parts", self.parts, stage="post_partition")

    def pre(self, plan):
        # Rewrite: every fetched "double" node becomes a constant 42 (the user's graph stays).
        repl = {}
        for t in plan.fetches:
            if t.op.name == "double":
                c = plan_graph.add_node(plan, "Const", [], {"value": np.float32(42.0), "dtype": tw.float32},
                                        name="forty_two", order=t.op._id + 0.5)
                repl[t] = c.outputs[0]
        plan_graph.replace(plan, repl)
        self.seen.append(("pre", sorted(op.name for op in plan.nodes)))

    def post(self, plan):
        self.seen.append(("post", sorted(op.name for op in plan.device_of)))

    def parts(self, plan):
        self.seen.append(("parts", len(plan.graph_parts)))


def test_third_party_passes_run_at_their_stages():
    plugin = _StagePlugin()
    plugins.register_plugin(plugin, name="stage-test-passes")
    try:
        reg = plugins.registry()
        assert [n for n, _ in reg.passes.ordered("pre_placement")][-1] == "test_pre"
        assert reg.passes.stage_of("test_post") == "post_placement"
        x = tw.placeholder(tw.float32, [], name="x")
        y = tw.multiply(x, 2.0, name="double")
        names = [op.name for op in tw.get_default_graph().get_operations()]
        with tw.Session() as s:
            assert s.run(y, {x: 1.0}) == 42.0
        assert plugin.seen[0][0] == "pre" and "forty_two" in plugin.seen[0][1]
        assert plugin.seen[1] == ("post", ["forty_two"])  # pruned after the stage: double is gone
        assert plugin.seen[2] == ("parts", 1)
        assert [op.name for op in tw.get_default_graph().get_operations()] == names
    finally:
        plugins._reset_for_tests()


def test_unknown_stage_is_refused():
    reg = plugins.registry()
    with pytest.raises(errors.InvalidArgumentError, match="unknown stage 'later'"):
        reg.passes.register("bad", lambda plan: None, stage="later")
