"""Neural-net ops: activations (the rest of the family arrives with autodiff)."""

from __future__ import annotations

from tensorweave.framework.graph import apply_op
from tensorweave.ops import shape_fns

_FLOAT = "T: {float16, float32, float64}"
_REALNUM = "T: {float16, float32, float64, int8, int16, int32, int64}"


def register_ops(reg):
    reg.op("Relu", inputs=["features: T"], outputs=["activations: T"], attrs=[_REALNUM], shape_fn=shape_fns.unchanged)


def relu(features, name=None):
    """max(features, 0)."""
    return apply_op("Relu", [features], name=name)
