"""Checkpoint ops: SaveV2 and RestoreV2 (whitepaper 3.3), with TensorFlow 1.x signatures.

``SaveV2(prefix, tensor_names, shape_and_slices, tensors)`` writes the checkpoint
``prefix`` (``prefix.safetensors`` + ``prefix.index.json``, see
``tensorweave.train.checkpoint_format``); ``RestoreV2(prefix, tensor_names,
shape_and_slices) -> dtypes`` reads tensors back. Paths arrive as tensors, so the same
graph saves to a new path each step and, later, a parameter-server task can run the save
on its own device.

A ``shape_and_slices`` entry is "" (the whole tensor) or TF's slice spec
``"<full shape> <slice>"``: the logical tensor's dimensions separated by spaces, then one
``offset,length`` (or ``-``, the whole dimension) per dimension separated by ``:``, e.g.
``"10 4 0,5:-"`` for rows 0-4 of a [10, 4] tensor (``Variable.SaveSliceInfo.spec`` writes
it). SaveV2 takes the shards of a partitioned variable as several entries of one name, each
with its slice; together they must tile the full shape, and the checkpoint holds the one
logical tensor, assembled. RestoreV2 returns the requested slice of a stored tensor whose
shape must be the spec's full shape, so a checkpoint restores into any partitioning (or
none). Specs are checked when the graph is built if their value is known then, else when
the op runs.
"""

from __future__ import annotations

from tensorweave.framework import dtypes as _dtypes
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op, constant_value
from tensorweave.framework.tensor_shape import TensorShape

__all__ = ["save_v2", "restore_v2", "parse_slice_spec"]


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def parse_slice_spec(spec, what="shape_and_slices"):
    """``None`` for "" (the whole tensor), else ``(full_shape, starts, lengths)`` of a TF slice
    spec (see the module docstring); a malformed or out-of-range spec is InvalidArgumentError."""
    spec = _text(spec)
    if not spec:
        return None
    fields = spec.split(" ")

    def bad(why):
        return errors.InvalidArgumentError(
            f"{what} {spec!r}: {why}; expected \"<dim> <dim> ... <offset>,<length>:...\" (one offset,length or - "
            "per dimension)")
    if len(fields) < 2:
        raise bad("no full shape")
    try:
        full = [int(d) for d in fields[:-1]]
    except ValueError:
        raise bad("the full shape is not integers") from None
    parts = fields[-1].split(":")
    if len(parts) != len(full):
        raise bad(f"{len(parts)} slices for a full shape of rank {len(full)}")
    starts, lengths = [], []
    for d, (size, part) in enumerate(zip(full, parts)):
        if size < 0:
            raise bad(f"dimension {d} is negative")
        if part == "-":
            starts.append(0)
            lengths.append(size)
            continue
        try:
            o, n = (int(x) for x in part.split(","))
        except ValueError:
            raise bad(f"slice {part!r} of dimension {d} is not offset,length") from None
        if o < 0 or n < 0 or o + n > size:
            raise bad(f"slice {o},{n} of dimension {d} is outside [0, {size})")
        starts.append(o)
        lengths.append(n)
    return full, starts, lengths


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
    if slices is None:
        return None
    return [parse_slice_spec(s) for s in slices.reshape(-1).tolist()]


def _save_shape(op):
    n = len(op.get_attr("dtypes"))
    specs = _check_names_and_slices(op, n)
    if specs is not None and len(specs) == n:
        for spec, t in zip(specs, op.inputs[3:]):
            if spec is not None and not t.shape.is_compatible_with(spec[2]):
                raise errors.InvalidArgumentError(
                    f"a tensor of shape {t.shape} cannot be saved as the slice {spec[2]} of a tensor of shape {spec[0]}")
    return []


def _restore_shape(op):
    n = len(op.get_attr("dtypes"))
    specs = _check_names_and_slices(op, n)
    if specs is None or len(specs) != n:
        return [TensorShape(None)] * n
    return [TensorShape(None) if s is None else TensorShape(s[2]) for s in specs]


def register_ops(reg):
    reg.op("SaveV2", inputs=["prefix: string", "tensor_names: string", "shape_and_slices: string",
                             "tensors: dtypes"],
           attrs=["dtypes: list(type)"], shape_fn=_save_shape, stateful=True,
           doc="Saves tensors to the checkpoint `prefix` (safetensors data + JSON index), atomically; slices of "
               "one name are assembled into its full tensor.")
    reg.op("RestoreV2", inputs=["prefix: string", "tensor_names: string", "shape_and_slices: string"],
           outputs=["tensors: dtypes"], attrs=["dtypes: list(type)"], shape_fn=_restore_shape, stateful=True,
           doc="Reads tensors (or slices of them) from the checkpoint `prefix`; each must exist with the dtype "
               "and full shape asked for.")
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
