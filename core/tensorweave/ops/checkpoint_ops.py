"""Checkpoint ops: SaveV2 and RestoreV2 (whitepaper 3.3), with TensorFlow 1.x signatures.

``SaveV2(prefix, tensor_names, shape_and_slices, tensors)`` writes the checkpoint
``prefix`` (``prefix.safetensors`` + ``prefix.index.json``, see
``tensorweave.train.checkpoint_format``); ``RestoreV2(prefix, tensor_names,
shape_and_slices) -> dtypes`` reads tensors back. Paths arrive as tensors, so the same
graph saves to a new path each step and, later, a parameter-server task can run the save
on its own device. Partial slices are not supported: every ``shape_and_slices`` entry must
be "" (whole tensor); anything else is rejected when the graph is built if the value is
known then, else when the op runs.
"""

from __future__ import annotations

from tensorweave.framework import dtypes as _dtypes
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op, constant_value
from tensorweave.framework.tensor_shape import TensorShape

__all__ = ["save_v2", "restore_v2"]


def _check_names_and_slices(op, n_tensors):
    names_t, slices_t = op.inputs[1], op.inputs[2]
    if op.inputs[0].shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(f"prefix must be a scalar string, got shape {op.inputs[0].shape}")
    for what, t in (("tensor_names", names_t), ("shape_and_slices", slices_t)):
        s = t.shape
        if s.ndims is not None and (s.ndims != 1 or s[0] not in (None, n_tensors)):
            raise errors.InvalidArgumentError(
                f"{what} must be a vector of {n_tensors} strings (one per tensor), got shape {s}")
    slices = constant_value(slices_t)
    if slices is not None:
        bad = [s for s in slices.reshape(-1).tolist() if s not in (b"", "")]
        if bad:
            raise errors.InvalidArgumentError(
                f"shape_and_slices {bad[:3]}: partial slices are not supported; pass \"\" for each tensor")


def _save_shape(op):
    _check_names_and_slices(op, len(op.get_attr("dtypes")))
    return []


def _restore_shape(op):
    n = len(op.get_attr("dtypes"))
    _check_names_and_slices(op, n)
    return [TensorShape(None)] * n


def register_ops(reg):
    reg.op("SaveV2", inputs=["prefix: string", "tensor_names: string", "shape_and_slices: string",
                             "tensors: dtypes"],
           attrs=["dtypes: list(type)"], shape_fn=_save_shape, stateful=True,
           doc="Saves tensors to the checkpoint `prefix` (safetensors data + JSON index), atomically.")
    reg.op("RestoreV2", inputs=["prefix: string", "tensor_names: string", "shape_and_slices: string"],
           outputs=["tensors: dtypes"], attrs=["dtypes: list(type)"], shape_fn=_restore_shape, stateful=True,
           doc="Reads tensors from the checkpoint `prefix`; each must exist with the dtype asked for.")
    reg.no_gradient("SaveV2", "RestoreV2")


def save_v2(prefix, tensor_names, shape_and_slices, tensors, name=None):
    """Save ``tensors`` under ``tensor_names`` to checkpoint ``prefix``; returns the op."""
    tensors = list(tensors)
    if not tensors:
        raise errors.InvalidArgumentError("save_v2 needs at least one tensor to save")
    return apply_op("SaveV2", [prefix, tensor_names, shape_and_slices, tensors], name=name)


def restore_v2(prefix, tensor_names, shape_and_slices, dtypes, name=None):  # noqa: A002 - TF1 name
    """Tensors ``tensor_names`` of checkpoint ``prefix``, of ``dtypes`` (a list of tensors)."""
    dts = [_dtypes.as_dtype(d) for d in dtypes]
    if not dts:
        raise errors.InvalidArgumentError("restore_v2 needs at least one dtype")
    out = apply_op("RestoreV2", [prefix, tensor_names, shape_and_slices], {"dtypes": dts}, name=name)
    return list(out)
