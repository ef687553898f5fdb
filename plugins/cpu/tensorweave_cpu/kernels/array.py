"""Array kernels: constants, packing, slicing, joining, gathering, filling, ranges. (Identity,
Reshape, ExpandDims, Squeeze, Shape, Size and Rank are the core's, the same on every device:
``tensorweave/kernels/shapes.py``.)

Results are often views of their inputs (transpose, slices, broadcasts): no kernel writes into
an array, so sharing memory is safe. Indexing that would give a NumPy scalar is made to give
a 0-d array instead (a string element would otherwise come back as a bare ``bytes``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels.axes import int_list, norm_axis
from tensorweave.ops import index_math
from tensorweave.ops.array_ops import range_length, strided_slice_index

CPU = "CPU"
_E = errors.InvalidArgumentError


def _identity(x):
    return x


def _const(ctx):
    value = ctx.attrs["value"]
    return lambda: value  # the executor places constants in the slot template instead


def _placeholder(ctx):
    def fail():
        raise ctx.error(errors.InvalidArgumentError, "a placeholder must be fed")
    return fail



# ---------------------------------------------------------------------------------------
def _unpack(ctx):
    num, axis = ctx.attrs["num"], ctx.attrs["axis"]

    def unpack(x):
        if x.ndim == 0:
            raise ctx.error(_E, "cannot unstack a scalar")
        a = norm_axis(ctx, axis, x.ndim)
        if x.shape[a] != num:
            raise ctx.error(_E, f"input of shape {x.shape} has {x.shape[a]} elements along axis {a}, not num={num}")
        lead = (slice(None),) * a
        outs = tuple(x[lead + (i, Ellipsis)] for i in range(num))
        return outs[0] if num == 1 else outs  # the executor stores a single output as is
    return unpack


def _concat(ctx):
    def concat(*args):
        values = args[:-1]
        nd = values[0].ndim
        if nd == 0:
            raise ctx.error(_E, "cannot concatenate scalars; use tw.stack")
        axis = norm_axis(ctx, args[-1], nd, "concat axis")
        try:
            return np.concatenate(values, axis=axis)
        except ValueError:
            raise ctx.error(_E, f"cannot concatenate shapes {[v.shape for v in values]} along axis {axis}: "
                                "ranks and all other dimensions must match") from None
    return concat


def _slice(ctx):
    def slice_(x, begin, size):
        b = int_list(ctx, begin, "begin")
        s = int_list(ctx, size, "size")
        if len(b) != x.ndim or len(s) != x.ndim:
            raise ctx.error(_E, f"begin {b} and size {s} must have one element per dimension of the input {x.shape}")
        idx = []
        for bi, si, d in zip(b, s, x.shape, strict=False):
            if si == -1:
                si = d - bi
            if bi < 0 or si < 0 or bi + si > d:
                raise ctx.error(_E, f"slice begin {b} size {s} is out of bounds for an input of shape {x.shape}")
            idx.append(slice(bi, bi + si))
        idx.append(Ellipsis)
        return x[tuple(idx)]
    return slice_


def _strided_slice(ctx):
    masks = tuple(ctx.attrs[k] for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                         "shrink_axis_mask"))
    memo = [None]

    def strided_slice(x, begin, end, strides):
        m = memo[0]
        if m is not None and m[0] is begin and m[1] is end and m[2] is strides:
            idx = m[3]
        else:
            idx = strided_slice_index(int_list(ctx, begin, "begin"), int_list(ctx, end, "end"),
                                      int_list(ctx, strides, "strides"), *masks)
            if not any(e is Ellipsis for e in idx):
                idx += (Ellipsis,)  # keeps a fully indexed result a 0-d array, not a scalar
            # Constants are read-only and the same object every step, so their index can be
            # reused; a fed (writable) array might be changed in place between steps.
            if not (begin.flags.writeable or end.flags.writeable or strides.flags.writeable):
                memo[0] = (begin, end, strides, idx)
        try:
            return x[idx]
        except IndexError as e:
            raise ctx.error(_E, f"slice spec is invalid for an input of shape {x.shape}: {e}") from None
    return strided_slice


def _split(ctx):
    num = ctx.attrs["num_split"]

    def split(axis, value):
        if value.ndim == 0:
            raise ctx.error(_E, "cannot split a scalar")
        a = norm_axis(ctx, axis, value.ndim, "split axis")
        if value.shape[a] % num:
            raise ctx.error(_E, f"the number of splits {num} must evenly divide dimension {a} of the input "
                                f"{value.shape} (size {value.shape[a]})")
        width = value.shape[a] // num
        parts = _parts(value, a, [i * width for i in range(num + 1)])
        return parts[0] if num == 1 else parts
    return split


def _parts(value, axis, bounds):
    """Views of ``value`` between consecutive ``bounds`` along ``axis``: np.split's views,
    without its generic path (four parts of an LSTM cell's gates: 15 -> 2 us)."""
    lead = (slice(None),) * axis
    return tuple(value[lead + (slice(b0, b1),)] for b0, b1 in zip(bounds[:-1], bounds[1:], strict=False))


def _split_v(ctx):
    num = ctx.attrs["num_split"]

    def split_v(value, size_splits, axis):
        if value.ndim == 0:
            raise ctx.error(_E, "cannot split a scalar")
        a = norm_axis(ctx, axis, value.ndim, "split axis")
        sizes = int_list(ctx, size_splits, "size_splits")
        try:
            sizes = index_math.resolve_split_sizes(sizes, value.shape[a], a, value.shape, num)
        except ValueError as e:
            raise ctx.error(_E, str(e)) from None
        bounds = [0]
        for n in sizes:
            bounds.append(bounds[-1] + n)
        parts = _parts(value, a, bounds)
        return parts[0] if num == 1 else parts
    return split_v


def _transpose(ctx):
    def transpose(x, perm):
        p = int_list(ctx, perm, "perm")
        if len(p) != x.ndim or sorted(p) != list(range(x.ndim)):
            raise ctx.error(_E, f"perm {p} is not a permutation of the {x.ndim} dimensions of the input {x.shape}")
        return np.transpose(x, p)
    return transpose


def _fill(ctx):
    def fill(dims, value):
        d = int_list(ctx, dims, "dims")
        if any(n < 0 for n in d):
            raise ctx.error(_E, f"dims {d} must be >= 0")
        if value.ndim != 0:
            raise ctx.error(_E, f"the fill value must be a scalar, got shape {value.shape}")
        return np.full(d, value, dtype=value.dtype)
    return fill


def _zeros_like(ctx):
    if ctx.attrs["T"].is_string:
        return lambda x: np.full(x.shape, b"", dtype=object)
    return np.zeros_like


def _select(ctx):
    def select(c, t, e):
        if t.shape != e.shape:
            raise ctx.error(_E, f"t and e must have the same shape, got {t.shape} and {e.shape}")
        if c.ndim == 1 and t.ndim > 1 and c.shape[0] == t.shape[0]:
            c = c.reshape(c.shape + (1,) * (t.ndim - 1))  # a vector condition picks rows
        elif c.ndim and c.shape != t.shape:
            raise ctx.error(_E, f"condition of shape {c.shape} does not fit t and e of shape {t.shape} "
                                "(it must be a scalar, of their shape, or a vector of their first dimension)")
        return np.where(c, t, e)
    return select


def _where(x):
    return np.argwhere(x).astype(np.int64)


def _check_indices(ctx, indices, n):
    if not indices.size:
        return
    if indices.min() >= 0 and indices.max() < n:
        return
    flat = indices.reshape(-1)
    pos = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
    where = ",".join(str(int(i)) for i in np.unravel_index(pos, indices.shape))
    raise ctx.error(_E, f"indices[{where}] = {flat[pos]} is not in [0, {n})")


def _take(params, indices, axis):
    r = np.take(params, indices, axis=axis)
    return r if type(r) is np.ndarray else np.asarray(r, dtype=params.dtype)


def _gather(ctx):
    def gather(params, indices):
        if params.ndim == 0:
            raise ctx.error(_E, "cannot gather from a scalar")
        _check_indices(ctx, indices, params.shape[0])
        return _take(params, indices, 0)
    return gather


def _gather_v2(ctx):
    def gather(params, indices, axis):
        if params.ndim == 0:
            raise ctx.error(_E, "cannot gather from a scalar")
        a = norm_axis(ctx, axis, params.ndim, "gather axis")
        _check_indices(ctx, indices, params.shape[a])
        return _take(params, indices, a)
    return gather


def _tile(ctx):
    def tile(x, multiples):
        m = int_list(ctx, multiples, "multiples")
        if len(m) != x.ndim:
            raise ctx.error(_E, f"multiples {m} must have one element per dimension of the input {x.shape}")
        if any(k < 0 for k in m):
            raise ctx.error(_E, f"multiples {m} must be >= 0")
        return np.tile(x, m)
    return tile


def _range(ctx):
    dt = ctx.attrs["Tidx"]
    np_dt = dt.np_dtype

    def range_(start, limit, delta):
        s, lim, d = start.item(), limit.item(), delta.item()
        n = range_length(s, lim, d)
        if dt.is_integer:
            return np.arange(s, lim, d, dtype=np_dt)
        # Computed from the length, so the result always has the length the shape function says.
        return (np.arange(n, dtype=np.float64) * d + s).astype(np_dt)
    return range_


def _one_hot(ctx):
    axis = ctx.attrs["axis"]
    dt = ctx.attrs["T"].np_dtype

    def one_hot(indices, depth, on_value, off_value):
        d = int(depth)
        if d < 0:
            raise ctx.error(_E, f"depth must be >= 0, got {d}")
        out = np.where(indices[..., None] == np.arange(d), on_value, off_value)
        if out.dtype != dt:
            out = out.astype(dt)
        if axis != -1 and axis != indices.ndim:
            out = np.moveaxis(out, -1, axis)
        return out
    return one_hot


def _broadcast_to(ctx):
    def broadcast_to(x, shape):
        dims = int_list(ctx, shape, "shape")
        try:
            return np.broadcast_to(x, dims)  # a read-only view: nothing writes into kernel outputs
        except ValueError:
            raise ctx.error(_E, f"cannot broadcast a tensor of shape {x.shape} to shape {tuple(dims)}") from None
    return broadcast_to


def _invert_permutation(ctx):
    def invert_permutation(x):
        try:
            return index_math.invert_permutation(int_list(ctx, x, "x"), x.dtype)
        except ValueError as e:
            raise ctx.error(_E, str(e)) from None
    return invert_permutation


def _list_diff(ctx):
    idx_dt = ctx.attrs["out_idx"].np_dtype

    def list_diff(x, y):
        if x.ndim != 1 or y.ndim != 1:
            raise ctx.error(_E, f"x and y must be vectors, got shapes {x.shape} and {y.shape}")
        keep = ~np.isin(x, y) if x.dtype != object else np.array([v not in set(y.tolist()) for v in x], dtype=bool)
        idx = np.flatnonzero(keep).astype(idx_dt)
        return x[keep], idx
    return list_diff


def _strided_slice_grad(ctx):
    masks = tuple(ctx.attrs[k] for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                         "shrink_axis_mask"))
    dt = ctx.attrs["T"].np_dtype

    def strided_slice_grad(shape, begin, end, strides, dy):
        dims = int_list(ctx, shape, "shape")
        idx = strided_slice_index(int_list(ctx, begin, "begin"), int_list(ctx, end, "end"),
                                  int_list(ctx, strides, "strides"), *masks)
        if not any(e is Ellipsis for e in idx):
            idx += (Ellipsis,)
        out = np.zeros(dims, dtype=dt)
        try:
            out[idx] = dy
        except (IndexError, ValueError) as e:
            raise ctx.error(_E, f"cannot write a gradient of shape {dy.shape} into shape {tuple(dims)} "
                                f"with this slice spec: {e}") from None
        return out
    return strided_slice_grad


def register(reg):
    reg.register("Const", CPU, factory=_const)
    reg.register("Placeholder", CPU, factory=_placeholder)
    reg.register("PlaceholderWithDefault", CPU, _identity)
    reg.register("Pack", CPU, factory=lambda ctx: (lambda *xs, _a=ctx.attrs["axis"]: np.stack(xs, axis=_a)))
    reg.register("Unpack", CPU, factory=_unpack)
    reg.register("ConcatV2", CPU, factory=_concat)
    reg.register("Slice", CPU, factory=_slice)
    reg.register("StridedSlice", CPU, factory=_strided_slice)
    reg.register("Split", CPU, factory=_split)
    reg.register("SplitV", CPU, factory=_split_v)
    reg.register("Transpose", CPU, factory=_transpose)
    reg.register("Fill", CPU, factory=_fill)
    reg.register("ZerosLike", CPU, factory=_zeros_like)
    reg.register("Select", CPU, factory=_select)
    reg.register("Where", CPU, _where)
    reg.register("OnesLike", CPU, np.ones_like)
    reg.register("Gather", CPU, factory=_gather)
    reg.register("GatherV2", CPU, factory=_gather_v2)
    reg.register("Tile", CPU, factory=_tile)
    reg.register("Range", CPU, factory=_range)
    reg.register("OneHot", CPU, factory=_one_hot)
    reg.register("BroadcastTo", CPU, factory=_broadcast_to)
    reg.register("InvertPermutation", CPU, factory=_invert_permutation)
    reg.register("ListDiff", CPU, factory=_list_diff)
    reg.register("StridedSliceGrad", CPU, factory=_strided_slice_grad)
