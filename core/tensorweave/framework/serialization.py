"""The serialisable graph form: a dict (our GraphDef) and its tagged attr values;
``framework/importer.py`` builds a graph back from it.

Schema (version 1)::

    {"versions": {"producer": 1}, "node": [
        {"name": "add", "op": "Add", "input": ["x:0", "y:0", "^init"],
         "device": "/device:CPU:0", "attr": {"T": {"type": "float32"}}}]}

Attr values are tagged by kind (type, i, f, b, s, shape, tensor, list, none) so the dict
round-trips exactly: ``graph_to_dict(import(graph_to_dict(g))) == graph_to_dict(g)``. This
module owns the tags: ``encode_attr`` writes them, ``decode_attr`` reads them strictly (JSON
types checked, and the kind checked against an attr's declared type when one is given).

A tensor value (kind ``tensor``) has three forms, one per use: the JSON form for users
(``{"dtype", "shape", "data"}``: ``framework/tensor_codec.py``'s dtype name, shape and base64
of its payload), the in-memory form (the ndarray itself; ``arrays=True``), and the wire's
frame references (``distributed/wire.py``, through the ``encode_tensor``/``decode_tensor``
hooks). The bytes are always the codec's.
"""

from __future__ import annotations

import base64
import binascii
import math

import numpy as np

from tensorweave.framework import dtypes, errors, tensor_codec
from tensorweave.framework.tensor_shape import TensorShape

GRAPH_DEF_VERSION = 1
_TENSOR_KEYS = frozenset({"dtype", "shape", "data"})
_WHERE = "malformed tensor value in graph"
_DTYPE_NAMES = {d.name: d for d in dtypes.ALL_DTYPES}
# The tag an attr of each declared type is written with ("func"/"any": any tag).
_KIND_OF = {"type": "type", "int": "i", "float": "f", "bool": "b", "string": "s", "shape": "shape",
            "tensor": "tensor"}
_MAX_SHAPE_RANK = 255


def _enc_float(f: float):
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f


def encode_tensor(arr) -> dict:
    """The JSON form of a tensor: the codec's header fields and base64 of its payload."""
    fields, parts = tensor_codec.encode(arr, "tensor value")
    return {"dtype": fields["dtype"], "shape": fields["shape"],
            "data": base64.b64encode(b"".join(parts)).decode("ascii")}


def decode_tensor(d) -> np.ndarray:
    """An owned array from a tensor's JSON form (or the array itself, its in-memory form)."""
    if isinstance(d, np.ndarray):
        return d
    if not isinstance(d, dict) or set(d) != _TENSOR_KEYS:
        raise errors.InvalidArgumentError(f"{_WHERE}: expected an object with 'dtype', 'shape' and 'data', "
                                          f"got {str(d)[:200]}")
    tensor_codec.dtype_of(d["dtype"], _WHERE)
    shape = tensor_codec.check_shape(d["shape"], _WHERE)
    try:
        raw = base64.b64decode(d["data"], validate=True)
    except (TypeError, ValueError, binascii.Error) as e:
        raise errors.InvalidArgumentError(f"{_WHERE}: 'data' is not base64: {e}") from None
    return tensor_codec.decode(d["dtype"], shape, raw, _WHERE, copy=True)


def keep_array(arr) -> np.ndarray:
    """The in-memory form of a tensor value: the array itself (an ``encode_tensor`` hook)."""
    return tensor_codec.as_array(arr)


def encode_attr(value, encode_tensor=encode_tensor) -> dict:
    """The tagged form of an attr value; ``encode_tensor`` writes the value of a tensor."""
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
        return {"list": [encode_attr(v, encode_tensor) for v in value]}
    if value is None:
        return {"none": True}
    raise errors.UnimplementedError(f"attr value {value!r} of type {type(value).__name__} cannot be serialised")


def decode_attr(d, attr_type: str | None = None, decode_tensor=decode_tensor):
    """The value of a tagged attr ``d``; raises InvalidArgumentError for anything malformed.

    ``attr_type`` (an ``AttrDef.type`` such as ``"int"`` or ``"list(type)"``) requires the
    matching tag; ``decode_tensor`` reads the value of a tensor. Values are only decoded
    here; ``op_def.check_attr_value`` checks them against the op (allowed values, minimums).
    """
    if not isinstance(d, dict) or len(d) != 1:
        raise errors.InvalidArgumentError(
            f"malformed attr value {str(d)[:200]}: expected one tagged value like {{\"i\": 3}}")
    (kind, x), = d.items()
    if kind == "none":
        if x is not True:
            raise errors.InvalidArgumentError(f"malformed 'none' value {str(x)[:200]}")
        return None
    t = attr_type or "any"
    if t.startswith("list("):
        want = "list"
    elif t in ("any", "func"):
        want = kind
    else:
        want = _KIND_OF.get(t)
    if kind != want:
        raise errors.InvalidArgumentError(f"declared {t}, so expected kind {want!r}, got {kind!r}")
    if kind == "type":
        dt = _DTYPE_NAMES.get(x) if isinstance(x, str) else None
        if dt is None:
            raise errors.InvalidArgumentError(f"unknown dtype {x!r}; expected one of {sorted(_DTYPE_NAMES)}")
        return dt
    if kind == "i":
        if type(x) is not int:
            raise _malformed(kind, x)
        return x
    if kind == "f":
        if type(x) in (int, float) or x in ("nan", "inf", "-inf"):
            return float(x)
        raise _malformed(kind, x)
    if kind == "b":
        if type(x) is not bool:
            raise _malformed(kind, x)
        return x
    if kind == "s":
        if not isinstance(x, str):
            raise _malformed(kind, x)
        return x
    if kind == "shape":
        if x is not None and not (isinstance(x, list) and len(x) <= _MAX_SHAPE_RANK
                                  and all(v is None or (type(v) is int and v >= 0) for v in x)):
            raise _malformed(kind, x)
        return TensorShape(x)
    if kind == "tensor":
        return decode_tensor(x)
    if kind == "list":
        if not isinstance(x, list):
            raise _malformed(kind, x)
        inner = t[5:-1] if t.startswith("list(") else None
        out = []
        for i, v in enumerate(x):
            try:
                out.append(decode_attr(v, inner, decode_tensor))
            except errors.InvalidArgumentError as e:
                raise errors.InvalidArgumentError(f"element {i}: {e.message}") from None
        return out
    raise errors.InvalidArgumentError(f"unknown attr kind {kind!r}")


def _malformed(kind, x) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(f"malformed {kind!r} value {str(x)[:200]}")


def node_to_dict(op, arrays: bool = False) -> dict:
    """One node of a GraphDef; ``arrays``: tensor values as ndarrays (in-memory form)."""
    enc = keep_array if arrays else encode_tensor
    return {
        "name": op.name,
        "op": op.type,
        "input": [t.name for t in op.inputs] + ["^" + c.name for c in op.control_inputs],
        "device": op.device,
        "attr": {k: encode_attr(v, enc) for k, v in sorted(op._attrs.items())},
    }


def graph_to_dict(graph, add_shapes=False, arrays: bool = False) -> dict:
    """The GraphDef of ``graph``: JSON-safe, or with ``arrays`` its tensors as ndarrays."""
    nodes = []
    for op in graph._nodes:
        d = node_to_dict(op, arrays)
        if add_shapes:
            d["output_shapes"] = [t.shape.dims for t in op.outputs]
        nodes.append(d)
    return {"versions": {"producer": GRAPH_DEF_VERSION}, "node": nodes}
