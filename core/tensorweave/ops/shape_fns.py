"""Shape functions shared by op definitions.

A shape function takes the new ``Operation`` and returns one ``TensorShape`` per output (or
one shape for single-output ops). It raises ``InvalidArgumentError`` for incompatible input
shapes; ``apply_op`` prefixes the node name.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.graph import constant_value
from tensorweave.framework.tensor_shape import TensorShape


def unknown(op):
    return [TensorShape(None) for _ in op.outputs]


def scalar(op):
    return [TensorShape([]) for _ in op.outputs]


def unchanged(op):
    """Every output has the shape of the first input."""
    return [op.inputs[0].shape for _ in op.outputs]


def broadcast_shapes(a: TensorShape, b: TensorShape) -> TensorShape:
    """NumPy broadcasting on static shapes, with unknown dimensions."""
    if a.ndims is None or b.ndims is None:
        return TensorShape(None)
    da, db = a.dims, b.dims
    n = max(len(da), len(db))
    da = [1] * (n - len(da)) + da
    db = [1] * (n - len(db)) + db
    out = []
    for x, y in zip(da, db, strict=True):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        elif x == y:
            out.append(x)
        else:
            raise errors.InvalidArgumentError(
                f"incompatible shapes {a} and {b}: dimensions {x} and {y} cannot be broadcast")
    return TensorShape(out)


def broadcast(op):
    """Element-wise binary ops: the broadcast shape of the two inputs."""
    return [broadcast_shapes(op.inputs[0].shape, op.inputs[1].shape)]


def merge_all(op):
    """Ops whose inputs must all have one shape (AddN): that shape, as far as it is known."""
    shape = TensorShape(None)
    for t in op.inputs:
        try:
            shape = shape.merge_with(t.shape)
        except errors.InvalidArgumentError:
            raise errors.InvalidArgumentError(
                f"all inputs must have the same shape; '{t.name}' has shape {t.shape}, "
                f"the inputs before it {shape}") from None
    return [shape for _ in op.outputs]


def reduction(op):
    """Reductions with an ``axis``/``reduction_indices`` input and ``keep_dims`` attr."""
    x = op.inputs[0].shape
    keep = op.get_attr("keep_dims")
    if op.inputs[1].shape.ndims is not None and op.inputs[1].shape.ndims > 1:
        raise errors.InvalidArgumentError(
            f"reduction indices must be a scalar or a vector, got shape {op.inputs[1].shape}")
    axes = constant_value(op.inputs[1])
    if axes is None:
        if keep and x.ndims is not None:
            return [TensorShape([None] * x.ndims)]
        return [TensorShape(None)]
    if x.ndims is None:
        return [TensorShape(None)]
    axes = np.asarray(axes).reshape(-1)
    nd = x.ndims
    norm = set()
    for a in axes:
        a = int(a)
        if not -nd <= a < max(nd, 1):
            raise errors.InvalidArgumentError(f"reduction axis {a} is out of range for input of rank {nd}")
        norm.add(a % nd if nd else 0)
    dims = x.dims
    if keep:
        return [TensorShape([1 if i in norm else d for i, d in enumerate(dims)])]
    return [TensorShape([d for i, d in enumerate(dims) if i not in norm])]


def normalize_axis(axis: int, ndims: int, what: str = "axis") -> int:
    if not -ndims <= axis < ndims:
        raise errors.InvalidArgumentError(f"{what} {axis} is out of range for a tensor of rank {ndims}")
    return axis % ndims
