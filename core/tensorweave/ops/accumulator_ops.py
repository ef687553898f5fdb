"""Gradient accumulators (TF1 ``tf.ConditionalAccumulator``): what synchronous replicated
training aggregates gradients with (``train/sync_replicas.py``, whitepaper section 7).

This module owns the accumulator resource (``GradientAccumulator``), its ops
(``ConditionalAccumulator``, ``AccumulatorApplyGradient``, ``AccumulatorTakeGradient``,
``AccumulatorSetGlobalStep``, ``AccumulatorNumAccumulated``) and the Python class; the
resource is ``runtime/accumulators.py``, the kernels ``kernels/accumulators.py``.

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

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import math_ops, shape_fns

__all__ = ["ConditionalAccumulator"]

_FLOATS = "{float16, float32, float64}"

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
