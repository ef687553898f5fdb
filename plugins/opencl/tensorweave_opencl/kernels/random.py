"""Random ops on the OpenCL device (kernels/random.cl): RandomUniform, RandomStandardNormal,
TruncatedNormal (float32, float64) and RandomUniformInt (int32, int64) from the Philox4x32-10
streams of ``tensorweave.kernels.random``: the same seeds give the CPU's values (uniforms bit
for bit, normals to float rounding).

Random ops are stateful, so the executor builds their kernels once per Session and node: the
factory makes the node's ``PhiloxStream`` and each run reserves its blocks from it, so runs
continue the stream and a new Session with the same seeds replays it. ``shape`` (and
RandomUniformInt's ``minval``/``maxval``) are host-memory inputs.
"""

from __future__ import annotations

import numpy as np

from tensorweave.kernels import random as philox
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import _E, BUF, INDEX, OPENCL, host, int_list, launcher, num_elements

FLOATS = ["float32", "float64"]
_KERNEL = {"RandomUniform": "random_uniform", "RandomStandardNormal": "random_normal",
           "TruncatedNormal": "random_truncated_normal", "RandomUniformInt": "random_uniform_int"}
_ARGS = [BUF, np.int64, np.uint64, np.uint64, np.uint64]


def _defines(dt: np.dtype) -> dict:
    kind = {"float32": "TW_FLOAT", "float64": "TW_DOUBLE", "int32": "TW_INT32", "int64": "TW_INT64"}[dt.name]
    return {"T": program.ctype(dt), kind: None, "TW_TRUNC_ROUNDS": philox.TRUNC_ROUNDS}


def _random(op):
    def factory(ctx):
        dev = ctx.device
        dt = (ctx.attrs["Tout"] if op == "RandomUniformInt" else ctx.attrs["dtype"]).np_dtype
        args = _ARGS + [np.int64, np.uint64] if op == "RandomUniformInt" else _ARGS
        launch = launcher(ctx, "random.cl", _KERNEL[op], args, _defines(dt))
        stream = philox.PhiloxStream.for_node(ctx)
        per = philox.VALUES_PER_BLOCK[dt.name]

        def start(shape):
            dims = int_list(ctx, shape, "shape")
            if any(d < 0 for d in dims):
                raise ctx.error(_E, f"shape {dims} must not have negative dimensions")
            out = dev.empty(dims, dt)
            n = num_elements(dims)
            first = stream.reserve(philox.blocks_for(op, dt, n))
            return out, n, first

        if op == "RandomUniformInt":
            def uniform_int(shape, minval, maxval):
                lo_v, hi_v = host(minval), host(maxval)
                if lo_v.ndim or hi_v.ndim:
                    raise ctx.error(_E, f"minval and maxval must be scalars, got shapes {lo_v.shape} and {hi_v.shape}")
                lo, hi = int(lo_v), int(hi_v)
                if lo >= hi:
                    raise ctx.error(_E, f"need minval < maxval, got minval {lo} and maxval {hi}")
                out, n, first = start(shape)
                if n:
                    launch.run(-(-n // per), out.buf, n, stream.key, stream.stream, first, lo,
                               (hi - lo) & philox.MASK64)
                return out
            return uniform_int

        def random(shape):
            out, n, first = start(shape)
            if n:
                launch.run(-(-n // per), out.buf, n, stream.key, stream.stream, first)
            return out
        return random
    return factory


def register(reg):
    for op in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal"):
        reg.register(op, OPENCL, factory=_random(op), constraints={"dtype": FLOATS, "T": INDEX},
                     host_memory=("shape",))
    reg.register("RandomUniformInt", OPENCL, factory=_random("RandomUniformInt"),
                 constraints={"Tout": INDEX, "T": INDEX}, host_memory=("shape", "minval", "maxval"))
