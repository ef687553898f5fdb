"""The core's kernels for every device type (``tensorweave.kernels``: variables, the
shape-only kernels, ``norm_axis``), run on the CPU and on the FAKE accelerator, whose
tensors are wrappers: a kernel that handed back a host array where a device tensor belongs
would show."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.framework.kernel_registry import KernelContext
from tensorweave.kernels import EVERY_DEVICE_DTYPES
from tensorweave.kernels.axes import norm_axis
from tensorweave.runtime.containers import SessionResources
from tensorweave.testing.fake_device import FakeDevice, FakeTensor, register_fake_devices

FAKE0 = "/job:localhost/replica:0/task:0/device:FAKE:0"


@pytest.fixture
def fake_devices():
    register_fake_devices(count=1)
    yield
    plugins._reset_for_tests()  # later tests see only the installed plugins again


class _Ctx:
    """Enough of a KernelContext for norm_axis."""

    def error(self, cls, message):
        return cls(message)


def test_norm_axis_accepts_minus_rank_to_rank():
    ctx = _Ctx()
    assert [norm_axis(ctx, a, 3) for a in (-3, -1, 0, 2)] == [0, 2, 0, 2]
    assert norm_axis(ctx, np.int64(-1), 2) == 1
    with pytest.raises(errors.InvalidArgumentError, match="squeeze axis 3 is out of range for an input of rank 3"):
        norm_axis(ctx, 3, 3, "squeeze axis")
    with pytest.raises(errors.InvalidArgumentError, match="axis 0 is out of range for an input of rank 0"):
        norm_axis(ctx, 0, 0)  # a scalar has no axis


def test_every_device_type_gets_the_dtypes_every_device_holds_only():
    kernels = plugins.registry().kernels
    for op in ("Identity", "Reshape", "Shape", "Squeeze", "Assign", "AssignAdd"):
        assert kernels.lookup(op, "SOMEDEVICE", {"T": tw.float32}) is not None, op
        assert kernels.lookup(op, "SOMEDEVICE", {"T": tw.complex64}) is None, op
        assert kernels.lookup(op, "CPU", {"T": tw.complex64}) is not None, op
    assert kernels.lookup("Variable", "SOMEDEVICE", {"dtype": tw.string}) is None
    assert kernels.lookup("Variable", "CPU", {"dtype": tw.string}) is not None
    assert kernels.lookup("NoOp", "SOMEDEVICE", {}) is not None
    assert set(EVERY_DEVICE_DTYPES) == {"bool", "float32", "float64", "int32", "int64"}


def test_string_tensors_and_variables_on_the_cpu():
    v = tw.Variable(np.array([b"a", b"b"], dtype=object), name="names")
    r = tw.reshape(tw.identity(v), [2, 1])
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        out = s.run([r, tw.shape(r), tw.is_variable_initialized(v)])
    assert out[0].tolist() == [[b"a"], [b"b"]] and out[1].tolist() == [2, 1] and out[2]


def test_shape_kernels_and_variables_on_an_accelerator(fake_devices):
    x = tw.placeholder(tw.float32, None, name="x")
    with tw.device("/device:FAKE:0"):
        v = tw.Variable(np.zeros([2, 3], np.float32), name="v")
        y = tw.squeeze(tw.expand_dims(tw.reshape(x, [2, -1]), 0), [0])
        shape, size, rank = tw.shape(y), tw.size(y), tw.rank(y)
        add = tw.assign_add(v, y)
        sub = tw.assign_sub(v, tw.ones([2, 3]))
        ready = tw.is_variable_initialized(v)
    feed = {x: np.arange(6, dtype=np.float32)}
    with tw.Session() as s:
        assert not s.run(ready)
        s.run(v.initializer)
        out = s.run([y, shape, size, rank, add, ready], feed)
        np.testing.assert_array_equal(out[0], np.arange(6).reshape(2, 3))
        assert out[1].tolist() == [2, 3] and out[2] == 6 and out[3] == 2 and out[5]
        np.testing.assert_array_equal(out[4], np.arange(6).reshape(2, 3))
        np.testing.assert_array_equal(s.run(sub), np.arange(6).reshape(2, 3) - 1)
        placement = s.placement([y, shape, add], feed)
    assert all(placement[t.op.name] == FAKE0 for t in (y, shape, add))


def test_shape_errors_name_the_node_on_an_accelerator(fake_devices):
    x = tw.placeholder(tw.float32, None, name="x")
    with tw.device("/device:FAKE:0"):
        bad_reshape = tw.reshape(x, [4, -1], name="bad_reshape")
        bad_squeeze = tw.squeeze(x, [0], name="bad_squeeze")
    with tw.Session() as s:
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"Reshape node 'bad_reshape' on .*FAKE:0: cannot reshape a tensor of shape "
                                 r"\(6,\) \(6 elements\) to shape \[4, -1\]"):
            s.run(bad_reshape, {x: np.zeros(6, np.float32)})
        with pytest.raises(errors.InvalidArgumentError, match="cannot squeeze dimension 0 of shape"):
            s.run(bad_squeeze, {x: np.zeros(6, np.float32)})


def _update_node(fn):
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(np.zeros(3, np.float32), name="v")
        return fn(v, tw.constant(np.ones(3, np.float32))).op


def test_read_on_brings_the_value_to_the_reading_device():
    op = _update_node(tw.assign_add)
    store = SessionResources("t").state_for_op(op.inputs[0].op)
    cpu, fake = tw.list_devices()[0], FakeDevice("/job:localhost/replica:0/task:0/device:FAKE:0")
    with pytest.raises(errors.FailedPreconditionError, match="uninitialized value v"):
        store.read_on(fake)
    store.value = np.arange(3, dtype=np.float32)  # a host value (no device wrote it)
    assert store.read_on(cpu) is store.value
    on_fake = store.read_on(fake)
    assert isinstance(on_fake, FakeTensor) and on_fake.array.tolist() == [0, 1, 2]
    store.value, store.device = on_fake, fake
    assert store.read_on(fake) is on_fake
    back = store.read_on(cpu)
    assert isinstance(back, np.ndarray) and back.tolist() == [0, 1, 2]


class _BareDevice(FakeDevice):
    """An accelerator type with no kernels of its own (no Add, no Sub)."""

    device_type = "BARE"


@pytest.mark.parametrize("fn, expected", [(tw.assign_add, [1, 2, 3]), (tw.assign_sub, [-1, 0, 1])])
def test_updates_on_a_device_without_add_compute_through_the_host(fn, expected):
    op = _update_node(fn)
    resources = SessionResources("t")
    device = _BareDevice("/job:localhost/replica:0/task:0/device:BARE:0")
    kd = plugins.registry().kernels.find(op, "BARE")
    update = kd.factory(KernelContext(op, device, resources))
    store = resources.state_for_op(op.inputs[0].op)
    store.value, store.device = device.to_device(np.arange(3, dtype=np.float32)), device
    out = update(device.to_device(np.ones(3, np.float32)))
    assert isinstance(out, FakeTensor) and store.value is out and out.array.tolist() == expected
    with pytest.raises(errors.InvalidArgumentError, match="update of shape \\(2, 3\\) does not match variable v "
                                                          "of shape \\(3,\\)"):
        update(device.to_device(np.ones((2, 3), np.float32)))
