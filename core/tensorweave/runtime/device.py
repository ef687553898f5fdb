"""Device and DeviceFactory: the interfaces a device plugin implements (its allocator's
contract is ``runtime/allocator.py``; ``Allocator`` is importable from here too).

A ``Device`` has a full name (``/job:localhost/replica:0/task:0/device:CPU:0``), a type, an
allocator, and moves data between host and device. Device tensors are opaque to the core: it
only passes them between kernels of the same device and asks the device to copy them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.runtime.allocator import Allocator  # also imported from here by plugins


class Device:
    """One device of a process. Subclasses set ``device_type`` and implement the copies."""

    device_type = "?"
    # True when this device's tensors are plain host ndarrays (the CPU): feeds, fetches and
    # host-memory inputs then need no conversion.
    host_tensors = False

    def __init__(self, name: str, allocator: Allocator, description: str = "", memory_limit: int | None = None):
        self.name = name
        self.spec = DeviceSpec.from_string(name)
        self.allocator = allocator
        self.description = description
        self.memory_limit = memory_limit

    def to_device(self, array: np.ndarray):
        """Host ndarray -> device tensor."""
        raise NotImplementedError

    def to_host(self, value) -> np.ndarray:
        """Device tensor -> host ndarray."""
        raise NotImplementedError

    def copy_from(self, value, src: Device):
        """Device tensor on ``src`` -> a tensor on this device (default: through the host)."""
        return self.to_device(src.to_host(value))

    def sync(self) -> None:
        """Wait for queued work on this device to finish."""

    def accumulate_product(self, acc, a, b) -> bool:
        """``acc += a @ b``, written into ``acc`` (a 2-D tensor of this device that nothing
        else holds; ``a`` and ``b`` 2-D, possibly transposed views), where the device has a
        kernel that adds a product into its output (a GEMM with beta = 1); False, with
        nothing written, where it has none for these operands. Compiled loops use it for a
        gradient's sum over iterations of a product (runtime/loops.py), saving a pass over
        the sum and a temporary per iteration."""
        return False

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


class DeviceFactory:
    """Enumerates the physical devices of one type and creates Device objects for them."""

    device_type = "?"

    def count(self) -> int:
        """How many devices of this type exist on this machine."""
        raise NotImplementedError

    def create_devices(self, name_prefix: str, config=None) -> list[Device]:
        """Create the devices, named ``f"{name_prefix}/device:{TYPE}:{i}"``."""
        raise NotImplementedError

    def describe(self) -> list[str]:
        return []


LOCAL_PREFIX = "/job:localhost/replica:0/task:0"


def create_local_devices(config=None, name_prefix: str = LOCAL_PREFIX) -> list[Device]:
    """Every device every installed plugin offers, honouring ``config.device_count``."""
    reg = plugins.registry()
    counts = dict(getattr(config, "device_count", None) or {})
    out: list[Device] = []
    for dt, factory in sorted(reg.device_factories.items(), key=lambda kv: (kv[0] != "CPU", kv[0])):
        want = counts.get(dt, counts.get(dt.lower()))
        if want == 0:
            continue
        try:
            devs = factory.create_devices(name_prefix, config)
        except errors.OpError:
            raise
        except Exception as e:
            raise errors.UnavailableError(f"device plugin for {dt} failed to create its devices: {e}") from e
        out.extend(devs[:want] if want is not None else devs)
    if not out:
        raise errors.FailedPreconditionError(
            "no devices are available: no device plugin is installed or enabled. "
            "Install one, e.g. `pip install tensorweave-cpu`, and see `tensorweave plugins`.")
    return out


class DeviceTensor(Protocol):
    """What the core may ask of a device's tensor; everything else about it (buffers,
    pointers, streams) is the device's own. A NumPy array satisfies it.

    The kernels the core owns for every device type (``tensorweave.kernels``: variables,
    Identity, Reshape, Shape, ...) see tensors only through this, plus ``Device.to_device``
    for the small results they make on the host (a Shape's value).

    - ``shape``: a tuple of ints; ``dtype``: a NumPy dtype.
    - ``reshape(shape)``: the same elements, in row-major order, with another shape (a
      sequence of ints with as many elements: the caller has inferred any -1 and checked
      the size), as a new handle on the same memory: no copy, no device work (NumPy copies
      a non-contiguous array, which immutability makes harmless).

    Tensors are immutable: no kernel writes into a tensor it did not just create. So
    handles may share memory, a kernel may return its input (Identity), and a tensor may be
    kept across steps (a variable's value, a node's cached Shape result). The one exception,
    an update of a variable (Scatter*, SparseApply*, and a plugin's dense Apply* where it
    chooses to, as the CPU's compiled loops do), writes into the variable's tensor only when
    nothing else can observe it (``kernels/state.py``, ``writable``).

    Every device type holds tensors of bool, float32, float64, int32 and int64 (its
    ``to_device`` accepts them): the core's kernels are registered for every device type
    (``"*"``) for those dtypes (``tensorweave.kernels.EVERY_DEVICE_DTYPES``).
    """

    shape: tuple[int, ...]
    dtype: np.dtype

    def reshape(self, shape) -> DeviceTensor: ...
