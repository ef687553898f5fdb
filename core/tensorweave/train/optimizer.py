"""``tw.train.Optimizer``: the base class of the optimizers (TensorFlow 1.x's interface).

``minimize(loss)`` is ``compute_gradients`` (``tw.gradients`` of the loss with respect to the
trainable variables) followed by ``apply_gradients``, which adds one fused update op
(``ApplyGradientDescent``, ``ApplyAdam``, ...) per variable that has a gradient, groups
them, and, given a ``global_step``, increments it once all updates are done. Running the
returned op performs one training step.

A gradient that is an ``IndexedSlices`` (a variable read through ``tw.gather`` or
``embedding_lookup``) is applied sparsely, as in TensorFlow: ``apply_gradients`` sums the
slices of repeated indices first (``Unique`` + ``UnsortedSegmentSum``,
``_apply_sparse_duplicate_indices``) and hands the result to ``_apply_sparse``, which updates
only those rows (ScatterSub, SparseApplyMomentum, ...; Adam's decays its slots densely, as
TensorFlow's does). An optimizer without an ``_apply_sparse`` of its own gets the gradient
densified and applied by ``_apply_dense``.

Per-variable state lives in *slots*: non-trainable variables named ``<var>/<optimizer>``
(``w/Momentum``, ``w/Adam``, ``w/Adam_1``), created the first time gradients are applied to
the variable, initialised by ``tw.global_variables_initializer()``. A subclass implements
``_create_slots``, ``_prepare``, ``_apply_dense`` and optionally ``_apply_sparse`` and
``_finish``.

Hyperparameters given as Python numbers become constants of each variable's dtype (so a
float64 model is updated in float64); Tensors (a placeholder for a learning-rate schedule)
are cast to the variable's dtype; callables are called when the update ops are built.
"""

from __future__ import annotations

import contextlib

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    GraphKeys,
    Operation,
    Tensor,
    apply_op,
    convert_to_tensor,
    get_default_graph,
)
from tensorweave.framework.indexed_slices import IndexedSlices
from tensorweave.ops import array_ops, control_flow_ops, indexing_ops, math_ops
from tensorweave.ops import gradients as gradients_mod
from tensorweave.ops.variables import Variable, trainable_variables
from tensorweave.train.training_util import assert_global_step

_VALID_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)


def _describe(x) -> str:
    name = getattr(x, "name", None)
    if isinstance(name, str):
        return f"{type(x).__name__} '{name}'"
    return repr(x)


def _check_variable(v, where):
    if not isinstance(v, Variable):
        raise errors.InvalidArgumentError(
            f"{where}: {_describe(v)} is not a tw.Variable; optimizers update only variables "
            "(pass the Variable objects, e.g. tw.trainable_variables())")
    return v


def _device_scope(g, device):
    return g.device(device) if device else contextlib.nullcontext()


def _group(ops, name):
    """A NoOp that runs after ``ops``; ``name`` ending in "/" is an exact (scope) name."""
    g = get_default_graph()
    with g.control_dependencies(list(ops)):
        if name.endswith("/"):
            return apply_op("NoOp", [], _exact_name=name[:-1])
        return apply_op("NoOp", [], name=name)


class Optimizer:
    """Base class for optimizers; use a subclass (``GradientDescentOptimizer``, ...)."""

    # How gradients are gated (TensorFlow's constants).
    GATE_NONE = 0
    GATE_OP = 1
    GATE_GRAPH = 2

    def __init__(self, use_locking, name):
        if not name:
            raise errors.InvalidArgumentError("an optimizer must have a non-empty name")
        self._use_locking = use_locking
        self._name = name
        self._slots: dict[str, dict] = {}           # slot name -> {var.op: slot variable}
        self._non_slot_dict: dict[tuple, Variable] = {}  # (name, graph) -> variable
        self._hyper_cache: dict = {}
        self._apply_scope = None  # the name scope of the apply_gradients being built

    def get_name(self) -> str:
        return self._name

    # ----------------------------------------------------------------------------------
    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP, aggregation_method=None,
                 colocate_gradients_with_ops=False, name=None, grad_loss=None):
        """Add ops that minimise ``loss`` by updating ``var_list`` (default: the trainable
        variables); returns the op that runs one step (and increments ``global_step``)."""
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients, aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        vars_with_grad = [v for g, v in grads_and_vars if g is not None]
        if not vars_with_grad:
            raise errors.InvalidArgumentError(
                f"No gradients provided for any variable, check your graph for ops that do not support "
                f"gradients, between variables {[v.name for _, v in grads_and_vars]} and loss "
                f"'{convert_to_tensor(loss).name}'.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP, aggregation_method=None,
                          colocate_gradients_with_ops=False, grad_loss=None):
        """``[(gradient, variable)]`` for ``var_list`` (default: the trainable variables; any
        iterable of variables, such as ``some_dict.values()``); the gradient is None for a
        variable the loss does not depend on."""
        if callable(loss) and not isinstance(loss, Tensor | Variable):
            raise errors.UnimplementedError(
                f"{self._name}.compute_gradients: loss must be a Tensor (callable losses are for eager "
                "execution, which tensorweave does not have)")
        if gate_gradients not in (self.GATE_NONE, self.GATE_OP, self.GATE_GRAPH):
            raise errors.InvalidArgumentError(
                f"{self._name}: gate_gradients must be one of Optimizer.GATE_NONE, GATE_OP or GATE_GRAPH, "
                f"got {gate_gradients!r}")
        try:
            loss = convert_to_tensor(loss)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{self._name}: the loss must be a Tensor: {e}") from None
        if loss.dtype not in _VALID_DTYPES:
            raise errors.InvalidArgumentError(
                f"{self._name}: the loss '{loss.name}' has dtype {loss.dtype.name}; it must be a floating-point "
                "tensor (float16, float32 or float64) to be differentiated (use tw.cast)")
        if var_list is None:
            var_list = trainable_variables()
        else:
            var_list = list(_flatten(var_list))
        for v in var_list:
            _check_variable(v, f"{self._name}: var_list")
        if not var_list:
            raise errors.InvalidArgumentError(
                f"{self._name}: no variables to optimize (var_list is empty and the graph has no trainable "
                "variables)")
        for v in var_list:
            if v.dtype not in _VALID_DTYPES:
                raise errors.InvalidArgumentError(
                    f"{self._name}: variable '{v.name}' has dtype {v.dtype.name}; only float16, float32 and "
                    "float64 variables can be trained")
        grads = gradients_mod.gradients(
            loss, var_list, grad_ys=grad_loss, gate_gradients=(gate_gradients == self.GATE_OP),
            aggregation_method=aggregation_method, colocate_gradients_with_ops=colocate_gradients_with_ops)
        if gate_gradients == self.GATE_GRAPH and any(g is not None for g in grads):
            grads = _gate(grads)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Add the update ops for ``grads_and_vars`` (pairs whose gradient is None are
        skipped) and return the op that runs them all; given ``global_step``, that op also
        increments it, after the updates."""
        grads_and_vars = tuple(grads_and_vars)
        if not grads_and_vars:
            raise errors.InvalidArgumentError(f"{self._name}.apply_gradients: no (gradient, variable) pairs given")
        converted = []
        for item in grads_and_vars:
            try:
                g, v = item
            except (TypeError, ValueError):
                raise errors.InvalidArgumentError(
                    f"{self._name}.apply_gradients: expected (gradient, variable) pairs, got {item!r}") from None
            _check_variable(v, f"{self._name}.apply_gradients")
            if g is not None:
                if not isinstance(g, IndexedSlices):
                    try:
                        g = convert_to_tensor(g)
                    except errors.InvalidArgumentError as e:
                        raise errors.InvalidArgumentError(
                            f"{self._name}.apply_gradients: the gradient for variable '{v.name}' is not a Tensor: {e}"
                        ) from None
                if g.dtype is not v.dtype:
                    raise errors.InvalidArgumentError(
                        f"{self._name}.apply_gradients: the gradient '{g.name}' has dtype {g.dtype.name} but "
                        f"variable '{v.name}' has dtype {v.dtype.name}")
                if not v.shape.is_compatible_with(g.shape):
                    raise errors.InvalidArgumentError(
                        f"{self._name}.apply_gradients: the gradient '{g.name}' has shape {g.shape} but "
                        f"variable '{v.name}' has shape {v.shape}")
            converted.append((g, v))
        var_list = [v for g, v in converted if g is not None]
        if not var_list:
            raise errors.InvalidArgumentError(
                f"No gradients provided for any variable: {[v.name for _, v in converted]}.")
        if global_step is not None:
            assert_global_step(global_step)

        graph = var_list[0].graph
        with graph.as_default():
            # Slots and other optimizer state are created outside any control dependencies
            # and name scope the caller is in (TensorFlow's init_scope).
            with graph.control_dependencies(None), graph.name_scope(None):
                self._create_slots(var_list)
            with graph.name_scope(name or self._name) as scope:
                self._hyper_cache = {}
                self._apply_scope = scope
                self._prepare()
                update_ops = []
                for grad, var in converted:
                    if grad is None:
                        continue
                    with graph.name_scope("update_" + var.op.name), _device_scope(graph, var.device):
                        if isinstance(grad, IndexedSlices):
                            update_ops.append(self._apply_sparse_duplicate_indices(grad, var))
                        else:
                            update_ops.append(self._apply_dense(grad, var))
                if global_step is None:
                    apply_updates = self._finish(update_ops, scope)
                else:
                    with graph.control_dependencies([self._finish(update_ops, "update")]):
                        ref = global_step._ref() if hasattr(global_step, "_ref") else global_step
                        with _device_scope(graph, ref.device):
                            apply_updates = apply_op("AssignAdd", [global_step, 1], {"use_locking": self._use_locking},
                                                     _exact_name=scope.rstrip("/"))
            if isinstance(apply_updates, Tensor):
                apply_updates = apply_updates.op
            train_ops = graph.get_collection_ref(GraphKeys.TRAIN_OP)
            if apply_updates not in train_ops:
                train_ops.append(apply_updates)
        return apply_updates

    # ----------------------------------------------------------------------------------
    # slots
    def get_slot_names(self) -> list[str]:
        """The names of the slots this optimizer creates (``["m", "v"]`` for Adam)."""
        return sorted(self._slots)

    def get_slot(self, var, name):
        """The slot variable ``name`` of ``var``, or None if there is none."""
        named = self._slots.get(name)
        if not named:
            return None
        return named.get(_var_key(var))

    def variables(self) -> list[Variable]:
        """This optimizer's variables in the default graph (slots and e.g. Adam's beta
        powers), sorted by name."""
        g = get_default_graph()
        out = [v for (_, graph), v in self._non_slot_dict.items() if graph is g]
        for named in self._slots.values():
            out.extend(v for v in named.values() if v.graph is g)
        return sorted(out, key=lambda v: v.name)

    def _slot_dict(self, slot_name):
        return self._slots.setdefault(slot_name, {})

    def _get_or_make_slot(self, var, initial_value_fn, slot_name, op_name):
        """The slot ``slot_name`` of ``var``, created as ``<var>/<op_name>`` from
        ``initial_value_fn()`` (a value of ``var``'s shape and dtype) if it does not exist."""
        named = self._slot_dict(slot_name)
        key = _var_key(var)
        if key not in named:
            g = var.graph
            with g.as_default(), g.name_scope(None), g.control_dependencies(None), _device_scope(g, var.device):
                named[key] = Variable(initial_value_fn, trainable=False, name=f"{var.op.name}/{op_name}",
                                      dtype=var.dtype, validate_shape=var.shape.is_fully_defined())
        return named[key]

    def _zeros_slot(self, var, slot_name, op_name):
        return self._get_or_make_slot(var, lambda: _filled_like(var, 0), slot_name, op_name)

    def _constant_slot(self, var, value, slot_name, op_name):
        return self._get_or_make_slot(var, lambda: _filled_like(var, value), slot_name, op_name)

    def _get_non_slot_variable(self, name, graph=None):
        return self._non_slot_dict.get((name, graph if graph is not None else get_default_graph()))

    def _create_non_slot_variable(self, initial_value, name, colocate_with):
        """A variable of the optimizer itself (not per variable), one per graph."""
        g = colocate_with.graph
        key = (name, g)
        v = self._non_slot_dict.get(key)
        if v is None:
            with g.as_default(), g.name_scope(None), g.control_dependencies(None), \
                    _device_scope(g, colocate_with.device):
                v = Variable(initial_value, trainable=False, name=name, dtype=colocate_with.dtype)
            self._non_slot_dict[key] = v
        return v

    # ----------------------------------------------------------------------------------
    # hyperparameters
    def _hyper(self, value, dtype, name):
        """Hyperparameter ``value`` as a scalar Tensor of ``dtype``: a Python number becomes
        a constant of that dtype (one per dtype and update), a Tensor is cast."""
        if callable(value) and not isinstance(value, Tensor | Variable):
            value = value()
        dtype = dtypes.as_dtype(dtype)
        if isinstance(value, Tensor | Variable):
            t = convert_to_tensor(value)
            if t.shape.ndims not in (None, 0):
                raise errors.InvalidArgumentError(
                    f"{self._name}: hyperparameter {name} must be a scalar, got '{t.name}' of shape {t.shape}")
            return math_ops.cast(t, dtype, name=f"{name}_cast" if t.dtype is not dtype else None)
        key = (name, dtype)
        t = self._hyper_cache.get(key)
        if t is None:
            g = get_default_graph()
            scope = self._apply_scope
            try:
                with g.name_scope(scope) if scope else contextlib.nullcontext():
                    t = array_ops.constant(value, dtype=dtype, name=name)
            except (errors.InvalidArgumentError, TypeError, ValueError) as e:
                raise errors.InvalidArgumentError(
                    f"{self._name}: hyperparameter {name} must be a number or a scalar Tensor, got {value!r} ({e})"
                ) from None
            if t.shape.ndims != 0:
                raise errors.InvalidArgumentError(
                    f"{self._name}: hyperparameter {name} must be a scalar, got {value!r}")
            self._hyper_cache[key] = t
        return t

    # ----------------------------------------------------------------------------------
    # what subclasses implement
    def _create_slots(self, var_list):
        pass

    def _prepare(self):
        pass

    def _apply_dense(self, grad, var):
        raise NotImplementedError

    def _apply_sparse_duplicate_indices(self, grad, var):
        """Apply the IndexedSlices ``grad``: the slices of repeated indices summed first,
        then ``_apply_sparse`` (whose kernels then see every row once)."""
        values, indices = _deduplicate_indexed_slices(grad.values, grad.indices)
        return self._apply_sparse(IndexedSlices(values, indices, grad.dense_shape), var)

    def _apply_sparse(self, grad, var):
        """Apply the IndexedSlices ``grad`` (no repeated indices) to ``var``. This default
        densifies it for ``_apply_dense``: subclasses override it to touch only its rows."""
        return self._apply_dense(convert_to_tensor(grad), var)

    def _finish(self, update_ops, name_scope):
        return _group(update_ops, name_scope)


class WrappingOptimizer(Optimizer):
    """An optimizer around another one (``self._opt``) that changes how gradients reach it
    (``SyncReplicasOptimizer``, ``AllReduceSyncOptimizer``): the gradients, slots and
    variables are the wrapped optimizer's."""

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients (of this replica's loss)."""
        return self._opt.compute_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()


def _deduplicate_indexed_slices(values, indices):
    """``(summed values, unique indices)``: one slice per distinct index, the sum of its
    slices (TensorFlow's ``_deduplicate_indexed_slices``)."""
    unique_indices, positions = indexing_ops.unique(indices)
    summed = math_ops.unsorted_segment_sum(values, positions, array_ops.shape(unique_indices)[0])
    return summed, unique_indices


def _gate(grads):
    """``grads`` (Tensors, IndexedSlices or None) available only once all of them are."""
    flat = []
    for g in grads:
        if isinstance(g, IndexedSlices):
            flat.extend([g.values, g.indices] + ([g.dense_shape] if g.dense_shape is not None else []))
        else:
            flat.append(g)
    gated = iter(control_flow_ops.tuple_(flat))
    out = []
    for g in grads:
        if isinstance(g, IndexedSlices):
            values, indices = next(gated), next(gated)
            out.append(IndexedSlices(values, indices, next(gated) if g.dense_shape is not None else None))
        else:
            out.append(next(gated))
    return out


def _var_key(var):
    if isinstance(var, Variable):
        return var.op
    if isinstance(var, Tensor):
        return var.op
    if isinstance(var, Operation):
        return var
    return var


def _flatten(x):
    """The variables in ``var_list``: any iterable of them (a list, ``dict.values()``, a
    generator, a set), nested; a dict gives its values in key order, as TF1's
    ``nest.flatten`` does; a set is ordered by name so the graph built is deterministic."""
    if isinstance(x, Variable | Tensor | Operation | str | bytes):
        yield x
    elif isinstance(x, dict):
        for k in sorted(x, key=repr):
            yield from _flatten(x[k])
    elif isinstance(x, set | frozenset):
        for y in sorted(x, key=lambda v: (str(getattr(v, "name", "")), repr(v))):
            yield from _flatten(y)
    elif hasattr(x, "__iter__"):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


def _filled_like(var, value):
    """A tensor of ``var``'s shape and dtype filled with ``value`` (its run-time shape when
    the static one is not fully known)."""
    if var.shape.is_fully_defined():
        if value == 0:
            return array_ops.zeros(var.shape.as_list(), var.dtype)
        return array_ops.fill(var.shape.as_list(), array_ops.constant(value, dtype=var.dtype))
    like = var.initial_value
    return array_ops.fill(array_ops.shape(like), array_ops.constant(value, dtype=var.dtype))
