"""``tw.get_variable`` and ``tw.variable_scope``: variables named by scope and shared by name.

As in TensorFlow 1.x, each graph has a *variable store* (full name -> Variable) that
``get_variable`` consults, and each thread a current ``VariableScope`` that carries the name
prefix, the reuse mode and default initializer/dtype. Reuse modes:

- ``reuse`` None/False (the default, inherited from the enclosing scope): ``get_variable``
  creates a new variable; an existing one with that name is an error;
- ``reuse=True``: it returns the existing variable; a missing one is an error;
- ``reuse=tw.AUTO_REUSE``: it returns the existing variable or creates it.

Variable names depend only on variable scopes: ``get_variable`` ignores the current
``tw.name_scope`` (but ``variable_scope`` opens a name scope too, so ops created inside get
its prefix; re-entering a scope opens ``scope_1/`` for ops while variables stay ``scope/v``).
A scope opened with ``default_name`` is made unique (``dense``, ``dense_1``, ...) among the
scopes opened under the same parent since the parent was entered.
"""

from __future__ import annotations

import enum
import inspect
import threading
import weakref

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops, control_flow_ops, init_ops
from tensorweave.ops.partitioned_variables import (
    PartitionedVariable,
    _PartitionInfo,
    call_partitioner,
    iter_slices,
    slice_dim_and_count,
)
from tensorweave.ops.variables import Variable, _check_built_outside_control_flow

__all__ = ["get_variable", "variable_scope", "get_variable_scope", "VariableScope", "AUTO_REUSE",
           "create_partitioned_variables"]


class _ReuseMode(enum.Enum):
    AUTO_REUSE = 1


AUTO_REUSE = _ReuseMode.AUTO_REUSE


def _default_initializer(name, dtype):
    if dtype.is_floating:
        return init_ops.glorot_uniform_initializer()
    if dtype.is_integer or dtype.is_unsigned or dtype.is_bool or dtype.is_string:
        return init_ops.zeros_initializer()
    raise errors.InvalidArgumentError(
        f"get_variable: an initializer is required for variable {name!r} of dtype {dtype.name}")


class _VariableStore:
    """Full variable name -> Variable (shards included, as ``name/part_i``), and full name ->
    PartitionedVariable, for one graph."""

    def __init__(self):
        self.vars: dict[str, object] = {}
        self.partitioned: dict[str, PartitionedVariable] = {}
        self.lock = threading.RLock()

    def get_variable(self, name, shape, dtype, initializer, reuse, trainable, collections, validate_shape,
                     regularizer=None, partitioner=None, partition_info=None):
        shape = as_shape(shape) if shape is not None else None
        from_value = initializer is not None and not callable(initializer)
        if from_value and shape is not None:
            raise errors.InvalidArgumentError(
                f"get_variable {name!r}: the initializer is a value, so do not also specify a shape")
        if partitioner is not None:
            return self._get_partitioned_variable(name, partitioner, shape, dtype, initializer, reuse, trainable,
                                                  collections, validate_shape, regularizer)
        with self.lock:
            found = self.vars.get(name)
            if found is None and name in self.partitioned:
                found = self.partitioned[name]  # reusing one without restating its partitioner
            if found is not None:
                if reuse is None or reuse is False:
                    raise errors.InvalidArgumentError(
                        f"Variable {name} already exists, disallowed. Did you mean to set reuse=True or "
                        "reuse=tw.AUTO_REUSE in the variable scope?")
                _check_reuse(name, found, shape, dtype)
                return found
            if reuse is True:
                raise errors.InvalidArgumentError(
                    f"Variable {name} does not exist, or was not created with tw.get_variable(). Did you mean "
                    "to set reuse=tw.AUTO_REUSE in the variable scope?")

            if from_value:
                # A value keeps its own dtype unless one is given.
                init_val, var_dtype = initializer, (None if dtype is None else dtypes.as_dtype(dtype))
            else:
                dtype = dtypes.as_dtype(dtype if dtype is not None else dtypes.float32)
                if initializer is None:
                    initializer = _default_initializer(name, dtype)
                if inspect.isclass(initializer):
                    initializer = initializer()
                if shape is not None and shape.is_fully_defined():
                    dims = shape.as_list()

                    def init_val(initializer=initializer, dims=dims, dtype=dtype):
                        with get_default_graph().name_scope("Initializer"):
                            return initializer(dims, dtype=dtype, partition_info=partition_info)
                    var_dtype = dtype
                elif _takes_no_arguments(initializer):
                    init_val, var_dtype = initializer, None
                else:
                    raise errors.InvalidArgumentError(
                        f"Shape of a new variable ({name}) must be fully defined, but instead was "
                        f"{shape if shape is not None else TensorShape(None)}")
            g = get_default_graph()
            with g.name_scope(None), control_flow_ops.init_scope(g):
                v = Variable(initial_value=init_val, name=name, trainable=trainable, collections=collections,
                             dtype=var_dtype, validate_shape=validate_shape)
            self.vars[name] = v
            if regularizer is not None:
                _add_regularization_loss(name, v, regularizer)
            return v

    def _get_partitioned_variable(self, name, partitioner, shape, dtype, initializer, reuse, trainable,
                                  collections, validate_shape, regularizer):
        """TF1's ``_get_partitioned_variable``: the shards ``name/part_i`` of one logical
        variable, each with its ``SaveSliceInfo``, as a ``PartitionedVariable``."""
        if not callable(partitioner):
            raise errors.InvalidArgumentError(f"get_variable {name!r}: partitioner must be callable, got {partitioner!r}")
        with self.lock:
            if name in self.vars:
                raise errors.InvalidArgumentError(
                    f"A partitioner was provided, but an unpartitioned version of the variable was found: {name}. "
                    "Perhaps a variable of the same name was already created without partitioning?")
            g = get_default_graph()
            start = len(g._nodes)  # what a callable initializer builds is checked below
            from_value = initializer is not None and not callable(initializer)
            if initializer is not None and callable(initializer) and not inspect.isclass(initializer) \
                    and _takes_no_arguments(initializer):
                with control_flow_ops.init_scope(g):  # the whole value, sliced per shard below
                    initializer, from_value = initializer(), True
            found = self.partitioned.get(name)
            if found is not None:
                if reuse is None or reuse is False:
                    raise errors.InvalidArgumentError(
                        f"Partitioned variable with name {name} already exists. Did you mean to set reuse=True or "
                        "reuse=tw.AUTO_REUSE in the variable scope?")
                if from_value and shape is None:
                    shape = _value_shape(initializer)
                _check_reuse(name, found, shape, dtype)
                partitions = call_partitioner(partitioner, found.get_shape(), found.dtype, name)
                if partitions != found._get_partitions():
                    raise errors.InvalidArgumentError(
                        f"Trying to reuse partitioned variable {name}, but specified partitions {partitions} and "
                        f"found partitions {found._get_partitions()}")
                return found
            if reuse is True:
                raise errors.InvalidArgumentError(
                    f"PartitionedVariable {name} does not exist, or was not created with tw.get_variable(). Did you "
                    "mean to set reuse=None or reuse=tw.AUTO_REUSE in the variable scope?")

            value = None
            if from_value:
                with g.name_scope(None), control_flow_ops.init_scope(g), g.name_scope(f"{name}/Initializer/"):
                    value = convert_to_tensor(initializer, dtype=None if dtype is None else dtypes.as_dtype(dtype),
                                              name="initial_value")
                    _check_built_outside_control_flow(g, start, value, f"partitioned variable '{name}'")
                shape, dtype = value.shape, value.dtype
            else:
                dtype = dtypes.as_dtype(dtype if dtype is not None else dtypes.float32)
                if initializer is None:
                    initializer = _default_initializer(name, dtype)
                if inspect.isclass(initializer):
                    initializer = initializer()
            if shape is None:
                shape = TensorShape(None)
            partitions = call_partitioner(partitioner, shape, dtype, name)
            slice_dim, num_slices = slice_dim_and_count(partitions)
            # Shards left by another partitioning of the same name would be mixed in silently.
            if f"{name}/part_0" in self.vars:
                if f"{name}/part_{num_slices - 1}" not in self.vars:
                    raise errors.InvalidArgumentError(
                        f"Partitioner returned a different partitioning than what was already found. Partitioner "
                        f"returned {num_slices} shards, and shard {name}/part_0 was found, but "
                        f"{name}/part_{num_slices - 1} was not.")
                if f"{name}/part_{num_slices}" in self.vars:
                    raise errors.InvalidArgumentError(
                        f"Partitioner returned a different partitioning than what was already found. Partitioner "
                        f"returned {num_slices} shards, and shard {name}/part_0 was found, but so was the extra "
                        f"shard {name}/part_{num_slices}.")
            full_shape = shape.as_list()
            shards = []
            for i, (offset, var_shape) in enumerate(iter_slices(full_shape, num_slices, slice_dim)):
                part = f"{name}/part_{i}"
                info = _PartitionInfo(full_shape=full_shape, var_offset=offset) if all(full_shape) else None
                if value is not None:
                    with g.name_scope(None), control_flow_ops.init_scope(g), \
                            g.name_scope(f"{part}/PartitionedInitializer/"):
                        init, init_shape = array_ops.slice(value, offset, var_shape), None
                else:
                    init, init_shape = initializer, var_shape
                v = self.get_variable(part, init_shape, dtype, init, reuse=False, trainable=trainable,
                                      collections=collections, validate_shape=validate_shape,
                                      regularizer=regularizer, partition_info=info)
                v._set_save_slice_info(Variable.SaveSliceInfo(name, full_shape, offset, var_shape))
                shards.append(v)
            pv = PartitionedVariable(name, shape, dtype, shards, partitions)
            self.partitioned[name] = pv
            return pv


def _value_shape(value):
    if isinstance(value, Tensor):
        return value.shape
    return TensorShape(list(np.shape(value)))


def _check_reuse(name, found, shape, dtype):
    if shape is not None and not shape.is_compatible_with(found.get_shape()):
        raise errors.InvalidArgumentError(
            f"Trying to share variable {name}, but specified shape {shape} and found shape {found.get_shape()}")
    if dtype is not None and dtypes.as_dtype(dtype) is not found.dtype:
        raise errors.InvalidArgumentError(
            f"Trying to share variable {name}, but specified dtype {dtypes.as_dtype(dtype).name} and "
            f"found dtype {found.dtype.name}")


def _add_regularization_loss(name, var, regularizer):
    """TF1: a new variable's ``regularizer(var)`` (unless None) joins
    REGULARIZATION_LOSSES, built in the absolute name scope ``<var name>/Regularizer/``."""
    if not callable(regularizer):
        raise errors.InvalidArgumentError(
            f"get_variable {name!r}: regularizer must be a callable taking the variable, got {regularizer!r}")
    g = get_default_graph()
    # Outside any loop or cond the variable was first asked for in, as the variable (TF1).
    with g.name_scope(None), control_flow_ops.init_scope(g), g.name_scope(f"{name}/Regularizer/"):
        loss = regularizer(var)
    if loss is not None:
        g.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)


def _is_scalar(shape, initializer) -> bool:
    if shape is not None:
        return as_shape(shape).ndims == 0
    if initializer is not None and not callable(initializer):
        return _value_shape(initializer).ndims == 0
    return False


def _takes_no_arguments(fn) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in sig.parameters.values())


class VariableScope:
    """The defaults ``get_variable`` uses inside a ``variable_scope``: name prefix, reuse
    mode, initializer and dtype. ``reuse_variables()`` switches the rest of the block to
    reuse."""

    def __init__(self, reuse, name="", initializer=None, dtype=dtypes.float32, name_scope="", regularizer=None,
                 partitioner=None):
        self._name = name
        self._partitioner = partitioner
        self._reuse = reuse
        self._initializer = initializer
        self._regularizer = regularizer
        self._dtype = dtypes.as_dtype(dtype)
        self._name_scope = name_scope

    name = property(lambda self: self._name)
    reuse = property(lambda self: self._reuse)
    initializer = property(lambda self: self._initializer)
    regularizer = property(lambda self: self._regularizer)
    partitioner = property(lambda self: self._partitioner)
    dtype = property(lambda self: self._dtype)
    original_name_scope = property(lambda self: self._name_scope)

    def reuse_variables(self):
        self._reuse = True

    def set_initializer(self, initializer):
        self._initializer = initializer

    def set_dtype(self, dtype):
        self._dtype = dtypes.as_dtype(dtype)

    def set_regularizer(self, regularizer):
        self._regularizer = regularizer

    def set_partitioner(self, partitioner):
        self._partitioner = partitioner

    def get_variable(self, var_store, name, shape=None, dtype=None, initializer=None, trainable=True,
                     collections=None, validate_shape=True, reuse=None, regularizer=None, partitioner=None):
        full_name = f"{self._name}/{name}" if self._name else name
        if partitioner is None and self._partitioner is not None and not _is_scalar(shape, initializer):
            # As TF1: a scope's partitioner leaves scalars (a global step, a temperature) whole.
            partitioner = self._partitioner
        if reuse is None or reuse is False:
            reuse = self._reuse
        if initializer is None:
            initializer = self._initializer
        if regularizer is None:
            regularizer = self._regularizer
        if dtype is None and (initializer is None or callable(initializer)):
            dtype = self._dtype  # a value initializer keeps its own dtype unless one is given
        return var_store.get_variable(full_name, shape, dtype, initializer, reuse, trainable, collections,
                                      validate_shape, regularizer, partitioner=partitioner)

    def __repr__(self):
        return f"<tw.VariableScope {self._name!r} reuse={self._reuse}>"


class _ScopeState:
    """Per graph: the variable store (shared) and, per thread, the current scope and how
    often each scope name was opened (for ``default_name`` uniqueness)."""

    def __init__(self):
        self.store = _VariableStore()
        self._local = threading.local()

    @property
    def current(self) -> VariableScope:
        loc = self._local
        if not hasattr(loc, "scope"):
            loc.scope = VariableScope(False)
            loc.counts = {}
        return loc.scope

    @current.setter
    def current(self, scope):
        self.current  # noqa: B018 - make sure the thread's state exists
        self._local.scope = scope

    @property
    def counts(self) -> dict:
        self.current  # noqa: B018
        return self._local.counts

    @counts.setter
    def counts(self, value):
        self.current  # noqa: B018
        self._local.counts = value

    def open(self, scope_name):
        self.counts[scope_name] = self.counts.get(scope_name, 0) + 1

    def close_subscopes(self, scope_name):
        counts = self.counts
        for k in list(counts):
            if not scope_name or k.startswith(scope_name + "/"):
                counts[k] = 0


_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_states_lock = threading.Lock()


def _state(graph=None) -> _ScopeState:
    g = graph if graph is not None else get_default_graph()
    with _states_lock:
        st = _states.get(g)
        if st is None:
            st = _states[g] = _ScopeState()
        return st


def get_variable_scope() -> VariableScope:
    """The current variable scope of this thread in the default graph."""
    return _state().current


def _get_variable_store() -> _VariableStore:
    return _state().store


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True,
                 collections=None, caching_device=None, partitioner=None, validate_shape=True,
                 use_resource=None, custom_getter=None, constraint=None):
    """Get the variable ``<scope>/name`` of the current variable scope, or create it.

    Whether an existing variable is returned, or a new one created, depends on the scope's
    reuse mode (see the module docstring). A new variable takes its value from
    ``initializer``: an initializer object or class called with ``shape`` (the scope's
    initializer by default, then ``glorot_uniform_initializer`` for floats and zeros for
    integers, bools and strings), a callable of no arguments, or a value/Tensor (then
    ``shape`` must not be given). ``dtype`` defaults to the scope's (float32).

    ``regularizer`` (default: the scope's) is called with a newly created variable; a
    Tensor it returns is added to ``GraphKeys.REGULARIZATION_LOSSES`` (see
    ``tw.losses.get_regularization_loss``). Reused variables add nothing.

    With a ``partitioner`` (default: the scope's, which is not applied to scalars) the
    variable is created as shards ``name/part_0``, ``name/part_1``, ... and a
    ``PartitionedVariable`` is returned (see ``ops/partitioned_variables.py``); an initializer
    object is called once per shard with a ``partition_info``, a value is sliced. Reusing
    it returns the same ``PartitionedVariable``, with or without restating the partitioner.
    """
    for arg, val in (("caching_device", caching_device), ("custom_getter", custom_getter),
                     ("constraint", constraint)):
        if val is not None:
            raise errors.UnimplementedError(f"get_variable: {arg} is not supported")
    if not isinstance(name, str) or not name:
        raise errors.InvalidArgumentError(f"get_variable: name must be a non-empty string, got {name!r}")
    st = _state()
    return st.current.get_variable(st.store, name, shape=shape, dtype=dtype, initializer=initializer,
                                   trainable=trainable, collections=collections, validate_shape=validate_shape,
                                   regularizer=regularizer, partitioner=partitioner)


class variable_scope:  # noqa: N801 - TensorFlow's name
    """A context manager that opens a variable scope (and a name scope).

    ``name_or_scope`` is a string (nested under the current scope) or a ``VariableScope``
    captured earlier (re-entered as is). With ``name_or_scope`` None, ``default_name`` is
    used, made unique. ``reuse`` True or ``tw.AUTO_REUSE`` applies to the scope and its
    sub-scopes; None or False inherits the enclosing scope's. ``initializer``,
    ``regularizer``, ``partitioner`` and ``dtype`` become the defaults of ``get_variable``
    inside.
    """

    def __init__(self, name_or_scope, default_name=None, values=None, initializer=None, regularizer=None,
                 caching_device=None, partitioner=None, custom_getter=None, reuse=None, dtype=None,
                 use_resource=None, constraint=None, auxiliary_name_scope=True):
        if name_or_scope is None and default_name is None:
            raise errors.InvalidArgumentError("variable_scope: if default_name is None then name_or_scope is required")
        if name_or_scope is not None and not isinstance(name_or_scope, str | VariableScope):
            raise errors.InvalidArgumentError(
                f"variable_scope: name_or_scope must be a string or a VariableScope, got {name_or_scope!r}")
        if reuse not in (None, False, True, AUTO_REUSE):
            raise errors.InvalidArgumentError(
                f"variable_scope: reuse must be True, False, None or tw.AUTO_REUSE, got {reuse!r}")
        if name_or_scope is None and reuse is True:
            raise errors.InvalidArgumentError("variable_scope: reuse=True cannot be used without a name_or_scope")
        for arg, val in (("caching_device", caching_device), ("custom_getter", custom_getter),
                         ("constraint", constraint)):
            if val is not None:
                raise errors.UnimplementedError(f"variable_scope: {arg} is not supported")
        if partitioner is not None and not callable(partitioner):
            raise errors.InvalidArgumentError(f"variable_scope: partitioner must be callable, got {partitioner!r}")
        self._partitioner = partitioner
        if regularizer is not None and not callable(regularizer):
            raise errors.InvalidArgumentError(f"variable_scope: regularizer must be callable, got {regularizer!r}")
        self._regularizer = regularizer
        self._name_or_scope = name_or_scope
        self._default_name = default_name
        self._initializer = initializer
        self._reuse = None if reuse is False else reuse
        self._dtype = dtype
        self._aux_name_scope = auxiliary_name_scope
        self._graph = None
        self._name_scope_ctx = None

    def __enter__(self) -> VariableScope:
        g = self._graph = get_default_graph()
        st = self._state = _state(g)
        old = self._old = st.current
        self._old_counts = dict(st.counts)
        nos = self._name_or_scope

        if isinstance(nos, VariableScope):
            new_name = nos.name
            ns_name = new_name.split("/")[-1] if new_name else None
        elif nos is not None:
            new_name = f"{old.name}/{nos}" if old.name else nos
            ns_name = nos
        else:
            prefix = f"{old.name}/" if old.name else ""
            unique = self._default_name
            if st.counts.get(prefix + unique, 0) > 0:
                i = 1
                while st.counts.get(f"{prefix}{unique}_{i}", 0) > 0:
                    i += 1
                unique = f"{unique}_{i}"
            new_name = prefix + unique
            ns_name = self._default_name

        current_ns = ""
        if self._aux_name_scope and ns_name:
            self._name_scope_ctx = g.name_scope(ns_name)
            current_ns = self._name_scope_ctx.__enter__()

        if isinstance(nos, VariableScope):
            scope = VariableScope(self._reuse if self._reuse else nos.reuse, name=new_name,
                                  initializer=nos.initializer, dtype=nos.dtype, name_scope=nos.original_name_scope,
                                  regularizer=nos.regularizer, partitioner=nos.partitioner)
        else:
            reuse = self._reuse or old.reuse
            scope = VariableScope(reuse, name=new_name, initializer=old.initializer, dtype=old.dtype,
                                  name_scope=current_ns, regularizer=old.regularizer, partitioner=old.partitioner)
        if self._initializer is not None:
            scope.set_initializer(self._initializer)
        if self._regularizer is not None:
            scope.set_regularizer(self._regularizer)
        if self._partitioner is not None:
            scope.set_partitioner(self._partitioner)
        if self._dtype is not None:
            scope.set_dtype(self._dtype)
        st.open(new_name)
        self._new_name = new_name
        # A re-entered scope object restores the counts on exit; a named scope forgets what
        # was opened under it, so re-entering it names sub-scopes ("dense", ...) as before.
        self._old_counts = dict(st.counts) if isinstance(nos, VariableScope) else None
        st.current = scope
        return scope

    def __exit__(self, *exc):
        st = self._state
        if isinstance(self._name_or_scope, VariableScope):
            st.counts = self._old_counts
        else:
            st.close_subscopes(self._new_name)
        st.current = self._old
        if self._name_scope_ctx is not None:
            self._name_scope_ctx.__exit__(*exc)
            self._name_scope_ctx = None
        return False


def create_partitioned_variables(shape, slicing, initializer, dtype=dtypes.float32, trainable=True,
                                 collections=None, name=None, reuse=None):
    """The shards of a new partitioned variable as a list (TF1's deprecated form of
    ``get_variable(..., partitioner=...)``): ``slicing`` gives the shard count per axis
    (at most one above 1). The logical variable is named by the variable scope opened for
    it (``name``, else a unique ``PartitionedVariable``). It lives here rather than in
    ``partitioned_variables.py``, which this module imports."""
    shape, slicing = list(shape), list(slicing)
    if len(shape) != len(slicing):
        raise errors.InvalidArgumentError(
            f"The 'shape' and 'slicing' of a partitioned Variable must have the same length: shape: {shape}, "
            f"slicing: {slicing}")
    if len(shape) < 1:
        raise errors.InvalidArgumentError(f"A partitioned Variable must have rank at least 1: shape: {shape}")
    with variable_scope(name, default_name="PartitionedVariable", reuse=reuse) as scope:
        pv = _get_variable_store().get_variable(
            scope.name, None if initializer is not None and not callable(initializer) else shape, dtype,
            initializer, scope.reuse, trainable, collections, True, partitioner=lambda **unused: slicing)
    return list(pv)
