"""Random kernels: RandomUniform, RandomStandardNormal, TruncatedNormal and RandomUniformInt
draw from the Philox4x32-10 streams of ``tensorweave.kernels.random`` (the reference those
of every other device match: same seeds, same values); RandomShuffle from a NumPy Generator.

Random ops are stateful, so the executor builds these kernels once per Session and node:
the stream (or generator) made in the factory carries on from run to run, and a new Session
starts the sequence again from the op's seeds. Seeds (0, 0) mean "nondeterministic" (OS
entropy).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import random as philox

CPU = "CPU"
_E = errors.InvalidArgumentError
_MASK64 = (1 << 64) - 1


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


def _floats(op):
    def factory(ctx):
        stream = philox.PhiloxStream.for_node(ctx)
        dt = ctx.attrs["dtype"].np_dtype

        def random(shape):
            dims = _dims(ctx, shape)
            return philox.draw(stream, op, dt, int(np.prod(dims, dtype=np.int64))).reshape(dims)
        return random
    return factory


def _uniform_int(ctx):
    stream = philox.PhiloxStream.for_node(ctx)
    dt = ctx.attrs["Tout"].np_dtype

    def uniform_int(shape, minval, maxval):
        if minval.ndim or maxval.ndim:
            raise ctx.error(_E, f"minval and maxval must be scalars, got shapes {minval.shape} and {maxval.shape}")
        lo, hi = int(minval), int(maxval)
        if lo >= hi:
            raise ctx.error(_E, f"need minval < maxval, got minval {lo} and maxval {hi}")
        dims = _dims(ctx, shape)
        return philox.uniform_int(stream, dt, int(np.prod(dims, dtype=np.int64)), lo, hi).reshape(dims)
    return uniform_int


def _shuffle(ctx):
    rng = _generator(ctx)

    def shuffle(x):
        if x.ndim == 0 or x.shape[0] <= 1:
            return x
        return x[rng.permutation(x.shape[0])]
    return shuffle


def register(reg):
    for op in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal"):
        reg.register(op, CPU, factory=_floats(op))
    reg.register("RandomUniformInt", CPU, factory=_uniform_int)
    reg.register("RandomShuffle", CPU, factory=_shuffle)
