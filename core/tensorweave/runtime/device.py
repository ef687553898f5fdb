"""Device, Allocator and DeviceFactory: the interfaces a device plugin implements.

A ``Device`` has a full name (``/job:localhost/replica:0/task:0/device:CPU:0``), a type, an
allocator, and moves data between host and device. Device tensors are opaque to the core: it
only passes them between kernels of the same device and asks the device to copy them.
"""

from __future__ import annotations

import threading

import numpy as np

from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec


class Allocator:
    """Hands out device buffers and keeps statistics. Subclasses implement allocate/free;
    the statistics are kept here so every allocator reports the same way."""

    name = "base"

    def __init__(self, device_name: str = "", memory_limit: int | None = None):
        self.device_name = device_name
        self.memory_limit = memory_limit
        # Re-entrant: a free triggered by garbage collection may run on a thread that is
        # already inside _note_alloc.
        self._lock = threading.RLock()
        self.bytes_in_use = 0
        self.peak_bytes_in_use = 0
        self.num_allocs = 0
        self.largest_alloc_size = 0

    def _note_alloc(self, nbytes: int) -> None:
        with self._lock:
            if self.memory_limit is not None and self.bytes_in_use + nbytes > self.memory_limit:
                raise errors.ResourceExhaustedError(
                    f"out of memory on {self.device_name}: asked for {nbytes} bytes with "
                    f"{self.bytes_in_use} of {self.memory_limit} bytes in use")
            self.bytes_in_use += nbytes
            self.num_allocs += 1
            if self.bytes_in_use > self.peak_bytes_in_use:
                self.peak_bytes_in_use = self.bytes_in_use
            if nbytes > self.largest_alloc_size:
                self.largest_alloc_size = nbytes

    def _note_free(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_in_use -= nbytes

    def reset_peak(self) -> None:
        with self._lock:
            self.peak_bytes_in_use = self.bytes_in_use

    def stats(self) -> dict:
        return {
            "allocator": self.name, "bytes_in_use": self.bytes_in_use,
            "peak_bytes_in_use": self.peak_bytes_in_use, "num_allocs": self.num_allocs,
            "largest_alloc_size": self.largest_alloc_size, "bytes_limit": self.memory_limit,
        }

    def track(self, value) -> None:
        """Account for a buffer a kernel produced (released when its last reference goes)."""


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
