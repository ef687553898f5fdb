"""The gradient accumulator resource behind TF1's ``tf.ConditionalAccumulator`` (host logic).

Semantics follow TensorFlow 1.x: the accumulator has a time step. ``apply(local_step, g)``
adds ``g`` to the running sum unless ``local_step`` is older than that time step (a *stale*
gradient, computed from parameters that have since been updated: dropped).
``take_async(step, n, done)`` waits — parked, holding no thread, given back if its step is
cancelled — until at least ``n`` gradients are in, then answers their mean (or sum), empties
the accumulator and advances its time step by one. ``set_global_step(s)`` sets the time step.

The ops are in ``ops/accumulator_ops.py``, their kernels in ``kernels/accumulators.py``.
Like a queue, an accumulator lives in the resources of the task that runs its op.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.tensor_shape import TensorShape


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
