"""The serialisable graph form: a JSON-safe dict (our GraphDef) and importing it back.

Schema (version 1)::

    {"versions": {"producer": 1}, "node": [
        {"name": "add", "op": "Add", "input": ["x:0", "y:0", "^init"],
         "device": "/device:CPU:0", "attr": {"T": {"type": "float32"}}}]}

Attr values are tagged by kind (type, i, f, b, s, shape, tensor, list) so the dict round-trips
exactly: ``graph_to_dict(import(graph_to_dict(g))) == graph_to_dict(g)``. Tensor values carry
dtype, shape and base64 of the raw little-endian bytes. Importing a graph only ever creates
ops that are registered, through ``apply_op``; nothing in a GraphDef is evaluated as code.
"""

from __future__ import annotations

import base64
import math

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.tensor_shape import TensorShape

GRAPH_DEF_VERSION = 1


def _enc_float(f: float):
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f


def _dec_float(v) -> float:
    return float(v)


def encode_tensor(arr: np.ndarray) -> dict:
    arr = np.asarray(arr)
    dt = dtypes.as_dtype(arr.dtype) if arr.dtype != object else dtypes.string
    out = {"dtype": dt.name, "shape": list(arr.shape)}
    if dt.is_string:
        out["strings"] = [base64.b64encode(b if isinstance(b, bytes) else str(b).encode()).decode()
                          for b in arr.reshape(-1)]
    else:
        out["data"] = base64.b64encode(np.ascontiguousarray(arr, dtype=dt.np_dtype.newbyteorder("<")).tobytes()).decode()
    return out


def decode_tensor(d: dict) -> np.ndarray:
    try:
        dt = dtypes.as_dtype(d["dtype"])
        shape = tuple(int(x) for x in d["shape"])
        if any(x < 0 for x in shape):
            raise ValueError("negative dimension")
        if dt.is_string:
            items = [base64.b64decode(s) for s in d["strings"]]
            out = np.empty(len(items), dtype=object)
            out[:] = items
            return out.reshape(shape)
        raw = base64.b64decode(d["data"])
        n = int(np.prod(shape, dtype=np.int64))
        if len(raw) != n * dt.size:
            raise ValueError(f"{len(raw)} bytes do not hold {n} elements of {dt.name}")
        return np.frombuffer(raw, dtype=dt.np_dtype.newbyteorder("<")).astype(dt.np_dtype).reshape(shape)
    except (KeyError, TypeError, ValueError, base64.binascii.Error) as e:
        raise errors.InvalidArgumentError(f"malformed tensor value in graph: {e}") from None


def encode_attr(value) -> dict:
    if isinstance(value, dtypes.DType):
        return {"type": value.name}
    if isinstance(value, bool | np.bool_):
        return {"b": bool(value)}
    if isinstance(value, int | np.integer):
        return {"i": int(value)}
    if isinstance(value, float | np.floating):
        return {"f": _enc_float(float(value))}
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, TensorShape):
        return {"shape": value.dims}
    if isinstance(value, np.ndarray):
        return {"tensor": encode_tensor(value)}
    if isinstance(value, list | tuple):
        return {"list": [encode_attr(v) for v in value]}
    if value is None:
        return {"none": True}
    raise errors.UnimplementedError(f"attr value {value!r} of type {type(value).__name__} cannot be serialised")


def decode_attr(d: dict):
    if not isinstance(d, dict) or len(d) != 1:
        raise errors.InvalidArgumentError(f"malformed attr value {d!r}: expected one tagged entry")
    (k, v), = d.items()
    if k == "type":
        return dtypes.as_dtype(v)
    if k == "b":
        return bool(v)
    if k == "i":
        return int(v)
    if k == "f":
        return _dec_float(v)
    if k == "s":
        return str(v)
    if k == "shape":
        return TensorShape(v)
    if k == "tensor":
        return decode_tensor(v)
    if k == "list":
        return [decode_attr(x) for x in v]
    if k == "none":
        return None
    raise errors.InvalidArgumentError(f"unknown attr kind {k!r}")


def node_to_dict(op) -> dict:
    return {
        "name": op.name,
        "op": op.type,
        "input": [t.name for t in op.inputs] + ["^" + c.name for c in op.control_inputs],
        "device": op.device,
        "attr": {k: encode_attr(v) for k, v in sorted(op._attrs.items())},
    }


def graph_to_dict(graph, add_shapes=False) -> dict:
    nodes = []
    for op in graph._nodes:
        d = node_to_dict(op)
        if add_shapes:
            d["output_shapes"] = [t.shape.dims for t in op.outputs]
        nodes.append(d)
    return {"versions": {"producer": GRAPH_DEF_VERSION}, "node": nodes}


def import_graph_def(graph_def: dict, input_map=None, return_elements=None, name=None):
    """Add the nodes of ``graph_def`` to the default graph (TF1 ``tf.import_graph_def``).

    Names are prefixed with ``name`` (default ``"import"``; ``""`` keeps them exactly).
    ``input_map`` maps tensor names in ``graph_def`` to existing Tensors.
    """
    from tensorweave.framework import graph as graph_mod

    g = graph_mod.get_default_graph()
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
            attrs = {k: decode_attr(v) for k, v in (n.get("attr") or {}).items()}
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


def _is_back_edge(by_name, nm, inp, src) -> bool:
    """The edge NextIteration -> Merge that closes a while loop (graphs are otherwise acyclic)."""
    return (not inp.startswith("^") and by_name[nm]["op"] == "Merge"
            and by_name.get(src, {}).get("op") == "NextIteration")


def _create_named(g, op_type, flat_inputs, attrs, exact_name):
    """Create a node with exactly ``exact_name`` (names in a graph_def are already unique)."""
    from tensorweave.framework import graph as graph_mod

    if exact_name in g._by_name:
        raise errors.InvalidArgumentError(f"cannot import node {exact_name!r}: the graph already has it")
    key = exact_name.lower()
    g._names_in_use[key] = max(g._names_in_use.get(key, 0), 1)
    out = graph_mod.apply_op(op_type, flat_inputs, attrs, name=None, graph=g, _flat=True,
                             _exact_name=exact_name)
    if isinstance(out, graph_mod.Operation):
        return out
    return out[0].op if isinstance(out, tuple) else out.op
