"""Random kernels (NumPy Generators, one per node, created once per session).

Random ops are stateful, so the executor builds these kernels once per Session and node:
the generator made in the factory carries on from run to run, and a new Session starts the
sequence again from the op's seeds. Seeds (0, 0) mean "nondeterministic" (OS entropy).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors

CPU = "CPU"
_E = errors.InvalidArgumentError
_MASK64 = (1 << 64) - 1
_BELOW_ONE_F16 = np.nextafter(np.float16(1), np.float16(0))


def _generator(ctx):
    seed, seed2 = ctx.attrs["seed"], ctx.attrs["seed2"]
    if seed == 0 and seed2 == 0:
        return np.random.default_rng()
    return np.random.Generator(np.random.PCG64([seed & _MASK64, seed2 & _MASK64]))


def _dims(ctx, shape):
    if shape.ndim != 1:
        raise ctx.error(_E, f"shape must be a vector, got a value of shape {shape.shape}")
    dims = shape.tolist()
    if any(d < 0 for d in dims):
        raise ctx.error(_E, f"shape {dims} must not have negative dimensions")
    return dims


def _uniform(ctx):
    rng = _generator(ctx)
    dt = ctx.attrs["dtype"].np_dtype
    if dt == np.float16:
        # float32 values just below 1 round up to 1.0 in float16; keep the interval half-open.
        return lambda shape: np.minimum(rng.random(_dims(ctx, shape), dtype=np.float32).astype(np.float16),
                                        _BELOW_ONE_F16)
    return lambda shape: rng.random(_dims(ctx, shape), dtype=dt)


def _gen_dtype(dt):
    return dt if dt in (np.float32, np.float64) else np.float32


def _normal(ctx):
    rng = _generator(ctx)
    dt = ctx.attrs["dtype"].np_dtype
    gdt = _gen_dtype(dt)
    return lambda shape: rng.standard_normal(_dims(ctx, shape), dtype=gdt).astype(dt, copy=False)


def _truncated_normal(ctx):
    rng = _generator(ctx)
    dt = ctx.attrs["dtype"].np_dtype
    gdt = _gen_dtype(dt)

    def truncated(shape):
        x = rng.standard_normal(_dims(ctx, shape), dtype=gdt)
        bad = np.abs(x) > 2
        n = int(np.count_nonzero(bad))
        while n:  # about 4.6% of draws are redrawn each round
            x[bad] = rng.standard_normal(n, dtype=gdt)
            bad = np.abs(x) > 2
            n = int(np.count_nonzero(bad))
        return x.astype(dt, copy=False)
    return truncated


def _uniform_int(ctx):
    rng = _generator(ctx)
    dt = ctx.attrs["Tout"].np_dtype

    def uniform_int(shape, minval, maxval):
        if minval.ndim or maxval.ndim:
            raise ctx.error(_E, f"minval and maxval must be scalars, got shapes {minval.shape} and {maxval.shape}")
        lo, hi = int(minval), int(maxval)
        if lo >= hi:
            raise ctx.error(_E, f"need minval < maxval, got minval {lo} and maxval {hi}")
        return rng.integers(lo, hi, size=_dims(ctx, shape), dtype=dt)
    return uniform_int


def _shuffle(ctx):
    rng = _generator(ctx)

    def shuffle(x):
        if x.ndim == 0 or x.shape[0] <= 1:
            return x
        return x[rng.permutation(x.shape[0])]
    return shuffle


def register(reg):
    reg.register("RandomUniform", CPU, factory=_uniform)
    reg.register("RandomStandardNormal", CPU, factory=_normal)
    reg.register("TruncatedNormal", CPU, factory=_truncated_normal)
    reg.register("RandomUniformInt", CPU, factory=_uniform_int)
    reg.register("RandomShuffle", CPU, factory=_shuffle)
