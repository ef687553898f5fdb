"""``tw.contrib.opt``: ``LazyAdamOptimizer`` (TF1 ``tf.contrib.opt.LazyAdamOptimizer``).

LazyAdam is Adam whose sparse step is lazy: for an IndexedSlices gradient (an embedding read
through ``tw.gather``/``embedding_lookup``) only the looked-up rows of ``m``, ``v`` and the
variable are updated; the other rows keep their moments and do not move. That is not the
Adam update (TensorFlow's ``AdamOptimizer`` decays every row's moments and moves every row,
see ``train/adam.py``), but for large embedding tables it costs what the rows cost, not what
the table costs, and usually trains as well. Dense gradients get the ordinary Adam update.
The bias correction uses the optimizer's global ``beta1_power``/``beta2_power``, as in TF.
"""

from __future__ import annotations

from tensorweave.ops import array_ops, control_flow_ops, math_ops, state_ops
from tensorweave.train.adam import AdamOptimizer

__all__ = ["LazyAdamOptimizer"]


class LazyAdamOptimizer(AdamOptimizer):
    """Adam with lazy sparse updates: only the rows a sparse gradient names are updated::

        m[rows] = beta1 * m[rows] + (1 - beta1) * g
        v[rows] = beta2 * v[rows] + (1 - beta2) * g^2
        var[rows] -= lr_t * m[rows] / (sqrt(v[rows]) + epsilon)

    with ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``. Repeated indices are summed
    first (``Optimizer.apply_gradients``). Slots and arguments are Adam's."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking=False,
                 name="LazyAdam"):
        super().__init__(learning_rate, beta1, beta2, epsilon, use_locking, name)

    def _apply_sparse(self, grad, var):
        lr, beta1, beta2, epsilon = self._sparse_hypers(var)
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        indices, values = grad.indices, grad.values
        locking = self._use_locking
        m_t = state_ops.scatter_update(m, indices, beta1 * array_ops.gather(m, indices) + (1 - beta1) * values,
                                       use_locking=locking)
        v_t = state_ops.scatter_update(v, indices,
                                       beta2 * array_ops.gather(v, indices) + (1 - beta2) * (values * values),
                                       use_locking=locking)
        m_rows = array_ops.gather(m_t, indices)
        v_rows = array_ops.gather(v_t, indices)
        var_update = state_ops.scatter_sub(var, indices, lr * m_rows / (math_ops.sqrt(v_rows) + epsilon),
                                           use_locking=locking)
        return control_flow_ops.group(var_update, m_t, v_t)
