"""Random ops on the GPU (``random.cu``): RandomUniform, RandomStandardNormal, TruncatedNormal
and RandomUniformInt from Philox4x32-10 streams.

Random ops are stateful, so the executor builds their kernels once per Session and node, as
on the CPU: the factory fixes the stream and the compute function keeps the node's counter
offset, advanced past the blocks each run used. Successive runs therefore give new numbers,
and a new Session with the same seeds replays the same sequence. The op's ``seed`` is the
Philox key and ``seed2`` the stream (counter words 2-3); seeds (0, 0) mean
nondeterministic, as on the CPU: both are drawn from the OS's entropy. (The values differ
from the CPU kernels' NumPy streams, as TensorFlow's GPU and CPU streams do.)

``shape`` (and RandomUniformInt's ``minval``/``maxval``) are host-memory inputs.
"""

from __future__ import annotations

import secrets
import threading

from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, host, int_list, launch
from tensorweave_cuda.kernels.util import register as reg_kernel

_MASK64 = (1 << 64) - 1
# Values one 128-bit Philox block gives, by output dtype.
VALUES_PER_BLOCK = {"float32": 4, "float64": 2, "int32": 4, "int64": 2}


def stream_of(seed: int, seed2: int) -> tuple[int, int]:
    """(key, stream) as unsigned 64-bit ints for the op's seeds; (0, 0) draws both."""
    if seed == 0 and seed2 == 0:
        return secrets.randbits(64), secrets.randbits(64)
    return seed & _MASK64, seed2 & _MASK64


def _signed(v: int) -> int:
    """An unsigned 64-bit value as the int64 launch argument with the same bits."""
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


def _random(op):
    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.attrs["Tout" if op == "RandomUniformInt" else "dtype"])
        ref = catalog.random_kernel(op, dt)
        key, stream = stream_of(ctx.attrs["seed"], ctx.attrs["seed2"])
        key, stream = _signed(key), _signed(stream)
        per = VALUES_PER_BLOCK[dt.name]
        rounds = catalog.TRUNC_ROUNDS if op == "TruncatedNormal" else 1
        state = {"offset": 0}
        lock = threading.Lock()

        def dims_of(shape):
            dims = int_list(ctx, host(dev, shape), "shape")
            if any(d < 0 for d in dims):
                raise ctx.error(E, f"shape {dims} must not have negative dimensions")
            return dims

        def reserve(n: int) -> int:
            """The first counter of this run's blocks; the next run starts after them."""
            with lock:
                first = state["offset"]
                state["offset"] = (first + -(-n // per) * rounds) & _MASK64
            return first

        if op == "RandomUniformInt":
            def uniform_int(shape, minval, maxval):
                lo_v, hi_v = host(dev, minval), host(dev, maxval)
                if lo_v.ndim or hi_v.ndim:
                    raise ctx.error(E, f"minval and maxval must be scalars, got shapes {lo_v.shape} and {hi_v.shape}")
                lo, hi = int(lo_v), int(hi_v)
                if lo >= hi:
                    raise ctx.error(E, f"need minval < maxval, got minval {lo} and maxval {hi}")
                out = dev.empty(dims_of(shape), dt.np)
                if out.size:
                    launch(dev, ref, -(-out.size // per), out.ptr, out.size, key, stream, _signed(reserve(out.size)),
                           lo, _signed(hi - lo))
                return out
            return uniform_int

        def random(shape):
            out = dev.empty(dims_of(shape), dt.np)
            if out.size:
                launch(dev, ref, -(-out.size // per), out.ptr, out.size, key, stream, _signed(reserve(out.size)))
            return out
        return random
    return factory


def register(reg, device_type):
    for op in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal"):
        reg_kernel(reg, op, device_type, _random(op), catalog.FLOAT, attr="dtype", host_memory=("shape",))
    reg_kernel(reg, "RandomUniformInt", device_type, _random("RandomUniformInt"), catalog.INT, attr="Tout",
               host_memory=("shape", "minval", "maxval"))
