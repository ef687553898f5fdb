"""Random ops on the GPU (``random.cu``): RandomUniform, RandomStandardNormal, TruncatedNormal
and RandomUniformInt from the Philox4x32-10 streams of ``tensorweave.kernels.random``: the
same seeds give the CPU's and OpenCL's values (uniforms bit for bit, normals to float
rounding).

Random ops are stateful, so the executor builds their kernels once per Session and node, as
on the CPU: the factory makes the node's ``PhiloxStream`` and each run reserves its blocks
from it (the counter offset advances past them), so successive runs give new numbers and a
new Session with the same seeds replays the same sequence. Seeds (0, 0) mean
nondeterministic, as on the CPU.

``shape`` (and RandomUniformInt's ``minval``/``maxval``) are host-memory inputs.
"""

from __future__ import annotations

from tensorweave.kernels import random as philox
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, host, int_list, launch
from tensorweave_cuda.kernels.util import register as reg_kernel

_MASK64 = philox.MASK64


def _signed(v: int) -> int:
    """An unsigned 64-bit value as the int64 launch argument with the same bits."""
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


def _random(op):
    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.attrs["Tout" if op == "RandomUniformInt" else "dtype"])
        ref = catalog.random_kernel(op, dt)
        stream = philox.PhiloxStream.for_node(ctx)
        key, words = _signed(stream.key), _signed(stream.stream)
        per = philox.VALUES_PER_BLOCK[dt.name]

        def start(shape):
            dims = int_list(ctx, host(dev, shape), "shape")
            if any(d < 0 for d in dims):
                raise ctx.error(E, f"shape {dims} must not have negative dimensions")
            out = dev.empty(dims, dt.np)
            return out, _signed(stream.reserve(philox.blocks_for(op, dt.np, out.size)))

        if op == "RandomUniformInt":
            def uniform_int(shape, minval, maxval):
                lo_v, hi_v = host(dev, minval), host(dev, maxval)
                if lo_v.ndim or hi_v.ndim:
                    raise ctx.error(E, f"minval and maxval must be scalars, got shapes {lo_v.shape} and {hi_v.shape}")
                lo, hi = int(lo_v), int(hi_v)
                if lo >= hi:
                    raise ctx.error(E, f"need minval < maxval, got minval {lo} and maxval {hi}")
                out, first = start(shape)
                if out.size:
                    launch(dev, ref, -(-out.size // per), out.ptr, out.size, key, words, first, lo, _signed(hi - lo))
                return out
            return uniform_int

        def random(shape):
            out, first = start(shape)
            if out.size:
                launch(dev, ref, -(-out.size // per), out.ptr, out.size, key, words, first)
            return out
        return random
    return factory


def register(reg, device_type):
    for op in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal"):
        reg_kernel(reg, op, device_type, _random(op), catalog.FLOAT, attr="dtype", host_memory=("shape",))
    reg_kernel(reg, "RandomUniformInt", device_type, _random("RandomUniformInt"), catalog.INT, attr="Tout",
               host_memory=("shape", "minval", "maxval"))
