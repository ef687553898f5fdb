"""``tw.train.replica_device_setter``: where between-graph replicas put their ops (TF1 semantics).

Whitepaper section 7: every worker client builds the same graph; the model's parameters
live on ``ps`` tasks and everything else runs on the worker that built it. The setter is a
*device function* (``tw.device(fn)``, see ``framework/graph.py``): it is called with each
new op and returns the op's device.

* Variable nodes (``ps_ops``: ``Variable``/``VariableV2``/``VarHandleOp``) go to
  ``ps_device``; their task is chosen by ``ps_strategy`` (default: round robin over
  ``ps_tasks``), unless the op already names a job other than the ps job.
* Every other op goes to ``worker_device``.
* ``merge_devices=True``: a device the op already has from an inner ``tw.device`` scope
  wins field by field (``/device:CPU:0`` inside the setter gives
  ``/job:worker/device:CPU:0``); with ``False`` an op that has any device keeps it.

Each shard of a partitioned variable (``get_variable(..., partitioner=...)``) is a Variable
node of its own, so the strategy spreads the shards too: round robin puts shard ``i`` of
the first such variable on task ``i % ps_tasks``; ``tw.contrib.training``'s
``GreedyLoadBalancingStrategy`` with ``byte_size_load_fn`` balances them by bytes.

A variable's initializer and ``read`` snapshot follow the variable (``tw.Variable``
colocates them), and optimizer updates run on the variable's device, so only gradients
and values travel between workers and ps tasks.
"""

from __future__ import annotations

from tensorweave.distributed.master import _cluster_dict, _normalise_cluster
from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec

__all__ = ["replica_device_setter", "STANDARD_PS_OPS"]

STANDARD_PS_OPS = ("Variable", "VariableV2", "AutoReloadVariable", "VarHandleOp")


class _RoundRobinStrategy:
    """Tasks 0, 1, ..., n-1, 0, ... in the order ps ops are created."""

    def __init__(self, num_tasks: int):
        self._num_tasks = num_tasks
        self._next = 0

    def __call__(self, unused_op) -> int:
        task = self._next
        self._next = (self._next + 1) % self._num_tasks
        return task


class _ReplicaDeviceChooser:
    def __init__(self, ps_tasks, ps_device, worker_device, merge_devices, ps_ops, ps_strategy):
        self._ps_tasks = ps_tasks
        self._ps_device = ps_device
        self._worker_device = worker_device
        self._merge_devices = merge_devices
        self._ps_ops = frozenset(ps_ops)
        self._ps_strategy = ps_strategy

    def device_function(self, op) -> str:
        if not self._merge_devices and op.device:
            return op.device
        current = DeviceSpec.from_string(op.device or "")
        if self._ps_tasks and self._ps_device and op.type in self._ps_ops:
            ps = DeviceSpec.from_string(self._ps_device)
            # The strategy picks the task only when the op is not pinned to another job.
            if ps.job and (current.job is None or current.job == ps.job):
                task = self._ps_strategy(op)
                if not isinstance(task, int) or isinstance(task, bool) or task < 0:
                    raise errors.InvalidArgumentError(
                        f"replica_device_setter: ps_strategy returned {task!r} for op '{op.name}'; "
                        "it must return a task index (an int >= 0)")
                ps = ps.merge_from(DeviceSpec(task=task))
            return ps.merge_from(current).to_string()
        return DeviceSpec.from_string(self._worker_device or "").merge_from(current).to_string()


def replica_device_setter(ps_tasks=0, ps_device="/job:ps", worker_device="/job:worker", merge_devices=True,
                          cluster=None, ps_ops=None, ps_strategy=None):
    """A device function for ``tw.device``: variables on ps tasks, other ops on the worker.

    ``cluster`` (a ``tw.train.ClusterSpec``, a dict of jobs, or a cluster config) gives the
    number of ps tasks (the tasks of ``ps_device``'s job) instead of ``ps_tasks``. Returns
    None when there are no ps tasks (then ``tw.device(None)`` leaves ops unconstrained), as
    in TensorFlow 1.x::

        with tw.device(tw.train.replica_device_setter(cluster=cluster)):
            w = tw.Variable(...)          # /job:ps/task:0
            b = tw.Variable(...)          # /job:ps/task:1 (round robin)
            y = tw.matmul(x, w) + b       # /job:worker
    """
    if cluster is not None:
        try:
            tasks = _normalise_cluster(_cluster_dict(cluster))
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"replica_device_setter: cluster: {e.message}") from None
        ps_job = DeviceSpec.from_string(ps_device).job
        if ps_job is None:
            return None
        ps_tasks = sum(1 for job, _ in tasks if job == ps_job)
    if isinstance(ps_tasks, bool) or not isinstance(ps_tasks, int) or ps_tasks < 0:
        raise errors.InvalidArgumentError(f"replica_device_setter: ps_tasks must be an int >= 0, got {ps_tasks!r}")
    if ps_tasks == 0:
        return None
    for what, spec in (("ps_device", ps_device), ("worker_device", worker_device)):
        if spec is not None and not isinstance(spec, str | DeviceSpec):
            raise errors.InvalidArgumentError(f"replica_device_setter: {what} must be a device string, got {spec!r}")
        DeviceSpec.from_string(spec)  # malformed: InvalidArgumentError naming it
    if ps_strategy is None:
        ps_strategy = _RoundRobinStrategy(ps_tasks)
    if not callable(ps_strategy):
        raise errors.InvalidArgumentError(f"replica_device_setter: ps_strategy must be callable, got {ps_strategy!r}")
    chooser = _ReplicaDeviceChooser(ps_tasks, ps_device, worker_device, merge_devices,
                                    STANDARD_PS_OPS if ps_ops is None else tuple(ps_ops), ps_strategy)
    return chooser.device_function
