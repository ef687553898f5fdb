"""Graph functions, graph side: tracing a Python function into a ``FuncGraph`` and the
serialised form (``FunctionDef``) that ops carry in a ``func`` attr.

A *graph function* is a sub-graph with declared inputs and outputs that a kernel runs as a
unit, many times (``runtime/functions.py`` instantiates and runs it). ``tw.data`` uses them for
``map``/``filter``/``flat_map``/``interleave`` functions and for one-shot iterators' dataset
factories; a ``while_loop`` body could be one too (nothing here is specific to datasets).

Tracing (``trace``) calls the Python function once, on placeholders, as TF 1.x's ``Defun`` does.
The function is built *in the caller's graph*, inside a control-flow context of its own
(``_FunctionContext``), so that tensors from outside can be used in it exactly as anywhere else
(``Graph._add_op`` hands every new op's inputs to the current context, and nested
``tw.cond``/``tw.while_loop`` contexts chain up to it). When the function returns, the ops it
built are moved out of the caller's graph into a ``FuncGraph``; every tensor from outside that
they use (a *capture*: a constant, a placeholder, a variable's value) is replaced by a
placeholder of the FuncGraph, and the caller passes the outside tensor as an extra input of the
op that runs the function. So the caller's graph is left as it was, and a captured placeholder
is fed when that op runs (e.g. when an iterator is initialised).

``FunctionDef``: a JSON string ``{"version", "name", "graph", "inputs", "outputs"}`` whose
``graph`` is the body's GraphDef (``framework/serialization.py``) and whose ``inputs``/``outputs``
are tensor names in it (arguments first, then captures). A string attr keeps graphs with
functions serialisable and shippable to workers like any other graph (nothing is pickled; a
worker imports the body through the op registry). ``from_subgraph`` makes a FunctionDef with no
inputs from ops already in a graph (the dataset factory of a one-shot iterator).
"""

from __future__ import annotations

import json

from tensorweave.framework import errors, serialization
from tensorweave.framework.graph import Graph, Operation, Tensor, apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape

FUNCTION_DEF_VERSION = 1


class FuncGraph(Graph):
    """The body of a traced function: a graph of its own, with ``inputs`` (placeholders:
    the arguments, then one per capture), ``outputs`` and ``captures`` ([(outside tensor,
    placeholder)], in the order of the extra inputs the caller passes)."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.captures: list[tuple[Tensor, Tensor]] = []
        self._definition: str | None = None

    @property
    def captured_inputs(self) -> list[Tensor]:
        """The outside tensors the caller passes after the arguments."""
        return [outer for outer, _ in self.captures]

    @property
    def output_dtypes(self):
        return [t.dtype for t in self.outputs]

    @property
    def output_shapes(self) -> list[TensorShape]:
        return [t.shape for t in self.outputs]

    @property
    def definition(self) -> str:
        """The FunctionDef (a JSON string) for a ``func`` attr."""
        if self._definition is None:
            self._definition = _function_def(self.name, serialization.graph_to_dict(self),
                                             [t.name for t in self.inputs], [t.name for t in self.outputs])
        return self._definition

    def __repr__(self):
        return f"<tw FuncGraph '{self.name}' with {len(self._nodes)} ops>"


def _function_def(name, graph_def, inputs, outputs) -> str:
    return json.dumps({"version": FUNCTION_DEF_VERSION, "name": name, "graph": graph_def,
                       "inputs": inputs, "outputs": outputs}, sort_keys=True, separators=(",", ":"))


def parse_function_def(text) -> dict:
    """The fields of a FunctionDef string, checked for shape (not for content: importing the
    graph checks every node against the op registry)."""
    if isinstance(text, bytes):
        text = text.decode()
    try:
        d = json.loads(text) if isinstance(text, str) else None
    except ValueError as e:
        raise errors.InvalidArgumentError(f"malformed function definition: {e}") from None
    if not isinstance(d, dict) or d.get("version") != FUNCTION_DEF_VERSION or not isinstance(d.get("graph"), dict) \
            or not all(isinstance(d.get(k), list) and all(isinstance(x, str) for x in d[k])
                       for k in ("inputs", "outputs")) or not isinstance(d.get("name"), str):
        raise errors.InvalidArgumentError(
            "malformed function definition: expected a JSON object with version "
            f"{FUNCTION_DEF_VERSION}, 'name', 'graph', 'inputs' and 'outputs'")
    return d


class _FunctionContext:
    """The control-flow context ops are built in while a function is traced.

    It routes nothing (captures are found after tracing, from the ops' inputs); it exists so
    that the traced ops can be told apart (``Operation._control_flow_context`` leads here) and
    so that contexts opened inside the function (``tw.cond``, ``tw.while_loop``) stop here
    instead of reaching a context of the caller.
    """

    outer_context = None
    grad_state = None

    def __init__(self, name: str):
        self.name = name

    def describe(self) -> str:
        return f"graph function '{self.name}'"

    def add_value(self, val):
        return val

    def _process_new_op(self, op_def, inputs, control):
        return inputs, control


def _within(ctx, fctx) -> bool:
    while ctx is not None:
        if ctx is fctx:
            return True
        ctx = ctx.outer_context
    return False


def trace(fn, input_specs, name: str = "fn", graph: Graph | None = None, what: str | None = None) -> FuncGraph:
    """Trace ``fn(*placeholders)`` into a FuncGraph.

    ``input_specs``: one (dtype, shape) per argument. ``fn`` returns a list of tensors (or
    values ``convert_to_tensor`` accepts). ``what`` names the function in error messages
    (``"the map function of MapDataset"``). Ops the function builds leave ``graph`` (the default
    graph); outside tensors they use become captures.
    """
    g = graph if graph is not None else get_default_graph()
    what = what or f"function '{name}'"
    with g.name_scope(name) as scope:
        fname = scope.rstrip("/")
    fctx = _FunctionContext(fname)
    start = len(g._nodes)
    old_ctx = g._get_control_flow_context()
    g._set_control_flow_context(fctx)
    try:
        # A function is a graph of its own: the caller's control dependencies, device and
        # colocation scopes do not reach into it (it runs where the op that calls it runs).
        with g.as_default(), g.name_scope(scope), g.control_dependencies(None), g.device(None), \
                g.colocate_with(None, ignore_existing=True):
            args = [apply_op("Placeholder", [], {"dtype": dt, "shape": as_shape(shape)}, name=f"arg{i}")
                    for i, (dt, shape) in enumerate(input_specs)]
            results = fn(*args)
            outputs = []
            for i, r in enumerate(results):
                if isinstance(r, Operation):
                    raise errors.InvalidArgumentError(
                        f"{what} returned the operation '{r.name}' as output {i}; it must return tensors")
                try:
                    outputs.append(convert_to_tensor(r))
                except errors.InvalidArgumentError as e:
                    raise errors.InvalidArgumentError(
                        f"{what} returned {r!r} as output {i}, which is not a tensor: {e.message}") from None
    except BaseException:
        g._set_control_flow_context(old_ctx)
        _drop_ops(g, [op for op in g._nodes[start:] if _within(op._control_flow_context, fctx)])
        raise
    g._set_control_flow_context(old_ctx)
    body = [op for op in g._nodes[start:] if _within(op._control_flow_context, fctx)]
    return _move_to_func_graph(g, fname, body, args, outputs, what)


def _drop_ops(g: Graph, ops) -> None:
    """Take ``ops`` out of ``g`` (and out of its collections)."""
    dead = set(ops)
    if not dead:
        return
    with g._lock:
        g._nodes[:] = [op for op in g._nodes if op not in dead]
        for op in dead:
            if g._by_name.get(op.name) is op:
                del g._by_name[op.name]
        for items in list(g._collections.values()):
            kept = [x for x in items if _op_of(x) not in dead]
            if len(kept) != len(items):
                items[:] = kept
        g._version += 1


def _op_of(x):
    if isinstance(x, Operation):
        return x
    if isinstance(x, Tensor):
        return x.op
    el = getattr(x, "op", None)
    return el if isinstance(el, Operation) else None


def _move_to_func_graph(g: Graph, fname: str, body: list, args: list, outputs: list, what: str) -> FuncGraph:
    body_set = set(body)
    for op in body:
        if op.op_def.outputs_ref:
            _drop_ops(g, body)
            raise errors.InvalidArgumentError(
                f"{what} creates the variable '{op.name}'; a graph function cannot create variables "
                "(create it outside and use its value in the function)")
        for arg, t in zip(op.op_def.flat_inputs(op._attrs), op._inputs):
            if arg.is_ref and t.op not in body_set:
                _drop_ops(g, body)
                raise errors.InvalidArgumentError(
                    f"{what} updates the variable '{t.op.name}' ({op.type} '{op.name}'); a graph function "
                    "cannot change variables of the graph around it")
        for c in op._control_inputs:
            if c not in body_set:
                _drop_ops(g, body)
                raise errors.InvalidArgumentError(
                    f"{what}: '{op.name}' depends on the operation '{c.name}' outside the function; "
                    "a graph function can use outside tensors, not outside control dependencies")
    _drop_ops(g, body)

    fg = FuncGraph(fname)
    fg.seed = g.seed
    fg._names_in_use = {op.name.lower(): 1 for op in body}
    for op in body:
        op._graph = fg
        op._device = ""
        op._id = len(fg._nodes)
        op._control_flow_context = None if isinstance(op._control_flow_context, _FunctionContext) \
            else op._control_flow_context
        fg._nodes.append(op)
        fg._by_name[op.name] = op
    # Outside tensors become placeholders of the function (in order of first use).
    inner: dict[Tensor, Tensor] = {}

    def capture(t: Tensor) -> Tensor:
        p = inner.get(t)
        if p is None:
            with fg.as_default():
                p = apply_op("Placeholder", [], {"dtype": t.dtype, "shape": t.shape},
                             name=f"{fname}/capture{len(fg.captures)}")
            inner[t] = p
            fg.captures.append((t, p))
        return p

    for op in body:
        if any(t.op not in body_set for t in op._inputs):
            op._inputs = tuple(t if t.op in body_set else capture(t) for t in op._inputs)
    fg.outputs = [t if t.op in body_set else capture(t) for t in outputs]
    fg.inputs = list(args) + [p for _, p in fg.captures]
    fg._version += 1
    return fg


def from_subgraph(outputs, name: str, what: str) -> str:
    """A FunctionDef with no inputs that recomputes ``outputs`` from the ops that produce them
    (they stay in their graph). Placeholders and variables cannot be copied: their values
    belong to a step, and a function made this way takes no inputs."""
    outputs = list(outputs)
    needed: dict[Operation, None] = {}
    stack = [t.op for t in outputs]
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        if op.type in ("Placeholder", "PlaceholderWithDefault"):
            raise errors.InvalidArgumentError(
                f"{what} depends on the placeholder '{op.name}', whose value cannot be captured once for "
                "good; use make_initializable_iterator() and feed it when running the initializer")
        if op.op_def.outputs_ref:
            raise errors.InvalidArgumentError(
                f"{what} depends on the variable '{op.name}', whose value cannot be captured once for good; "
                "use make_initializable_iterator() instead")
        needed[op] = None
        stack.extend(t.op for t in op._inputs)
        stack.extend(op._control_inputs)
    ordered = sorted(needed, key=lambda op: op._id)
    nodes = []
    for op in ordered:
        d = serialization.node_to_dict(op)
        d["device"] = ""
        d["attr"].pop("_class", None)
        nodes.append(d)
    graph_def = {"versions": {"producer": serialization.GRAPH_DEF_VERSION}, "node": nodes}
    return _function_def(name, graph_def, [], [t.name for t in outputs])
