"""Gradient accumulators (TF1 ``tf.ConditionalAccumulator``): what synchronous replicated
training aggregates gradients with (``train/sync_replicas.py``, whitepaper section 7).

This module owns the accumulator resource (``GradientAccumulator``), its ops
(``ConditionalAccumulator``, ``AccumulatorApplyGradient``, ``AccumulatorTakeGradient``,
``AccumulatorSetGlobalStep``, ``AccumulatorNumAccumulated``), their CPU kernels (host
logic, registered by the core's built-in plugin) and the Python class.

Semantics follow TensorFlow 1.x: the accumulator has a time step. ``apply_grad(g,
local_step)`` adds ``g`` to the running sum unless ``local_step`` is older than that time
step (a *stale* gradient, computed from parameters that have since been updated: dropped).
``take_grad(n)`` waits — parked, holding no thread, given back if its step is cancelled —
until at least ``n`` gradients are in, then returns their mean (or sum), empties the
accumulator and advances its time step by one. ``set_global_step(s)`` sets the time step
(the chief does it at start-up, e.g. after restoring a checkpoint).

Like a queue, an accumulator lives in the resources of the task that runs its op (on a ps
task for ``SyncReplicasOptimizer``), shared by name (``shared_name``, else the node name)
by every client's graph; the op outputs a string handle (``runtime/queues.py`` format), and
every op of the Python class is colocated with the accumulator op so it runs where the
accumulator is.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import math_ops, shape_fns
from tensorweave.runtime import queues

__all__ = ["ConditionalAccumulator", "GradientAccumulator"]

_FLOATS = "{float16, float32, float64}"


class GradientAccumulator:
    """The resource behind a ``ConditionalAccumulator`` op (see the module docstring). Thread-safe."""

    def __init__(self, name: str, dtype, shape, reduction_type: str = "MEAN"):
        self.name = name
        self.dtype = dtypes_mod.as_dtype(dtype)
        self.shape = TensorShape(shape)
        self.reduction_type = reduction_type
        self._lock = threading.Lock()
        self._sum = None
        self._count = 0
        self._global_step = 0
        self._takers: collections.deque = collections.deque()  # [n, done, step]

    def describe(self) -> str:
        return f"accumulator {self.name!r}"

    def same_spec(self, other: GradientAccumulator) -> bool:
        return (self.dtype is other.dtype and str(self.shape) == str(other.shape)
                and self.reduction_type == other.reduction_type)

    @property
    def global_step(self) -> int:
        return self._global_step

    def num_accumulated(self) -> int:
        return self._count

    def set_global_step(self, step: int) -> None:
        with self._lock:
            self._global_step = int(step)

    def apply(self, local_step: int, grad) -> bool:
        """Add ``grad`` unless it is stale; True when it was added."""
        grad = np.asarray(grad)
        if grad.dtype != self.dtype.np_dtype:
            raise errors.InvalidArgumentError(
                f"{self.describe()}: gradient of dtype {grad.dtype} for an accumulator of {self.dtype.name}")
        out = []
        with self._lock:
            want = self.shape if self._sum is None else TensorShape(self._sum.shape)
            if not want.is_compatible_with(grad.shape):
                raise errors.InvalidArgumentError(
                    f"{self.describe()}: gradient of shape {tuple(grad.shape)}, expected {want}")
            if int(local_step) < self._global_step:
                return False  # stale: computed before the last update
            # A fresh array: the caller's gradient buffer is never written.
            self._sum = grad.copy() if self._sum is None else self._sum + grad
            self._count += 1
            self._flush(out)
        _call(out)
        return True

    def take_async(self, step, n: int, done) -> None:
        """``done(aggregate)`` once ``n`` gradients are in (or ``done(None, error)``)."""
        if n < 1:
            done(None, errors.InvalidArgumentError(f"{self.describe()}: take_grad needs num_required >= 1, got {n}"))
            return
        attempt = [n, done, step]
        out = []
        with self._lock:
            self._takers.append(attempt)
            self._flush(out)
            parked = attempt in self._takers
        _call(out)
        if parked and step is not None and not step.on_cancel(lambda: self._cancel(attempt)):
            self._cancel(attempt)

    def _cancel(self, attempt) -> None:
        with self._lock:
            try:
                self._takers.remove(attempt)
            except ValueError:
                return  # already served
        attempt[1](None, errors.CancelledError(
            f"{self.describe()}: take_grad cancelled because its step was cancelled (timeout, or another "
            "node failed)"))

    def _flush(self, out) -> None:
        # Only the first waiting take can be served: takes are served in arrival order.
        if self._takers and self._count >= self._takers[0][0]:
            _, done, _ = self._takers.popleft()
            agg = self._sum if self.reduction_type == "SUM" else \
                (self._sum / self._count).astype(self.dtype.np_dtype, copy=False)
            self._sum, self._count = None, 0
            self._global_step += 1
            out.append((done, agg))

    def cancel_takes(self) -> int:
        """Fail every waiting take with CancelledError (a chief stopping, or starting after
        one died mid-take); the gradients accumulated so far stay. Returns how many."""
        with self._lock:
            takers = list(self._takers)
            self._takers.clear()
        for _, done, _ in takers:
            done(None, errors.CancelledError(f"{self.describe()}: take_grad cancelled by cancel_pending_takes"))
        return len(takers)

    def reset(self) -> None:
        """Its container was reset: drop the sum, fail waiting takes (CancelledError)."""
        with self._lock:
            takers = list(self._takers)
            self._takers.clear()
            self._sum, self._count, self._global_step = None, 0, 0
        for _, done, _ in takers:
            done(None, errors.CancelledError(f"{self.describe()} was reset (its container was reset)"))


def _call(out) -> None:
    for done, value in out:
        done(value)


# ----------------------------------------------------------------------------------------
# ops
def _take_shape(op):
    acc = _accumulator_op_of(op.inputs[0])
    return [as_shape(acc.get_attr("shape")) if acc is not None else TensorShape(None)]


def _accumulator_op_of(handle):
    op = handle.op
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return op if op.type == "ConditionalAccumulator" else None


def register_ops(reg):
    reg.op("ConditionalAccumulator", outputs=["handle: string"],
           attrs=[f"dtype: {_FLOATS}", "shape: shape = unknown", "container: string = ''",
                  "shared_name: string = ''", "reduction_type: {'MEAN', 'SUM'} = 'MEAN'"],
           shape_fn=shape_fns.scalar, stateful=True,
           doc="An accumulator of gradients that drops stale ones; outputs its handle.")
    reg.op("AccumulatorApplyGradient", inputs=["handle: string", "local_step: int64", "gradient: dtype"],
           attrs=[f"dtype: {_FLOATS}"], stateful=True,
           doc="Adds a gradient computed at local_step, unless local_step is older than the accumulator's step.")
    reg.op("AccumulatorTakeGradient", inputs=["handle: string", "num_required: int32"], outputs=["average: dtype"],
           attrs=[f"dtype: {_FLOATS}"], shape_fn=_take_shape, stateful=True,
           doc="Waits for num_required gradients, returns their mean (or sum), empties the accumulator and "
               "advances its step.")
    reg.op("AccumulatorSetGlobalStep", inputs=["handle: string", "new_global_step: int64"], stateful=True,
           doc="Sets the accumulator's step (gradients older than it are dropped).")
    reg.op("AccumulatorCancelPendingTakes", inputs=["handle: string"], stateful=True,
           doc="Fails every waiting take with CancelledError (not in TensorFlow; SyncReplicasOptimizer's stop).")
    reg.op("AccumulatorNumAccumulated", inputs=["handle: string"], outputs=["num_accumulated: int32"],
           shape_fn=shape_fns.scalar, stateful=True, doc="The number of gradients accumulated since the last take.")


# ----------------------------------------------------------------------------------------
# kernels (host logic; the accumulator lives in the resources of the task that runs it)
def _accumulator_factory(ctx):
    a = ctx.attrs
    container, name = a["container"], a["shared_name"] or ctx.op.name
    handle = queues.make_handle(container, name)
    resources = ctx.resources
    declared = GradientAccumulator(name, a["dtype"], a["shape"], a.get("reduction_type", "MEAN"))

    def accumulator_op():
        acc = resources.manager_for(container).lookup_or_create(container, name, lambda: declared)
        if not isinstance(acc, GradientAccumulator):
            raise ctx.error(errors.InvalidArgumentError, f"resource {name!r} in container {container!r} is not "
                            "an accumulator")
        if acc is not declared and not acc.same_spec(declared):
            raise ctx.error(errors.InvalidArgumentError,
                            f"shared accumulator {name!r} already exists with dtype {acc.dtype.name}, shape "
                            f"{acc.shape}, reduction {acc.reduction_type}; this node declares a different one")
        return handle
    return accumulator_op


def _lookup(ctx):
    resources = ctx.resources

    def find(handle) -> GradientAccumulator:
        container, name = queues.parse_handle(handle)
        try:
            acc = resources.manager_for(container).lookup(container, name)
        except errors.NotFoundError:
            raise ctx.error(errors.NotFoundError, f"accumulator {name!r} not found in container {container!r}: "
                            "its ConditionalAccumulator op has not run on this task") from None
        if not isinstance(acc, GradientAccumulator):
            raise ctx.error(errors.InvalidArgumentError, f"resource {name!r} is not an accumulator")
        return acc
    return find


def _apply_factory(ctx):
    find = _lookup(ctx)

    def apply_gradient(step, done, handle, local_step, grad):
        try:
            acc = find(handle)
        except errors.OpError as e:
            done(None, e)
            return
        try:
            acc.apply(int(local_step), grad)
        except errors.OpError as e:
            done(None, ctx.error(type(e), e.message))
            return
        done(None)
    return apply_gradient


def _take_factory(ctx):
    find = _lookup(ctx)

    def take_gradient(step, done, handle, num_required):
        try:
            acc = find(handle)
        except errors.OpError as e:
            done(None, e)
            return
        acc.take_async(step, int(num_required), done)
    return take_gradient


def _set_step_factory(ctx):
    find = _lookup(ctx)

    def set_global_step(step, done, handle, new_step):
        try:
            find(handle).set_global_step(int(new_step))
        except errors.OpError as e:
            done(None, e)
            return
        done(None)
    return set_global_step


def _cancel_factory(ctx):
    find = _lookup(ctx)

    def cancel_pending_takes(step, done, handle):
        try:
            find(handle).cancel_takes()
        except errors.OpError as e:
            done(None, e)
            return
        done(None)
    return cancel_pending_takes


def _num_factory(ctx):
    find = _lookup(ctx)

    def num_accumulated(step, done, handle):
        try:
            n = find(handle).num_accumulated()
        except errors.OpError as e:
            done(None, e)
            return
        done(np.array(n, dtype=np.int32))
    return num_accumulated


def register_kernels(reg):
    reg.register("ConditionalAccumulator", "CPU", factory=_accumulator_factory)
    reg.register("AccumulatorApplyGradient", "CPU", factory=_apply_factory, is_async=True)
    reg.register("AccumulatorTakeGradient", "CPU", factory=_take_factory, is_async=True)
    reg.register("AccumulatorSetGlobalStep", "CPU", factory=_set_step_factory, is_async=True)
    reg.register("AccumulatorNumAccumulated", "CPU", factory=_num_factory, is_async=True)
    reg.register("AccumulatorCancelPendingTakes", "CPU", factory=_cancel_factory, is_async=True)


# ----------------------------------------------------------------------------------------
class ConditionalAccumulator:
    """``tf.ConditionalAccumulator``: averages gradients, dropping stale ones (module docstring).

    Every op it builds is colocated with the accumulator op, so they run on the task whose
    resources hold the accumulator (a device scope around the constructor chooses it).
    """

    def __init__(self, dtype, shape=None, shared_name=None, name="conditional_accumulator", reduction_type="MEAN"):
        dtype = dtypes_mod.as_dtype(dtype)
        if dtype not in (dtypes_mod.float16, dtypes_mod.float32, dtypes_mod.float64):
            raise errors.InvalidArgumentError(
                f"ConditionalAccumulator '{name}': dtype must be float16, float32 or float64, got {dtype.name}")
        if reduction_type not in ("MEAN", "SUM"):
            raise errors.InvalidArgumentError(
                f"ConditionalAccumulator '{name}': reduction_type must be 'MEAN' or 'SUM', got {reduction_type!r}")
        self._dtype = dtype
        self._shape = as_shape(shape) if shape is not None else TensorShape(None)
        g = get_default_graph()
        self._ref = apply_op("ConditionalAccumulator", [], {
            "dtype": dtype, "shape": self._shape, "container": g._current_container(),
            "shared_name": shared_name or "", "reduction_type": reduction_type}, name=name)

    accumulator_ref = property(lambda self: self._ref)
    name = property(lambda self: self._ref.op.name)
    dtype = property(lambda self: self._dtype)

    def _colocated(self):
        return get_default_graph().colocate_with(self._ref.op)

    def num_accumulated(self, name=None):
        """An int32 scalar: gradients accumulated since the last take."""
        with self._colocated():
            return apply_op("AccumulatorNumAccumulated", [self._ref], name=name or "num_accumulated")

    def set_global_step(self, new_global_step, name=None):
        """An op that sets the accumulator's step to ``new_global_step``."""
        with self._colocated():
            step = convert_to_tensor(new_global_step, dtype=dtypes_mod.int64) \
                if not hasattr(new_global_step, "dtype") else _to_int64(new_global_step)
            return apply_op("AccumulatorSetGlobalStep", [self._ref, step], name=name or "SetGlobalStep")

    def apply_grad(self, grad, local_step=0, name=None):
        """An op that adds ``grad`` (computed at ``local_step``) unless it is stale."""
        grad = convert_to_tensor(grad, dtype=self._dtype)
        if grad.dtype is not self._dtype:
            raise errors.InvalidArgumentError(
                f"accumulator '{self.name}': gradient '{grad.name}' has dtype {grad.dtype.name}, expected "
                f"{self._dtype.name}")
        if not self._shape.is_compatible_with(grad.shape):
            raise errors.InvalidArgumentError(
                f"accumulator '{self.name}': gradient '{grad.name}' has shape {grad.shape}, expected {self._shape}")
        with self._colocated():
            step = convert_to_tensor(local_step, dtype=dtypes_mod.int64) \
                if not hasattr(local_step, "dtype") else _to_int64(local_step)
            return apply_op("AccumulatorApplyGradient", [self._ref, step, grad], name=name or "AccumulatorApplyGradient")

    def cancel_pending_takes(self, name=None):
        """An op that fails every waiting ``take_grad`` with CancelledError (keeping the
        gradients accumulated). Not in TensorFlow: ``SyncReplicasOptimizer`` uses it to end
        its chief's sync op on stop."""
        with self._colocated():
            return apply_op("AccumulatorCancelPendingTakes", [self._ref], name=name or "cancel_pending_takes")

    def take_grad(self, num_required, name=None):
        """The mean (or sum) of at least ``num_required`` fresh gradients; waits for them."""
        with self._colocated():
            n = convert_to_tensor(num_required, dtype=dtypes_mod.int32)
            return apply_op("AccumulatorTakeGradient", [self._ref, n], {"dtype": self._dtype},
                            name=name or "AccumulatorTakeGradient")


def _to_int64(t):
    t = convert_to_tensor(t)
    return t if t.dtype is dtypes_mod.int64 else math_ops.cast(t, dtypes_mod.int64)
