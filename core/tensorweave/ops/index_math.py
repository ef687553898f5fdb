"""Host-side index and shape arithmetic shared by every device's kernels.

These ops compute on shapes and sizes, not on tensor data, so every backend runs the same
Python on the host (an accelerator then uploads the small result). Keeping the arithmetic
here means the CPU, OpenCL and CUDA kernels cannot drift apart. Functions raise
``ValueError`` with a message; kernels re-raise it through ``ctx.error`` so the node is named.
"""

from __future__ import annotations

import numpy as np


def broadcast_gradient_args(s0, s1, dtype=np.int32):
    """Axes along which the gradients of two broadcast operands of shapes ``s0`` and ``s1``
    must be summed (TensorFlow's BroadcastGradientArgs)."""
    a0, a1 = [int(d) for d in s0], [int(d) for d in s1]
    n = max(len(a0), len(a1))
    a = [1] * (n - len(a0)) + a0
    b = [1] * (n - len(a1)) + a1
    r0 = set(range(n - len(a0)))
    r1 = set(range(n - len(a1)))
    for i, (x, y) in enumerate(zip(a, b)):
        if x == y:
            continue
        if x == 1:
            r0.add(i)
        elif y == 1:
            r1.add(i)
        else:
            raise ValueError(f"incompatible shapes for broadcasting: {a0} and {a1}")
    return np.array(sorted(r0), dtype=dtype), np.array(sorted(r1), dtype=dtype)


def resolve_split_sizes(sizes: list, dim: int, axis: int, shape, num: int) -> list:
    """SplitV's ``size_splits`` for a dimension of size ``dim``, with one -1 inferred."""
    if len(sizes) != num:
        raise ValueError(f"size_splits has {len(sizes)} elements but num_split is {num}")
    if any(s < -1 for s in sizes) or sizes.count(-1) > 1:
        raise ValueError(f"size_splits {sizes} must be >= 0, with at most one -1 (inferred)")
    known = sum(s for s in sizes if s != -1)
    if -1 in sizes:
        if known > dim:
            raise ValueError(f"size_splits {sizes} add up to more than dimension {axis} of the input "
                             f"{shape} (size {dim})")
        return [dim - known if s == -1 else s for s in sizes]
    if known != dim:
        raise ValueError(f"size_splits {sizes} must add up to dimension {axis} of the input {shape} (size {dim})")
    return sizes


def invert_permutation(p: list, dtype) -> np.ndarray:
    """The inverse of permutation ``p`` of 0..n-1."""
    n = len(p)
    if sorted(p) != list(range(n)):
        raise ValueError(f"{p} is not a permutation of 0..{n - 1}")
    out = np.empty(n, dtype=dtype)
    out[np.asarray(p, dtype=np.int64)] = np.arange(n, dtype=dtype)
    return out
