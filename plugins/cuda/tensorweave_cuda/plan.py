"""Index math decided on the host before a launch: broadcasting strides, launch grids,
reduction passes. Pure Python (no driver), so it is tested everywhere.

All tensors of this device are dense and row-major; strides are in elements.
"""

from __future__ import annotations

import dataclasses
import math

from tensorweave_cuda.kernels.catalog import MAX_DIMS

# Threads per block of the grid-stride element-wise kernels, and the largest grid they get:
# each thread loops, so a bigger grid buys nothing once every SM is full.
BLOCK = 256
MAX_GRID = 1 << 16
# Block reductions (rows, softmax) use power-of-two blocks between these.
MIN_ROW_BLOCK = 32
MAX_ROW_BLOCK = 256
# A row longer than this, with few rows, is split across blocks and reduced in a second pass.
SPLIT_ROW = 1 << 14
SPLIT_CHUNK = 1 << 12


class BroadcastError(ValueError):
    pass


def num_elements(shape) -> int:
    return math.prod(int(d) for d in shape)


def contiguous_strides(shape) -> tuple:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)
    return tuple(reversed(out))


def broadcast_shape(*shapes) -> tuple:
    """NumPy's broadcast of ``shapes``, or BroadcastError naming them."""
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        dims = {int(s[len(s) - n + i]) for s in shapes if len(s) - n + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise BroadcastError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_strides(shape, out_shape) -> tuple:
    """Strides of a dense ``shape`` read at each index of ``out_shape`` (0 where broadcast)."""
    pad = len(out_shape) - len(shape)
    if pad < 0:
        raise BroadcastError(f"cannot broadcast {tuple(shape)} to {tuple(out_shape)}")
    own = contiguous_strides(shape)
    out = []
    for i, d in enumerate(out_shape):
        j = i - pad
        if j < 0 or int(shape[j]) == 1:
            out.append(0)
        elif int(shape[j]) == int(d):
            out.append(own[j])
        else:
            raise BroadcastError(f"cannot broadcast {tuple(shape)} to {tuple(out_shape)}")
    return tuple(out)


def collapse(out_shape, *strides) -> tuple[tuple, list[tuple]]:
    """Drop size-1 dimensions and merge neighbours that are contiguous for every operand.

    Dimension ``i`` merges into ``i + 1`` when, for each operand, ``stride[i] ==
    stride[i + 1] * shape[i + 1]`` (both broadcast, or both dense and adjacent). The result
    indexes the same elements in the same order with fewer dimensions (rank 0 -> ``(1,)``).
    """
    dims = [(int(d), [s[i] for s in strides]) for i, d in enumerate(out_shape) if int(d) != 1]
    merged: list = []
    for d, st in dims:
        if merged:
            pd, pst = merged[-1]
            if all(ps == s * d for ps, s in zip(pst, st)):
                merged[-1] = (pd * d, st)
                continue
        merged.append((d, st))
    if not merged:
        return (1,), [(0,) for _ in strides]
    shape = tuple(d for d, _ in merged)
    return shape, [tuple(st[k] for _, st in merged) for k in range(len(strides))]


@dataclasses.dataclass(frozen=True)
class BinaryPlan:
    out_shape: tuple     # the broadcast shape (what the op returns)
    n: int               # its element count
    flat: bool           # both inputs have the output's shape: the flat kernel does
    struct: tuple = ()   # TwBcast, flattened: ndim, shape[MAX_DIMS], xs[MAX_DIMS], ys[MAX_DIMS]


def plan_binary(x_shape, y_shape) -> BinaryPlan:
    out = broadcast_shape(x_shape, y_shape)
    n = num_elements(out)
    if tuple(x_shape) == tuple(y_shape):
        return BinaryPlan(out, n, True)
    shape, (xs, ys) = collapse(out, broadcast_strides(x_shape, out), broadcast_strides(y_shape, out))
    if len(shape) > MAX_DIMS:
        raise BroadcastError(f"broadcasting {tuple(x_shape)} with {tuple(y_shape)} needs {len(shape)} "
                             f"dimensions after merging; the CUDA kernels handle {MAX_DIMS}")
    return BinaryPlan(out, n, False, _pack(shape, xs, ys))


def strided_struct(out_shape, x_strides) -> tuple:
    """TwStrided for reading ``x`` with ``x_strides`` at each index of ``out_shape``."""
    shape, (xs,) = collapse(out_shape, x_strides)
    if len(shape) > MAX_DIMS:
        raise BroadcastError(f"a strided copy to {tuple(out_shape)} needs {len(shape)} dimensions after "
                             f"merging; the CUDA kernels handle {MAX_DIMS}")
    return _pack(shape, xs)


def transpose_strides(shape, perm) -> tuple:
    """Strides of a dense ``shape`` read in the order of ``np.transpose(x, perm)``."""
    own = contiguous_strides(shape)
    return tuple(own[p] for p in perm)


def _pack(shape, *strides) -> tuple:
    pad = (0,) * (MAX_DIMS - len(shape))
    out = [len(shape), *shape, *pad]
    for s in strides:
        out += [*s, *pad]
    return tuple(int(v) for v in out)


# ---------------------------------------------------------------------------------------
# launch configuration
def launch_dims(n: int, block: int = BLOCK, max_grid: int = MAX_GRID) -> tuple[tuple, tuple]:
    """(grid, block) for a grid-stride loop over ``n`` items (n > 0)."""
    if n <= 0:
        raise ValueError("nothing to launch for n <= 0")
    grid = min(-(-n // block), max_grid)
    return (grid, 1, 1), (block, 1, 1)


def row_block(length: int) -> int:
    """Threads for a block that reduces a row of ``length``: a power of two in [32, 256]."""
    b = MIN_ROW_BLOCK
    while b < length and b < MAX_ROW_BLOCK:
        b *= 2
    return b


def row_launch(rows: int, length: int, max_grid: int = MAX_GRID) -> tuple[tuple, tuple]:
    """(grid, block) for kernels with one block per row (looping when rows > max_grid)."""
    if rows <= 0:
        raise ValueError("nothing to launch for rows <= 0")
    return (min(rows, max_grid), 1, 1), (row_block(length), 1, 1)


# ---------------------------------------------------------------------------------------
# reductions
@dataclasses.dataclass(frozen=True)
class ReducePass:
    """One kernel launch: ``x`` viewed as [outer, r, inner], reduced over r.

    ``rows`` (inner == 1): a block per (row, part); a row is split into ``parts`` chunks of
    ``chunk`` when it is long and rows are few, and a later pass reduces the parts.
    ``cols``: a thread per (outer, inner) output, looping over r.
    """

    layout: str
    outer: int
    r: int
    inner: int = 1
    chunk: int = 0
    parts: int = 1

    @property
    def out_elements(self) -> int:
        return self.outer * self.inner * (self.parts if self.layout == "rows" else 1)


@dataclasses.dataclass(frozen=True)
class ReducePlan:
    out_shape: tuple     # with or without kept dimensions, as asked
    count: int           # elements folded into each output (Mean divides by it)
    passes: tuple        # ReducePass, in order; empty: copy (nothing reduced) or fill
    fill: bool = False   # an empty reduction: every output is the identity (or NaN for Mean)


def normalize_axes(axes, ndim: int) -> tuple:
    """Sorted, de-duplicated axes in [0, ndim); ValueError for one out of range.

    As the CPU kernels do, a scalar accepts axis 0 or -1 and reduces nothing."""
    out = set()
    for a in axes:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"reduction axis {a} is out of range for input of rank {ndim}")
        if ndim:
            out.add(a % ndim)
    return tuple(sorted(out))


def plan_reduction(shape, axes, keep_dims: bool = False) -> ReducePlan:
    shape = tuple(int(d) for d in shape)
    axes = normalize_axes(axes, len(shape))
    out_shape = tuple((1 if i in axes else d) for i, d in enumerate(shape) if keep_dims or i not in axes)
    count = math.prod(shape[a] for a in axes)
    n_out = num_elements(out_shape)
    if n_out == 0:
        return ReducePlan(out_shape, count, ())
    if count == 0:
        return ReducePlan(out_shape, 0, (), fill=True)
    # Groups of adjacent dimensions that are all reduced or all kept (size-1 ones dropped).
    groups: list[list] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        red = i in axes
        if groups and groups[-1][1] == red:
            groups[-1][0] *= d
        else:
            groups.append([d, red])
    passes = []
    while any(red for _, red in groups):
        # The innermost reduced group first: when it is last, rows are contiguous.
        k = max(i for i, (_, red) in enumerate(groups) if red)
        outer = math.prod(d for d, _ in groups[:k])
        inner = math.prod(d for d, _ in groups[k + 1:])
        r = groups[k][0]
        if inner == 1:
            passes.extend(_row_passes(outer, r))
        else:
            passes.append(ReducePass("cols", outer, r, inner))
        del groups[k]
        # The kept neighbours of the reduced group are now adjacent: merge them.
        if 0 < k < len(groups) and not groups[k][1] and not groups[k - 1][1]:
            groups[k - 1][0] *= groups[k][0]
            del groups[k]
    return ReducePlan(out_shape, count, tuple(passes))


def _row_passes(outer: int, r: int) -> list:
    if r >= SPLIT_ROW and outer < 64:
        parts = -(-r // SPLIT_CHUNK)
        chunk = -(-r // parts)
        return [ReducePass("rows", outer, r, 1, chunk, parts)] + _row_passes(outer, parts)
    return [ReducePass("rows", outer, r, 1, r, 1)]


def reduction_scale(kind: str, count: int, last: bool) -> float:
    """The factor the last pass applies: 1/count for Mean (NaN for an empty Mean)."""
    if kind != "mean" or not last:
        return 1.0
    return 1.0 / count if count else float("nan")


def plan_arg_reduction(shape, axis: int) -> tuple[int, int, int]:
    """(outer, r, inner) for ArgMax/ArgMin over ``axis`` (already range-checked)."""
    shape = tuple(int(d) for d in shape)
    a = axis % len(shape)
    return num_elements(shape[:a]), shape[a], num_elements(shape[a + 1:])
