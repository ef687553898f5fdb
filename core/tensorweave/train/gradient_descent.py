"""``tw.train.GradientDescentOptimizer``: ``var -= learning_rate * grad``; a sparse gradient
(IndexedSlices) is a ``ScatterSub`` of ``learning_rate * values`` at its indices."""

from __future__ import annotations

from tensorweave.ops import state_ops, training_ops
from tensorweave.train.optimizer import Optimizer


class GradientDescentOptimizer(Optimizer):
    """Plain gradient descent. ``learning_rate`` is a number, a scalar Tensor (e.g. a
    placeholder) or a callable returning one."""

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply_dense(self, grad, var):
        return training_ops.apply_gradient_descent(
            var, self._hyper(self._learning_rate, var.dtype, "learning_rate"), grad, use_locking=self._use_locking)

    def _apply_sparse_duplicate_indices(self, grad, var):
        # ScatterSub applies every slice, so repeated indices need no summing first (TF's too).
        return self._apply_sparse(grad, var)

    def _apply_sparse(self, grad, var):
        lr = self._hyper(self._learning_rate, var.dtype, "learning_rate")
        return state_ops.scatter_sub(var, grad.indices, grad.values * lr, use_locking=self._use_locking)
