"""``tw.train.SyncReplicasOptimizer``: synchronous data-parallel training (whitepaper 7, Figure 7 top).

Between-graph replication: every worker client builds the same graph (variables on ps
tasks through ``replica_device_setter``) and wraps its optimizer::

    opt = tw.train.SyncReplicasOptimizer(tw.train.AdamOptimizer(1e-3),
                                         replicas_to_aggregate=2, total_num_replicas=2)
    train_op = opt.minimize(loss, global_step=global_step)
    hook = opt.make_session_run_hook(is_chief=(task_index == 0))

How a step works (TensorFlow 1.x's design, built on ``tw.ConditionalAccumulator``):

* Each worker's ``train_op`` adds its gradients, tagged with its ``local_step``, to one
  accumulator per variable (on the variable's ps task), then waits for a *token* from the
  token queue and sets its ``local_step`` to the token's value.
* The chief runs the ``sync_op`` in a queue-runner thread (``get_chief_queue_runner``,
  started by the hook): for each variable it takes the mean of ``replicas_to_aggregate``
  fresh gradients (waiting for them), applies the wrapped optimizer once to those means
  (incrementing ``global_step``), then puts ``max(total_num_replicas,
  replicas_to_aggregate)`` tokens holding the new global step in the token queue.
* A gradient computed from parameters that have been updated since (its ``local_step`` is
  older than the accumulator's step) is dropped, so with ``total_num_replicas >
  replicas_to_aggregate`` the slowest workers are *backup workers* whose late gradients do
  not count.

With ``total_num_replicas == replicas_to_aggregate`` and no initial tokens
(``make_session_run_hook(is_chief, num_tokens=0)``), every update averages exactly one
gradient from each replica: N replicas with batches of b give the same parameters as one
process training on batches of N*b (``tests/distributed/test_replicated.py`` checks it).
The default ``num_tokens=-1`` puts ``replicas_to_aggregate`` tokens in the queue at start,
as TensorFlow does, so a fast worker may contribute twice to the first update.

State lives on the tasks: accumulators and the token queue in the ps task's resources
(shared by name by every client's graph), ``local_step`` in each worker task's (a local
variable, ``tw.local_variables_initializer``). Give each worker client a task-specific
``worker_device`` (``/job:worker/task:1``) so its local step has one home.
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.graph import GraphKeys
from tensorweave.ops import array_ops, control_flow_ops, state_ops
from tensorweave.ops.accumulator_ops import ConditionalAccumulator
from tensorweave.ops.data_flow_ops import FIFOQueue
from tensorweave.ops.variables import Variable
from tensorweave.train.hooks import SessionRunHook
from tensorweave.train.optimizer import Optimizer, WrappingOptimizer
from tensorweave.train.queue_runner import QueueRunner
from tensorweave.train.training_util import assert_global_step

__all__ = ["SyncReplicasOptimizer"]


def _cpu_of(device: str) -> str:
    """The CPU of the task of ``device`` (accumulators are host data structures)."""
    spec = DeviceSpec.from_string(device or "")
    return DeviceSpec(spec.job, spec.replica, spec.task, "CPU").to_string()


class SyncReplicasOptimizer(WrappingOptimizer):
    """Aggregates gradients from replicas before one update (see the module docstring)."""

    def __init__(self, opt, replicas_to_aggregate, total_num_replicas=None, variable_averages=None,
                 variables_to_average=None, use_locking=False, name="sync_replicas"):
        super().__init__(use_locking, name)
        if not isinstance(opt, Optimizer):
            raise errors.InvalidArgumentError(
                f"SyncReplicasOptimizer wraps an optimizer (e.g. tw.train.AdamOptimizer), got {opt!r}")
        if total_num_replicas is None:
            total_num_replicas = replicas_to_aggregate
        for what, n in (("replicas_to_aggregate", replicas_to_aggregate), ("total_num_replicas", total_num_replicas)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise errors.InvalidArgumentError(f"SyncReplicasOptimizer: {what} must be an int >= 1, got {n!r}")
        if variable_averages is not None or variables_to_average is not None:
            raise errors.UnimplementedError(
                "SyncReplicasOptimizer: variable_averages (ExponentialMovingAverage) is not supported")
        self._opt = opt
        self._replicas_to_aggregate = replicas_to_aggregate
        self._total_num_replicas = total_num_replicas
        self._tokens_per_step = max(total_num_replicas, replicas_to_aggregate)
        self._gradients_applied = False
        self._global_step = None
        self._sync_token_queue = None
        self._chief_queue_runner = None
        self._accumulator_list = []
        self._local_step = None
        self.local_step_init_op = None
        self.chief_init_op = None
        self.ready_for_local_init_op = None

    # TF1 attribute names
    replicas_to_aggregate = property(lambda self: self._replicas_to_aggregate)
    total_num_replicas = property(lambda self: self._total_num_replicas)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Build this replica's ``train_op`` (returned) and the chief's ``sync_op`` (run by
        ``get_chief_queue_runner()``); ``global_step`` is required (staleness is judged
        against it)."""
        grads_and_vars = tuple(grads_and_vars)
        if not grads_and_vars:
            raise errors.InvalidArgumentError(f"{self._name}.apply_gradients: no (gradient, variable) pairs given")
        if global_step is None:
            raise errors.InvalidArgumentError(
                f"{self._name}.apply_gradients: a global_step is required (gradients are judged stale against it)")
        if self._gradients_applied:
            raise errors.FailedPreconditionError(
                f"{self._name}.apply_gradients was already called; use one SyncReplicasOptimizer per train op")

        assert_global_step(global_step)
        self._global_step = global_step
        graph = global_step.graph
        gs_device = global_step.device
        with graph.as_default():
            # The local step lives on this worker task: anchored to a NoOp placed by the
            # caller's device scope (a replica_device_setter puts it on the worker).
            local_anchor = control_flow_ops.no_op(name="sync_rep_local_anchor")
            with graph.colocate_with(local_anchor), graph.control_dependencies(None):
                self._local_step = Variable(array_ops.constant(0, dtype=global_step.dtype), trainable=False,
                                            collections=[GraphKeys.LOCAL_VARIABLES], name="sync_rep_local_step")
            with graph.colocate_with(self._local_step.op):
                self.local_step_init_op = state_ops.assign(self._local_step, global_step.read_value()).op
            chief_init_ops = [self.local_step_init_op]

            train_ops, aggregated, var_list = [], [], []
            with graph.name_scope(name or self._name):
                for grad, var in grads_and_vars:
                    var_list.append(var)
                    if grad is None:
                        aggregated.append(None)
                        continue
                    if not var.shape.is_fully_defined():
                        raise errors.InvalidArgumentError(
                            f"{self._name}: variable '{var.name}' has shape {var.shape}; synchronous replicas "
                            "need fully defined variable shapes")
                    with graph.device(_cpu_of(var.device)):
                        acc = ConditionalAccumulator(grad.dtype, shape=var.shape,
                                                     shared_name=f"{var.op.name}/grad_accum", name="grad_accum")
                    train_ops.append(acc.apply_grad(grad, local_step=self._local_step._ref()))
                    aggregated.append(acc.take_grad(self._replicas_to_aggregate))
                    self._accumulator_list.append(acc)
                if not self._accumulator_list:
                    raise errors.InvalidArgumentError(
                        f"No gradients provided for any variable: {[v.name for _, v in grads_and_vars]}.")

                with graph.device(gs_device):
                    update_op = self._opt.apply_gradients(list(zip(aggregated, var_list)), global_step)
                with graph.device(_cpu_of(gs_device)):
                    token_queue = FIFOQueue(-1, [global_step.dtype], shapes=[[]], name="sync_token_q",
                                            shared_name=f"{self._name}/sync_token_q")
                self._sync_token_queue = token_queue
                with graph.colocate_with(token_queue.queue_ref.op):
                    # This replica waits for a token (the global step after the next update)
                    # once its gradients are in.
                    with graph.control_dependencies(train_ops):
                        token = token_queue.dequeue()
                    with graph.control_dependencies([update_op]):
                        tokens = array_ops.fill([self._tokens_per_step], global_step.read_value())
                        sync_op = token_queue.enqueue_many([tokens])
                    self._sync_op = sync_op
                with graph.colocate_with(self._local_step.op):
                    train_op = state_ops.assign(self._local_step, token).op
                # On the chief's stop, the sync op waiting in take_grad must end: the queue
                # runner's cancel op cancels pending takes (nothing is closed, so a restarted
                # chief can go on with the same accumulators and token queue).
                cancel_op = control_flow_ops.group(*[a.cancel_pending_takes() for a in self._accumulator_list],
                                              name="cancel_pending_takes")
                self._chief_queue_runner = QueueRunner(token_queue, [sync_op], close_op=cancel_op,
                                                       cancel_op=cancel_op)
                for acc in self._accumulator_list:
                    # A chief (re)starting: stale takes of a chief that died are dropped, and
                    # the accumulators' step follows the (maybe restored) global step.
                    chief_init_ops.append(acc.cancel_pending_takes())
                    chief_init_ops.append(acc.set_global_step(global_step.read_value()))
                self.chief_init_op = control_flow_ops.group(*chief_init_ops, name="chief_init")
            train_ops_coll = graph.get_collection_ref(GraphKeys.TRAIN_OP)
            if train_op not in train_ops_coll:
                train_ops_coll.append(train_op)
        self._gradients_applied = True
        return train_op

    # ----------------------------------------------------------------------------------
    def get_chief_queue_runner(self):
        """The QueueRunner whose thread runs the sync op (the chief starts it)."""
        if not self._gradients_applied:
            raise errors.FailedPreconditionError(
                f"{self._name}: call apply_gradients (or minimize) before get_chief_queue_runner")
        return self._chief_queue_runner

    def get_init_tokens_op(self, num_tokens=-1):
        """An op putting ``num_tokens`` tokens in the token queue (the chief runs it once at
        start); -1 means ``replicas_to_aggregate``; at least ``replicas_to_aggregate -
        total_num_replicas`` are needed for the first update to happen."""
        if not self._gradients_applied:
            raise errors.FailedPreconditionError(
                f"{self._name}: call apply_gradients (or minimize) before get_init_tokens_op")
        needed = self._replicas_to_aggregate - self._total_num_replicas
        if num_tokens == -1:
            num_tokens = self._replicas_to_aggregate
        elif num_tokens < max(needed, 0):
            raise errors.InvalidArgumentError(
                f"{self._name}: num_tokens={num_tokens} is too small; replicas_to_aggregate - total_num_replicas "
                f"= {needed} tokens are needed for the first update")
        graph = self._global_step.graph
        with graph.as_default():
            if num_tokens <= 0:
                return control_flow_ops.no_op(name="no_init_tokens")
            with graph.colocate_with(self._sync_token_queue.queue_ref.op):
                tokens = array_ops.fill([num_tokens], self._global_step.read_value())
                return self._sync_token_queue.enqueue_many([tokens], name="init_tokens")

    def make_session_run_hook(self, is_chief, num_tokens=-1):
        """A hook that, once a session is created, initialises this replica's local step
        (the chief: also the accumulators and ``num_tokens`` tokens) and, on the chief,
        starts the sync queue runner with the session's coordinator."""
        return _SyncReplicasOptimizerHook(self, is_chief, num_tokens)


class _SyncReplicasOptimizerHook(SessionRunHook):
    def __init__(self, sync_optimizer, is_chief, num_tokens):
        self._sync_optimizer = sync_optimizer
        self._is_chief = bool(is_chief)
        self._num_tokens = num_tokens
        self._threads = []

    def begin(self):
        opt = self._sync_optimizer
        if not opt._gradients_applied:
            raise errors.FailedPreconditionError(
                "SyncReplicasOptimizer.apply_gradients (or minimize) must be called before using its hook")
        if self._is_chief:
            self._local_init_op = opt.chief_init_op
            self._q_runner = opt.get_chief_queue_runner()
            self._init_tokens_op = opt.get_init_tokens_op(self._num_tokens)
        else:
            self._local_init_op = opt.local_step_init_op
            self._q_runner = None
            self._init_tokens_op = None

    def after_create_session(self, session, coord):
        session.run(self._local_init_op)
        if self._init_tokens_op is not None:
            session.run(self._init_tokens_op)
        if self._q_runner is not None:
            self._threads = self._q_runner.create_threads(session, coord=coord, daemon=True, start=True)

    @property
    def threads(self):
        """The chief's queue-runner threads (for ``coord.join``), empty on other workers."""
        return list(self._threads)

