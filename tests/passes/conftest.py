"""Fixtures for placement and cost-model tests: the CPU and FAKE devices built explicitly.

FAKE kernels are registered once per process with ``register_fake_devices(count=0)``, so
they exist for the placer to look up while Sessions elsewhere in the run still see no FAKE
devices; the tests create ``FakeDevice`` objects of the speeds and memory limits they need.
"""

import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.testing.fake_device import FakeDevice, register_fake_devices

LOCAL = "/job:localhost/replica:0/task:0"


@pytest.fixture
def kernels():
    reg = plugins.registry()
    if "FAKE" not in reg.device_factories:
        register_fake_devices(count=0)
    reg = plugins.registry()
    if not reg.kernels.lookup("MatMul", "FAKE", {"T": tw.float32}):
        pytest.skip("FAKE devices were registered elsewhere in this process without a MatMul kernel")
    return reg.kernels


@pytest.fixture
def cpu():
    return tw.list_devices()[0]


@pytest.fixture
def fake(kernels):
    """fake(index, speed=1.0, memory_limit=None, prefix=LOCAL, **attrs) -> a FakeDevice."""

    def make(index=0, speed=1.0, memory_limit=None, prefix=LOCAL, **attrs):
        d = FakeDevice(f"{prefix}/device:FAKE:{index}", memory_limit=memory_limit, speed=speed)
        for k, v in attrs.items():
            setattr(d, k, v)
        return d
    return make
