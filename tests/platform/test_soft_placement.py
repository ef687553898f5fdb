"""Soft device names: a program written for GPUs runs without one when
allow_soft_placement=True (TF1's ConfigProto); without it the error says so."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.passes.placement import feasible_devices


def _gpu_program():
    with tw.device("/gpu:0"):
        x = tw.placeholder(tw.float32, [None, 2], name="x")
        w = tw.Variable(np.ones((2, 1), np.float32), name="w")
        loss = tw.reduce_mean(tw.square(tw.matmul(x, w) - 3.0))
        step = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
    return x, w, loss, step


def _has_gpu():
    return any(d.device_type == "GPU" for d in tw.list_devices())


def test_a_gpu_program_trains_with_soft_placement():
    x, w, loss, step = _gpu_program()
    feed = {x: np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)}
    with tw.Session(config=tw.ConfigProto(allow_soft_placement=True)) as s:
        s.run(tw.global_variables_initializer())
        first = s.run(loss, feed)
        for _ in range(5):
            s.run(step, feed)
        assert s.run(loss, feed) < first
        where = s.placement(step, feed)[w.op.name]
        assert ("GPU" in where) == _has_gpu()


def test_without_soft_placement_the_error_names_the_devices_and_the_option():
    if _has_gpu():
        pytest.skip("this machine has a GPU, so /gpu:0 matches a device")
    x, w, loss, step = _gpu_program()
    with tw.Session() as s:
        with pytest.raises(tw.errors.InvalidArgumentError) as e:
            s.run(tw.global_variables_initializer())
    msg = str(e.value)
    assert "device specification '/device:GPU:0' matches no device" in msg
    assert "/job:localhost/replica:0/task:0/device:CPU:0" in msg and "allow_soft_placement=True" in msg


class _Dev:
    def __init__(self, name):
        self.name = name
        self.spec = name
        self.device_type = name.rsplit(":", 2)[-2]


class _AnyKernel:
    def lookup(self, *args):
        return object()


def test_soft_placement_keeps_the_task_it_names():
    # /job:worker/task:1/device:GPU:0 on a cluster without GPUs: the devices of that task,
    # not any device (as TF, which drops only the device type and index).
    devices = [_Dev(f"/job:worker/replica:0/task:{t}/device:CPU:0") for t in (0, 1)]

    class Op:
        type, device, _attrs = "Add", "/job:worker/task:1/device:GPU:0", {}

    feasible, _, _ = feasible_devices(Op, devices, _AnyKernel(), allow_soft_placement=True)
    assert [d.name for d in feasible] == ["/job:worker/replica:0/task:1/device:CPU:0"]
    Op.device = "/job:ps/task:0/device:GPU:0"   # a job that does not exist: any device
    feasible, _, _ = feasible_devices(Op, devices, _AnyKernel(), allow_soft_placement=True)
    assert len(feasible) == 2
    feasible, _, _ = feasible_devices(Op, devices, _AnyKernel(), allow_soft_placement=False)
    assert feasible == []
