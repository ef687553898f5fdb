"""Variables on every device: Variable, Assign, AssignAdd, AssignSub, IsVariableInitialized,
the Scatter ops (ScatterUpdate/Add/Sub/Mul/Div/Min/Max, ScatterNdUpdate/Add), and the one
place where a variable's tensor is written in place (``writable``).

A ``VariableStore`` (``runtime/containers.py``) holds a tensor of the device whose kernel
last wrote it. Whole-value updates never write into a stored tensor: Assign stores the
tensor it is given (tensors are immutable, so no copy), AssignAdd/AssignSub store the result
of the device's own ``Add``/``Sub`` kernel (NumPy's, through the host, on a device without
one). Updates read the current value with ``VariableStore.read_on`` (a value another device
wrote, or a host value, is brought to the updating device) under the store's lock, held
around read-compute-store, so concurrent updates serialise.

Sparse updates (the Scatter ops here, the SparseApply* optimizer kernels of the device
plugins) must not copy a whole embedding table to change a few rows, so they write into the
stored tensor, copy-on-write: ``writable(store, device)`` returns the store's own tensor when
nobody else can observe it, and otherwise stores a private copy first (once: the copy is
then the store's alone, and the next update writes into it). Nobody else can observe it when
(1) its memory is its own, not a view of or shared with another tensor (NumPy: it owns its
data and is writable, ``base is None``), and (2) no other Python reference holds it: the
store's reference is the only one (``sys.getrefcount``, calibrated once at import). So a
fetched value, a value a consumer still holds (the executor drops variable reads and
unconsumed outputs as soon as it can), a fed array or a constant that was assigned keep
their values: the first sparse update after them copies. Validation (index ranges, shapes)
comes before any write, so a rejected update leaves the variable unchanged.

``use_locking``: every update holds the store's lock from its checks to its last write, so
``use_locking=True`` serialises updates as TensorFlow promises and ``False`` (where TF leaves
concurrent updates undefined) does the same. Reads do not take the lock (as TF1's ref
variables): a read on another thread that is not ordered after a sparse update (no data or
control dependency, another concurrent step) may see it half done, as in TensorFlow; a value
read before the update started is never changed by it (condition 2).

The device-specific part of a sparse update is a ``RowWriter``: whether a tensor's memory is
its own, a private copy, and the row updates themselves, in place. ``NUMPY_ROWS`` is the host
one. The Scatter kernels registered here use it on a device whose tensors are host arrays;
on any other device they run through the host (the table is copied out and back: correct,
not sparse) until the device plugin registers its own kernels with
``scatter_factory(op_type, rows)`` and a ``RowWriter`` of its tensors.

The fused optimizer updates (ApplyGradientDescent, ApplyAdam, ...) do their math in one
device kernel each and stay in the device plugins; their sparse forms take their checks,
locks and ``writable`` tensors from ``SparseApply`` here and keep only the row math. A
plugin may write dense updates in place the same way (the CPU's compiled loops do): the
executor drops a step's reads of a variable after their last use, so an update later in the
step finds the variable's tensor unshared.
"""

from __future__ import annotations

import sys

import numpy as np

from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.kernels import EVERY_DEVICE_DTYPES, dtypes_to_register
from tensorweave.runtime.containers import StoreUpdate

_E = errors.InvalidArgumentError
# AssignAdd/AssignSub: the op's T excludes these.
_NOT_NUMBERS = ("bool", "string")


def _variable(ctx):
    # Variable nodes do not run as steps (the executor reads the store at each consumer);
    # this kernel declares that variables can live on the device and serves direct reads.
    return ctx.resources.state_for_op(ctx.op).read


def _assign(ctx):
    store = ctx.ref_input(0)
    validate = ctx.attrs["validate_shape"]

    def assign(value):
        if validate and store.shape.ndims is not None and not store.shape.is_compatible_with(value.shape):
            raise ctx.error(_E, f"cannot assign a value of shape {value.shape} to variable {store.name} "
                                f"of shape {store.shape}")
        with store.lock:
            store.value = value
        return value
    return assign


def _device_binary(ctx, op_type: str, on_host):
    """The device's own kernel for the binary op ``op_type`` (Add, Sub, ...), built for the
    node of ``ctx``, whose inputs and output stand for the op's two inputs and its output:
    same attr ``T``, same shapes. A kernel that takes its inputs in host memory (the CUDA
    plugin's int32 arithmetic) is handed them there. A device with no plain kernel for it
    (a minimal or test device) gets ``on_host`` (a NumPy function) run on host copies, so
    the ops registered for every device type run on every device."""
    reg = plugins.registry()
    device = ctx.device
    kd = reg.kernels.lookup(op_type, device.device_type, ctx.attrs)
    if kd is None or kd.is_async or kd.takes_context:
        if device.host_tensors:
            return on_host
        to_host, to_device = device.to_host, device.to_device

        def through_host(a, b):
            return to_device(np.asarray(on_host(to_host(a), to_host(b))))
        return through_host
    compute = kd.factory(ctx)
    if not kd.host_memory or device.host_tensors:
        return compute
    host_inputs = [arg.name in kd.host_memory for arg in reg.ops.get(op_type).inputs]
    to_host = device.to_host

    def compute_with_host_inputs(*args):
        return compute(*(to_host(a) if h else a for a, h in zip(args, host_inputs)))
    return compute_with_host_inputs


def _update(op_type: str, on_host):
    def factory(ctx):
        store = ctx.ref_input(0)
        device = ctx.device
        read_on = store.read_on
        combine = _device_binary(ctx, op_type, on_host)

        def update(delta):
            with store.lock:
                cur = read_on(device)
                new = combine(cur, delta)
                if new.shape != cur.shape:
                    raise ctx.error(_E, f"update of shape {delta.shape} does not match variable {store.name} "
                                        f"of shape {cur.shape}")
                store.value = new
            return new
        return update
    return factory


# ---------------------------------------------------------------------------------------
# copy-on-write: writing into a variable's tensor in place
class RowWriter:
    """What a device provides for in-place sparse updates of its tensors (``NUMPY_ROWS`` is
    the host's). ``indices`` are host int arrays, already checked to be in range;
    ``updates`` are tensors of the device, of shape ``[n] + target.shape[k:]`` or scalars."""

    def owns(self, t) -> bool:
        """Whether ``t``'s memory is its own: writable, not shared with another tensor (a
        view, a reshape of it). Python references to ``t`` itself are ``writable``'s concern."""
        raise NotImplementedError

    def copy(self, t):
        """A private copy of ``t`` on its device (``owns`` is true of it)."""
        raise NotImplementedError

    def scatter(self, kind: str, target, indices, updates) -> None:
        """``target[indices[i]] <kind>= updates[i]`` in place, for ``kind`` in update, add,
        sub, mul, div, min, max; ``indices`` a 1-D array of row numbers, which may repeat
        (all of them apply; for update one wins)."""
        raise NotImplementedError

    def scatter_nd(self, kind: str, target, indices, updates) -> None:
        """Like ``scatter`` with ``indices`` of shape ``[n, K]``: the first K coordinates."""
        raise NotImplementedError


def distinct(idx) -> bool:
    """Whether the row numbers ``idx`` (a 1-D host array) are all different."""
    return idx.size < 2 or np.unique(idx).size == idx.size


class _NumpyRows(RowWriter):
    """In-place row updates of NumPy arrays. Unique indices take the vectorised path
    (``a[idx] = f(a[idx], u)``); repeated ones the ufunc's ``.at``, which applies each."""

    _UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}

    def owns(self, t) -> bool:
        return type(t) is np.ndarray and t.base is None and t.flags.owndata and t.flags.writeable

    def copy(self, t):
        return np.array(t, copy=True)

    def scatter(self, kind, target, indices, updates):
        self._apply(kind, target, indices, updates)

    def scatter_nd(self, kind, target, indices, updates):
        self._apply(kind, target, tuple(indices.T), updates)

    def _apply(self, kind, target, where, updates):
        flat = where if not isinstance(where, tuple) else np.ravel_multi_index(where, target.shape[:len(where)])
        if kind == "update":
            target[where] = updates
            return
        if kind == "div":
            self._divide(target, where, flat, updates)
            return
        ufunc = self._UFUNCS[kind]
        if distinct(flat):
            target[where] = ufunc(target[where], updates)
        else:
            ufunc.at(target, where, updates)

    def _divide(self, target, where, flat, updates):
        if target.dtype.kind not in "iu":
            if distinct(flat):
                target[where] = target[where] / updates
            else:
                np.divide.at(target, where, updates)
            return
        # Integer division truncates (C's, TensorFlow's): dividing by d1 then d2 is dividing
        # by d1 * d2, so repeated indices first multiply their divisors together.
        k = len(where) if isinstance(where, tuple) else 1
        uniq, inverse = np.unique(flat, return_inverse=True)
        upd = np.broadcast_to(updates, (flat.size,) + target.shape[k:])
        divisors = np.ones((uniq.size,) + upd.shape[1:], dtype=target.dtype)
        np.multiply.at(divisors, inverse, upd)
        rows = np.unravel_index(uniq, target.shape[:k]) if isinstance(where, tuple) else uniq
        cur = target[rows]
        with np.errstate(all="ignore"):
            q = np.where(divisors == 0, 0, np.trunc(cur / np.where(divisors == 0, 1, divisors)))
        target[rows] = q.astype(target.dtype)


NUMPY_ROWS = _NumpyRows()


class _Probe:
    __slots__ = ("value",)


def _refs(holder) -> int:
    return sys.getrefcount(holder.value)


def _calibrate() -> int:
    # The count _refs sees when the holder's reference is the only one (the interpreter's
    # own temporaries included), measured rather than assumed: it differs between versions.
    probe = _Probe()
    probe.value = np.empty(1)
    return _refs(probe)


_ALONE = _calibrate()


def _on(store, device) -> bool:
    """Whether the store's value is a tensor of ``device`` (no copy needed to update it there)."""
    src = store.device
    if src is None:
        return device.host_tensors == isinstance(store.value, np.ndarray)
    return src is device or src.name == device.name or (src.host_tensors and device.host_tensors)


def writable(store, device, rows: RowWriter = NUMPY_ROWS):
    """The tensor of ``store`` on ``device`` that an update may write into in place: the
    store's own when nothing else can observe it (its memory is its own and the store holds
    the only reference), else a private copy, which becomes the store's value (so the next
    update writes into it). Call it with ``store.lock`` held, after every check that can
    fail, and write before releasing the lock. Raises like ``VariableStore.read`` when the
    variable is uninitialised."""
    if store.value is None:
        store.read()
    # The count comes first: any local bound to the value would count as another holder.
    if _refs(store) <= _ALONE and _on(store, device) and rows.owns(store.value):
        return store.value
    cur = store.read_on(device)
    # A value brought from another device or from the host is a fresh tensor: already private.
    mine = rows.copy(cur) if cur is store.value else cur
    store.value = mine
    return mine


def _bad_index(ctx, store, indices, shape, nd: bool):
    """The error for the first index of ``indices`` out of range, or None when all are in it."""
    idx = np.asarray(indices)
    if nd:
        k = idx.shape[-1]
        limits = np.asarray(shape[:k], dtype=np.int64)
        bad = (idx < 0) | (idx >= limits)
        if not bad.any():
            return None
        pos = np.unravel_index(int(np.argmax(bad.any(axis=-1).reshape(-1))), idx.shape[:-1])
        at = ",".join(str(int(p)) for p in pos)
        val = idx[pos].tolist()
        return ctx.error(_E, f"indices[{at}] = {val} does not index into the variable {store.name} of shape "
                             f"{tuple(shape)} (each coordinate j must be in [0, shape[j])); the variable is unchanged")
    n = shape[0]
    bad = (idx < 0) | (idx >= n)
    if not bad.any():
        return None
    pos = np.unravel_index(int(np.argmax(bad.reshape(-1))), idx.shape)
    at = ",".join(str(int(p)) for p in pos)
    return ctx.error(_E, f"indices[{at}] = {int(idx[pos])} is not in [0, {n}): variable {store.name} has {n} rows; "
                         "the variable is unchanged")


def validate_rows(ctx, store, indices, updates, shape, nd: bool = False):
    """Check a sparse update of a variable of ``shape`` before anything is written: the
    indices in range, ``updates`` of shape ``indices.shape + shape[1:]`` (``nd``:
    ``indices.shape[:-1] + shape[K:]``) or a scalar. Returns the indices as a host array of
    row numbers (``[n]``, or ``[n, K]`` for ``nd``)."""
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise ctx.error(_E, f"indices must be integers, got {idx.dtype}")
    if nd:
        if idx.ndim == 0:
            raise ctx.error(_E, "indices must have rank >= 1: the last dimension indexes the variable")
        k = idx.shape[-1]
        if k > len(shape):
            raise ctx.error(_E, f"indices of shape {idx.shape} index {k} dimensions of variable {store.name}, "
                                f"which has shape {tuple(shape)}")
        want = idx.shape[:-1] + tuple(shape[k:])
    else:
        if len(shape) == 0:
            raise ctx.error(_E, f"cannot scatter into the scalar variable {store.name}")
        want = idx.shape + tuple(shape[1:])
    u_shape = tuple(np.shape(updates)) if not hasattr(updates, "shape") else tuple(updates.shape)
    if u_shape and u_shape != want:
        raise ctx.error(_E, f"updates of shape {u_shape} do not match indices of shape {idx.shape} and variable "
                            f"{store.name} of shape {tuple(shape)}: expected {want} or a scalar; the variable is "
                            "unchanged")
    err = _bad_index(ctx, store, idx, shape, nd)
    if err is not None:
        raise err
    return idx.reshape(-1, idx.shape[-1]) if nd else idx.reshape(-1)


def _shape(x) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))


class SparseApply:
    """The device-independent part of a sparse optimizer update (SparseApplyMomentum,
    SparseApplyAdagrad, ...) of ``n_refs`` refs (the variable, then its slots), built once per
    node in a kernel factory: ``guard`` holds the locks of all of them
    (``runtime.containers.StoreUpdate``), and ``targets`` checks the update and hands out the
    tensors to write its rows into. A device's kernel keeps only the row math."""

    def __init__(self, ctx, n_refs: int, grad_pos: int, idx_pos: int, rows: RowWriter = NUMPY_ROWS):
        self.ctx = ctx
        self.stores = [ctx.ref_input(i) for i in range(n_refs)]
        self.guard = StoreUpdate(ctx, self.stores)
        self.names = [t.name for t in ctx.op.inputs[n_refs:]]  # the other inputs: args
        self.grad_pos, self.idx_pos = grad_pos, idx_pos
        self.rows = rows

    def targets(self, args, indices):
        """With ``guard`` held: ``(idx, targets)``, the host array ``indices`` as a vector of
        row numbers and the tensors of the variable and its slots, written in place
        (``writable``), after checking before anything is written that ``args`` (the inputs
        after the refs) hold scalars but for grad and indices, that grad has a row per index
        (``validate_rows``) and that the slots have the variable's shape."""
        ctx, stores = self.ctx, self.stores
        for i, (name, a) in enumerate(zip(self.names, args)):
            if i not in (self.grad_pos, self.idx_pos) and _shape(a) != ():
                raise ctx.error(_E, f"'{name}' must be a scalar, got a value of shape {_shape(a)}")
        if len(_shape(indices)) != 1:
            raise ctx.error(_E, f"indices must be a vector, got a value of shape {_shape(indices)}")
        grad = args[self.grad_pos]
        if not _shape(grad):
            raise ctx.error(_E, "grad must hold one row per index, got a scalar")
        # Shapes only: a reference to a value held here would make writable() copy it.
        shapes = [tuple(s.read().shape) for s in stores]
        for s, shape in zip(stores[1:], shapes[1:]):
            if shape != shapes[0]:
                raise ctx.error(_E, f"slot {s.name} of shape {shape} does not match variable {stores[0].name} of "
                                    f"shape {shapes[0]}")
        idx = validate_rows(ctx, stores[0], indices, grad, shapes[0])
        return idx, [writable(s, ctx.device, self.rows) for s in stores]


def _flat_updates(updates, n, row_shape):
    """``updates`` as ``[n] + row_shape`` (a scalar stays a scalar: it applies to every row)."""
    if not tuple(updates.shape):
        return updates
    return updates.reshape((n,) + tuple(row_shape))


def scatter_factory(op_type: str, rows: RowWriter | None = None):
    """The kernel factory of the Scatter op ``op_type`` for a device whose ``RowWriter`` is
    ``rows`` (its row updates in place on its tensors). ``rows=None``: NumPy's in place on a
    device whose tensors are host arrays, through the host on any other (a whole copy of the
    variable each update: correct, not sparse; a device plugin registers its own)."""
    kind = _SCATTER_KINDS[op_type]
    nd = op_type.startswith("ScatterNd")

    def factory(ctx):
        store = ctx.ref_input(0)
        device = ctx.device
        writer = rows if rows is not None else (NUMPY_ROWS if device.host_tensors else None)
        to_host, to_device = device.to_host, device.to_device

        def scatter(indices, updates):
            with store.lock:
                cur = store.read()
                shape = tuple(cur.shape)
                del cur  # a reference held here would make writable() copy
                through_host = writer is None
                if through_host:
                    updates = to_host(updates)
                # indices are host memory (the kernel's host_memory), checked before any write
                idx = validate_rows(ctx, store, np.asarray(indices), updates, shape, nd)
                upd = _flat_updates(updates, idx.shape[0], shape[idx.shape[1]:] if nd else shape[1:])
                if through_host:
                    # No row kernels on this device: update a host copy, store it back.
                    host = np.array(to_host(store.read_on(device)), copy=True)
                    (NUMPY_ROWS.scatter_nd if nd else NUMPY_ROWS.scatter)(kind, host, idx, upd)
                    store.value = to_device(host)
                    return store.value
                target = writable(store, device, writer)
                (writer.scatter_nd if nd else writer.scatter)(kind, target, idx, upd)
                return target
        return scatter
    return factory


_SCATTER_KINDS = {
    "ScatterUpdate": "update", "ScatterAdd": "add", "ScatterSub": "sub", "ScatterMul": "mul", "ScatterDiv": "div",
    "ScatterMin": "min", "ScatterMax": "max", "ScatterNdUpdate": "update", "ScatterNdAdd": "add",
}
# Ops whose T includes every dtype (the others take numbers only, Min/Max real ones).
_ANY_T = ("ScatterUpdate", "ScatterNdUpdate")
_NOT_REAL = ("bool", "string", "complex64", "complex128")


def _is_initialized(ctx):
    store = ctx.ref_input(0)
    if ctx.device.host_tensors:
        return lambda: np.array(store.value is not None)
    answers = {v: ctx.device.to_device(np.array(v)) for v in (False, True)}
    return lambda: answers[store.value is not None]


def register_kernels(registry, device_type: str = "*", held=None) -> None:
    """The variable kernels for ``device_type`` and the dtypes ``held`` there (by default
    ``"*"`` and ``EVERY_DEVICE_DTYPES``; see ``tensorweave.kernels``)."""
    names = dtypes_to_register(device_type, EVERY_DEVICE_DTYPES if held is None else held)
    if not names:
        return
    registry.register("Variable", device_type, factory=_variable, constraints={"dtype": names})
    registry.register("Assign", device_type, factory=_assign, constraints={"T": names})
    registry.register("IsVariableInitialized", device_type, factory=_is_initialized, constraints={"dtype": names})
    numbers = [n for n in names if n not in _NOT_NUMBERS]
    if numbers:
        registry.register("AssignAdd", device_type, factory=_update("Add", np.add), constraints={"T": numbers})
        registry.register("AssignSub", device_type, factory=_update("Sub", np.subtract), constraints={"T": numbers})
    real = [n for n in names if n not in _NOT_REAL]
    for op_type, kind in _SCATTER_KINDS.items():
        allowed = names if op_type in _ANY_T else real if kind in ("min", "max") else numbers
        if allowed:
            registry.register(op_type, device_type, factory=scatter_factory(op_type), host_memory=("indices",),
                              constraints={"T": allowed, "Tindices": ["int32", "int64"]})
