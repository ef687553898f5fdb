"""tw.cond, tw.while_loop and tw.case: graph construction (contexts, captured tensors,
pivots, shape checks, errors) and results when run."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.ops.control_flow_ops import CondContext, WhileContext

# A control-flow bug shows up as a step that never finishes: fail loudly instead of hanging.
pytestmark = pytest.mark.usefixtures("bounded_time")


@pytest.fixture(autouse=True)
def fresh_graph():
    with tw.Graph().as_default() as g:
        yield g


def run(fetches, feed=None):
    with tw.Session() as sess:
        return sess.run(fetches, feed)


# ----------------------------------------------------------------------------------------
# construction
def test_cond_routes_captured_tensors_through_switch_and_pivots_constants(fresh_graph):
    x = tw.placeholder(tw.float32, [], name="x")
    out = tw.cond(x > 0, lambda: x * 2.0, lambda: tw.constant(-1.0))
    ops = {op.name: op for op in fresh_graph.get_operations()}
    mul = next(op for op in ops.values() if op.type == "Mul")
    assert isinstance(mul._control_flow_context, CondContext) and mul._control_flow_context.branch == 1
    # x reaches the branch through Switch(x, pred)[1], never directly.
    assert all(t.op.type != "Placeholder" for t in mul.inputs)
    sw = next(t for t in mul.inputs if t.op.type == "Switch")
    assert sw.value_index == 1 and sw.op.inputs[0] is x
    # A constant in a branch runs only when the branch is taken: a control input from the pivot.
    consts = [op for op in ops.values() if op.type == "Const" and isinstance(op._control_flow_context, CondContext)]
    assert consts and all(op.control_inputs for op in consts)
    assert out.op.type == "Merge" and out.dtype == tw.float32 and out.shape == tw.TensorShape([])


def test_while_loop_builds_frame_with_enter_merge_switch_exit(fresh_graph):
    w = tw.placeholder(tw.float32, [2], name="w")
    i, a = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * w), [tw.constant(0), tw.ones([2])])
    assert i.op.type == "Exit" and a.op.type == "Exit" and a.shape == tw.TensorShape([2])
    ctx = a.op._control_flow_context
    assert isinstance(ctx, WhileContext) and ctx.parallel_iterations == 10
    enters = [op for op in fresh_graph.get_operations() if op.type == "Enter"]
    # Two loop variables and one captured loop invariant (w), all in the loop's frame.
    assert sorted(op.get_attr("is_constant") for op in enters) == [False, False, True]
    assert {op.get_attr("frame_name") for op in enters} == {ctx.name}
    invariant = next(op for op in enters if op.get_attr("is_constant"))
    assert invariant.inputs[0] is w
    merges = [op for op in fresh_graph.get_operations() if op.type == "Merge"]
    assert all(m.inputs[1].op.type == "NextIteration" for m in merges)
    assert len([op for op in fresh_graph.get_operations() if op.type == "LoopCond"]) == 1


def test_nested_contexts_capture_through_every_level(fresh_graph):
    x = tw.placeholder(tw.float32, [], name="x")

    def outer_body(i, acc):
        inner = tw.cond(acc > 100.0, lambda: acc, lambda: acc + x)  # x: Enter, then Switch
        return i + 1, inner

    tw.while_loop(lambda i, acc: i < 4, outer_body, [0, 0.0])
    sw = [op for op in fresh_graph.get_operations() if op.type == "Switch" and op.inputs[0].op.type == "Enter"
          and op.inputs[0].op.inputs[0] is x]
    assert len(sw) == 1 and sw[0].inputs[0].op.get_attr("is_constant")
    assert isinstance(sw[0]._control_flow_context, CondContext)
    assert isinstance(sw[0]._control_flow_context.outer_context, WhileContext)


def test_python_bool_pred_and_tf1_keyword_names():
    a = tw.cond(True, fn1=lambda: tw.constant(1), fn2=lambda: tw.constant(2))
    b = tw.cond(False, lambda: tw.constant(1), lambda: tw.constant(2))
    assert run([a, b]) == [1, 2]


# ----------------------------------------------------------------------------------------
# running loops
def test_while_loop_sums_one_to_n():
    n = tw.placeholder(tw.int32, [])
    _, total = tw.while_loop(lambda i, s: i <= n, lambda i, s: (i + 1, s + i), [1, 0])
    for v in (0, 1, 10, 100):
        assert run(total, {n: v}) == v * (v + 1) // 2


def test_single_loop_var_comes_back_bare_unless_return_same_structure():
    r = tw.while_loop(lambda x: x < 10, lambda x: x * 2, tw.constant(1))
    assert isinstance(r, tw.Tensor) and run(r) == 16
    r2 = tw.while_loop(lambda x: x < 10, lambda x: [x * 2], [tw.constant(1)], return_same_structure=True)
    assert isinstance(r2, list) and run(r2) == [16]


def test_nested_loops():
    n = tw.placeholder(tw.int32, [])

    def outer(i, total):
        _, inner = tw.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, s + j), [0, 0])
        return i + 1, total + inner
    _, total = tw.while_loop(lambda i, t: i < n, outer, [0, 0])
    # sum over i < n of sum over j < i of j
    for v in (0, 1, 5):
        assert run(total, {n: v}) == sum(sum(range(i)) for i in range(v))


def test_cond_inside_while():
    def body(i, evens, odds):
        e, o = tw.cond(tw.equal(tw.mod(i, 2), 0), lambda: (evens + i, odds), lambda: (evens, odds + i))
        return i + 1, e, o
    _, e, o = tw.while_loop(lambda i, e, o: i < 10, body, [0, 0, 0])
    assert run([e, o]) == [20, 25]


def test_while_inside_cond():
    x = tw.placeholder(tw.float64, [])

    def doubling():
        return tw.while_loop(lambda v: v < 100.0, lambda v: v * 2.0, [x])

    out = tw.cond(x > 0, doubling, lambda: -x)
    assert run(out, {x: 3.0}) == 192.0
    assert run(out, {x: -3.0}) == 3.0


def test_several_loop_vars_and_nested_structures():
    Pair = collections.namedtuple("Pair", "a b")
    init = (tw.constant(0), {"acc": tw.constant([1.0, 1.0]), "n": tw.constant(0.0)}, Pair(tw.constant(1), tw.constant(2)))

    def body(i, d, p):
        return i + 1, {"acc": d["acc"] * 2.0, "n": d["n"] + 1.0}, Pair(p.b, p.a + p.b)

    i, d, p = tw.while_loop(lambda i, d, p: i < 5, body, init)
    assert isinstance(d, dict) and isinstance(p, Pair)
    vals = run([i, d["acc"], d["n"], p.a, p.b])
    assert vals[0] == 5 and list(vals[1]) == [32.0, 32.0] and vals[2] == 5.0 and (vals[3], vals[4]) == (13, 21)


def test_maximum_iterations():
    n = tw.placeholder(tw.int32, [])
    r = tw.while_loop(lambda x: x < 1000, lambda x: x + 1, [0], maximum_iterations=n)
    assert run(r, {n: 7}) == 7
    r2 = tw.while_loop(lambda x: x < 3, lambda x: x + 1, [0], maximum_iterations=10)
    assert run(r2) == 3


def test_parallel_iterations_one_and_ten_agree():
    x = tw.placeholder(tw.float64, [5])
    results = []
    for p in (1, 10):
        def body(i, acc):
            return i + 1, acc + tw.sin(x * tw.cast(i, tw.float64)) * 0.5
        results.append(tw.while_loop(lambda i, acc: i < 50, body, [0, tw.zeros([5], tw.float64)],
                                     parallel_iterations=p)[1])
    xv = np.linspace(0.1, 1.0, 5)
    a, b = run(results, {x: xv})
    expect = sum(np.sin(xv * i) * 0.5 for i in range(50))
    np.testing.assert_allclose(a, expect, rtol=1e-12)
    np.testing.assert_array_equal(a, b)


def test_shape_invariants_let_a_loop_var_grow():
    def body(i, v):
        return i + 1, tw.concat([v, tw.reshape(tw.cast(i, tw.float32), [1])], 0)
    i, v = tw.while_loop(lambda i, v: i < 4, body, [0, tw.zeros([0])],
                         shape_invariants=[tw.TensorShape([]), tw.TensorShape([None])])
    assert v.shape.as_list() == [None]
    assert list(run(v)) == [0.0, 1.0, 2.0, 3.0]


def test_assign_add_in_body_runs_once_per_iteration():
    v = tw.Variable(0.0)

    def body(i):
        with tw.control_dependencies([tw.assign_add(v, 2.0)]):
            return i + 1
    loop = tw.while_loop(lambda i: i < 5, body, [0])
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert sess.run(loop) == 5
        assert sess.run(v) == 10.0
        sess.run(loop)
        assert sess.run(v) == 20.0


def test_loop_reads_fresh_variable_value_each_iteration():
    v = tw.Variable(1.0)

    def body(i, seen):
        up = tw.assign_add(v, 1.0)
        return i + 1, seen + up
    _, seen = tw.while_loop(lambda i, s: i < 3, body, [0, 0.0], parallel_iterations=1)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert sess.run(seen) == 2.0 + 3.0 + 4.0


def test_only_the_taken_branch_runs():
    v = tw.Variable(0)
    p = tw.placeholder(tw.bool, [])
    out = tw.cond(p, lambda: tw.assign_add(v, 1), lambda: tw.assign_add(v, 100))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert sess.run(out, {p: True}) == 1
        assert sess.run(out, {p: False}) == 101
        assert sess.run(v) == 101


def test_cond_with_nested_structures_ops_and_strict():
    p = tw.placeholder(tw.bool, [])
    v = tw.Variable(0)
    res = tw.cond(p, lambda: {"a": (tw.constant(1), tw.constant(2.0)), "op": tw.assign_add(v, 1).op},
                  lambda: {"a": (tw.constant(3), tw.constant(4.0)), "op": tw.no_op()})
    assert isinstance(res["op"], tw.Operation)
    single = tw.cond(p, lambda: [tw.constant(1)], lambda: [tw.constant(2)])
    strict = tw.cond(p, lambda: [tw.constant(1)], lambda: [tw.constant(2)], strict=True)
    assert isinstance(single, tw.Tensor) and isinstance(strict, list)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        a, _ = sess.run([res["a"], res["op"]], {p: True})
        assert a == (1, 2.0) and sess.run(v) == 1
        a, _ = sess.run([res["a"], res["op"]], {p: False})
        assert a == (3, 4.0) and sess.run(v) == 1


def test_cond_branch_returning_outside_tensor():
    x = tw.placeholder(tw.float32, [])
    y = tw.placeholder(tw.float32, [])
    out = tw.cond(x > y, lambda: x, lambda: y)
    assert run(out, {x: 1.0, y: 2.0}) == 2.0 and run(out, {x: 3.0, y: 2.0}) == 3.0


def test_case():
    x = tw.placeholder(tw.int32, [])
    out = tw.case([(x < 0, lambda: tw.constant(-1)), (tw.equal(x, 0), lambda: tw.constant(0))],
                  default=lambda: tw.constant(1))
    assert [run(out, {x: v}) for v in (-5, 0, 5)] == [-1, 0, 1]
    last_is_default = tw.case([(x < 0, lambda: tw.constant(10)), (x > 100, lambda: tw.constant(20))])
    assert [run(last_is_default, {x: v}) for v in (-1, 5)] == [10, 20]


# ----------------------------------------------------------------------------------------
# bad input
def test_loop_var_shape_change_without_invariant_is_an_error():
    with pytest.raises(errors.InvalidArgumentError) as e:
        tw.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tw.concat([v, v], 0)), [0, tw.zeros([2])])
    msg = str(e.value)
    assert "loop variable 1" in msg and "(2,)" in msg and "(4,)" in msg and "shape_invariants" in msg


def test_shape_invariant_incompatible_with_entry_shape():
    with pytest.raises(errors.InvalidArgumentError, match=r"shape invariant \(3,\).*loop variable 0.*\(2,\)"):
        tw.while_loop(lambda v: tw.reduce_sum(v) < 3.0, lambda v: v, [tw.zeros([2])],
                      shape_invariants=[tw.TensorShape([3])])


def test_cond_branches_with_different_structures():
    p = tw.placeholder(tw.bool, [])
    with pytest.raises(errors.InvalidArgumentError, match=r"same structure.*\(Tensor, Tensor\).*\(Tensor,\)"):
        tw.cond(p, lambda: (tw.constant(1), tw.constant(2)), lambda: (tw.constant(1),), name="mycond")
    with pytest.raises(errors.InvalidArgumentError, match="same structure"):
        tw.cond(p, lambda: {"a": tw.constant(1)}, lambda: {"b": tw.constant(1)})


def test_cond_branches_with_different_dtypes():
    p = tw.placeholder(tw.bool, [])
    with pytest.raises(errors.InvalidArgumentError, match=r"tw.cond 'c2'.*dtype.*float32.*int32"):
        tw.cond(p, lambda: tw.constant(1.0), lambda: tw.constant(1), name="c2")
    assert issubclass(errors.InvalidArgumentError, ValueError)


def test_non_bool_pred():
    with pytest.raises(errors.InvalidArgumentError, match="pred .* has dtype int32; a bool scalar was expected"):
        tw.cond(tw.constant(1), lambda: tw.constant(1), lambda: tw.constant(2))
    with pytest.raises(errors.InvalidArgumentError, match="bool scalar"):
        tw.cond(tw.constant([True, False]), lambda: tw.constant(1), lambda: tw.constant(2))
    with pytest.raises(errors.InvalidArgumentError, match="pred must be a bool"):
        tw.cond("yes", lambda: tw.constant(1), lambda: tw.constant(2))
    with pytest.raises(errors.InvalidArgumentError, match="the value cond returned, .* float32"):
        tw.while_loop(lambda x: x * 2.0, lambda x: x, [1.0])


def test_body_returning_wrong_number_of_vars():
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"body must return the structure of loop_vars \[Tensor, Tensor\] \(2 tensors\), "
                             r"got \(Tensor, Tensor, Tensor\) \(3 tensors\)"):
        tw.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s, s), [0, 0])
    with pytest.raises(errors.InvalidArgumentError, match="body must return"):
        tw.while_loop(lambda i, s: i < 3, lambda i, s: i + 1, [0, 0], maximum_iterations=3)


def test_body_returning_wrong_dtype():
    with pytest.raises(errors.InvalidArgumentError, match=r"wrong dtype for loop variable 0 .*int32"):
        tw.while_loop(lambda i: i < 3, lambda i: tw.cast(i, tw.float32), [0])


def test_branch_tensor_used_outside_its_branch():
    p = tw.placeholder(tw.bool, [])
    inside = []

    def true_fn():
        inside.append(tw.constant(5.0) * 2.0)
        return inside[0]

    tw.cond(p, true_fn, lambda: tw.constant(0.0), name="first")
    with pytest.raises(errors.InvalidArgumentError, match="true branch of tw.cond 'first'.*cannot be used"):
        tw.cond(p, lambda: inside[0] + 1.0, lambda: tw.constant(0.0))


def test_bad_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="parallel_iterations"):
        tw.while_loop(lambda i: i < 3, lambda i: i + 1, [0], parallel_iterations=0)
    with pytest.raises(errors.InvalidArgumentError, match="callable"):
        tw.cond(True, 1, lambda: 2)
    with pytest.raises(errors.InvalidArgumentError, match="maximum_iterations"):
        tw.while_loop(lambda i: i < 3, lambda i: i + 1, [0], maximum_iterations=2.5)


def test_loop_and_cond_graphs_round_trip_through_graph_def():
    n = tw.placeholder(tw.int32, [], name="n")
    _, total = tw.while_loop(lambda i, s: i <= n, lambda i, s: (i + 1, s + i), [1, 0])
    x = tw.placeholder(tw.float64, [], name="x")
    c = tw.cond(x > 0, lambda: x * 2.0, lambda: -x)
    (g,) = tw.gradients(tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x), [0, x])[1], x)
    gd = tw.get_default_graph().as_graph_def()
    with tw.Graph().as_default() as g2:
        tw.import_graph_def(gd, name="")
        # The same nodes (a loop's back edge NextIteration -> Merge is connected after import).
        key = sorted(gd["node"], key=lambda d: d["name"])
        assert sorted(g2.as_graph_def()["node"], key=lambda d: d["name"]) == key
        t = g2.get_tensor_by_name
        out = run([t(total.name), t(c.name), t(g.name)], {t("n:0"): 10, t("x:0"): -3.0})
        assert out == [55, 3.0, 4 * (-3.0) ** 3]


def test_outer_control_dependencies_reach_ops_in_a_loop_through_a_proxy(fresh_graph):
    v = tw.Variable(1.0)
    with tw.control_dependencies([tw.assign(v, 5.0)]):
        r = tw.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + v.read_value()), [0, 0.0])[1]
    # No op in the loop has a control input from outside its frame: a proxy stands in.
    loop_ops = [op for op in fresh_graph.get_operations() if isinstance(op._control_flow_context, WhileContext)]
    assert all(c._control_flow_context is not None for op in loop_ops for c in op.control_inputs)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert sess.run(r) == 15.0
