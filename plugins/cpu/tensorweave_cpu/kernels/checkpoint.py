"""SaveV2 and RestoreV2 on the CPU, over ``tensorweave.train.checkpoint_format``.

Both validate everything before touching state: SaveV2 checks names and slices before it
writes (and the format writes temp files renamed into place), RestoreV2 checks that every
requested tensor exists with the requested dtype (and, for a slice, the spec's full shape)
before reading any of them, so a failing restore returns nothing and no Assign downstream
runs.

Slices (``shape_and_slices`` specs, see ``tensorweave.ops.checkpoint_ops``): SaveV2 assembles
the slices of one name into its full tensor, which is what the checkpoint stores; RestoreV2
reads each stored tensor once per call and cuts every slice asked of it from that copy.
"""

from __future__ import annotations

import os

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops.checkpoint_ops import parse_slice_spec
from tensorweave.runtime import file_access
from tensorweave.train import checkpoint_format as fmt

CPU = "CPU"


def _string(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _args(ctx, prefix, names, slices, n):
    prefix = np.asarray(prefix, dtype=object)
    if prefix.ndim != 0:
        raise ctx.error(errors.InvalidArgumentError, f"prefix must be a scalar string, got shape {prefix.shape}")
    names = [_string(x) for x in np.asarray(names, dtype=object).reshape(-1)]
    slices = [_string(x) for x in np.asarray(slices, dtype=object).reshape(-1)]
    if len(names) != n or len(slices) != n:
        raise ctx.error(errors.InvalidArgumentError,
                        f"expected {n} tensor names and shape_and_slices (one per tensor), got "
                        f"{len(names)} and {len(slices)}")
    specs = []
    for name, s in zip(names, slices):
        try:
            specs.append(parse_slice_spec(s, f"tensor '{name}' has shape_and_slices"))
        except errors.InvalidArgumentError as e:
            raise ctx.error(errors.InvalidArgumentError, e.message) from None
    path = _string(prefix.item())
    # The checkpoint's files are the prefix's siblings (<prefix>.index, <prefix>.data-*).
    files = file_access.of(ctx.resources)
    what = f"{ctx.op.type} node '{ctx.op.name}' on {ctx.device.name}"
    for p in (path, path + ".index"):
        files.check(p, what, write=ctx.op.type.startswith("Save"))
    return path, names, specs


def _group_slices(names, specs, tensors, dts):
    """Whole tensors and assembled slices: ([names], [values], [dtypes]), one per name."""
    order, whole, sliced = [], {}, {}
    for name, spec, value, dt in zip(names, specs, tensors, dts):
        if name not in whole and name not in sliced:
            order.append(name)
        if spec is None:
            if name in whole or name in sliced:
                raise errors.InvalidArgumentError(
                    f"tensor '{name}' is given more than once, and not as slices of one tensor")
            whole[name] = (np.asarray(value), dt)
            continue
        if name in whole:
            raise errors.InvalidArgumentError(f"tensor '{name}' is given both whole and as slices")
        full, starts, lengths = spec
        first = sliced.setdefault(name, (full, dt, []))
        if first[0] != full or first[1] is not dt:
            raise errors.InvalidArgumentError(
                f"the slices of tensor '{name}' disagree: full shape {first[0]} ({first[1].name}) and "
                f"{full} ({dt.name})")
        first[2].append((starts, lengths, value))
    values, out_dts = [], []
    for name in order:
        if name in whole:
            value, dt = whole[name]
        else:
            full, dt, pieces = sliced[name]
            value = fmt.assemble_slices(name, full, dt, pieces)
        values.append(value)
        out_dts.append(dt)
    return order, values, out_dts


def _save(ctx):
    dts = list(ctx.attrs["dtypes"])

    def save(prefix, names, slices, *tensors):
        path, names, specs = _args(ctx, prefix, names, slices, len(dts))
        try:
            names, values, out_dts = _group_slices(names, specs, tensors, dts)
            step = None
            if "global_step" in names:  # recorded in the index when the global step is saved
                v = values[names.index("global_step")]
                if np.ndim(v) == 0 and np.asarray(v).dtype.kind in "iu":
                    step = int(v)
            fmt.write_checkpoint(path, names, [np.asarray(t) for t in values], out_dts, global_step=step)
        except errors.OpError as e:
            raise ctx.error(type(e), e.message) from None
        except OSError as e:
            cls = errors.PermissionDeniedError if isinstance(e, PermissionError) else errors.UnknownError
            raise ctx.error(cls, f"writing checkpoint {path!r} failed: {e}") from None
        return None
    return save


def _restore(ctx):
    dts = list(ctx.attrs["dtypes"])

    def restore(prefix, names, slices):
        path, names, specs = _args(ctx, prefix, names, slices, len(dts))
        try:
            with fmt.CheckpointReader(path) as r:
                for name, spec, dt in zip(names, specs, dts):  # all checks first, then all reads
                    if not r.has_tensor(name):
                        raise errors.NotFoundError(
                            f"key '{name}' not found in checkpoint {r.path} (it holds {sorted(r.names())[:20]})")
                    if r.dtype(name) is not dt:
                        raise errors.InvalidArgumentError(
                            f"tensor '{name}' in checkpoint {r.path} has dtype {r.dtype(name).name}, "
                            f"but {dt.name} was requested")
                    if spec is not None and r.shape(name) != spec[0]:
                        raise errors.InvalidArgumentError(
                            f"tensor '{name}' in checkpoint {r.path} has shape {r.shape(name)}, but a slice of a "
                            f"tensor of full shape {spec[0]} was requested (the partitioned variable's full shape "
                            "differs from the saved one)")
                read: dict = {}
                out = []
                for name, spec in zip(names, specs):
                    if name not in read:
                        read[name] = r.get_tensor(name)
                    out.append(read[name] if spec is None else fmt.take_slice(read[name], spec[1], spec[2]))
                return tuple(out)
        except errors.OpError as e:
            raise ctx.error(type(e), e.message) from None
        except OSError as e:
            raise ctx.error(errors.UnknownError, f"reading checkpoint {os.fspath(path)!r} failed: {e}") from None
    return restore


def register(reg):
    reg.register("SaveV2", CPU, factory=_save)
    reg.register("RestoreV2", CPU, factory=_restore)
