"""The serialisable graph form: a JSON-safe dict (our GraphDef); ``framework/importer.py``
builds a graph back from it.

Schema (version 1)::

    {"versions": {"producer": 1}, "node": [
        {"name": "add", "op": "Add", "input": ["x:0", "y:0", "^init"],
         "device": "/device:CPU:0", "attr": {"T": {"type": "float32"}}}]}

Attr values are tagged by kind (type, i, f, b, s, shape, tensor, list) so the dict round-trips
exactly: ``graph_to_dict(import(graph_to_dict(g))) == graph_to_dict(g)``. Tensor values carry
dtype, shape and base64 of the raw little-endian bytes.
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
