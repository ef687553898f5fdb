"""``tw.Variable``: a persistent tensor with an initializer, and the initializer helpers."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import (
    GraphKeys,
    Tensor,
    convert_to_tensor,
    get_default_graph,
    register_tensor_conversion_function,
    session_for,
)
from tensorweave.framework.indexed_slices import IndexedSlices
from tensorweave.ops import array_ops, control_flow_ops, state_ops


def _check_built_outside_control_flow(graph, start: int, init: Tensor, what: str) -> None:
    """The initial value ``init`` of ``what``, and the ops built for it since op number
    ``start`` (all outside control flow), must not use a value of a tw.cond branch or a
    tw.while_loop body: the variable exists once per graph, that value once per branch taken
    or iteration."""
    inside = control_flow_ops._in_control_flow_op
    culprit, verb = (init.op, "is") if inside(init.op) else (None, "uses")
    for op in graph._nodes[start:] if culprit is None else ():
        culprit = next((x for x in [t.op for t in op.inputs] + op.control_inputs if inside(x)), None)
        if culprit is not None:
            break
    if culprit is not None:
        name = init.name if culprit is init.op else culprit.name
        raise errors.InvalidArgumentError(
            f"the initial value of {what} {verb} '{name}', which was built inside "
            f"{control_flow_ops._output_context(culprit).describe()}: a variable is created outside "
            "control flow (once, not per branch or iteration), so build its initial value there too, or "
            "pass a callable (an initializer or a lambda) that builds it from values outside the loop or cond")


class Variable:
    """A variable: a Variable node, its initializer (an Assign) and a read snapshot.

    ``initial_value`` may be a Tensor, a Python/NumPy value, or a callable returning one.
    Used in an expression, a Variable reads its current value (``v + 1``).
    """

    def __init__(self, initial_value=None, trainable=True, collections=None, validate_shape=True,
                 name=None, dtype=None, expected_shape=None, container=None):
        if initial_value is None:
            raise errors.InvalidArgumentError("tw.Variable needs an initial_value")
        g = get_default_graph()
        # The variable, its initializer and its snapshot exist once per graph: built outside
        # any tw.cond/tw.while_loop the caller is in (TF's init_scope), and free of its
        # control dependencies. Ops of a loop body that use the variable capture the snapshot
        # (or take the reference) as usual.
        with g.name_scope(name or "Variable") as scope, control_flow_ops.init_scope(g):
            base = scope.rstrip("/")
            start = len(g._nodes)
            init = initial_value() if callable(initial_value) else initial_value
            init = convert_to_tensor(init, dtype=dtype, name="initial_value")
            _check_built_outside_control_flow(g, start, init, f"variable '{base}'")
            shape = init.shape if validate_shape else None
            # The Variable node takes the scope's own (already unique) name, as in TF1.
            self._variable = state_ops.variable_op(shape, init.dtype, container=container, exact_name=base)
            self._initial_value = init
            # On the variable's device whatever device function is in scope
            # (tw.train.replica_device_setter puts only the Variable node on a ps), as in TF1.
            with g.colocate_with(self._variable.op):
                self._initializer_op = state_ops.assign(self._variable, init, validate_shape=validate_shape,
                                                        name="Assign").op
                self._snapshot = array_ops.identity(self._variable, name="read")
        self._trainable = trainable
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections = list(collections) + [GraphKeys.TRAINABLE_VARIABLES]
        g.add_to_collections(collections, self)

    class SaveSliceInfo:
        """Where a shard of a partitioned variable sits in its logical tensor (TF1's
        ``Variable.SaveSliceInfo``): the logical ``full_name`` and ``full_shape``, the shard's
        ``var_offset`` and ``var_shape``. The Saver saves shards under ``full_name``."""

        def __init__(self, full_name=None, full_shape=None, var_offset=None, var_shape=None):
            self.full_name = full_name
            self.full_shape = [int(d) for d in full_shape]
            self.var_offset = [int(d) for d in var_offset]
            self.var_shape = [int(d) for d in var_shape]

        @property
        def spec(self) -> str:
            """The checkpoint slice spec: ``"<full shape> <offset>,<length>:..."``."""
            return " ".join(str(d) for d in self.full_shape) + " " + ":".join(
                f"{o},{n}" for o, n in zip(self.var_offset, self.var_shape))

        def __repr__(self):
            return f"SaveSliceInfo({self.full_name!r}, {self.spec!r})"

    _save_slice_info = None  # set on the shards of a partitioned variable

    def _set_save_slice_info(self, save_slice_info):
        self._save_slice_info = save_slice_info

    def _get_save_slice_info(self):
        return self._save_slice_info

    # identity and naming
    name = property(lambda self: self._variable.name)
    op = property(lambda self: self._variable.op)
    dtype = property(lambda self: self._variable.dtype)
    graph = property(lambda self: self._variable.graph)
    device = property(lambda self: self._variable.device)
    shape = property(lambda self: self._variable.shape)
    initializer = property(lambda self: self._initializer_op)
    initial_value = property(lambda self: self._initial_value)
    trainable = property(lambda self: self._trainable)

    def get_shape(self):
        return self._variable.shape

    def value(self) -> Tensor:
        """The snapshot read of this variable (``Variable/read``)."""
        return self._snapshot

    def read_value(self) -> Tensor:
        return array_ops.identity(self._variable, name="read")

    def _ref(self) -> Tensor:
        return self._variable

    def _as_graph_element(self):
        return self._variable

    def assign(self, value, use_locking=False, name=None, read_value=True):
        return state_ops.assign(self._variable, value, use_locking=use_locking, name=name)

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        return state_ops.assign_add(self._variable, delta, use_locking=use_locking, name=name)

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        return state_ops.assign_sub(self._variable, delta, use_locking=use_locking, name=name)

    # Sparse updates (TF1's RefVariable methods): ``sparse_delta`` is an IndexedSlices whose
    # values are applied at its indices (ScatterAdd, ...); they return the new value.
    def scatter_add(self, sparse_delta, use_locking=False, name=None):
        _check_sparse_delta(sparse_delta, "scatter_add")
        return state_ops.scatter_add(self._variable, sparse_delta.indices, sparse_delta.values,
                                     use_locking=use_locking, name=name)

    def scatter_sub(self, sparse_delta, use_locking=False, name=None):
        _check_sparse_delta(sparse_delta, "scatter_sub")
        return state_ops.scatter_sub(self._variable, sparse_delta.indices, sparse_delta.values,
                                     use_locking=use_locking, name=name)

    def scatter_update(self, sparse_delta, use_locking=False, name=None):
        _check_sparse_delta(sparse_delta, "scatter_update")
        return state_ops.scatter_update(self._variable, sparse_delta.indices, sparse_delta.values,
                                        use_locking=use_locking, name=name)

    def scatter_nd_update(self, indices, updates, name=None):
        return state_ops.scatter_nd_update(self._variable, indices, updates, use_locking=True, name=name)

    def scatter_nd_add(self, indices, updates, name=None):
        return state_ops.scatter_nd_add(self._variable, indices, updates, use_locking=True, name=name)

    def eval(self, session=None):
        return self._variable.eval(session=session)

    def load(self, value, session=None):
        """Assign ``value`` from Python (feeds it into the initializer's Assign)."""
        session_for(session, self.graph, "Variable.load()").run(
            self._initializer_op, {self._initializer_op.inputs[1]: value})

    def is_initialized(self):
        return state_ops.is_variable_initialized(self._variable)

    def __repr__(self):
        return f"<tw.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    # Variables behave like their value in expressions.
    __array_priority__ = 100


def _check_sparse_delta(sparse_delta, method):
    if not isinstance(sparse_delta, IndexedSlices):
        raise TypeError(f"Variable.{method}: sparse_delta must be a tw.IndexedSlices (the rows and their values), "
                        f"got {type(sparse_delta).__name__}")


def _forward(name):
    def f(self, *a):
        return getattr(self._snapshot, name)(*a)
    return f


for _m in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
           "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__",
           "__rmatmul__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__", "__abs__", "__getitem__",
           "__and__", "__or__", "__invert__"):
    setattr(Variable, _m, _forward(_m))


def _convert_variable(v, dtype=None, name=None):
    return v._snapshot


register_tensor_conversion_function(Variable, _convert_variable)


def global_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


all_variables = global_variables


def trainable_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def variables_initializer(var_list, name="init"):
    """An op that runs the initializers of ``var_list``."""
    var_list = list(var_list)
    if not var_list:
        return control_flow_ops.no_op(name=name)
    return control_flow_ops.group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer():
    return variables_initializer(global_variables(), name="init")


initialize_all_variables = global_variables_initializer


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init_local")

