"""Kernels that are the same on every device, registered once by the core for every device
type (``"*"``), and the kernels of host-side resources.

The kernels for every device type (control flow, variables, the shape-only kernels) use
only the device-tensor contract (``runtime.device.DeviceTensor``) and the ``Device`` copies.
A ``"*"`` kernel claims its op on every device type, and the registry cannot take that claim
back for one type, so the kernels with a dtype are registered for ``"*"`` only for
``EVERY_DEVICE_DTYPES``, the dtypes every device type holds. A device that holds more
registers the same kernels for its own type and the dtypes it holds
(``shapes.register_kernels(registry, "CPU", dtypes.ALL_DTYPES)``, likewise ``state``).
"""

from __future__ import annotations

from tensorweave.framework import dtypes

# Every device type holds tensors of these dtypes (runtime.device.DeviceTensor says so).
EVERY_DEVICE_DTYPES = ("bool", "float32", "float64", "int32", "int64")


def dtypes_to_register(device_type: str, held) -> list[str]:
    """The dtypes of ``held`` that a registration of the core's kernels for ``device_type``
    covers: all of them for ``"*"``; for one device type, those the ``"*"`` kernels do not
    cover already (a second kernel for the same dtype would only slow lookups down)."""
    names = sorted({dtypes.as_dtype(d).name for d in held})
    if device_type == "*":
        return names
    return [n for n in names if n not in EVERY_DEVICE_DTYPES]
