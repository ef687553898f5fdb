"""TensorArray kernels (TensorArrayV3 and its Read/Write/Gather/Scatter/Concat/Split/Size/
Close/Grad ops), the same on every device: registered for ``"*"`` (and for the CPU's extra
dtypes), holding the device's own tensors.

A TensorArray lives for one step, as TF's does: ``StepContext.step_resources`` (cleared by
the executor when the step ends) maps its handle, a plain string naming the node and a
per-kernel counter, to a ``_TensorArray``. Its elements are the device tensors written to
it; Read and Write only move them. Gather, Scatter, Concat and Split compute: on a device
whose tensors are NumPy arrays (the CPU) with NumPy, elsewhere through the host
(``Device.to_host``/``to_device``) — one copy of the whole array, at the loop's edges in
``dynamic_rnn`` (its loop body only reads and writes).

Gradient arrays (TensorArrayGradV3) are kept under ``<handle>@<source>``: every call with the
same forward handle and gradient source returns the same array, sized like the forward one
when first asked for. Writes to one of its indices add up (``multiple_writes_aggregate``),
and an element that got no gradient reads as zeros of the forward element's shape.

The flow tensors (a float32 scalar) carry no data: they order the ops of one array in the
graph and carry gradients; the kernels pass them through.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.kernels import EVERY_DEVICE_DTYPES, dtypes_to_register, handle_key, step_resources

_E = errors.InvalidArgumentError


class _TensorArray:
    __slots__ = ("name", "dtype", "size", "dynamic_size", "clear_after_read", "element_shape",
                 "identical", "elements", "shapes", "read", "is_grad", "lock", "closed", "grad_fixed", "fwd")

    def __init__(self, name, dtype, size, dynamic_size, clear_after_read, element_shape, identical,
                 is_grad=False):
        self.name = name
        self.dtype = dtype
        self.size = size
        self.dynamic_size = dynamic_size
        self.clear_after_read = clear_after_read
        self.element_shape = element_shape  # a TensorShape, merged with every write's shape
        self.identical = identical
        self.elements = {}  # index -> device tensor
        self.shapes = {}  # index -> tuple shape of what was written there (kept after a clearing read)
        self.read = set()  # indices cleared by a read
        self.is_grad = is_grad
        self.lock = threading.Lock()
        self.closed = False
        self.grad_fixed = False  # a gradient array exists: the size may no longer change
        self.fwd = None  # a gradient array's forward array (the shapes of its elements)


def _lookup(ctx, step, handle) -> _TensorArray:
    key = handle_key(handle)
    ta = step_resources(ctx, step).get(key)
    if ta is None:
        raise ctx.error(errors.NotFoundError, f"TensorArray {key!r} does not exist in this step (closed, "
                                              "or created by another step)")
    if ta.closed:
        raise ctx.error(errors.InvalidArgumentError, f"TensorArray {key!r} has been closed")
    return ta


class _Host:
    """Host <-> device conversions for one kernel's device (a no-op on the CPU)."""

    def __init__(self, device):
        self.device = device
        self.host = bool(getattr(device, "host_tensors", False))

    def to_host(self, x):
        return x if self.host or isinstance(x, np.ndarray | np.generic) else np.asarray(self.device.to_host(x))

    def to_device(self, a):
        return a if self.host else self.device.to_device(np.ascontiguousarray(a))

    def int_vector(self, x):
        return np.asarray(self.to_host(x)).reshape(-1).astype(np.int64)

    def int_scalar(self, ctx, x, what):
        a = np.asarray(self.to_host(x))
        if a.size != 1:
            raise ctx.error(_E, f"{what} must be a scalar, got shape {a.shape}")
        return int(a.reshape(-1)[0])


def _shape_str(s) -> str:
    return str(tuple(s)) if not isinstance(s, TensorShape) else str(s)


def _zeros(ta, host, shape):
    return host.to_device(np.zeros(shape, ta.dtype.np_dtype))


# ----------------------------------------------------------------------------------------
# the operations of one array (called with ta.lock held)
def _check_index(ctx, ta, index, what):
    if index < 0:
        raise ctx.error(_E, f"TensorArray {ta.name!r}: {what} index {index} is negative")
    if index >= ta.size:
        if ta.dynamic_size and what == "write" and not ta.grad_fixed:
            ta.size = index + 1
        else:
            why = ("its size may not change once a gradient array exists" if ta.grad_fixed and ta.dynamic_size
                   else "the array is not dynamic_size")
            raise ctx.error(_E, f"TensorArray {ta.name!r}: tried to {what} index {index} but the array has "
                                f"size {ta.size} ({why})")


def _write(ctx, ta, host, index, value, check_shape=True):
    _check_index(ctx, ta, index, "write")
    shape = tuple(value.shape)
    if check_shape and not ta.element_shape.is_compatible_with(as_shape(shape)):
        raise ctx.error(_E, f"TensorArray {ta.name!r}: could not write to index {index}: the value has shape "
                            f"{shape}, but the array's elements have shape {ta.element_shape}")
    if ta.identical and check_shape:
        ta.element_shape = ta.element_shape.merge_with(as_shape(shape))
    if index in ta.read:
        raise ctx.error(_E, f"TensorArray {ta.name!r}: could not write to index {index}: it has already been "
                            "read (cleared after read)")
    old = ta.elements.get(index)
    if old is not None:
        if not ta.is_grad:
            raise ctx.error(_E, f"TensorArray {ta.name!r}: could not write to index {index}: it has already "
                                "been written to (a TensorArray element is written once)")
        if tuple(old.shape) != shape:
            raise ctx.error(_E, f"TensorArray {ta.name!r}: could not add the gradient of shape {shape} to "
                                f"index {index}, which holds shape {tuple(old.shape)}")
        value = host.to_device(np.add(host.to_host(old), host.to_host(value)))
    ta.elements[index] = value
    ta.shapes[index] = shape


def _read(ctx, ta, host, index):
    if index < 0 or index >= ta.size:
        raise ctx.error(_E, f"TensorArray {ta.name!r}: tried to read index {index} of an array of size {ta.size}")
    value = ta.elements.get(index)
    if value is None:
        if index in ta.read:
            raise ctx.error(_E, f"TensorArray {ta.name!r}: could not read index {index} twice: it was cleared "
                                "after a previous read (clear_after_read=True; pass clear_after_read=False "
                                "to read elements more than once)")
        if ta.is_grad:
            shape = ta.fwd.shapes.get(index) if ta.fwd is not None else None
            if shape is None and ta.element_shape.is_fully_defined():
                shape = tuple(ta.element_shape.as_list())
            if shape is not None:  # no gradient reached this element
                return _zeros(ta, host, shape)
        raise ctx.error(_E, f"TensorArray {ta.name!r}: could not read index {index}: it has not been written "
                            "to yet")
    if ta.clear_after_read and not ta.is_grad:
        del ta.elements[index]
        ta.read.add(index)
    return value


def _stacked(ctx, ta, host, indices, element_shape, what):
    """The elements at ``indices`` as host arrays of one shape."""
    vals = [host.to_host(_read(ctx, ta, host, int(i))) for i in indices]
    if not vals:
        shape = element_shape if element_shape.is_fully_defined() else ta.element_shape
        if not shape.is_fully_defined():
            raise ctx.error(_E, f"TensorArray {ta.name!r}: {what} of no elements needs a fully defined "
                                f"element_shape, have {shape}")
        return np.zeros([0, *shape.as_list()], ta.dtype.np_dtype)
    first = vals[0].shape
    for i, v in zip(indices, vals):
        if v.shape != first:
            raise ctx.error(_E, f"TensorArray {ta.name!r}: {what} needs elements of one shape: index "
                                f"{int(indices[0])} has shape {first}, index {int(i)} has shape {v.shape}")
    return np.stack(vals).astype(ta.dtype.np_dtype, copy=False)


# ----------------------------------------------------------------------------------------
# kernel factories
def _flow(host):
    return host.to_device(np.zeros((), np.float32))


def _tensor_array(ctx):
    counter = itertools.count()
    a = ctx.attrs
    # The node's name keeps keys apart (two nodes may share a tensor_array_name).
    name = ctx.node_name
    dtype = dtypes.as_dtype(a["dtype"])
    elem_shape = as_shape(a.get("element_shape", TensorShape(None)))
    host = _Host(ctx.device)
    flow = _flow(host)

    def tensor_array(step, size):
        n = host.int_scalar(ctx, size, "size")
        if n < 0:
            raise ctx.error(_E, f"the size of TensorArray {name!r} must be >= 0, got {n}")
        key = f"ta:{name}:{next(counter)}"
        step_resources(ctx, step)[key] = _TensorArray(key, dtype, n, a.get("dynamic_size", False),
                                                  a.get("clear_after_read", True), elem_shape,
                                                  a.get("identical_element_shapes", False))
        return np.array(key.encode(), dtype=object), flow
    return tensor_array


def _grad(ctx):
    source = ctx.attrs.get("source", "")

    def grad(step, handle, flow_in):
        fwd = _lookup(ctx, step, handle)
        key = f"{fwd.name}@{source}"
        res = step_resources(ctx, step)
        with fwd.lock:
            g = res.get(key)
            if g is None:
                fwd.grad_fixed = True
                g = _TensorArray(key, fwd.dtype, fwd.size, False, False, fwd.element_shape, False, is_grad=True)
                g.fwd = fwd
                res[key] = g
        return np.array(key.encode(), dtype=object), flow_in
    return grad


def _write_kernel(ctx):
    host = _Host(ctx.device)

    def write(step, handle, index, value, flow_in):
        ta = _lookup(ctx, step, handle)
        i = host.int_scalar(ctx, index, "index")
        with ta.lock:
            _write(ctx, ta, host, i, value)
        return flow_in
    return write


def _read_kernel(ctx):
    host = _Host(ctx.device)

    def read(step, handle, index, flow_in):
        ta = _lookup(ctx, step, handle)
        i = host.int_scalar(ctx, index, "index")
        with ta.lock:
            return _read(ctx, ta, host, i)
    return read


def _gather_kernel(ctx):
    host = _Host(ctx.device)
    elem_shape = as_shape(ctx.attrs.get("element_shape", TensorShape(None)))

    def gather(step, handle, indices, flow_in):
        ta = _lookup(ctx, step, handle)
        idx = host.int_vector(indices)
        with ta.lock:
            return host.to_device(_stacked(ctx, ta, host, idx, elem_shape, "gather (stack)"))
    return gather


def _scatter_kernel(ctx):
    host = _Host(ctx.device)

    def scatter(step, handle, indices, value, flow_in):
        ta = _lookup(ctx, step, handle)
        idx = host.int_vector(indices)
        v = host.to_host(value)
        if v.ndim == 0 or v.shape[0] != len(idx):
            raise ctx.error(_E, f"TensorArray {ta.name!r}: scatter (unstack) of a value of shape {v.shape} "
                                f"at {len(idx)} indices: its first dimension must be {len(idx)}")
        with ta.lock:
            for i, row in zip(idx, v):
                _write(ctx, ta, host, int(i), host.to_device(np.array(row)))
        return flow_in
    return scatter


def _concat_kernel(ctx):
    host = _Host(ctx.device)
    rest = as_shape(ctx.attrs.get("element_shape_except0", TensorShape(None)))

    def concat(step, handle, flow_in):
        ta = _lookup(ctx, step, handle)
        with ta.lock:
            vals = [host.to_host(_read(ctx, ta, host, i)) for i in range(ta.size)]
        for i, v in enumerate(vals):
            if v.ndim == 0:
                raise ctx.error(_E, f"TensorArray {ta.name!r}: concat needs elements of rank >= 1; index {i} "
                                    "is a scalar")
            if v.shape[1:] != vals[0].shape[1:]:
                raise ctx.error(_E, f"TensorArray {ta.name!r}: concat needs elements whose shapes agree after "
                                    f"the first dimension: index 0 has shape {vals[0].shape}, index {i} "
                                    f"has {v.shape}")
        lengths = np.array([v.shape[0] for v in vals], np.int64)
        if vals:
            out = np.concatenate(vals).astype(ta.dtype.np_dtype, copy=False)
        else:
            if not rest.is_fully_defined():
                raise ctx.error(_E, f"TensorArray {ta.name!r}: concat of no elements needs a fully defined "
                                    f"element_shape_except0, have {rest}")
            out = np.zeros([0, *rest.as_list()], ta.dtype.np_dtype)
        return host.to_device(out), host.to_device(lengths)
    return concat


def _split_kernel(ctx):
    host = _Host(ctx.device)

    def split(step, handle, value, lengths, flow_in):
        ta = _lookup(ctx, step, handle)
        v = host.to_host(value)
        lens = host.int_vector(lengths)
        if v.ndim == 0:
            raise ctx.error(_E, f"TensorArray {ta.name!r}: split needs a value of rank >= 1, got a scalar")
        if (lens < 0).any() or int(lens.sum()) != v.shape[0]:
            raise ctx.error(_E, f"TensorArray {ta.name!r}: split lengths {lens.tolist()} must be >= 0 and add "
                                f"up to the value's first dimension {v.shape[0]}")
        offsets = np.concatenate([[0], np.cumsum(lens)])
        with ta.lock:
            if len(lens) > ta.size and not ta.dynamic_size:
                raise ctx.error(_E, f"TensorArray {ta.name!r}: split into {len(lens)} pieces, but the array "
                                    f"has size {ta.size} and is not dynamic_size")
            for i in range(len(lens)):
                _write(ctx, ta, host, i, host.to_device(np.array(v[offsets[i]:offsets[i + 1]])), check_shape=False)
        return flow_in
    return split


def _size_kernel(ctx):
    host = _Host(ctx.device)

    def size(step, handle, flow_in):
        ta = _lookup(ctx, step, handle)
        return host.to_device(np.array(ta.size, np.int32))
    return size


def _close_kernel(ctx):
    def close(step, handle):
        key = handle_key(handle)
        ta = step_resources(ctx, step).get(key)
        if ta is not None:
            ta.closed = True
            ta.elements.clear()
    return close


# ops with an element type attr, the attr, and the kernel factory
_TYPED = (("TensorArrayV3", "dtype", _tensor_array), ("TensorArrayWriteV3", "T", _write_kernel),
          ("TensorArrayReadV3", "dtype", _read_kernel), ("TensorArrayGatherV3", "dtype", _gather_kernel),
          ("TensorArrayScatterV3", "T", _scatter_kernel), ("TensorArrayConcatV3", "dtype", _concat_kernel),
          ("TensorArraySplitV3", "T", _split_kernel))
_UNTYPED = (("TensorArrayGradV3", _grad), ("TensorArraySizeV3", _size_kernel), ("TensorArrayCloseV3", _close_kernel))
# index/size inputs the kernels want on the host
_HOST = {"TensorArrayV3": ("size",), "TensorArrayWriteV3": ("index",), "TensorArrayReadV3": ("index",),
         "TensorArrayGatherV3": ("indices",), "TensorArrayScatterV3": ("indices",),
         "TensorArraySplitV3": ("lengths",)}


def register_kernels(reg, device_type="*", held=EVERY_DEVICE_DTYPES):
    """For ``"*"`` (the dtypes every device holds) and, with ``held``, one device type's
    other dtypes (the CPU: all of them)."""
    names = dtypes_to_register(device_type, held)
    for op, attr, factory in _TYPED:
        if names:
            reg.register(op, device_type, factory=factory, takes_context=True, constraints={attr: names},
                         host_memory=_HOST.get(op, ()))
    if device_type == "*":
        for op, factory in _UNTYPED:
            reg.register(op, device_type, factory=factory, takes_context=True)
