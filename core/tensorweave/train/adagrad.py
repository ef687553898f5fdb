"""``tw.train.AdagradOptimizer``: ``accum += grad^2; var -= lr * grad / sqrt(accum)``; a sparse
gradient updates only its rows of ``var`` and ``accum`` (SparseApplyAdagrad)."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.ops import training_ops
from tensorweave.train.optimizer import Optimizer


class AdagradOptimizer(Optimizer):
    """Adagrad; one slot ``"accumulator"`` per variable (``<var>/Adagrad``), initialised to
    ``initial_accumulator_value`` (positive)."""

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False, name="Adagrad"):
        if not initial_accumulator_value > 0.0:
            raise errors.InvalidArgumentError(
                f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_accumulator_value = initial_accumulator_value

    def _create_slots(self, var_list):
        for v in var_list:
            self._constant_slot(v, self._initial_accumulator_value, "accumulator", self._name)

    def _apply_dense(self, grad, var):
        return training_ops.apply_adagrad(
            var, self.get_slot(var, "accumulator"), self._hyper(self._learning_rate, var.dtype, "learning_rate"),
            grad, use_locking=self._use_locking)

    def _apply_sparse(self, grad, var):
        return training_ops.sparse_apply_adagrad(
            var, self.get_slot(var, "accumulator"), self._hyper(self._learning_rate, var.dtype, "learning_rate"),
            grad.values, grad.indices, use_locking=self._use_locking)
