"""``tw.train.MomentumOptimizer``: ``accum = momentum * accum + grad; var -= lr * accum``
(with ``use_nesterov``: ``var -= lr * grad + lr * momentum * accum``). A sparse gradient updates
only its rows of ``var`` and ``accum`` (SparseApplyMomentum)."""

from __future__ import annotations

from tensorweave.ops import training_ops
from tensorweave.train.optimizer import Optimizer


class MomentumOptimizer(Optimizer):
    """Momentum; one zero-initialised slot ``"momentum"`` per variable (``<var>/Momentum``)."""

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum", use_nesterov=False):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = bool(use_nesterov)

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "momentum", self._name)

    def _apply_dense(self, grad, var):
        return training_ops.apply_momentum(
            var, self.get_slot(var, "momentum"), self._hyper(self._learning_rate, var.dtype, "learning_rate"),
            grad, self._hyper(self._momentum, var.dtype, "momentum"), use_locking=self._use_locking,
            use_nesterov=self._use_nesterov)

    def _apply_sparse(self, grad, var):
        return training_ops.sparse_apply_momentum(
            var, self.get_slot(var, "momentum"), self._hyper(self._learning_rate, var.dtype, "learning_rate"),
            grad.values, grad.indices, self._hyper(self._momentum, var.dtype, "momentum"),
            use_locking=self._use_locking, use_nesterov=self._use_nesterov)
