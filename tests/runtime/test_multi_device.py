"""Execution across devices: partitions joined by Send/Recv (whitepaper 3.2.2, Figure 4).

Uses the FAKE accelerator from tensorweave.testing: its tensors are wrappers, so a missing
host<->device transfer makes a kernel fail instead of silently working.
"""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.testing.fake_device import register_fake_devices

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
FAKE0 = "/job:localhost/replica:0/task:0/device:FAKE:0"
FAKE1 = "/job:localhost/replica:0/task:0/device:FAKE:1"


@pytest.fixture(autouse=True)
def fake_devices():
    register_fake_devices(count=2)
    yield
    plugins._reset_for_tests()  # later tests see only the installed plugins again


def _plan(sess):
    """The (most recent) multi-device plan of this session."""
    return [p for p in sess._plans.values() if p.partitions is not None][-1]


def test_values_flow_across_three_devices():
    x = tw.placeholder(tw.float32, [3], name="x")
    with tw.device("/device:FAKE:0"):
        a = x * 2.0
    with tw.device("/device:FAKE:1"):
        b = a + 1.0
    with tw.device("/device:CPU:0"):
        c = b * a  # on the CPU: needs a from FAKE:0 and b from FAKE:1
    with tw.Session() as s:
        out = s.run([c, a], {x: [1, 2, 3]})
        np.testing.assert_allclose(out[0], [6, 20, 42])
        np.testing.assert_allclose(out[1], [2, 4, 6])
        plan = _plan(s)
        assert {cp.device.name for cp in plan.partitions} == {CPU, FAKE0, FAKE1}
        assert plan.placement[a.op.name] == FAKE0 and plan.placement[c.op.name] == CPU


def test_one_recv_per_tensor_and_destination():
    # Figure 4: a tensor with two consumers on another device is sent and received once.
    with tw.device("/device:FAKE:0"):
        a = tw.constant([1.0, 2.0]) * 3.0
    with tw.device("/device:CPU:0"):
        b = a + 1.0
        c = a * 2.0
        total = b + c
    no_fusion = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
    with tw.Session(config=no_fusion) as s:  # (fused, b, c and total would be one node)
        np.testing.assert_allclose(s.run(total), [10.0, 19.0])
        parts = _plan(s).graph_parts
    cpu_part = next(p for d, p in parts.items() if d.name == CPU)
    fake_part = next(p for d, p in parts.items() if d.name == FAKE0)
    # Plans run a private copy of the graph: its nodes have the user's names.
    assert [r.tensor.name for r in cpu_part.recvs] == [a.name]
    assert [snd.tensor.name for snd in fake_part.sends] == [a.name]
    gd = cpu_part.to_graph_def()
    assert sum(n["op"] == "_Recv" for n in gd["node"]) == 1
    consumers = [n for n in gd["node"] if n["op"] in ("Add", "Mul") and "_recv_0:0" in n["input"]]
    assert len(consumers) == 2


def test_session_placement_as_data():
    with tw.device("/device:FAKE:1"):
        a = tw.constant(1.0) * 2.0
    with tw.Session() as s:
        placement = s.placement(a)
        assert placement[a.op.name] == FAKE1
        assert s.run(a) == 2.0


def test_control_edges_cross_devices():
    v = tw.Variable(0.0, name="v")
    bump = v.assign_add(1.0)  # on the CPU with its variable
    with tw.device("/device:FAKE:0"), tw.control_dependencies([bump]):
        out = tw.constant(5.0) + 1.0
    with tw.Session() as s:
        s.run(v.initializer)
        assert s.run(out) == 6.0
        assert s.run(v) == 1.0  # the control dependency made the CPU partition run bump
        parts = _plan(s).graph_parts
        s.run(out)
        assert s.run(v) == 2.0
    fake_part = next(p for d, p in parts.items() if d.name == FAKE0)
    assert any(r.tensor is None and r.control_op.name == bump.op.name for r in fake_part.recvs)


def test_variables_are_read_across_devices_and_feeds_go_to_the_device():
    w = tw.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    x = tw.placeholder(tw.float32, [None, 2], name="x")
    with tw.device("/device:FAKE:0"):
        y = tw.matmul(x, w)
    with tw.Session() as s:
        s.run(w.initializer)
        out = s.run(y, {x: [[1, 1]]})
        np.testing.assert_allclose(out, [[3, 5, 7]])
        fake = next(d for d in s.devices if d.name == FAKE0)
        assert fake.transfers_in >= 2 and fake.transfers_out >= 1


def test_a_failing_partition_aborts_the_whole_step_without_hanging():
    p = tw.placeholder(tw.float32, None, name="p")
    with tw.device("/device:FAKE:0"):
        bad = tw.matmul(tw.constant(np.ones((2, 3), np.float32)), p)
    out = bad + 1.0  # the CPU partition waits for bad
    with tw.Session() as s:
        with pytest.raises(errors.InvalidArgumentError, match="MatMul node 'MatMul' on .*FAKE:0"):
            s.run(out, {p: np.ones((4, 4), np.float32)}, options=tw.RunOptions(timeout_in_ms=20000))
        # the session works for the next step
        np.testing.assert_allclose(s.run(out, {p: np.ones((3, 1), np.float32)}), [[4.0], [4.0]])


def test_multi_device_training_matches_single_device():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((32, 4)).astype(np.float32)
    ys = rng.standard_normal((32, 1)).astype(np.float32)
    w0 = rng.standard_normal((4, 1)).astype(np.float32)

    def train(device):
        g = tw.Graph()
        with g.as_default():
            x = tw.placeholder(tw.float32, [None, 4])
            y = tw.placeholder(tw.float32, [None, 1])
            w = tw.Variable(w0)
            with tw.device(device):
                loss = tw.reduce_mean(tw.square(tw.matmul(x, w) - y))
            step = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
            with tw.Session(config=tw.ConfigProto(allow_soft_placement=True)) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(10):
                    s.run(step, {x: xs, y: ys})
                return s.run(w)

    np.testing.assert_allclose(train("/device:FAKE:0"), train(None), rtol=1e-5)


def test_a_variable_written_on_one_device_is_read_correctly_from_another():
    x = tw.placeholder(tw.float32, [2], name="x")
    with tw.device("/device:FAKE:0"):
        w = tw.Variable(np.ones(2, np.float32), name="w_fake")
        grow = w.assign_add(x)        # the variable lives on (and is written by) FAKE:0
    with tw.Session(config=tw.ConfigProto(allow_soft_placement=True)) as s:
        s.run(w.initializer)
        s.run(grow, {x: [1.0, 2.0]})
        # a later plan that reads w on the CPU must get a host value, not a FakeTensor
        with tw.device("/device:CPU:0"):
            doubled = w.read_value() * 2.0
        np.testing.assert_allclose(s.run(doubled), [4.0, 6.0])
        np.testing.assert_allclose(s.run(w), [2.0, 3.0])
        assert s.placement(grow, {x: 0})[w.op.name] == FAKE0  # it really lived on FAKE:0


def test_traced_multi_device_steps_feed_measured_costs_back():
    x = tw.placeholder(tw.float32, [64, 64], name="x")
    with tw.device("/device:FAKE:0"):
        y = tw.matmul(x, x, name="mm_fake")
    with tw.device("/device:CPU:0"):
        z = tw.reduce_sum(y, name="total")
    with tw.Session() as s:
        md = tw.RunMetadata()
        s.run(z, {x: np.ones((64, 64), np.float32)},
              options=tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE), run_metadata=md)
        by_node = {st["node"]: st for st in md.step_stats}
        assert by_node["mm_fake"]["device"] == FAKE0 and by_node["total"]["device"] == CPU
        assert by_node["mm_fake"]["output_bytes"] == 64 * 64 * 4  # sized from the FakeTensor
        assert FAKE0 in s._cost_model.measured["mm_fake"]  # the placer will use this measurement
