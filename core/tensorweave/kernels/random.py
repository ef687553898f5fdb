"""The random streams every device draws from: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011), counter-based, so a value is a pure
function of (seeds, position) and the CPU, OpenCL and CUDA kernels give the same stream.

It owns the device-independent part of RandomUniform, RandomStandardNormal, TruncatedNormal
and RandomUniformInt: the key and counter derivation from the op's seeds, the per-node
stream state (``PhiloxStream``), how many 128-bit blocks a run takes, and the reference
NumPy implementation the CPU kernels compute with (vectorised over blocks with uint32 and
uint64 arithmetic). The device kernels (opencl ``random.cl``, cuda ``random.cu``) implement
the same mapping; the tests compare them with this one.

The stream
    key = the op's ``seed`` (64 bits); counter words 2-3 = ``seed2`` (the stream), words 0-1 =
    a 64-bit block number. Seeds (0, 0) mean nondeterministic: key and stream come from the
    OS's entropy. Random ops are stateful: the kernel is built once per Session and node, and
    each run takes the blocks from the node's offset on and advances it past them (TF's
    per-node ``GuardedPhiloxRandom`` skip), so runs continue the stream and a new Session
    with the same seeds replays it. Output element ``i`` of a run comes from block
    ``offset + i // PER`` (PER values per block, ``VALUES_PER_BLOCK``), whatever the device
    or its launch geometry.

From words to values (u a 32-bit word; a 64-bit word is ``w[2k] << 32 | w[2k+1]``):
    uniform   float32: ``(u >> 8) * 2^-24``; float64: ``(w >> 11) * 2^-53``; float16 (CPU
              only): ``(u >> 21) * 2^-11``. Exact in every arithmetic, so bit-identical on
              every device; all in [0, 1). (TF puts 23 bits into the mantissa of a float in
              [1, 2) and subtracts 1: as exact, with half the resolution.)
    normal    Box-Muller on the block's pairs: ``u1`` from the first word(s) of a pair as
              ``(bits + 1) * 2^-b`` (in (0, 1], so the log is finite), ``u2`` from the second
              as above; ``r = sqrt(-2 log u1)``, ``theta = 2 pi u2``, values ``r cos theta``,
              ``r sin theta``, computed in the output dtype (float16: in float32, then
              rounded). log/cos/sin differ between math libraries by an ulp or two, so
              devices agree to float rounding, not bit for bit.
    truncated normal: rejection with a fixed counter schedule, so every device keeps the
              same draws: the values for block ``t`` (of B blocks in the run) are the
              normals of blocks ``offset + r * B + t``, r = 0, 1, ... < TRUNC_ROUNDS, in
              order, with ``|z| > 2`` dropped, until PER are kept (a slot left unfilled
              after TRUNC_ROUNDS rounds, probability below 1e-35, is 0). A run advances the
              offset by ``B * TRUNC_ROUNDS``. (A value within float rounding of 2 could be
              kept on one device and dropped on another; at ~1e-7 of the values' density
              there it does not happen in practice.)
    uniform integers: ``minval + bits % (maxval - minval)`` with 32 bits per int32 and 64
              per int64 (TF's modulo bias for ranges that do not divide 2^32 / 2^64).
"""

from __future__ import annotations

import secrets
import sys
import threading

import numpy as np

__all__ = ["PhiloxStream", "philox4x32_10", "blocks_for", "VALUES_PER_BLOCK", "TRUNC_ROUNDS",
           "uniform", "normal", "truncated_normal", "uniform_int", "draw"]

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1
# Philox4x32's multipliers and the Weyl constants its round keys advance by.
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
# The most blocks a truncated normal draws per PER values (cuda catalog.TRUNC_ROUNDS).
TRUNC_ROUNDS = 16
VALUES_PER_BLOCK = {"float16": 4, "float32": 4, "float64": 2, "int32": 4, "int64": 2}
RANDOM_OPS = ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt")

_U32, _U64 = np.uint32, np.uint64
_S32 = _U64(32)
# Where a uint64's low and high 32-bit words sit when it is viewed as two uint32.
_LO, _HI = (0, 1) if sys.byteorder == "little" else (1, 0)


def stream_of(seed: int, seed2: int) -> tuple[int, int]:
    """(key, stream) as unsigned 64-bit ints for an op's seeds; (0, 0) draws both from the OS."""
    if seed == 0 and seed2 == 0:
        return secrets.randbits(64), secrets.randbits(64)
    return seed & MASK64, seed2 & MASK64


def blocks_for(op: str, dtype, n: int) -> int:
    """How many blocks (counter values) a run of ``op`` with ``n`` outputs of ``dtype`` uses."""
    per = VALUES_PER_BLOCK[np.dtype(dtype).name]
    b = -(-n // per)
    return b * TRUNC_ROUNDS if op == "TruncatedNormal" else b


class PhiloxStream:
    """One node's stream: its key, its stream words and the counter offset of its next run
    (thread-safe: two Session.run calls may run the node at once)."""

    __slots__ = ("key", "stream", "offset", "_lock")

    def __init__(self, seed: int, seed2: int):
        self.key, self.stream = stream_of(int(seed), int(seed2))
        self.offset = 0
        self._lock = threading.Lock()

    @classmethod
    def for_node(cls, ctx) -> PhiloxStream:
        return cls(ctx.attrs["seed"], ctx.attrs["seed2"])

    def reserve(self, blocks: int) -> int:
        """The first block of a run that takes ``blocks``; the next run starts after them."""
        with self._lock:
            first = self.offset
            self.offset = (first + blocks) & MASK64
        return first

    def words(self, first: int, nblocks: int) -> np.ndarray:
        """Blocks ``first .. first + nblocks - 1`` (mod 2^64) as an (nblocks, 4) uint32 array."""
        block = np.arange(nblocks, dtype=_U64)
        block += _U64(first & MASK64)  # wraps mod 2^64
        return philox4x32_10(self.key, self.stream, block)

    def blocks(self, block: np.ndarray) -> np.ndarray:
        """The blocks numbered ``block`` (uint64) as a (len(block), 4) uint32 array."""
        return philox4x32_10(self.key, self.stream, block)


def philox4x32_10(key: int, stream: int, block: np.ndarray) -> np.ndarray:
    """The Philox4x32-10 outputs for the counters (block, stream) (words 0-1: each uint64 of
    ``block``; words 2-3: ``stream``) under the 64-bit ``key``: a (len(block), 4) uint32 array.

    Vectorised over blocks: each round's two 32x32 -> 64-bit products are uint64 NumPy
    products of the uint32 words."""
    nblocks = block.shape[0]
    c0 = block.astype(_U32)
    c1 = (block >> _S32).astype(_U32)
    c2 = np.full(nblocks, stream & MASK32, _U32)
    c3 = np.full(nblocks, (stream >> 32) & MASK32, _U32)
    k0, k1 = key & MASK32, (key >> 32) & MASK32
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + _W0) & MASK32, (k1 + _W1) & MASK32
        # A product's low and high words are views of it (no shifts, no copies).
        p0 = np.multiply(c0, _M0, dtype=_U64).view(_U32).reshape(nblocks, 2)
        p1 = np.multiply(c2, _M1, dtype=_U64).view(_U32).reshape(nblocks, 2)
        # c0' = hi(p1) ^ c1 ^ k0, c1' = lo(p1), c2' = hi(p0) ^ c3 ^ k1, c3' = lo(p0)
        c0 = np.bitwise_xor(p1[:, _HI], c1)
        c0 ^= _U32(k0)
        c2 = np.bitwise_xor(p0[:, _HI], c3)
        c2 ^= _U32(k1)
        c1, c3 = p1[:, _LO], p0[:, _LO]
    return np.stack([c0, c1, c2, c3], axis=1)


# ---------------------------------------------------------------------------------------
# words -> values
_F32_UNIT = np.float32(2.0**-24)
_F64_UNIT = 2.0**-53
_F16_UNIT = np.float32(2.0**-11)
_CHUNK = 32768  # blocks per pass: its arrays stay in the CPU's caches (twice as fast as one pass)
_TWO_PI = {np.float32: np.float32(2 * np.pi), np.float64: 2 * np.pi}


def _u64(words: np.ndarray) -> np.ndarray:
    """Each pair of words (hi, lo) as one uint64."""
    pairs = words.reshape(-1, 2).astype(_U64)
    return (pairs[:, 0] << _S32) | pairs[:, 1]


def _uniform_words(words: np.ndarray, dt: np.dtype) -> np.ndarray:
    if dt == np.float64:
        return (_u64(words) >> _U64(11)).astype(np.float64) * _F64_UNIT
    if dt == np.float16:
        return ((words.reshape(-1) >> _U32(21)).astype(np.float32) * _F16_UNIT).astype(np.float16)
    return (words.reshape(-1) >> _U32(8)).astype(np.float32) * _F32_UNIT


def _normal_words(words: np.ndarray, dt: np.dtype) -> np.ndarray:
    """(nblocks, PER) normals of the output dtype's generation type (float16 -> float32)."""
    if dt == np.float64:
        bits = (_u64(words) >> _U64(11)).reshape(-1, 2)
        u1 = (bits[:, :1] + _U64(1)).astype(np.float64) * _F64_UNIT
        u2 = bits[:, 1:].astype(np.float64) * _F64_UNIT
        gt = np.float64
    else:
        bits = words >> _U32(8)
        u1 = (bits[:, 0::2] + _U32(1)).astype(np.float32) * _F32_UNIT
        u2 = bits[:, 1::2].astype(np.float32) * _F32_UNIT
        gt = np.float32
    r = np.log(u1)
    r *= gt(-2)
    np.sqrt(r, out=r)
    theta = u2 * _TWO_PI[gt]
    out = np.empty((r.shape[0], 2 * r.shape[1]), gt)
    out[:, 0::2] = np.cos(theta)
    out[:, 0::2] *= r
    out[:, 1::2] = np.sin(theta)
    out[:, 1::2] *= r
    return out


def _map_blocks(s: PhiloxStream, first: int, nb: int, fn, dt, per: int) -> np.ndarray:
    """``fn(words)`` over blocks ``first ..`` in chunks of _CHUNK blocks: an (nb, per) array."""
    out = np.empty((nb, per), dt)
    for a in range(0, nb, _CHUNK):
        b = min(nb, a + _CHUNK)
        out[a:b] = fn(s.words((first + a) & MASK64, b - a)).reshape(b - a, per)
    return out


def uniform(s: PhiloxStream, dtype, n: int, first: int | None = None) -> np.ndarray:
    """``n`` uniform values in [0, 1) of ``dtype`` (float16/32/64), a flat array; the run's
    blocks are reserved from ``s`` unless ``first`` names them."""
    dt = np.dtype(dtype)
    nb = blocks_for("RandomUniform", dt, n)
    first = s.reserve(nb) if first is None else first
    return _map_blocks(s, first, nb, lambda w: _uniform_words(w, dt), dt, VALUES_PER_BLOCK[dt.name]).reshape(-1)[:n]


def normal(s: PhiloxStream, dtype, n: int, first: int | None = None) -> np.ndarray:
    """``n`` standard normal values of ``dtype``, a flat array."""
    dt = np.dtype(dtype)
    nb = blocks_for("RandomStandardNormal", dt, n)
    first = s.reserve(nb) if first is None else first
    z = _map_blocks(s, first, nb, lambda w: _normal_words(w, dt), dt, VALUES_PER_BLOCK[dt.name])
    return z.reshape(-1)[:n]


def truncated_normal(s: PhiloxStream, dtype, n: int, first: int | None = None) -> np.ndarray:
    """``n`` standard normal values of ``dtype`` within [-2, 2], a flat array (the schedule
    in the module's docstring)."""
    dt = np.dtype(dtype)
    per = VALUES_PER_BLOCK[dt.name]
    nb = -(-n // per)
    first = s.reserve(nb * TRUNC_ROUNDS) if first is None else first
    gt = np.float64 if dt == np.float64 else np.float32
    out = np.empty((nb, per), dt)
    # Block t's values depend only on blocks first + r * nb + t: chunks of t are independent.
    for a in range(0, nb, _CHUNK):
        out[a:min(nb, a + _CHUNK)] = _truncated_chunk(s, first, nb, a, min(nb, a + _CHUNK), dt, gt, per)
    return out.reshape(-1)[:n]


def _truncated_chunk(s, first, nb, a, b, dt, gt, per):
    out = _normal_words(s.words((first + a) & MASK64, b - a), dt)
    ok = np.abs(out) <= gt(2)
    todo = np.flatnonzero(~ok.all(axis=1))  # about 17% (float32) of the blocks refill
    if not todo.size:
        return out
    z, ok = out[todo], ok[todo]
    out[todo] = 0  # zero is in range: a slot still empty after TRUNC_ROUNDS keeps it
    filled = np.zeros(b - a, np.int64)
    for r in range(TRUNC_ROUNDS):
        if r:
            base = _U64((first + r * nb + a) & MASK64)
            z = _normal_words(s.blocks(base + todo.astype(_U64)), dt)  # wraps mod 2^64
            ok = np.abs(z) <= gt(2)
        f = filled[todo]
        # The kept values of each block go, in order, into the block's next free slots.
        slot = f[:, None] + np.cumsum(ok, axis=1) - 1
        ri, ci = np.nonzero(ok & (slot < per))
        out[todo[ri], slot[ri, ci]] = z[ri, ci]
        filled[todo] = np.minimum(f + np.count_nonzero(ok, axis=1), per)
        todo = todo[filled[todo] < per]
        if not todo.size:
            break
    return out


def uniform_int(s: PhiloxStream, dtype, n: int, lo: int, hi: int, first: int | None = None) -> np.ndarray:
    """``n`` integers in [lo, hi) of ``dtype`` (int32/int64); needs lo < hi."""
    dt = np.dtype(dtype)
    nb = blocks_for("RandomUniformInt", dt, n)
    first = s.reserve(nb) if first is None else first
    words = s.words(first, nb)
    rng = _U64((hi - lo) & MASK64)
    if dt == np.int64:
        v = _u64(words) % rng
    else:
        v = words.reshape(-1).astype(_U64) % rng
    v += _U64(lo & MASK64)  # mod 2^64: lo + offset may pass through values beyond int64
    return v[:n].view(np.int64).astype(dt)


def draw(s: PhiloxStream, op: str, dtype, n: int, *bounds) -> np.ndarray:
    """A run of ``op`` (one of ``RANDOM_OPS``) on the CPU: ``n`` values as a flat array."""
    if op == "RandomUniformInt":
        return uniform_int(s, dtype, n, *bounds)
    return {"RandomUniform": uniform, "RandomStandardNormal": normal,
            "TruncatedNormal": truncated_normal}[op](s, dtype, n)
