"""``tw.train.RMSPropOptimizer``: ``ms = decay * ms + (1 - decay) * grad^2;
mom = momentum * mom + lr * grad / sqrt(ms + epsilon); var -= mom``; a sparse gradient updates
only its rows of ``var`` and both slots (SparseApplyRMSProp)."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.ops import training_ops
from tensorweave.train.optimizer import Optimizer


class RMSPropOptimizer(Optimizer):
    """RMSProp; slots ``"rms"`` (``<var>/RMSProp``, initialised to ones, as in TensorFlow)
    and ``"momentum"`` (``<var>/RMSProp_1``, zeros). ``centered=True`` is not implemented."""

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False, centered=False,
                 name="RMSProp"):
        if centered:
            raise errors.UnimplementedError("RMSPropOptimizer: centered=True is not implemented")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._decay = decay
        self._momentum = momentum
        self._epsilon = epsilon

    def _create_slots(self, var_list):
        for v in var_list:
            self._constant_slot(v, 1, "rms", self._name)
            self._zeros_slot(v, "momentum", self._name)

    def _apply_dense(self, grad, var):
        dt = var.dtype
        return training_ops.apply_rms_prop(
            var, self.get_slot(var, "rms"), self.get_slot(var, "momentum"),
            self._hyper(self._learning_rate, dt, "learning_rate"), self._hyper(self._decay, dt, "decay"),
            self._hyper(self._momentum, dt, "momentum"), self._hyper(self._epsilon, dt, "epsilon"), grad,
            use_locking=self._use_locking)

    def _apply_sparse(self, grad, var):
        dt = var.dtype
        return training_ops.sparse_apply_rms_prop(
            var, self.get_slot(var, "rms"), self.get_slot(var, "momentum"),
            self._hyper(self._learning_rate, dt, "learning_rate"), self._hyper(self._decay, dt, "decay"),
            self._hyper(self._momentum, dt, "momentum"), self._hyper(self._epsilon, dt, "epsilon"), grad.values,
            grad.indices, use_locking=self._use_locking)
