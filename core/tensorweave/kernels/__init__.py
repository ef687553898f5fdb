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

import numpy as np

from tensorweave.framework import dtypes, errors

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


# Per-step resources (loop-gradient stacks, TensorArrays) live in ``StepContext.step_resources``
# under a handle: a string in a scalar object tensor (never a Python object in a tensor).
def step_resources(ctx, step) -> dict:
    """The step's resource table, for the kernel of ``ctx``."""
    res = getattr(step, "step_resources", None)
    if res is None:
        raise ctx.error(errors.FailedPreconditionError, "the executor gave this step no step_resources")
    return res


def handle_key(handle) -> str:
    """The key a resource handle (a scalar bytes/str tensor) stands for."""
    h = handle.item() if isinstance(handle, np.ndarray) else handle
    return h.decode() if isinstance(h, bytes) else str(h)
