"""``tw.train.FtrlOptimizer``: FTRL-proximal with TF1's ``ApplyFtrl`` update, composed from
ordinary ops (every new value is computed from the old ones before any is written); a sparse
gradient updates only its rows of ``var`` and both slots (SparseApplyFtrl)."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import get_default_graph
from tensorweave.ops import array_ops, control_flow_ops, math_ops, state_ops, training_ops
from tensorweave.train.optimizer import Optimizer


class FtrlOptimizer(Optimizer):
    """FTRL-proximal (McMahan et al. 2013) with TF1's ``ApplyFtrl`` update; slots ``accum``
    (initialised to ``initial_accumulator_value``) and ``linear`` (zeros)::

        accum_new = accum + g^2
        linear += g - (accum_new^-p - accum^-p) / lr * var        (p = learning_rate_power)
        quadratic = accum_new^-p / lr + 2 * l2
        var = (sign(linear) * l1 - linear) / quadratic  if |linear| > l1  else 0
    """

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0, use_locking=False, name="Ftrl",
                 accum_name=None, linear_name=None, l2_shrinkage_regularization_strength=0.0):
        if initial_accumulator_value < 0.0:
            raise errors.InvalidArgumentError(f"FtrlOptimizer: initial_accumulator_value {initial_accumulator_value} must be >= 0")
        if learning_rate_power > 0.0:
            raise errors.InvalidArgumentError(f"FtrlOptimizer: learning_rate_power {learning_rate_power} must be <= 0")
        if l1_regularization_strength < 0.0 or l2_regularization_strength < 0.0:
            raise errors.InvalidArgumentError("FtrlOptimizer: l1_ and l2_regularization_strength must be >= 0")
        if l2_shrinkage_regularization_strength:
            raise errors.UnimplementedError("FtrlOptimizer: l2_shrinkage_regularization_strength is not supported")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._lr_power = learning_rate_power
        self._initial = initial_accumulator_value
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength
        self._accum_name, self._linear_name = accum_name or name, linear_name or f"{name}_1"

    def _create_slots(self, var_list):
        for v in var_list:
            self._constant_slot(v, self._initial, "accum", self._accum_name)
            self._zeros_slot(v, "linear", self._linear_name)

    def _apply_dense(self, grad, var):
        accum, linear = self.get_slot(var, "accum"), self.get_slot(var, "linear")
        dt = var.dtype
        lr = self._hyper(self._learning_rate, dt, "learning_rate")
        power = self._hyper(-self._lr_power, dt, "neg_learning_rate_power")
        l1 = self._hyper(self._l1, dt, "l1_regularization_strength")
        l2 = self._hyper(self._l2, dt, "l2_regularization_strength")
        accum_old = array_ops.identity(accum)
        accum_new = accum_old + grad * grad
        sigma = (math_ops.pow(accum_new, power) - math_ops.pow(accum_old, power)) / lr
        linear_new = linear + grad - sigma * var
        quadratic = math_ops.pow(accum_new, power) / lr + 2.0 * l2
        keep = math_ops.cast(math_ops.greater(math_ops.abs(linear_new), l1), dt)
        var_new = keep * (math_ops.sign(linear_new) * l1 - linear_new) / quadratic
        # Every new value is computed from the old ones before any of them is written.
        with get_default_graph().control_dependencies([accum_new, linear_new, var_new]):
            return control_flow_ops.group(state_ops.assign(var, var_new), state_ops.assign(accum, accum_new),
                                          state_ops.assign(linear, linear_new))

    def _apply_sparse(self, grad, var):
        dt = var.dtype
        return training_ops.sparse_apply_ftrl(
            var, self.get_slot(var, "accum"), self.get_slot(var, "linear"), grad.values, grad.indices,
            self._hyper(self._learning_rate, dt, "learning_rate"), self._hyper(self._l1, dt, "l1_regularization_strength"),
            self._hyper(self._l2, dt, "l2_regularization_strength"),
            self._hyper(self._lr_power, dt, "learning_rate_power"), use_locking=self._use_locking)
