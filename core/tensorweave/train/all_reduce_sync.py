"""``tw.train.AllReduceSyncOptimizer``: synchronous data-parallel training without parameter
servers — every worker holds a replica of the variables and all-reduces the gradients.

Between-graph replication, as with ``SyncReplicasOptimizer``, but no ``ps`` job: each worker
client builds the same graph on its own worker task and wraps its optimizer::

    with tw.device(f"/job:worker/task:{task_index}"):
        ...  # the model: its variables live on this worker
        opt = tw.train.AllReduceSyncOptimizer(tw.train.AdamOptimizer(1e-3), num_workers=4)
        train_op = opt.minimize(loss, global_step=tw.train.get_or_create_global_step())
    hook = opt.make_session_run_hook(is_chief=(task_index == 0))  # same initial variables everywhere

How a step works: ``apply_gradients`` packs this replica's gradients of each dtype into one
flat tensor (fewer, larger messages: one collective per dtype and step), takes its mean over
the ``num_workers`` replicas with ``tw.collective_ops.all_reduce(..., merge_op="Add",
final_op="Div")`` (a ring over the workers: ``runtime/collectives.py``), and applies the
wrapped optimizer to the means on the local replica. Every worker's ``train_op`` therefore
blocks until every worker's gradients are in, and every replica applies bit for bit the same
update (the ring hands each member the same bytes). So replicas that start equal stay equal:

* ``make_session_run_hook(is_chief)`` (or ``broadcast_variables_op(is_chief)``) copies the
  chief's global variables to every other replica when a session is created — TensorFlow's
  and Horovod's answer (``BroadcastGlobalVariablesHook``); initialise on every worker first
  (``tw.global_variables_initializer()``), then run the hook's op: the chief sends, the
  others receive and assign. Variables of other dtypes than float16/32/64 and int32/64 are
  left alone.
* Alternatively give every worker the same graph-level seed (``tw.set_random_seed``): the
  initializers then draw the same values and no broadcast is needed.

Keys: the gradients' collectives use ``group_key`` and instance keys ``instance_key_base +
k`` (k-th pack), the broadcast ``instance_key_base + BROADCAST_OFFSET + k`` (k-th variable);
every replica builds the same graph, so the keys agree. Two of these optimizers in one
program need different ``instance_key_base``s (or group keys). With ``num_workers == 1`` it
is the wrapped optimizer.
"""

from __future__ import annotations

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.graph import convert_to_tensor
from tensorweave.framework.indexed_slices import IndexedSlices
from tensorweave.ops import array_ops, collective_ops, control_flow_ops, state_ops
from tensorweave.ops.variables import global_variables
from tensorweave.train.hooks import SessionRunHook
from tensorweave.train.optimizer import Optimizer, WrappingOptimizer

__all__ = ["AllReduceSyncOptimizer"]

DEFAULT_GROUP_KEY = 0x7E0
DEFAULT_INSTANCE_KEY_BASE = 1 << 24
BROADCAST_OFFSET = 1 << 20
_COLLECTIVE_DTYPES = (dtypes_mod.float16, dtypes_mod.float32, dtypes_mod.float64, dtypes_mod.int32, dtypes_mod.int64)


class AllReduceSyncOptimizer(WrappingOptimizer):
    """Averages each gradient over ``num_workers`` replicas by all-reduce before the wrapped
    optimizer applies it (see the module docstring). ``pack_gradients=False`` all-reduces each
    gradient on its own; ``timeout`` (seconds, 0: the collectives' default) bounds how long a
    step waits for the other workers."""

    def __init__(self, opt, num_workers, group_key=DEFAULT_GROUP_KEY, instance_key_base=DEFAULT_INSTANCE_KEY_BASE,
                 pack_gradients=True, timeout=0, use_locking=False, name="all_reduce_sync"):
        super().__init__(use_locking, name)
        if not isinstance(opt, Optimizer):
            raise errors.InvalidArgumentError(
                f"AllReduceSyncOptimizer wraps an optimizer (e.g. tw.train.AdamOptimizer), got {opt!r}")
        for what, v in (("num_workers", num_workers), ("group_key", group_key),
                        ("instance_key_base", instance_key_base)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise errors.InvalidArgumentError(f"AllReduceSyncOptimizer: {what} must be an int, got {v!r}")
        if num_workers < 1:
            raise errors.InvalidArgumentError(f"AllReduceSyncOptimizer: num_workers must be >= 1, got {num_workers}")
        self._opt = opt
        self._num_workers = num_workers
        self._group_key = group_key
        self._instance_key_base = instance_key_base
        self._pack = bool(pack_gradients)
        self._timeout = float(timeout)
        self._var_list = None

    num_workers = property(lambda self: self._num_workers)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The mean of each gradient over the workers, applied by the wrapped optimizer; the
        returned op (with ``global_step`` incremented) finishes when this replica is updated."""
        grads_and_vars = tuple(grads_and_vars)
        if not grads_and_vars:
            raise errors.InvalidArgumentError(f"{self._name}.apply_gradients: no (gradient, variable) pairs given")
        pairs = [(g, v) for g, v in grads_and_vars]
        present = [(i, g, v) for i, (g, v) in enumerate(pairs) if g is not None]
        if not present:
            raise errors.InvalidArgumentError(f"No gradients provided for any variable: {[v.name for _, v in pairs]}.")
        self._var_list = [v for _, _, v in present]
        if self._num_workers == 1:
            return self._opt.apply_gradients(pairs, global_step, name)
        graph = present[0][2].graph
        with graph.as_default(), graph.name_scope(f"{name or self._name}/all_reduce"):
            dense = []
            for i, g, v in present:
                if isinstance(g, IndexedSlices):
                    g = convert_to_tensor(g)  # all-reduce needs the dense gradient
                if g.dtype not in _COLLECTIVE_DTYPES:
                    raise errors.InvalidArgumentError(
                        f"{self._name}: the gradient of '{v.name}' has dtype {g.dtype.name}; all-reduce takes "
                        f"{[d.name for d in _COLLECTIVE_DTYPES]}")
                dense.append((i, g, v))
            reduced = self._all_reduce(graph, dense)
        for (i, _, v), r in zip(dense, reduced):
            pairs[i] = (r, v)
        return self._opt.apply_gradients(pairs, global_step, name)

    def _all_reduce(self, graph, dense):
        """The mean over the workers of each gradient in ``dense`` [(index, grad, var)]."""
        out = [None] * len(dense)
        packs: dict = {}
        for j, (_, g, v) in enumerate(dense):
            shape = v.shape if v.shape.is_fully_defined() else g.shape
            if self._pack and shape.is_fully_defined():
                packs.setdefault(g.dtype, []).append((j, g, v, shape))
            else:
                packs.setdefault(("alone", j), []).append((j, g, v, shape))
        for k, members in enumerate(packs.values()):
            key = self._instance_key_base + k
            first_var = members[0][2]
            with graph.colocate_with(first_var.op):
                if len(members) == 1:
                    j, g, _, _ = members[0]
                    out[j] = self._mean(g, key, f"grad_{k}")
                    continue
                flat = array_ops.concat([array_ops.reshape(g, [-1]) for _, g, _, _ in members], 0)
                mean = self._mean(flat, key, f"pack_{k}")
                sizes = [s.num_elements() for _, _, _, s in members]
                parts = array_ops.split(mean, sizes, 0) if len(sizes) > 1 else [mean]
                for (j, _, _, s), part in zip(members, parts):
                    out[j] = array_ops.reshape(part, s.as_list())
        return out

    def _mean(self, t, instance_key, name):
        return collective_ops.all_reduce(t, self._num_workers, self._group_key, instance_key, merge_op="Add",
                                         final_op="Div", timeout=self._timeout, name=name)

    # ----------------------------------------------------------------------------------
    def broadcast_variables_op(self, is_chief, var_list=None, name="broadcast_variables"):
        """An op that gives every replica the chief's values of ``var_list`` (default: the
        global variables, the optimizer's slots and the global step included): the chief sends
        them, every other worker receives and assigns them. Every worker runs it once, after
        initialising its variables."""
        if var_list is None:
            var_list = global_variables()
        var_list = [v for v in var_list if v.dtype.base_dtype in _COLLECTIVE_DTYPES]
        if self._num_workers == 1 or not var_list:
            return control_flow_ops.no_op(name=name)
        ops = []
        for k, v in enumerate(sorted(var_list, key=lambda v: v.op.name)):
            if not v.shape.is_fully_defined():
                raise errors.InvalidArgumentError(
                    f"{self._name}: variable '{v.name}' has shape {v.shape}; broadcasting needs a fully defined one")
            key = self._instance_key_base + BROADCAST_OFFSET + k
            dtype = v.dtype.base_dtype
            with v.graph.colocate_with(v.op):
                if is_chief:
                    ops.append(collective_ops.broadcast_send(v.read_value(), v.shape, dtype, self._num_workers,
                                                             self._group_key, key, timeout=self._timeout).op)
                else:
                    value = collective_ops.broadcast_recv(v.shape, dtype, self._num_workers, self._group_key, key,
                                                          timeout=self._timeout)
                    ops.append(state_ops.assign(v, value).op)
        return control_flow_ops.group(*ops, name=name)

    def make_session_run_hook(self, is_chief):
        """A hook that runs ``broadcast_variables_op(is_chief)`` once a session is created
        (after the scaffold's initialisation): the replicas start from the chief's values."""
        return _BroadcastVariablesHook(self, is_chief)


class _BroadcastVariablesHook(SessionRunHook):
    def __init__(self, optimizer, is_chief):
        self._optimizer = optimizer
        self._is_chief = bool(is_chief)
        self._op = None

    def begin(self):
        self._op = self._optimizer.broadcast_variables_op(self._is_chief)

    def after_create_session(self, session, coord):
        session.run(self._op)
