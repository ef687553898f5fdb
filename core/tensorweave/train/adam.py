"""``tw.train.AdamOptimizer`` (Kingma & Ba), with TensorFlow's formulation:
``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); m = beta1 * m + (1 - beta1) * grad;
v = beta2 * v + (1 - beta2) * grad^2; var -= lr_t * m / (sqrt(v) + epsilon)``.

A sparse gradient (IndexedSlices) is applied with TensorFlow's semantics, not lazily: ``m``
and ``v`` decay over all rows (``m = beta1 * m``), the gradient's rows are then added at its
indices (``ScatterAdd`` of ``(1 - beta1) * values``), and every row of ``var`` moves by
``lr_t * m / (sqrt(v) + epsilon)``, so rows not looked up keep moving on their momentum and
the step costs as much as a dense one. ``tw.contrib.opt.LazyAdamOptimizer`` updates only the
looked-up rows."""

from __future__ import annotations

from tensorweave.framework.graph import get_default_graph
from tensorweave.ops import control_flow_ops, math_ops, state_ops, training_ops
from tensorweave.train.optimizer import Optimizer, _device_scope, _group


class AdamOptimizer(Optimizer):
    """Adam; slots ``"m"`` (``<var>/Adam``) and ``"v"`` (``<var>/Adam_1``), both zeros, and
    the optimizer variables ``beta1_power``/``beta2_power`` (beta^t, updated after every
    step, in the dtype of the first variable by name)."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking=False, name="Adam"):
        super().__init__(use_locking, name)
        self._lr = learning_rate
        self._beta1 = beta1
        self._beta2 = beta2
        self._epsilon = epsilon

    def _get_beta_accumulators(self, graph=None):
        graph = graph if graph is not None else get_default_graph()
        return self._get_non_slot_variable("beta1_power", graph), self._get_non_slot_variable("beta2_power", graph)

    def _create_slots(self, var_list):
        first_var = min(var_list, key=lambda v: v.name)
        self._create_non_slot_variable(self._beta1, "beta1_power", first_var)
        self._create_non_slot_variable(self._beta2, "beta2_power", first_var)
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "v", self._name)

    def _apply_dense(self, grad, var):
        dt = var.dtype
        beta1_power, beta2_power = self._get_beta_accumulators(var.graph)
        return training_ops.apply_adam(
            var, self.get_slot(var, "m"), self.get_slot(var, "v"),
            math_ops.cast(beta1_power, dt), math_ops.cast(beta2_power, dt),
            self._hyper(self._lr, dt, "learning_rate"), self._hyper(self._beta1, dt, "beta1"),
            self._hyper(self._beta2, dt, "beta2"), self._hyper(self._epsilon, dt, "epsilon"), grad,
            use_locking=self._use_locking)

    def _sparse_hypers(self, var):
        """(lr_t, beta1, beta2, epsilon) in ``var``'s dtype, lr_t the bias-corrected rate."""
        dt = var.dtype
        beta1_power, beta2_power = self._get_beta_accumulators(var.graph)
        beta1_power, beta2_power = math_ops.cast(beta1_power, dt), math_ops.cast(beta2_power, dt)
        beta1, beta2 = self._hyper(self._beta1, dt, "beta1"), self._hyper(self._beta2, dt, "beta2")
        lr = self._hyper(self._lr, dt, "learning_rate") * math_ops.sqrt(1 - beta2_power) / (1 - beta1_power)
        return lr, beta1, beta2, self._hyper(self._epsilon, dt, "epsilon")

    def _apply_sparse(self, grad, var):
        lr, beta1, beta2, epsilon = self._sparse_hypers(var)
        g = get_default_graph()
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        locking = self._use_locking
        m_t = state_ops.assign(m, m * beta1, use_locking=locking)
        with g.control_dependencies([m_t]):
            m_t = state_ops.scatter_add(m, grad.indices, grad.values * (1 - beta1), use_locking=locking)
        v_t = state_ops.assign(v, v * beta2, use_locking=locking)
        with g.control_dependencies([v_t]):
            v_t = state_ops.scatter_add(v, grad.indices, (grad.values * grad.values) * (1 - beta2),
                                        use_locking=locking)
        var_update = state_ops.assign_sub(var, lr * m_t / (math_ops.sqrt(v_t) + epsilon), use_locking=locking)
        return control_flow_ops.group(var_update, m_t, v_t)

    def _finish(self, update_ops, name_scope):
        g = get_default_graph()
        beta1_power, beta2_power = self._get_beta_accumulators(g)
        with g.control_dependencies(update_ops), _device_scope(g, beta1_power.device):
            dt = beta1_power.dtype
            update_beta1 = state_ops.assign(beta1_power, beta1_power * self._hyper(self._beta1, dt, "beta1"),
                                            use_locking=self._use_locking)
            update_beta2 = state_ops.assign(beta2_power, beta2_power * self._hyper(self._beta2, dt, "beta2"),
                                            use_locking=self._use_locking)
        return _group(list(update_ops) + [update_beta1, update_beta2], name_scope)
