"""``tw.train.GradientDescentOptimizer``: ``var -= learning_rate * grad``."""

from __future__ import annotations

from tensorweave.ops import training_ops
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
