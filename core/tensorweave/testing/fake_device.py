"""A fake accelerator for tests: device type ``FAKE`` whose tensors are ``FakeTensor``
wrappers around NumPy arrays, so every host<->device transfer and every missing transfer
shows up (a kernel handed a raw ndarray fails).

``register_fake_devices(count=2, speed=1.0, ops=None)`` registers, at run time, a device
factory for ``count`` FAKE devices and FAKE kernels for the stateless ops that have CPU
kernels (or only ``ops``). ``speed`` is reported to the cost model as a relative compute
speed, and ``memory_limit`` caps each device's allocator. The core's kernels for every
device type (``tensorweave.kernels``: variables, the shape-only kernels) run on FAKE as on
any device, for every dtype the CPU holds: variables live on FAKE devices as FakeTensors.
Other stateful ops (random, optimizers) get no FAKE kernel and stay on the CPU.
"""

from __future__ import annotations

import numpy as np

from tensorweave import plugins
from tensorweave.framework import dtypes, errors
from tensorweave.kernels import shapes, state
from tensorweave.runtime.device import Allocator, Device, DeviceFactory


class FakeTensor:
    __slots__ = ("array", "device")

    def __init__(self, array, device):
        self.array = array
        self.device = device

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    def reshape(self, shape):
        return FakeTensor(self.array.reshape(shape), self.device)

    def __repr__(self):
        return f"FakeTensor({self.array!r} on {self.device})"


class FakeAllocator(Allocator):
    name = "fake"

    def track(self, value):
        if isinstance(value, FakeTensor):
            self._note_alloc(value.array.nbytes)


class FakeDevice(Device):
    device_type = "FAKE"

    def __init__(self, name, memory_limit=None, speed=1.0):
        super().__init__(name, FakeAllocator(name, memory_limit), description=f"fake accelerator (speed {speed})",
                         memory_limit=memory_limit)
        self.speed = speed
        self.transfers_in = 0
        self.transfers_out = 0

    def to_device(self, array):
        self.transfers_in += 1
        arr = np.asarray(array)
        self.allocator.track(FakeTensor(arr, self.name))
        return FakeTensor(arr, self.name)

    def to_host(self, value):
        if not isinstance(value, FakeTensor):
            raise errors.InternalError(f"{self.name}: to_host got {type(value).__name__}, not a FakeTensor")
        self.transfers_out += 1
        return value.array


class FakeDeviceFactory(DeviceFactory):
    device_type = "FAKE"

    def __init__(self, count, speed, memory_limit):
        self._count, self.speed, self.memory_limit = count, speed, memory_limit

    def count(self):
        return self._count

    def create_devices(self, name_prefix, config=None):
        return [FakeDevice(f"{name_prefix}/device:FAKE:{i}", self.memory_limit, self.speed)
                for i in range(self._count)]


def _wrap(cpu_factory, op_type):
    def factory(ctx):
        fn = cpu_factory(ctx)
        dev = ctx.device.name

        def compute(*inputs):
            raw = []
            for x in inputs:
                if not isinstance(x, FakeTensor):
                    raise errors.InternalError(
                        f"{op_type} on {dev} was handed a {type(x).__name__}, not a FakeTensor: a transfer is missing")
                raw.append(x.array)
            out = fn(*raw)
            if isinstance(out, tuple):
                return tuple(FakeTensor(np.asarray(o), dev) for o in out)
            return None if out is None else FakeTensor(np.asarray(out), dev)
        return compute
    return factory


class _FakePlugin:
    def __init__(self, count, speed, memory_limit, ops):
        self.factory = FakeDeviceFactory(count, speed, memory_limit)
        self.ops = ops

    @plugins.hookimpl
    def tensorweave_device_factories(self):
        return [self.factory]

    @plugins.hookimpl
    def tensorweave_register_kernels(self, registry):
        reg = plugins.registry()
        kernels = list(registry.items())
        everywhere = {op_type for (op_type, dt), _ in kernels if dt == "*"}
        for (op_type, dt), kd in kernels:
            if dt != "CPU" or kd.is_async or kd.takes_context:
                continue
            op_def = reg.ops.get(op_type) if op_type in reg.ops else None
            if op_def is None or op_def.stateful or any(a.is_ref for a in op_def.inputs) or op_def.outputs_ref:
                continue
            if op_type in everywhere:
                continue  # the core's kernel for every device type serves FAKE too
            if self.ops is not None and op_type not in self.ops:
                continue
            if op_type in ("Placeholder",):
                continue
            registry.register(op_type, "FAKE", factory=_wrap(kd.factory, op_type),
                              constraints=dict(kd.constraints) or None, priority=kd.priority, override=True)
        for core in (state, shapes):
            core.register_kernels(registry, "FAKE", dtypes.ALL_DTYPES)


def register_fake_devices(count=2, speed=1.0, memory_limit=None, ops=None) -> FakeDeviceFactory:
    """Register FAKE devices and kernels in this process (once; later calls update the
    factory's count/speed/limit). Returns the factory."""
    reg = plugins.registry()
    if "FAKE" in reg.device_factories:
        existing = reg.device_factories["FAKE"]
        existing._count, existing.speed, existing.memory_limit = count, speed, memory_limit
        return existing
    plugin = _FakePlugin(count, speed, memory_limit, ops)
    plugins.register_plugin(plugin, name="fake-devices", distribution="tensorweave.testing.fake_device")
    return plugin.factory
