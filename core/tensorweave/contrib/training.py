"""``tw.contrib.training``: ps placement strategies for ``tw.train.replica_device_setter``.

``replica_device_setter(ps_strategy=...)`` asks its strategy for the ps task of each
variable node, in creation order. The default is round robin; the strategies here balance a
load instead (TF1's ``tf.contrib.training``):

- ``GreedyLoadBalancingStrategy(num_tasks, load_fn)``: each variable goes to the task with
  the least load so far (the lowest index on ties), whose load then grows by
  ``load_fn(op)``;
- ``byte_size_load_fn(op)``: a variable's size in bytes, for balancing memory.

So the shards of a partitioned embedding and the model's other variables end up spread by
bytes rather than by count::

    strategy = tw.contrib.training.GreedyLoadBalancingStrategy(
        2, tw.contrib.training.byte_size_load_fn)
    with tw.device(tw.train.replica_device_setter(ps_tasks=2, ps_strategy=strategy)):
        ...
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.tensor_shape import TensorShape

__all__ = ["GreedyLoadBalancingStrategy", "byte_size_load_fn"]


class GreedyLoadBalancingStrategy:
    """Put each op on the ps task with the smallest load so far; its load grows by
    ``load_fn(op)``."""

    def __init__(self, num_tasks, load_fn):
        if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
            raise errors.InvalidArgumentError(
                f"GreedyLoadBalancingStrategy: num_tasks must be an int >= 1, got {num_tasks!r}")
        if not callable(load_fn):
            raise errors.InvalidArgumentError(f"GreedyLoadBalancingStrategy: load_fn must be callable, got {load_fn!r}")
        self._num_tasks = num_tasks
        self._load_fn = load_fn
        self._ps_loads = [0.0] * num_tasks

    @property
    def loads(self) -> list:
        """The load placed on each task so far."""
        return list(self._ps_loads)

    def __call__(self, op) -> int:
        task = min(range(self._num_tasks), key=lambda i: (self._ps_loads[i], i))
        self._ps_loads[task] += self._load_fn(op)
        return task


def byte_size_load_fn(op) -> int:
    """The size in bytes of ``op``'s one output (a variable's value): its static shape, or
    its ``shape`` attr while the output's shape is still unknown."""
    if len(op.outputs) != 1:
        raise errors.InvalidArgumentError(f"byte_size_load_fn: op {op.name} must have a single output")
    output = op.outputs[0]
    shape = output.shape
    if not shape.is_fully_defined():
        try:
            shape = TensorShape(op.get_attr("shape"))
        except (KeyError, ValueError, errors.OpError):
            pass
    if not shape.is_fully_defined():
        raise errors.InvalidArgumentError(
            f"byte_size_load_fn: the shape of {op.name} is not fully defined ({shape}); its size is unknown")
    return shape.num_elements() * output.dtype.size
