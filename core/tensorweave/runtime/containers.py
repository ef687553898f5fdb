"""Containers: where long-lived state (variables, later queues) lives (whitepaper 4.7).

A ``ResourceManager`` maps container name -> resource name -> object. Each Session owns one
whose *default* container ("") lives as long as the Session (as in TF1's local sessions, so
two Sessions on one graph get separate variables). *Named* containers live in one
process-wide manager, so Sessions on different graphs share state through them until
``tw.Session.reset(target, [name])`` / ``reset_container`` clears it.
"""

from __future__ import annotations

import threading

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.runtime import file_access


class VariableStore:
    """The persistent mutable tensor behind a Variable node."""

    __slots__ = ("name", "container", "dtype", "shape", "value", "lock", "device")

    def __init__(self, name: str, container: str, dtype: dtypes.DType, shape: TensorShape):
        self.name = name
        self.container = container
        self.dtype = dtype
        self.shape = shape
        self.value = None
        self.lock = threading.Lock()
        self.device = None  # the device whose kernel last wrote the value (set by the executor)

    def read(self):
        v = self.value
        if v is None:
            raise errors.FailedPreconditionError(
                f"attempting to use uninitialized value {self.name}"
                + (f" (container {self.container!r})" if self.container else "")
                + "; run its initializer first, e.g. sess.run(tw.global_variables_initializer())")
        return v

    def read_on(self, device):
        """The value as a tensor of ``device``, for kernels that read the store themselves
        (updates): a value another device wrote is copied over, and a host value (``assign``)
        is put on the device. Raises like ``read`` when the variable is uninitialised."""
        v = self.value
        src = self.device
        if src is device and v is not None:
            return v
        if v is None:
            return self.read()
        if src is None:
            # Written from the host, or by a kernel whose device is not recorded yet (the
            # executor records it when the kernel returns): only a host array needs a copy.
            if device.host_tensors or not isinstance(v, np.ndarray | np.generic):
                return v
            return device.to_device(v)
        if src.name == device.name or (src.host_tensors and device.host_tensors):
            return v  # the same device (another Session's object for it), or host memory on both
        return device.copy_from(v, src)

    def assign(self, value, validate_shape: bool = True):
        value = np.asarray(value) if not isinstance(value, np.ndarray) else value
        if value.dtype != self.dtype.np_dtype and not (self.dtype.is_string and value.dtype == object):
            raise errors.InvalidArgumentError(
                f"cannot assign a {value.dtype} value to variable {self.name} of dtype {self.dtype.name}")
        if validate_shape and not self.shape.is_compatible_with(value.shape):
            raise errors.InvalidArgumentError(
                f"cannot assign a value of shape {tuple(value.shape)} to variable {self.name} "
                f"of shape {self.shape}")
        self.value = value
        return value

    @property
    def initialized(self) -> bool:
        return self.value is not None


class ResourceManager:
    """container -> name -> resource. Thread-safe."""

    def __init__(self, label: str = ""):
        self.label = label
        self._containers: dict[str, dict[str, object]] = {}
        self._lock = threading.Lock()

    def lookup_or_create(self, container: str, name: str, create):
        with self._lock:
            c = self._containers.setdefault(container, {})
            r = c.get(name)
            if r is None:
                r = c[name] = create()
            return r

    def lookup(self, container: str, name: str):
        with self._lock:
            try:
                return self._containers[container][name]
            except KeyError:
                raise errors.NotFoundError(f"resource {name!r} not found in container {container!r}") from None

    def reset(self, containers=None) -> list[str]:
        """Clear the given containers (all when None): variables become uninitialised."""
        with self._lock:
            names = list(self._containers) if containers is None else list(containers)
            for n in names:
                for r in self._containers.get(n, {}).values():
                    if isinstance(r, VariableStore):
                        r.value = None
                    elif hasattr(r, "reset"):
                        r.reset()
            return names

    def containers(self) -> list[str]:
        return sorted(self._containers)


_process_resources = ResourceManager("process")


def process_resources() -> ResourceManager:
    """The process-wide manager that holds named containers."""
    return _process_resources


class SessionResources:
    """A Session's view: the default container is its own, named ones are process-wide."""

    def __init__(self, session_label: str):
        self.local = ResourceManager(session_label)
        self.shared = _process_resources
        # Which files this session's ops may use (runtime/file_access.py): any, unless a
        # worker serving remote clients restricts it.
        self.file_access = file_access.UNRESTRICTED

    def manager_for(self, container: str) -> ResourceManager:
        return self.local if not container else self.shared

    def variable(self, container: str, name: str, dtype, shape) -> VariableStore:
        dtype = dtypes.as_dtype(dtype)
        shape = TensorShape(shape)
        store = self.manager_for(container).lookup_or_create(
            container, name, lambda: VariableStore(name, container, dtype, shape))
        if not isinstance(store, VariableStore):
            raise errors.InvalidArgumentError(f"resource {name!r} in container {container!r} is not a variable")
        if store.dtype is not dtype or not store.shape.is_compatible_with(shape):
            if store.value is not None:
                raise errors.InvalidArgumentError(
                    f"variable {name!r} in container {container!r} already exists with dtype "
                    f"{store.dtype.name} and shape {store.shape}; this graph declares {dtype.name} {shape}")
            store.dtype, store.shape = dtype, shape  # an uninitialised store may be redeclared
        return store

    def state_for_op(self, op):
        """The state behind a stateful node (a Variable op) for ref inputs."""
        if op.type in ("Variable", "VariableV2"):
            return self.variable(op.get_attr("container"), op.get_attr("shared_name") or op.name,
                                 op.get_attr("dtype"), op.get_attr("shape"))
        raise errors.InvalidArgumentError(f"node '{op.name}' ({op.type}) holds no state to reference")

    def reset(self, containers=None):
        if containers is None:
            self.local.reset()
        else:
            for c in containers:
                self.manager_for(c).reset([c])


class StoreUpdate:
    """What every device's optimizer-update kernel (ApplyAdam, ...) needs around its math:
    the variable and its slots must be distinct, and are locked in one fixed order (by
    identity) so concurrent updates sharing a store can never deadlock.

    Built once per node in a kernel factory; ``with update:`` holds all the locks.
    """

    def __init__(self, ctx, stores):
        if len({id(s) for s in stores}) != len(stores):
            raise ctx.error(errors.InvalidArgumentError,
                            f"the variable and its slots must be distinct variables, got {[s.name for s in stores]}")
        self.ctx = ctx
        self.stores = stores
        self._locks = [s.lock for s in sorted(stores, key=id)]

    def __enter__(self):
        for lk in self._locks:
            lk.acquire()
        return self

    def __exit__(self, *exc):
        for lk in reversed(self._locks):
            lk.release()
        return False

    def check_shapes(self, current, grad) -> None:
        """Slots must have the variable's shape, and so must the gradient."""
        var, first = current[0], self.stores[0]
        for s, cur in zip(self.stores[1:], current[1:]):
            if cur.shape != var.shape:
                raise self.ctx.error(errors.InvalidArgumentError,
                                     f"slot {s.name} of shape {cur.shape} does not match variable "
                                     f"{first.name} of shape {var.shape}")
        if grad.shape != var.shape:
            raise self.ctx.error(errors.InvalidArgumentError,
                                 f"gradient of shape {grad.shape} does not match variable {first.name} "
                                 f"of shape {var.shape}")

    def check_each(self, current, grads, names) -> None:
        """Grouped updates (``_GroupedApplyGradientDescent``): store i's own gradient
        ``grads[i]`` must have its shape; ``names`` are the user's update nodes."""
        for s, cur, g, name in zip(self.stores, current, grads, names):
            if g.shape != cur.shape:
                raise self.ctx.error(errors.InvalidArgumentError,
                                     f"update '{name}': gradient of shape {g.shape} does not match "
                                     f"variable {s.name} of shape {cur.shape}")
