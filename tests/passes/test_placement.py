import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.passes.cost_model import CostModel
from tensorweave.passes.placement import DefaultPlacer, simulate


def _place(devices, kernels, cost_model=None, config=None, graph=None):
    nodes = (graph or tw.get_default_graph()).get_operations()
    placement = DefaultPlacer().place(nodes, devices, kernels, config, cost_model=cost_model)
    assert set(placement) == set(nodes)
    return {op.name: d for op, d in placement.items()}


def test_default_placer_is_registered():
    assert isinstance(plugins.registry().placers.get("default"), DefaultPlacer)


def test_small_graphs_stay_on_the_first_device(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [4], name="x")
    y = tw.add(tw.multiply(x, 2.0), tw.constant(1.0), name="y")
    tw.reduce_sum(y, name="s")
    placed = _place([cpu, fake(0), fake(1)], kernels)
    assert {d.name for d in placed.values()} == {cpu.name}


def test_picks_the_faster_device_when_transfer_is_cheap(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [256, 512], name="x")
    w = tw.constant(0.5, shape=[512, 512], name="w")
    y = tw.matmul(x, w, name="y")
    tw.nn.relu(y, name="r")
    slow, fast = fake(0, speed=2.0), fake(1, speed=20.0)
    placed = _place([cpu, slow, fast], kernels)
    assert placed["x"] is cpu  # Placeholder has only a CPU kernel
    assert placed["y"] is fast and placed["r"] is fast
    assert placed["w"] is fast  # a constant goes where its consumer goes


def test_stays_local_when_transfer_dominates(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [1024, 1024], name="x")  # 4 MB
    tw.reduce_sum(tw.negative(x, name="neg"), name="s")  # a few flops per byte
    fast = fake(0, speed=10.0)
    placed = _place([cpu, fast], kernels)
    assert placed["neg"] is cpu and placed["s"] is cpu
    # The same graph with compute that dominates the transfer moves.
    tw.reset_default_graph()
    x = tw.placeholder(tw.float32, [1024, 1024], name="x")
    tw.matmul(x, x, name="mm")
    assert _place([cpu, fast], kernels)["mm"] is fast
    # ... unless the link is slow enough.
    fast.transfer_bytes_per_second = 1e6
    assert _place([cpu, fast], kernels)["mm"] is cpu


def test_independent_branches_spread_over_devices(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [512, 512], name="x")
    a = tw.matmul(x, x, name="a")
    b = tw.matmul(x, x, name="b")
    tw.add(a, b, name="out")
    devices = [cpu, fake(0, speed=10.0), fake(1, speed=10.0)]
    sim = simulate(tw.get_default_graph().get_operations(), devices, kernels, cost_model=CostModel())
    where = {op.name: d for op, d in sim.placement.items()}
    assert {where["a"], where["b"]} == set(devices[1:])
    one = simulate(tw.get_default_graph().get_operations(), devices[:2], kernels, cost_model=CostModel())
    assert sim.makespan < one.makespan


def test_partial_device_constraints(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [64, 64], name="x")
    with tw.device("/device:FAKE:*"):
        tw.negative(x, name="tiny")  # would stay on the CPU if it could
    with tw.device("/job:worker/task:17"):
        tw.matmul(x, x, name="mm")
    devices = [cpu, fake(0, speed=5.0), fake(1, speed=1.0),
               fake(0, speed=1.0, prefix="/job:worker/replica:0/task:17"),
               fake(0, speed=50.0, prefix="/job:worker/replica:0/task:3")]
    placed = _place(devices, kernels)
    assert placed["tiny"] is devices[1]  # the faster FAKE device
    assert placed["mm"] is devices[3]  # the only device in task 17, though task 3 is faster


def test_colocate_with_records_the_class_attr_and_device():
    with tw.device("/device:FAKE:1"):
        a = tw.constant(1.0, name="a")
    with tw.device("/device:CPU:0"):
        with tw.colocate_with(a):
            b = tw.negative(a, name="b")
            with tw.colocate_with(b):
                c = tw.negative(b, name="c")
            with tw.colocate_with(None, ignore_existing=True):
                d = tw.negative(a, name="d")
        e = tw.negative(a, name="e")
    assert b.op.get_attr("_class") == ["loc:@a"]
    assert b.op.device == a.op.device  # the enclosing device scope does not apply inside
    assert c.op.get_attr("_class") == ["loc:@a"]  # b's group, not a new one
    assert "_class" not in d.op.attrs  # no colocation, but still inside a's device (as in TF)
    assert "_class" not in e.op.attrs and e.op.device == "/device:CPU:0"
    v = tw.Variable(tw.zeros([2]), name="v")
    with tw.colocate_with(v):
        w = tw.identity(v, name="w")
    assert w.op.get_attr("_class") == ["loc:@v"]
    with pytest.raises(errors.InvalidArgumentError, match="ignore_existing"):
        with tw.colocate_with(None):
            pass
    assert tw.get_default_graph().as_graph_def()  # the attr serialises


def test_explicit_colocation_is_honoured(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [256, 256], name="x")
    with tw.colocate_with(x):
        tw.matmul(x, x, name="near_x")  # x is CPU-only, so this stays there
    y = tw.matmul(x, x, name="free")
    with tw.device("/device:FAKE:1"):
        anchor = tw.negative(y, name="anchor")
    with tw.colocate_with(anchor):
        tw.matmul(anchor, anchor, name="with_anchor")
    devices = [cpu, fake(0, speed=20.0), fake(1, speed=2.0)]
    placed = _place(devices, kernels)
    assert placed["near_x"] is cpu
    assert placed["free"] is devices[1]
    assert placed["anchor"] is devices[2] and placed["with_anchor"] is devices[2]


def test_variables_share_a_device_with_their_ref_consumers(cpu, fake, kernels):
    # FAKE can hold variables but has no optimizer kernels: the update pulls the whole
    # group (variable, initializer, update) onto the CPU.
    v = tw.Variable(tw.zeros([128, 128]), name="v")
    x = tw.placeholder(tw.float32, [128, 128], name="x")
    apply_op("ApplyGradientDescent", [v, 0.1, tw.matmul(x, x, name="mm")], name="upd")
    placed = _place([cpu, fake(0, speed=20.0)], kernels)
    assert placed["v"] is cpu and placed["upd"] is cpu and placed["v/Assign"] is cpu


def test_memory_limits_are_respected(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [1024, 256], name="x")
    w = tw.constant(0.5, shape=[256, 1024], name="w")
    tw.matmul(x, w, name="mm")  # 4 MiB output
    small_fast = fake(0, speed=20.0, memory_limit=2 * 2**20)
    big_slow = fake(1, speed=5.0, memory_limit=64 * 2**20)
    placed = _place([cpu, small_fast, big_slow], kernels)
    assert placed["mm"] is big_slow
    sim = simulate(tw.get_default_graph().get_operations(), [cpu, small_fast, big_slow], kernels)
    assert sim.peak_bytes[small_fast.name] <= small_fast.memory_limit
    # Nothing fits: the estimate is not the last word, the fastest device is used anyway.
    tiny = fake(2, speed=20.0, memory_limit=1024)
    cpu.memory_limit = 1024
    assert _place([cpu, tiny], kernels)["mm"] is tiny


def test_memory_is_freed_after_last_consumer(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [256, 1024], name="x")  # 1 MiB
    h = x
    for i in range(8):  # 8 outputs of 1 MiB each, but at most three alive at once
        h = tw.tanh(h, name=f"t{i}")
    dev = fake(0, speed=50.0, memory_limit=4 * 2**20)
    sim = simulate(tw.get_default_graph().get_operations(), [cpu, dev], kernels)
    assert all(sim.placement[tw.get_default_graph().get_operation_by_name(f"t{i}")] is dev for i in range(8))
    assert sim.peak_bytes[dev.name] <= 3 * 2**20


def test_pinned_to_a_device_without_the_kernel(cpu, fake, kernels):
    with tw.device("/device:FAKE:0"):
        apply_op("RandomUniform", [tw.constant([2])], {"dtype": tw.float32}, name="r")  # no FAKE kernel
    with pytest.raises(errors.InvalidArgumentError, match=r"RandomUniform node 'r'.*'/device:FAKE:0'.*no kernel"):
        _place([cpu, fake(0)], kernels)
    placed = _place([cpu, fake(0)], kernels, config=tw.ConfigProto(allow_soft_placement=True))
    assert placed["r"] is cpu


def test_constraint_matching_no_device(cpu, kernels):
    with tw.device("/job:ps/task:0"):
        tw.constant(1.0, name="c")
    with pytest.raises(errors.InvalidArgumentError, match="Const node 'c'.*matches no device"):
        _place([cpu], kernels)


def test_colocation_group_with_disjoint_constraints(cpu, fake, kernels):
    with tw.device("/device:FAKE:0"):
        a = tw.constant(1.0, name="a")
    with tw.colocate_with(a), tw.device("/device:FAKE:1"):
        tw.negative(a, name="b")
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"cannot colocate nodes 'a' \(Const, /device:FAKE:0\), 'b' \(Neg, /device:FAKE:1\)"):
        _place([cpu, fake(0), fake(1)], kernels)


def test_colocated_with_a_variable_pinned_elsewhere(cpu, fake, kernels):
    v = tw.Variable(tw.zeros([2]), name="v")
    apply_op("ApplyGradientDescent", [v, 0.1, tw.ones([2])], name="upd")  # CPU only: so is v's group
    with tw.colocate_with(v), tw.device("/device:FAKE:0"):
        tw.identity(v, name="on_fake")
    with pytest.raises(errors.InvalidArgumentError, match="cannot colocate nodes .*'v'.*'on_fake'"):
        _place([cpu, fake(0)], kernels)


def test_measured_costs_change_a_later_placement(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [256, 256], name="x")
    y = tw.matmul(x, x, name="y")
    fast = fake(0, speed=10.0)
    cm = CostModel()
    assert _place([cpu, fast], kernels, cm)["y"] is fast
    # A traced run says the FAKE device is in fact slow for this node.
    cm.record([
        {"node": "y", "op": "MatMul", "device": fast.name, "start": 0.0, "end": 0.5, "output_bytes": 256 * 256 * 4},
        {"node": "y", "op": "MatMul", "device": cpu.name, "start": 0.0, "end": 0.002, "output_bytes": 256 * 256 * 4},
    ])
    assert _place([cpu, fast], kernels, cm)["y"] is cpu
    # Measured only where it ran (the CPU), 10x slower than estimated: the estimate for the
    # FAKE device is scaled likewise, so it stays the better choice.
    cm2 = CostModel()
    cm2.record([{"node": "y", "op": "MatMul", "device": cpu.name, "start": 0.0,
                 "end": 10 * cm2.compute_time(y.op, cpu), "output_bytes": 0}])
    assert _place([cpu, fast], kernels, cm2)["y"] is fast


def test_single_device_and_control_edges(cpu, fake, kernels):
    x = tw.placeholder(tw.float32, [8], name="x")
    a = tw.negative(x, name="a")
    with tw.control_dependencies([a]):
        tw.constant(2.0, name="after")
    placed = _place([cpu], kernels)
    assert set(placed.values()) == {cpu}
    placed = _place([cpu, fake(0)], kernels)
    assert set(placed.values()) == {cpu}


def test_session_uses_the_placer_and_feeds_traces_back():
    from tensorweave.testing.fake_device import register_fake_devices

    register_fake_devices(count=1, speed=10.0)
    try:
        x = tw.placeholder(tw.float32, [256, 256], name="x")
        z = tw.reduce_sum(tw.matmul(x, x, name="y"), name="z")
        with tw.Session() as s:
            md = tw.RunMetadata()
            out = s.run(z, {x: np.ones((256, 256), np.float32)}, options=tw.RunOptions(trace_level=3),
                        run_metadata=md)
            assert out == 256.0 ** 3
            assert md.placement["y"].endswith("/device:FAKE:0")
            measured = s._cost_model.measured
            assert "y" in measured and md.placement["y"] in measured["y"]
    finally:
        plugins._reset_for_tests()  # later tests see only the installed plugins again
