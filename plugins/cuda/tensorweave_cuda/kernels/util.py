"""What every op family's kernels share: registering a factory for the GPU device type with
the context made current around each call, launching a grid-stride kernel, and reading
values that arrived in host memory. (Axes are normalised by the core's
``tensorweave.kernels.axes.norm_axis``.)

Driver failures inside a kernel become ``InternalError`` naming the node: a launch the
driver refuses (or a cuBLAS error status) as "<Op> node '<name>' on <device>: kernel launch
failed: <kernel> (grid, block): <driver message>"; a failure reported while waiting for the
device (a kernel queued earlier failed: CUDA reports it asynchronously) as "...: CUDA error
...". Each wrapped node also leaves its name on the driver (``last_node``), so a failure
reported later (at a fetch's copy) can say which node queued work last."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_cuda import plan
from tensorweave_cuda.driver import DriverError, LaunchError
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.tensor import GPUTensor

E = errors.InvalidArgumentError


def register(reg, op: str, device_type: str, factory, dtypes=None, attr: str = "T", constraints=None,
             host_memory=(), activate: bool = True, **kw):
    """Register ``factory`` for ``op``; its compute function runs with the device's context
    current (one push/pop per node instead of one per driver call)."""
    cons = dict(constraints or {})
    if dtypes is not None:
        cons[attr] = list(dtypes)
    f = _activating(factory) if activate else factory
    reg.register(op, device_type, factory=f, constraints=cons or None, host_memory=tuple(host_memory), **kw)


def _activating(factory):
    def wrapped_factory(ctx):
        compute = factory(ctx)
        drv = ctx.device.driver
        activate = drv.activate
        where = f"{ctx.op_type} node '{ctx.node_name}'"

        def compute_on_device(*args):
            drv.last_node = where
            with activate():
                try:
                    return compute(*args)
                except DriverError as e:
                    raise driver_failure(ctx, e) from e
        compute_on_device.__name__ = getattr(compute, "__name__", "compute")
        return compute_on_device
    wrapped_factory.__name__ = getattr(factory, "__name__", "factory")
    return wrapped_factory


def driver_failure(ctx, e: DriverError) -> errors.InternalError:
    """The InternalError for a driver failure inside node ``ctx`` (see the module docstring)."""
    if isinstance(e, LaunchError):
        return ctx.error(errors.InternalError, f"kernel launch failed: {e}")
    return ctx.error(errors.InternalError, f"CUDA error (a kernel queued on {ctx.device.name} before "
                                           f"or by this node failed; CUDA reports it asynchronously): {e}")


def launch(dev, ref: catalog.KernelRef, n: int, *args, dt: catalog.DType | None = None) -> None:
    """A grid-stride kernel over ``n`` items (nothing for n == 0)."""
    if n <= 0:
        return
    grid, block = plan.launch_dims(n)
    try:
        dev.programs.kernel(ref, dt)(grid, block, *args)
    except LaunchError as e:
        raise LaunchError(f"{ref.name} {e}") from None


def launch_rows(dev, ref: catalog.KernelRef, rows: int, length: int, *args) -> None:
    """A kernel with one block per row of ``length`` (nothing for rows == 0)."""
    if rows <= 0:
        return
    grid, block = plan.row_launch(rows, length)
    try:
        dev.programs.kernel(ref)(grid, block, *args)
    except LaunchError as e:
        raise LaunchError(f"{ref.name} {e}") from None


def host(dev, x) -> np.ndarray:
    """``x`` as a host array (host-backed tensors need no copy)."""
    if isinstance(x, GPUTensor):
        h = x.host_value
        return h if h is not None else x.device.to_host(x)
    return np.asarray(x)


def int_list(ctx, v, what: str) -> list[int]:
    a = np.asarray(v)
    if a.ndim != 1:
        raise ctx.error(E, f"{what} must be a vector, got shape {a.shape}")
    return [int(d) for d in a.tolist()]


def fill(dev, out: GPUTensor, value) -> GPUTensor:
    """Set every element of a fresh ``out`` to a host scalar."""
    dt = catalog.dtype(out.dtype)
    if out.size:
        launch(dev, catalog.fill_kernel(dt), out.size, out.ptr, out.size, dt.np.type(value).item(), dt=dt)
    return out
