"""Importing a GraphDef (``framework/serialization.py``'s dict form, tensor values in the
JSON or the in-memory form) into a graph: ``tw.import_graph_def`` and ``tw.Graph.from_graph_def``.

Importing only ever creates ops that are registered, through ``apply_op`` (attrs checked, shapes
inferred, as when a program builds them); nothing in a GraphDef is evaluated as code. Loops
(the NextIteration -> Merge back edge) are connected once both ends exist.
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import Graph, Operation, apply_op, get_default_graph
from tensorweave.framework.serialization import decode_attr


def import_graph_def(graph_def: dict, input_map=None, return_elements=None, name=None):
    """Add the nodes of ``graph_def`` to the default graph (TF1 ``tf.import_graph_def``).

    Names are prefixed with ``name`` (default ``"import"``; ``""`` keeps them exactly).
    ``input_map`` maps tensor names in ``graph_def`` to existing Tensors.
    """
    g = get_default_graph()
    prefix = "import" if name is None else name
    if not isinstance(graph_def, dict) or not isinstance(graph_def.get("node"), list):
        raise errors.InvalidArgumentError("graph_def must be a dict with a 'node' list")
    nodes = graph_def["node"]
    by_name = {}
    for n in nodes:
        if not isinstance(n, dict) or not isinstance(n.get("name"), str) or not isinstance(n.get("op"), str):
            raise errors.InvalidArgumentError(f"malformed node in graph_def: {str(n)[:200]}")
        if n["name"] in by_name:
            raise errors.InvalidArgumentError(f"duplicate node name {n['name']!r} in graph_def")
        by_name[n["name"]] = n
    input_map = dict(input_map or {})
    created: dict[str, object] = {}

    def full(nm):
        return f"{prefix}/{nm}" if prefix else nm

    # Topological order so each node's inputs exist before it (a graph_def may be unordered).
    order, state = [], {}

    def visit(nm, path):
        st = state.get(nm)
        if st == 2:
            return
        if st == 1:
            raise errors.InvalidArgumentError(f"graph_def has a cycle through node {nm!r}")
        if nm not in by_name:
            raise errors.InvalidArgumentError(f"node {path!r} has an input from unknown node {nm!r}")
        state[nm] = 1
        for inp in by_name[nm].get("input", []):
            src = inp[1:] if inp.startswith("^") else inp.rsplit(":", 1)[0]
            if _is_back_edge(by_name, nm, inp, src):
                continue  # a loop's NextIteration -> Merge edge: connected after both exist
            if inp.startswith("^") or inp not in input_map:
                visit(src, nm)
        state[nm] = 2
        order.append(nm)

    for n in nodes:
        visit(n["name"], n["name"])

    back_edges = []  # (merge name, input position, NextIteration input reference)
    with g.as_default(), g.name_scope(None):
        for nm in order:
            n = by_name[nm]
            data_inputs, ctrl = [], []
            for inp in n.get("input", []):
                if inp.startswith("^"):
                    ctrl.append(created[inp[1:]])
                elif _is_back_edge(by_name, nm, inp, inp.rsplit(":", 1)[0]) and inp not in input_map:
                    back_edges.append((nm, len(data_inputs), inp))
                    data_inputs.append(None)
                elif inp in input_map:
                    data_inputs.append(input_map[inp])
                else:
                    src, _, idx = inp.rpartition(":")
                    op = created[src]
                    try:
                        data_inputs.append(op.outputs[int(idx)])
                    except (ValueError, IndexError):
                        raise errors.InvalidArgumentError(f"node {nm!r}: bad input reference {inp!r}") from None
            attrs = _decode_attrs(nm, n.get("attr") or {})
            if None in data_inputs:  # a loop Merge: its Enter input stands in for the back edge
                stand_in = next((t for t in data_inputs if t is not None), None)
                if stand_in is None:
                    raise errors.InvalidArgumentError(f"loop Merge node {nm!r} has no input from outside the loop")
                data_inputs = [stand_in if t is None else t for t in data_inputs]
            with g.control_dependencies(ctrl or None), g.device(n.get("device") or None):
                out = _create_named(g, n["op"], data_inputs, attrs, full(nm))
            created[nm] = out
        for nm, pos, inp in back_edges:
            src, _, idx = inp.rpartition(":")
            merge = created[nm]
            ins = list(merge._inputs)
            ins[pos] = created[src].outputs[int(idx)]
            merge._inputs = tuple(ins)
            g._version += 1
    if return_elements is None:
        return None
    out = []
    for r in return_elements:
        if ":" in r:
            src, _, idx = r.rpartition(":")
            out.append(created[src].outputs[int(idx)])
        else:
            out.append(created[r])
    return out


def _decode_attrs(nm, attrs) -> dict:
    """A node's tagged attrs as values (``apply_op`` then checks them against the op)."""
    if not isinstance(attrs, dict):
        raise errors.InvalidArgumentError(f"node {nm!r}: 'attr' must be an object")
    out = {}
    for k, v in attrs.items():
        try:
            out[k] = decode_attr(v)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"node {nm!r}: attr {k!r}: {e.message}") from None
    return out


def _is_back_edge(by_name, nm, inp, src) -> bool:
    """The edge NextIteration -> Merge that closes a while loop (graphs are otherwise acyclic)."""
    return (not inp.startswith("^") and by_name[nm]["op"] == "Merge"
            and by_name.get(src, {}).get("op") == "NextIteration")


def _create_named(g, op_type, flat_inputs, attrs, exact_name):
    """Create a node with exactly ``exact_name`` (names in a graph_def are already unique)."""
    if exact_name in g._by_name:
        raise errors.InvalidArgumentError(f"cannot import node {exact_name!r}: the graph already has it")
    key = exact_name.lower()
    g._names_in_use[key] = max(g._names_in_use.get(key, 0), 1)
    out = apply_op(op_type, flat_inputs, attrs, name=None, graph=g, _flat=True,
                             _exact_name=exact_name)
    if isinstance(out, Operation):
        return out
    return out[0].op if isinstance(out, tuple) else out.op


def _from_graph_def(cls, graph_def: dict) -> Graph:
    """A new Graph holding the nodes of ``graph_def`` under their own names."""
    g = cls()
    with g.as_default():
        import_graph_def(graph_def, name="")
    return g


# A constructor on the class users already hold (installed here, below which Graph cannot see,
# as array_ops installs Tensor.__getitem__).
Graph.from_graph_def = classmethod(_from_graph_def)
