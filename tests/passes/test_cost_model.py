import pytest

import tensorweave as tw
from tensorweave.framework.kernel_registry import KernelRegistry
from tensorweave.passes.cost_model import CostModel


def test_output_bytes_from_static_shapes_and_unknown_dims():
    a = tw.placeholder(tw.float32, [None, 10])
    b = tw.placeholder(tw.float64, None)
    c = tw.constant(1, shape=[3, 4], dtype=tw.int8)
    cm = CostModel()
    assert cm.output_bytes(a.op) == 32 * 10 * 4
    assert cm.output_bytes(b.op) == 32 * 8  # unknown rank counts as one unknown dimension
    assert cm.output_bytes(c.op) == 12
    assert CostModel(unknown_dim=100).output_bytes(a.op) == 100 * 10 * 4


def test_flops_heuristics():
    cm = CostModel(element_cost=1.0)
    a = tw.zeros([64, 128])
    b = tw.zeros([128, 32])
    assert cm.flops(tw.matmul(a, b).op) == 2 * 64 * 32 * 128
    assert cm.flops(tw.matmul(a, a, transpose_b=True).op) == 2 * 64 * 64 * 128
    assert cm.flops(tw.matmul(b, b, transpose_a=True).op) == 2 * 32 * 32 * 128
    x = tw.zeros([2, 16, 16, 3])
    f = tw.zeros([5, 5, 3, 8])
    conv = tw.nn.conv2d(x, f, [1, 1, 1, 1], "SAME")
    assert cm.flops(conv.op) == 2 * (2 * 16 * 16 * 8) * (5 * 5 * 3)
    assert cm.flops(tw.add(a, 1.0).op) == 64 * 128 * 2 + 1  # elements touched: inputs and output
    assert cm.flops(tw.reduce_sum(a).op) > 64 * 128
    assert cm.flops(tw.exp(a).op) > cm.flops(tw.negative(a).op)
    for meta in (tw.reshape(a, [-1]), tw.identity(a), tw.shape(a)):
        assert cm.flops(meta.op) == 0


def test_compute_time_scales_with_device_speed(cpu, fake):
    a = tw.zeros([256, 256])
    mm = tw.matmul(a, a).op
    cm = CostModel()
    slow, fast = fake(0, speed=1.0), fake(1, speed=8.0)
    t_cpu, t_slow, t_fast = (cm.compute_time(mm, d) for d in (cpu, slow, fast))
    assert t_slow == pytest.approx(t_cpu)  # an unknown device type counts as a CPU
    over = cm.overhead(fast)
    assert (t_slow - over) / (t_fast - over) == pytest.approx(8.0)
    fast.flops_per_second = 1e9  # a device that states its throughput is believed
    assert cm.compute_time(mm, fast) == pytest.approx(over + 2 * 256 ** 3 / 1e9)
    # Metadata ops cost only the per-node overhead.
    assert cm.compute_time(tw.reshape(a, [-1]).op, cpu) == pytest.approx(cm.overhead(cpu))


def test_kernel_supplied_estimate_is_used(fake):
    seen = []
    kr = KernelRegistry()
    kr.register("MatMul", "FAKE", fn=lambda a, b: a @ b,
                cost=lambda ctx: seen.append((ctx.op_type, ctx.device.name, ctx.input_shapes[0].as_list())) or 0.125)
    kr.register("Add", "FAKE", fn=lambda a, b: a + b, cost=lambda ctx: 1 / 0)  # broken: ignored
    a = tw.zeros([4, 4])
    dev = fake(0)
    cm = CostModel()
    assert cm.compute_time(tw.matmul(a, a).op, dev, kr) == 0.125
    assert seen == [("MatMul", dev.name, [4, 4])]
    add = tw.add(a, a).op
    assert cm.compute_time(add, dev, kr) == cm.compute_time(add, dev)


def _stat(op, device, secs, nbytes=0):
    return {"node": op.name, "op": op.type, "device": device.name, "start": 10.0, "end": 10.0 + secs,
            "output_bytes": nbytes}


def test_measured_times_override_estimates_as_a_running_average(cpu, fake):
    a = tw.zeros([64, 64])
    mm = tw.matmul(a, a).op
    cm = CostModel(window=4)
    cm.record([_stat(mm, cpu, 0.010)])
    assert cm.compute_time(mm, cpu) == pytest.approx(0.010)
    cm.record([_stat(mm, cpu, 0.020)])
    assert cm.compute_time(mm, cpu) == pytest.approx(0.015)
    for _ in range(20):  # after the window it is an exponential average: it follows changes
        cm.record([_stat(mm, cpu, 0.002)])
    assert cm.compute_time(mm, cpu) == pytest.approx(0.002, rel=0.05)
    # A stat for a node of another type (a name reused in a new graph) does not apply.
    cm2 = CostModel()
    cm2.record([dict(_stat(mm, cpu, 5.0), op="Add")])
    assert cm2.compute_time(mm, cpu) < 1.0
    # Malformed entries are skipped.
    cm2.record([{"node": "x"}, {"node": mm.name, "op": "MatMul", "device": cpu.name, "start": 2, "end": 1}])
    assert cm2.compute_time(mm, cpu) < 1.0


def test_records_queued_by_a_traced_step_fold_in_when_read_and_stay_bounded(cpu, fake):
    a = tw.zeros([64, 64])
    mm = tw.matmul(a, a).op
    cm = CostModel(window=4)
    calls = []

    def records(secs):
        def make():
            calls.append(secs)
            return [_stat(mm, cpu, secs)]
        return make

    for secs in (1.0, 1.0, 0.010, 0.010, 0.010, 0.010):
        cm.record_later(records(secs))
    assert calls == []  # the traced steps only queued their records
    # Read: only the newest `window` were kept (the two 1.0 s steps were dropped), folded in order.
    assert cm.compute_time(mm, cpu) == pytest.approx(0.010)
    assert calls == [0.010] * 4
    assert cm.compute_time(mm, cpu) == pytest.approx(0.010) and len(calls) == 4  # folded once


def test_measurements_calibrate_unmeasured_devices(cpu, fake):
    a = tw.zeros([128, 128])
    mm = tw.matmul(a, a).op
    fast = fake(0, speed=4.0)
    cm = CostModel()
    est_cpu, est_fast = cm.compute_time(mm, cpu), cm.compute_time(mm, fast)
    # The node ran 10x slower than estimated on the CPU: the unmeasured FAKE device's
    # estimate is scaled the same way, so their ratio is kept.
    cm.record([_stat(mm, cpu, 10 * est_cpu)])
    assert cm.compute_time(mm, cpu) == pytest.approx(10 * est_cpu)
    assert cm.compute_time(mm, fast) == pytest.approx(10 * est_fast)
    # Two FAKE devices of different speeds: one measured, the other calibrated from it.
    other = fake(1, speed=1.0)
    cm.compute_time(mm, other)
    cm.record([_stat(mm, fast, 0.5)])
    assert cm.compute_time(mm, fast) == pytest.approx(0.5)
    assert cm.compute_time(mm, other) == pytest.approx(cm.estimated_time(mm, other) * 0.5 / est_fast)


def test_measured_output_bytes(cpu):
    x = tw.placeholder(tw.float32, [None, 10])
    y = tw.nn.relu(x)
    cm = CostModel()
    assert cm.tensor_bytes(y) == 32 * 10 * 4
    cm.record([_stat(y.op, cpu, 1e-4, nbytes=1000 * 10 * 4)])
    assert cm.tensor_bytes(y) == 40000
    cm.record([_stat(y.op, cpu, 1e-4, nbytes=0)])  # "unknown" (a device tensor without nbytes)
    assert cm.tensor_bytes(y) == 40000


def test_transfer_time(cpu, fake):
    cm = CostModel(bytes_per_second=1e9, transfer_latency=1e-4)
    f0 = fake(0)
    assert cm.transfer_time(1e6, cpu, cpu) == 0.0
    assert cm.transfer_time(1e6, cpu, f0) == pytest.approx(1e-4 + 1e-3)
    f0.transfer_bytes_per_second = 1e8  # the slower end of a link limits it
    assert cm.transfer_time(1e6, f0, cpu) == pytest.approx(1e-4 + 1e-2)
    remote = fake(0, prefix="/job:worker/replica:0/task:1")
    default = CostModel()
    assert default.transfer_time(1e6, cpu, remote) > default.transfer_time(1e6, cpu, fake(1))
