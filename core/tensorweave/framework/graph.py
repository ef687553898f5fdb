"""The dataflow graph: ``Graph``, ``Operation`` and ``Tensor``, and building nodes.

``apply_op`` is the single entry point every op wrapper uses: it looks up the ``OpDef``,
converts Python values to constants, infers type attrs from the inputs, checks dtypes and
attrs, applies name/device/control-dependency scopes, and runs the op's shape function, so
bad input fails here, at construction, naming the node. Nothing in this module runs a kernel.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorweave import plugins
from tensorweave.framework import dtypes, errors, serialization
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.op_def import OpDef, check_attr_value
from tensorweave.framework.tensor_shape import TensorShape, as_shape


class GraphKeys:
    GLOBAL_VARIABLES = "variables"
    LOCAL_VARIABLES = "local_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    MODEL_VARIABLES = "model_variables"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    SUMMARIES = "summaries"
    QUEUE_RUNNERS = "queue_runners"
    GLOBAL_STEP = "global_step"
    INIT_OP = "init_op"
    TRAIN_OP = "train_op"
    SAVERS = "savers"
    VARIABLES = GLOBAL_VARIABLES


class Tensor:
    """One output of an Operation: a symbolic handle named ``"op_name:index"``."""

    __slots__ = ("_op", "_value_index", "_dtype", "_shape", "_name", "__weakref__")

    # NumPy must defer to our operator overloads (ndarray + Tensor -> Tensor.__radd__).
    __array_priority__ = 100

    def __init__(self, op: Operation, value_index: int, dtype: dtypes.DType):
        self._op = op
        self._value_index = value_index
        self._dtype = dtype
        self._shape = TensorShape(None)
        self._name = f"{op.name}:{value_index}"

    op = property(lambda self: self._op)
    value_index = property(lambda self: self._value_index)
    dtype = property(lambda self: self._dtype)
    name = property(lambda self: self._name)
    graph = property(lambda self: self._op.graph)
    device = property(lambda self: self._op.device)
    shape = property(lambda self: self._shape)

    def get_shape(self) -> TensorShape:
        return self._shape

    def set_shape(self, shape) -> None:
        try:
            self._shape = self._shape.merge_with(as_shape(shape))
        except errors.InvalidArgumentError:
            raise errors.InvalidArgumentError(
                f"set_shape on tensor '{self._name}': shape {as_shape(shape)} is incompatible "
                f"with its inferred shape {self._shape}") from None

    def consumers(self) -> list[Operation]:
        return [op for op in self._op.graph._nodes if any(t is self for t in op._inputs)]

    def eval(self, feed_dict=None, session=None):
        return session_for(session, self.graph, "Tensor.eval()").run(self, feed_dict)

    def __repr__(self):
        return f"<tw.Tensor '{self._name}' shape={self._shape} dtype={self._dtype.name}>"

    def __bool__(self):
        raise TypeError(
            f"using tw.Tensor '{self._name}' as a Python bool is not allowed: the graph is "
            "built before it runs. Use tw.cond for data-dependent control flow.")

    def __iter__(self):
        n = self._shape[0] if self._shape.ndims else None
        if n is None:
            raise TypeError(f"tensor '{self._name}' is not iterable: its first dimension is unknown")
        return iter([self[i] for i in range(n)])

    def __len__(self):
        raise TypeError(f"len() is not supported on tw.Tensor '{self._name}'; use tw.shape(t)[0]")

    # Tensors are dict keys (feed_dict) and compared by identity, as in TF1.
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def _as_graph_element(self):
        return self


class Operation:
    """A node in the graph: an instance of an op type with attrs, inputs and outputs."""

    __slots__ = ("_graph", "_name", "_op_def", "_inputs", "_control_inputs", "_attrs",
                 "_outputs", "_device", "_id", "_control_flow_context", "_skip_input_indices", "__weakref__")

    def __init__(self, graph, name, op_def: OpDef, inputs, control_inputs, attrs, output_dtypes, device):
        self._graph = graph
        self._name = name
        self._op_def = op_def
        self._inputs = tuple(inputs)
        self._control_inputs = list(control_inputs)
        self._attrs = attrs
        self._device = device
        self._id = len(graph._nodes)
        self._outputs = [Tensor(self, i, dt) for i, dt in enumerate(output_dtypes)]
        self._control_flow_context = None  # the tw.cond/tw.while_loop context it was built in
        self._skip_input_indices = None

    graph = property(lambda self: self._graph)
    name = property(lambda self: self._name)
    type = property(lambda self: self._op_def.name)
    op_def = property(lambda self: self._op_def)
    inputs = property(lambda self: self._inputs)
    outputs = property(lambda self: list(self._outputs))
    control_inputs = property(lambda self: list(self._control_inputs))
    attrs = property(lambda self: dict(self._attrs))
    device = property(lambda self: self._device)
    # While tw.gradients calls this op's gradient function: the positions of the inputs whose
    # gradients nobody asked for (TF2's attribute); None at any other time. A gradient
    # function may return None for them without building their ops.
    skip_input_indices = property(lambda self: self._skip_input_indices)

    def values(self):
        return tuple(self._outputs)

    def get_attr(self, name: str):
        try:
            return self._attrs[name]
        except KeyError:
            raise errors.InvalidArgumentError(
                f"{self.type} node '{self._name}' has no attr {name!r} "
                f"(it has {sorted(self._attrs)})") from None

    def _add_control_input(self, op: Operation) -> None:
        if op not in self._control_inputs:
            self._control_inputs.append(op)
            self._graph._version += 1

    def run(self, feed_dict=None, session=None):
        session_for(session, self.graph, "Operation.run()").run(self, feed_dict)

    @property
    def node_def(self) -> dict:
        return serialization.node_to_dict(self)

    def __repr__(self):
        return f"<tw.Operation '{self._name}' type={self.type}>"

    def _as_graph_element(self):
        return self


_NAME_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")


class Graph:
    """A set of Operations; the unit a Session runs.

    ``version`` grows with every change, so a Session knows when a cached execution plan
    might be stale (adding nodes after runs is the whitepaper's Extend).
    """

    def __init__(self):
        self._nodes: list[Operation] = []
        self._by_name: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._version = 0
        self._finalized = False
        self._collections: dict[str, list] = {}
        self._lock = threading.RLock()
        self._local = threading.local()
        self.seed = None
        self._last_seed_id = 0

    # -- per-thread construction scopes ---------------------------------------------------
    def _scopes(self):
        loc = self._local
        if not hasattr(loc, "name_stack"):
            loc.name_stack = ""
            loc.device_stack = [DeviceSpec()]
            loc.control_stack = []
            loc.container = ""
        return loc

    @property
    def version(self) -> int:
        return self._version

    @property
    def finalized(self) -> bool:
        return self._finalized

    def finalize(self) -> None:
        self._finalized = True

    @contextlib.contextmanager
    def as_default(self):
        _default_graph_stack().append(self)
        try:
            yield self
        finally:
            _default_graph_stack().pop()

    # -- naming ---------------------------------------------------------------------------
    def get_name_scope(self) -> str:
        return self._scopes().name_stack.rstrip("/")

    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        scope = self._scopes().name_stack
        if scope:
            name = scope + name
        key = name.lower()
        i = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = i + 1
        if i > 0:
            base = key
            while key in self._names_in_use:
                key = f"{base}_{i}"
                i += 1
            if mark_as_used:
                self._names_in_use[key] = 1
            name = f"{name}_{i - 1}"
        return name

    @contextlib.contextmanager
    def name_scope(self, name):
        s = self._scopes()
        old = s.name_stack
        if name is None or name == "":
            new = ""
        elif name.endswith("/"):  # an absolute scope, reused as-is (TF semantics)
            new = name
        else:
            if not _NAME_RE.match(name):
                raise errors.InvalidArgumentError(f"{name!r} is not a valid scope name")
            new = self.unique_name(name) + "/"
        s.name_stack = new
        try:
            yield new
        finally:
            s.name_stack = old

    # -- device and control-dependency scopes --------------------------------------------
    @contextlib.contextmanager
    def device(self, spec):
        s = self._scopes()
        if spec is None:
            s.device_stack.append(_NO_DEVICE)
        elif callable(spec) and not isinstance(spec, str | DeviceSpec):
            # A device function (tw.train.replica_device_setter): called with each new op.
            s.device_stack.append(_DeviceFunction(spec))
        else:
            # String scopes merge eagerly, but not across a device function: the function
            # must see only the scopes inside it (TF1 applies them innermost first).
            top = s.device_stack[-1]
            base = top if type(top) is DeviceSpec else DeviceSpec()
            s.device_stack.append(base.merge_from(DeviceSpec.from_string(spec)))
        try:
            yield
        finally:
            s.device_stack.pop()

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        s = self._scopes()
        old = s.control_stack
        if control_inputs is None:
            s.control_stack = []
        else:
            ops = []
            for c in control_inputs:
                if hasattr(c, "_as_graph_element"):
                    c = c._as_graph_element()
                if isinstance(c, Tensor):
                    c = c.op
                if not isinstance(c, Operation):
                    raise errors.InvalidArgumentError(
                        f"control_dependencies expects Operations or Tensors, got {c!r}")
                if c.graph is not self:
                    raise errors.InvalidArgumentError(f"control input '{c.name}' is from another graph")
                ops.append(c)
            s.control_stack = old + [ops]
        try:
            yield
        finally:
            s.control_stack = old

    @contextlib.contextmanager
    def container(self, name: str):
        s = self._scopes()
        old = s.container
        s.container = name
        try:
            yield name
        finally:
            s.container = old

    def _current_container(self) -> str:
        return self._scopes().container

    # The innermost control-flow context (ops/control_flow_ops.py) new ops are built in.
    def _get_control_flow_context(self):
        return getattr(self._scopes(), "cf_context", None)

    def _set_control_flow_context(self, ctx) -> None:
        self._scopes().cf_context = ctx

    # -- colocation scope (tw.colocate_with) ---------------------------------------------
    @contextlib.contextmanager
    def colocate_with(self, op, ignore_existing=False):
        """Ops created inside must be placed on the same device as ``op`` (recorded on each
        as the attr ``_class: ["loc:@<op name>"]``, as in TensorFlow). Enclosing device
        scopes do not apply inside: new ops start from ``op``'s device constraint (a
        ``tw.device`` opened inside still narrows it). ``ignore_existing=True`` drops outer
        colocation scopes; ``colocate_with(None, ignore_existing=True)`` clears them."""
        if op is None and not ignore_existing:
            raise errors.InvalidArgumentError("colocate_with(None) needs ignore_existing=True")
        target = None
        if op is not None:
            el = op
            if hasattr(el, "_as_graph_element") and not isinstance(el, Tensor | Operation):
                el = el._as_graph_element()
            if isinstance(el, Tensor):
                el = el.op
            if not isinstance(el, Operation):
                raise errors.InvalidArgumentError(
                    f"colocate_with expects an Operation, Tensor or Variable, got {op!r}")
            if el.graph is not self:
                raise errors.InvalidArgumentError(f"colocate_with: '{el.name}' is from another graph")
            target = el
        s = self._scopes()
        old_stack = getattr(s, "colocation_stack", [])
        old_devices = s.device_stack
        s.colocation_stack = ([] if ignore_existing else old_stack) + ([target] if target is not None else [])
        if target is not None:
            s.device_stack = [DeviceSpec.from_string(target.device)]
        try:
            yield
        finally:
            s.colocation_stack = old_stack
            s.device_stack = old_devices

    # -- lookup --------------------------------------------------------------------------
    def get_operations(self) -> list[Operation]:
        return list(self._nodes)

    def get_operation_by_name(self, name: str) -> Operation:
        if not isinstance(name, str):
            raise errors.InvalidArgumentError(f"operation names are strings, got {name!r}")
        try:
            return self._by_name[name]
        except KeyError:
            hint = " (that is a tensor name; use get_tensor_by_name)" if ":" in name else ""
            raise errors.NotFoundError(f"the graph has no operation named {name!r}{hint}") from None

    def get_tensor_by_name(self, name: str) -> Tensor:
        if not isinstance(name, str) or ":" not in name:
            raise errors.InvalidArgumentError(
                f"{name!r} is not a tensor name; tensor names look like 'op_name:output_index'")
        op_name, _, idx = name.rpartition(":")
        op = self.get_operation_by_name(op_name)
        try:
            i = int(idx)
            return op._outputs[i]
        except (ValueError, IndexError):
            raise errors.NotFoundError(
                f"operation '{op_name}' ({op.type}) has {len(op._outputs)} outputs; no tensor {name!r}") from None

    def as_graph_element(self, obj, allow_tensor=True, allow_operation=True):
        """Resolve a Tensor, Operation, Variable or name string to an element of this graph."""
        if hasattr(obj, "_as_graph_element") and not isinstance(obj, Tensor | Operation):
            obj = obj._as_graph_element()
        if isinstance(obj, str):
            obj = self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        if isinstance(obj, Tensor | Operation):
            if obj.graph is not self:
                raise errors.InvalidArgumentError(f"{type(obj).__name__} '{obj.name}' is not an element of this graph")
            if isinstance(obj, Tensor) and not allow_tensor:
                raise errors.InvalidArgumentError(f"expected an operation, got tensor '{obj.name}'")
            if isinstance(obj, Operation) and not allow_operation:
                raise errors.InvalidArgumentError(f"expected a tensor, got operation '{obj.name}'")
            return obj
        raise errors.InvalidArgumentError(
            f"cannot interpret {obj!r} (a {type(obj).__name__}) as a Tensor or Operation")

    # -- collections ---------------------------------------------------------------------
    def add_to_collection(self, name, value):
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names, value):
        for n in ([names] if isinstance(names, str) else set(names)):
            self.add_to_collection(n, value)

    def get_collection_ref(self, name):
        return self._collections.setdefault(name, [])

    def get_collection(self, name, scope=None):
        items = self._collections.get(name, [])
        if scope is None:
            return list(items)
        rx = re.compile(scope)
        return [x for x in items if getattr(x, "name", None) is not None and rx.match(x.name)]

    def get_all_collection_keys(self):
        return [k for k, v in self._collections.items() if v]

    def clear_collection(self, name):
        self._collections.pop(name, None)

    # -- node creation ------------------------------------------------------------------
    def _add_op(self, op_def: OpDef, name, inputs, attrs, output_dtypes) -> Operation:
        if self._finalized:
            raise errors.FailedPreconditionError(
                f"graph is finalized and cannot be modified (adding {op_def.name} '{name}')")
        s = self._scopes()
        control = []
        input_ops = {t.op for t in inputs}
        for group in s.control_stack:
            for c in group:
                if c not in control and c not in input_ops:
                    control.append(c)
        ctx = getattr(s, "cf_context", None)
        if ctx is not None:  # inside tw.cond/tw.while_loop: captured inputs enter the context
            inputs, control = ctx._process_new_op(op_def, inputs, control)
        stack = s.device_stack
        plain = all(type(e) is DeviceSpec for e in stack)  # no device function nor device(None)
        device = stack[-1].to_string() if plain else ""
        if getattr(s, "colocation_stack", None):
            attrs = dict(attrs, _class=_colocation_classes(s.colocation_stack, attrs.get("_class")))
        with self._lock:
            op = Operation(self, name, op_def, inputs, control, attrs, output_dtypes, device)
            op._control_flow_context = ctx
            self._nodes.append(op)
            self._by_name[name] = op
            self._version += 1
        if not plain:
            op._device = _apply_device_stack(stack, op)
        return op

    def create_op(self, op_type, inputs, dtypes_=None, input_types=None, name=None, attrs=None,
                  **_ignored) -> Operation:
        """TF1-compatible low-level constructor (flat inputs); prefer the op wrappers."""
        out = apply_op(op_type, list(inputs), attrs or {}, name=name, graph=self, _flat=True)
        return out if isinstance(out, Operation) else (out[0].op if isinstance(out, tuple) else out.op)

    # -- serialisation -----------------------------------------------------------------
    def as_graph_def(self, add_shapes=False) -> dict:
        return serialization.graph_to_dict(self, add_shapes=add_shapes)

    def __repr__(self):
        return f"<tw.Graph with {len(self._nodes)} ops>"


class _DeviceFunction:
    """A ``tw.device(fn)`` scope: ``fn(op)`` returns the op's device (a string, a
    DeviceSpec or None)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def to_string(self) -> str:
        return ""


class _NoDevice:
    """``tw.device(None)``: clears every enclosing device scope and device function."""

    def to_string(self) -> str:
        return ""

    def merge_from(self, other):
        return DeviceSpec().merge_from(other)


_NO_DEVICE = _NoDevice()


def _apply_device_stack(stack, op) -> str:
    """The device of a new op under scopes that include device functions (TF1 order: the
    innermost scope first; each device function sees the device chosen so far as
    ``op.device`` and returns the new one; a string scope fills only fields still unset)."""
    device = DeviceSpec()
    need_spec = True  # a string entry already holds every string scope below it, up to a function
    for entry in reversed(stack):
        if entry is _NO_DEVICE:
            break
        if type(entry) is _DeviceFunction:
            op._device = device.to_string()
            out = entry.fn(op)
            device = DeviceSpec.from_string("" if out is None else out)
            need_spec = True
        elif need_spec:
            device = entry.merge_from(device)
            need_spec = False
    return device.to_string()


def _colocation_classes(targets, existing=None) -> list[str]:
    """The ``_class`` attr of an op created under colocation scopes for ``targets``: each
    target's own groups (it may itself be colocated with something), else ``loc:@name``."""
    out = list(existing or ())
    for t in targets:
        for c in t._attrs.get("_class") or [f"loc:@{t.name}"]:
            if c not in out:
                out.append(c)
    return out


# ----------------------------------------------------------------------------------------
# default graph
_global_default_graph: Graph | None = None
_thread_local = threading.local()


def _default_graph_stack() -> list:
    st = getattr(_thread_local, "stack", None)
    if st is None:
        st = _thread_local.stack = []
    return st


def get_default_graph() -> Graph:
    global _global_default_graph
    st = _default_graph_stack()
    if st:
        return st[-1]
    if _global_default_graph is None:
        _global_default_graph = Graph()
    return _global_default_graph


def reset_default_graph() -> None:
    global _global_default_graph
    if _default_graph_stack():
        raise errors.FailedPreconditionError(
            "reset_default_graph() called inside a `with graph.as_default()` block")
    _global_default_graph = Graph()


# ----------------------------------------------------------------------------------------
# default session (TF keeps this stack beside the default graph's, in ops.py): a Session's
# ``as_default()`` pushes it; Tensor.eval and Operation.run use the innermost one.
def _session_stack() -> list:
    st = getattr(_thread_local, "sessions", None)
    if st is None:
        st = _thread_local.sessions = []
    return st


@contextlib.contextmanager
def default_session(session):
    """Make ``session`` the default session of this thread inside the block."""
    st = _session_stack()
    st.append(session)
    try:
        yield session
    finally:
        if st and st[-1] is session:
            st.pop()
        elif session in st:
            st.remove(session)


def get_default_session():
    """The innermost default session of this thread, or None."""
    st = _session_stack()
    return st[-1] if st else None


def session_for(session, graph: Graph, what: str):
    """``session`` or the default one, checked to run ``graph`` (for ``what``: "Tensor.eval()")."""
    s = session or get_default_session()
    if s is None:
        raise errors.InvalidArgumentError(
            f"cannot evaluate with {what}: no default session is registered. Use `with sess.as_default():` "
            "or pass session=sess")
    if s.graph is not graph:
        raise errors.InvalidArgumentError(
            f"cannot evaluate with {what}: the tensor's graph is different from the session's graph")
    return s


# ----------------------------------------------------------------------------------------
# conversion of Python values (TF's tensor_conversion_registry)
# (priority, registration order, base type, function): lower priorities are tried first.
_conversion_functions: list[tuple[int, int, type | tuple, Callable]] = []


def register_tensor_conversion_function(base_type, conversion_func, priority: int = 100) -> None:
    """Teach ``convert_to_tensor`` about a type: ``conversion_func(value, dtype, name)`` returns a
    Tensor, or ``NotImplemented`` to let the next function try. Functions are tried in
    increasing ``priority`` (TensorFlow's rule; 100 by default). The core's ops register
    theirs: lists and tuples holding tensors are packed (``array_ops``, 110), any other
    Python or NumPy value becomes a constant (``constant_op``, 200)."""
    _conversion_functions.append((priority, len(_conversion_functions), base_type, conversion_func))
    _conversion_functions.sort(key=lambda e: e[:2])


def convert_to_tensor(value, dtype=None, name=None, preferred_dtype=None) -> Tensor:
    """``value`` as a Tensor of ``dtype`` (when given). With ``preferred_dtype``, that dtype
    is tried first and the value's own dtype used if it does not fit (TF semantics)."""
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype is not dtype:
            raise errors.InvalidArgumentError(
                f"tensor '{value.name}' has dtype {value.dtype.name}, but {dtype.name} was expected "
                "(use tw.cast to convert)")
        return value
    if isinstance(value, Operation):
        raise errors.InvalidArgumentError(
            f"operation '{value.name}' ({value.type}) has no value to use as a tensor; pass one of its outputs")
    for _, _, base, fn in _conversion_functions:
        if not isinstance(value, base):
            continue
        if dtype is None and preferred_dtype is not None:
            try:
                t = fn(value, dtypes.as_dtype(preferred_dtype), name)
            except errors.InvalidArgumentError:
                t = NotImplemented
            if t is not NotImplemented:
                return t
        t = fn(value, dtype, name)
        if t is NotImplemented:
            continue
        if dtype is not None and t.dtype is not dtype:
            raise errors.InvalidArgumentError(
                f"'{getattr(value, 'name', value)}' has dtype {t.dtype.name}, but {dtype.name} was expected")
        return t
    raise errors.InvalidArgumentError(
        f"cannot convert {value!r} (a {type(value).__name__}) to a tensor: no conversion function is "
        "registered for its type (tw.register_tensor_conversion_function)")


# ----------------------------------------------------------------------------------------
# building a node
def _graph_of(values, graph: Graph | None) -> Graph:
    found = graph
    for v in values:
        if isinstance(v, list | tuple):
            found = _graph_of(v, found)
            continue
        g = getattr(v, "graph", None) if isinstance(v, Tensor) or hasattr(v, "_as_graph_element") else None
        if g is None:
            continue
        if found is None:
            found = g
        elif g is not found:
            raise errors.InvalidArgumentError(
                f"'{getattr(v, 'name', v)}' is from a different graph than the other inputs; "
                "all inputs of an op must belong to one graph")
    return found or get_default_graph()


def apply_op(op_type: str, inputs=(), attrs: dict | None = None, name: str | None = None,
             graph: Graph | None = None, _flat: bool = False, _exact_name: str | None = None):
    """Add a node of ``op_type`` to the graph and return its output(s).

    ``inputs`` has one entry per input argument of the op (a list for list arguments).
    Returns a Tensor for one output, a tuple for several, the Operation for none.
    """
    op_def = plugins.registry().ops.get(op_type)
    attrs = dict(attrs) if attrs else {}
    if _flat:
        inputs = _regroup_flat(op_def, list(inputs), attrs)
    g = _graph_of(inputs, graph)
    node_name = _exact_name or g.unique_name(name or op_type)
    where = f"{op_type} node '{node_name}'"

    if len(inputs) != len(op_def.inputs):
        raise errors.InvalidArgumentError(
            f"{where}: expected {len(op_def.inputs)} inputs "
            f"({', '.join(a.name for a in op_def.inputs)}), got {len(inputs)}")

    # 1. Infer type attrs from inputs that are already tensors (TF's op_def_library order).
    type_src: dict[str, str] = {}
    for arg, val in zip(op_def.inputs, inputs):
        if arg.is_ref and hasattr(val, "_ref"):
            val = val._ref()
        vals = val if arg.is_list else [val]
        if arg.is_list and not isinstance(val, list | tuple):
            raise errors.InvalidArgumentError(f"{where}: input '{arg.name}' must be a list of tensors, got {val!r}")
        for v in vals:
            dt = _known_dtype(v)
            if dt is None or arg.type_attr is None:
                continue
            prev = attrs.get(arg.type_attr)
            if prev is None:
                attrs[arg.type_attr] = dt
                type_src[arg.type_attr] = f"input '{arg.name}'"
            elif dtypes.as_dtype(prev) is not dt:
                src = type_src.get(arg.type_attr, f"attr {arg.type_attr}")
                raise errors.InvalidArgumentError(
                    f"{where}: input '{arg.name}' has dtype {dt.name} but {src} has dtype "
                    f"{dtypes.as_dtype(prev).name}; both must have the same type {arg.type_attr} "
                    "(use tw.cast to convert one)")

    # 2. Convert the remaining Python values now that types are known.
    flat_inputs: list[Tensor] = []
    with g.as_default():
        for arg, val in zip(op_def.inputs, inputs):
            vals = list(val) if arg.is_list else [val]
            if arg.is_ref:
                vals = [v._ref() if hasattr(v, "_ref") else v for v in vals]
                for v in vals:
                    if not (isinstance(v, Tensor) and v.op.op_def.outputs_ref):
                        raise errors.InvalidArgumentError(
                            f"{where}: input '{arg.name}' must be a variable, got "
                            f"{getattr(v, 'name', repr(v))}" + (f" from {v.op.type}" if isinstance(v, Tensor) else ""))
            if arg.number_attr:
                n = attrs.setdefault(arg.number_attr, len(vals))
                if n != len(vals):
                    raise errors.InvalidArgumentError(
                        f"{where}: list input '{arg.name}' has {len(vals)} tensors but {arg.number_attr}={n}")
            want = arg.fixed_dtype
            if want is None and arg.type_attr:
                known = attrs.get(arg.type_attr)
                if known is None:
                    known = op_def.attrs[arg.type_attr].default
                want = None if known is None else dtypes.as_dtype(known)
            converted = []
            for v in vals:
                try:
                    t = convert_to_tensor(v, dtype=want, name=None) if not isinstance(v, Tensor) else v
                except errors.InvalidArgumentError as e:
                    raise errors.InvalidArgumentError(f"{where}: input '{arg.name}': {e}") from None
                if want is not None and t.dtype is not want:
                    raise errors.InvalidArgumentError(
                        f"{where}: input '{arg.name}' must have dtype {want.name}, got {t.dtype.name} "
                        f"from '{t.name}'")
                if t.graph is not g:
                    raise errors.InvalidArgumentError(f"{where}: input '{t.name}' is from a different graph")
                converted.append(t)
            if arg.type_attr and converted:
                attrs.setdefault(arg.type_attr, converted[0].dtype)
            if arg.type_list_attr:
                attrs.setdefault(arg.type_list_attr, [t.dtype for t in converted])
            flat_inputs.extend(converted)

    # 3. Attrs: defaults, types, allowed values; nothing missing.
    checked = {}
    for a in op_def.attrs.values():
        if a.name in attrs and attrs[a.name] is not None:
            checked[a.name] = check_attr_value(op_type, node_name, a, attrs[a.name])
        elif a.has_default:
            checked[a.name] = a.default
        elif a.name in attrs:  # explicitly None, and None is allowed only via default
            raise errors.InvalidArgumentError(f"{where}: attr {a.name!r} must not be None")
        else:
            raise errors.InvalidArgumentError(
                f"{where}: missing required attr {a.name!r} ({a.type})")
    unknown = set(attrs) - set(op_def.attrs)
    unknown = {k for k in unknown if not k.startswith("_")}
    if unknown:
        raise errors.InvalidArgumentError(
            f"{where}: unknown attr(s) {sorted(unknown)}; {op_type} has {sorted(op_def.attrs)}")
    for k, v in attrs.items():
        if k.startswith("_"):
            checked[k] = v

    # 4. Output dtypes.
    out_dtypes = []
    for arg in op_def.outputs:
        if arg.fixed_dtype is not None:
            dt = [arg.fixed_dtype]
        elif arg.type_list_attr:
            dt = list(checked[arg.type_list_attr])
        else:
            dt = [checked[arg.type_attr]]
        if arg.number_attr:
            dt = dt * checked[arg.number_attr]
        out_dtypes.extend(dtypes.as_dtype(d) for d in dt)

    op = g._add_op(op_def, node_name, flat_inputs, checked, out_dtypes)

    # 5. Static shapes.
    if op_def.shape_fn is not None:
        try:
            shapes = op_def.shape_fn(op)
        except errors.InvalidArgumentError as e:
            _remove_last_op(g, op)
            raise errors.InvalidArgumentError(f"{where}: {e.message}", node_def=node_name) from None
        except Exception:
            _remove_last_op(g, op)
            raise
        if isinstance(shapes, TensorShape) or shapes is None:
            shapes = [shapes]
        for t, s in zip(op._outputs, shapes):
            if s is not None:
                t._shape = as_shape(s)

    outs = op._outputs
    if not outs:
        return op
    if len(outs) == 1 and not op_def.outputs[0].is_list:
        return outs[0]
    return tuple(outs)


def _remove_last_op(g: Graph, op: Operation) -> None:
    """Undo adding ``op`` whose construction failed, so the graph is left unchanged."""
    with g._lock:
        if g._nodes and g._nodes[-1] is op:
            g._nodes.pop()
            del g._by_name[op.name]


def _known_dtype(v) -> dtypes.DType | None:
    if isinstance(v, Tensor):
        return v.dtype
    if hasattr(v, "_as_graph_element") and hasattr(v, "dtype"):
        return dtypes.as_dtype(v.dtype)
    return None


def _regroup_flat(op_def: OpDef, flat: list, attrs: dict | None = None) -> list:
    """Group a flat input list (GraphDef order) into one entry per input argument."""
    out, i = [], 0
    n_list_args = sum(1 for a in op_def.inputs if a.is_list)
    n_fixed = len(op_def.inputs) - n_list_args
    attrs = attrs or {}
    for arg in op_def.inputs:
        if arg.is_list:
            n = len(flat) - i - (n_fixed - sum(1 for a in out if not isinstance(a, list)))
            take = max(n, 0) if n_list_args == 1 else None
            # Several list inputs (DynamicStitch's indices and data): their lengths are in
            # the attrs a GraphDef carries.
            if take is None and attrs.get(arg.number_attr) is not None:
                take = int(attrs[arg.number_attr])
            elif take is None and attrs.get(arg.type_list_attr) is not None:
                take = len(attrs[arg.type_list_attr])
            if take is None:
                raise errors.UnimplementedError(f"{op_def.name}: cannot regroup several list inputs")
            out.append(flat[i:i + take])
            i += take
        else:
            out.append(flat[i])
            i += 1
    return out


# ----------------------------------------------------------------------------------------
# constant folding helper for shape functions
def constant_value(t: Tensor) -> Any:
    """The value of ``t`` when it is known at construction time (Const, Shape of a fully
    defined tensor, ...), else None. Shape functions use it for e.g. Reshape's shape."""
    if not isinstance(t, Tensor):
        return None
    op = t.op
    typ = op.type
    if typ == "Const":
        return op.get_attr("value")
    if typ == "Shape" and t.op.inputs[0].shape.is_fully_defined():
        return np.array(op.inputs[0].shape.as_list(), dtype=t.dtype.np_dtype)
    if typ == "Size" and t.op.inputs[0].shape.is_fully_defined():
        return np.array(op.inputs[0].shape.num_elements(), dtype=t.dtype.np_dtype)
    if typ == "Rank" and t.op.inputs[0].shape.ndims is not None:
        return np.array(op.inputs[0].shape.ndims, dtype=np.int32)
    if typ in ("Identity", "StopGradient"):
        return constant_value(op.inputs[0])
    if typ == "Cast":
        v = constant_value(op.inputs[0])
        return None if v is None else np.asarray(v).astype(t.dtype.np_dtype)
    if typ == "Pack":
        vals = [constant_value(x) for x in op.inputs]
        if any(v is None for v in vals):
            return None
        return np.stack(vals, axis=op.get_attr("axis"))
    if typ == "ConcatV2":
        vals = [constant_value(x) for x in op.inputs]
        if any(v is None for v in vals) or any(np.ndim(v) == 0 for v in vals[:-1]):
            return None
        return np.concatenate(vals[:-1], axis=int(vals[-1]))
    if typ == "StridedSlice":
        return _strided_slice_value(op)
    return None


def _strided_slice_value(op):
    """A StridedSlice of a known vector (``tw.shape(x)[0]``, ``tw.shape(x)[1:]``) with known
    bounds; None for anything else (more dimensions, ellipsis or new-axis masks)."""
    v, begin, end, strides = (constant_value(x) for x in op.inputs[:4])
    if any(a is None for a in (v, begin, end, strides)) or np.ndim(v) != 1 or np.size(begin) != 1:
        return None
    if op.get_attr("ellipsis_mask") or op.get_attr("new_axis_mask"):
        return None
    b, e, st = int(np.reshape(begin, -1)[0]), int(np.reshape(end, -1)[0]), int(np.reshape(strides, -1)[0])
    v = np.asarray(v)
    if op.get_attr("shrink_axis_mask") & 1:
        return v[b] if -len(v) <= b < len(v) else None
    if st == 0:
        return None
    return v[None if op.get_attr("begin_mask") & 1 else b:None if op.get_attr("end_mask") & 1 else e:st]


def constant_value_as_shape(t: Tensor) -> TensorShape:
    """Interpret a 1-D int tensor as a shape, keeping whatever elements are known."""
    v = constant_value(t)
    if v is not None:
        return TensorShape([None if d < 0 else int(d) for d in np.asarray(v).reshape(-1)])
    if t.op.type == "Shape":
        return t.op.inputs[0].shape
    if t.op.type == "Pack":
        dims = []
        for x in t.op.inputs:
            xv = constant_value(x)
            dims.append(None if xv is None or int(xv) < 0 else int(xv))
        return TensorShape(dims)
    if t.shape.ndims == 1 and t.shape[0] is not None:
        return TensorShape([None] * t.shape[0])
    return TensorShape(None)
