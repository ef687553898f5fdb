"""SaveV2 and RestoreV2 on the CPU, over ``tensorweave.train.checkpoint_format``.

Both validate everything before touching state: SaveV2 checks names and slices before it
writes (and the format writes temp files renamed into place), RestoreV2 checks that every
requested tensor exists with the requested dtype before reading any of them, so a failing
restore returns nothing and no Assign downstream runs.
"""

from __future__ import annotations

import os

import numpy as np

from tensorweave.framework import errors
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
    bad = [(nm, s) for nm, s in zip(names, slices) if s]
    if bad:
        raise ctx.error(errors.InvalidArgumentError,
                        f"partial slices are not supported: tensor '{bad[0][0]}' has shape_and_slices "
                        f"{bad[0][1]!r}; pass \"\" to save or restore whole tensors")
    return _string(prefix.item()), names


def _save(ctx):
    dts = list(ctx.attrs["dtypes"])

    def save(prefix, names, slices, *tensors):
        path, names = _args(ctx, prefix, names, slices, len(dts))
        step = None
        if "global_step" in names:  # recorded in the index when the global step is saved
            v = tensors[names.index("global_step")]
            if np.ndim(v) == 0 and np.asarray(v).dtype.kind in "iu":
                step = int(v)
        try:
            fmt.write_checkpoint(path, names, [np.asarray(t) for t in tensors], dts, global_step=step)
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
        path, names = _args(ctx, prefix, names, slices, len(dts))
        try:
            with fmt.CheckpointReader(path) as r:
                for name, dt in zip(names, dts):  # all checks first, then all reads
                    if not r.has_tensor(name):
                        raise errors.NotFoundError(
                            f"key '{name}' not found in checkpoint {r.path} (it holds {sorted(r.names())[:20]})")
                    if r.dtype(name) is not dt:
                        raise errors.InvalidArgumentError(
                            f"tensor '{name}' in checkpoint {r.path} has dtype {r.dtype(name).name}, "
                            f"but {dt.name} was requested")
                return tuple(r.get_tensor(name) for name in names)
        except errors.OpError as e:
            raise ctx.error(type(e), e.message) from None
        except OSError as e:
            raise ctx.error(errors.UnknownError, f"reading checkpoint {os.fspath(path)!r} failed: {e}") from None
    return restore


def register(reg):
    reg.register("SaveV2", CPU, factory=_save)
    reg.register("RestoreV2", CPU, factory=_restore)
