"""Candidate sampler kernels and ComputeAccidentalHits (TensorFlow's range samplers).

Each sampler is a ``draw(rng, n)`` of ``n`` classes with replacement and a ``prob(classes)``.
``unique=True`` keeps TF's definition of sampling without replacement: draw one class after
another, skip those already picked, stop at ``num_sampled`` distinct ones; the number of
draws that took (``num_tries``) enters the expected counts ``1 - (1 - p)^num_tries``. The
draws are made in vectorised chunks and the first ``num_sampled`` distinct classes of the
stream are kept, which is the same result as drawing one at a time.

The kernels are built once per Session and node (the ops are stateful), so the generator
(seeded as in ``random.py``) and the learned sampler's counts carry over between runs.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_cpu.kernels.random import _generator

CPU = "CPU"
_E = errors.InvalidArgumentError
_INT32_MAX = 2**31 - 1
_FLT_MAX = np.finfo(np.float32).max


# ---------------------------------------------------------------------------------------
# samplers: (draw(rng, n) -> int64 classes, prob(classes) -> float64, range, update(classes) or None)
class _Uniform:
    update = None

    def __init__(self, range_max):
        self.range = range_max

    def draw(self, rng, n):
        return rng.integers(0, self.range, size=n, dtype=np.int64)

    def prob(self, classes):
        return np.full(np.shape(classes), 1.0 / self.range)


class _LogUniform:
    update = None

    def __init__(self, range_max):
        self.range = range_max
        self.log_range = np.log1p(range_max)

    def draw(self, rng, n):
        # exp(u * log(range + 1)) - 1 lands in [k, k + 1) with probability P(k) below;
        # the modulo only guards against round-off at the top end (as in TF).
        v = np.exp(rng.random(n) * self.log_range).astype(np.int64) - 1
        return v % self.range

    def prob(self, classes):
        k = np.asarray(classes, np.float64)
        return np.log((k + 2.0) / (k + 1.0)) / self.log_range


class _Weighted:
    """Classes drawn in proportion to ``weights`` (inverse CDF over their running sum)."""

    update = None

    def __init__(self, weights):
        self.weights = np.asarray(weights, np.float64)
        self.range = self.weights.size
        self._cdf = None

    def _cumulative(self):
        if self._cdf is None:
            self._cdf = np.cumsum(self.weights)
        return self._cdf

    def draw(self, rng, n):
        cdf = self._cumulative()
        picks = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
        return np.minimum(picks, self.range - 1).astype(np.int64)

    def prob(self, classes):
        total = self._cumulative()[-1]
        return self.weights[classes] / total if total > 0 else np.zeros(np.shape(classes))


class _Learned(_Weighted):
    """Every class starts with weight 1; each run adds 1 for every true class it was given
    (TF's UnigramSampler), until the total would pass 2^31 - 1."""

    def __init__(self, range_max):
        super().__init__(np.ones(range_max))
        self.total = float(range_max)

    def update(self, classes):
        room = int(_INT32_MAX - self.total)
        classes = classes.reshape(-1)[:max(room, 0)]
        if classes.size:
            np.add.at(self.weights, classes, 1.0)
            self.total += classes.size
            self._cdf = None


def _fixed_weights(ctx, range_max):
    """TF's FixedUnigramSampler weights: reserved ids of this shard first (weight 0), then
    one weight per id of this shard, from ``unigrams`` or the last CSV column of each line of
    ``vocab_file``, raised to ``distortion``."""
    a = ctx.attrs
    shards, shard, distortion = a["num_shards"], a["shard"], a["distortion"]
    weights = [0.0 for word in range(a["num_reserved_ids"]) if word % shards == shard]
    if a["vocab_file"]:
        try:
            with open(a["vocab_file"], encoding="utf-8") as f:
                lines = [ln.rstrip("\r\n") for ln in f]
        except FileNotFoundError:
            raise ctx.error(errors.NotFoundError, f"vocab_file {a['vocab_file']!r} does not exist") from None
        except OSError as e:
            raise ctx.error(errors.InvalidArgumentError, f"cannot read vocab_file {a['vocab_file']!r}: {e}") from None
        raw = []
        for line in lines:
            try:
                raw.append(float(line.split(",")[-1]))
            except ValueError:
                raise ctx.error(_E, f"wrong vocabulary format at line {line!r} of {a['vocab_file']!r}: the last "
                                    "comma-separated field must be the weight") from None
    else:
        raw = list(a["unigrams"])
    # As TF does, the ids after the reserved ones are counted from the number of reserved
    # ids kept in this shard (the same as num_reserved_ids when there is one shard).
    word = len(weights)
    for w in raw:
        if word % shards == shard:
            weights.append(float(w) ** distortion)
        word += 1
    if len(weights) != range_max:
        raise ctx.error(_E, f"range_max is {range_max} but the sampler has {len(weights)} class weights "
                            "(reserved ids plus unigrams or vocab_file lines, in this shard)")
    if min(weights) < 0:
        raise ctx.error(_E, "class weights must not be negative")
    if sum(weights) <= 0:
        raise ctx.error(_E, "class weights must not all be zero")
    return weights


def _make_sampler(ctx):
    op = ctx.op_type
    if op == "UniformCandidateSampler":
        return _Uniform(ctx.attrs["range_max"])
    if op == "LogUniformCandidateSampler":
        return _LogUniform(ctx.attrs["range_max"])
    if op == "LearnedUnigramCandidateSampler":
        return _Learned(ctx.attrs["range_max"])
    return _Weighted(_fixed_weights(ctx, ctx.attrs["range_max"]))


def _distinct(sampler, rng, n):
    """The first ``n`` distinct classes of a stream of draws, and how many draws that took."""
    stream = np.empty(0, np.int64)
    chunk = max(2 * n, 16)
    while True:
        stream = np.concatenate([stream, sampler.draw(rng, chunk)])
        _, first = np.unique(stream, return_index=True)
        if first.size >= n:
            first.sort()
            return stream[first[:n]], int(first[n - 1]) + 1
        chunk = stream.size  # double the stream: few rounds even for skewed distributions


def _expected(p, num_sampled, num_tries):
    if num_tries == num_sampled:
        return p * num_sampled
    # 1 - (1 - p)^num_tries without cancellation for small p
    return -np.expm1(num_tries * np.log1p(-p))


def _candidate_sampler(ctx):
    a = ctx.attrs
    num_true, num_sampled, unique = a["num_true"], a["num_sampled"], a["unique"]
    rng = _generator(ctx)
    if ctx.op_type == "AllCandidateSampler":
        sampler = None
    else:
        sampler = _make_sampler(ctx)
        if unique and num_sampled > sampler.range:
            raise ctx.error(_E, f"cannot sample num_sampled = {num_sampled} distinct classes (unique=True) from "
                                f"range_max = {sampler.range} classes")

    def sample(true_classes):
        if true_classes.ndim != 2 or true_classes.shape[1] != num_true:
            raise ctx.error(_E, f"true_classes must be a matrix [batch_size, num_true = {num_true}], got shape "
                                f"{true_classes.shape}")
        if sampler is None:
            return (np.arange(num_sampled, dtype=np.int64), np.ones(true_classes.shape, np.float32),
                    np.ones(num_sampled, np.float32))
        bad = (true_classes < 0) | (true_classes >= sampler.range)
        if bad.any():
            raise ctx.error(_E, f"true class {int(true_classes[bad][0])} is out of range [0, {sampler.range})")
        if unique:
            sampled, tries = _distinct(sampler, rng, num_sampled)
        else:
            sampled, tries = sampler.draw(rng, num_sampled), num_sampled
        true_count = _expected(sampler.prob(true_classes), num_sampled, tries).astype(np.float32)
        sampled_count = _expected(sampler.prob(sampled), num_sampled, tries).astype(np.float32)
        if sampler.update is not None:
            sampler.update(true_classes)
        return sampled, true_count, sampled_count
    return sample


def _accidental_hits(ctx):
    num_true = ctx.attrs["num_true"]

    def hits(true_classes, sampled):
        if true_classes.ndim != 2 or true_classes.shape[1] != num_true:
            raise ctx.error(_E, f"true_classes must be a matrix [batch_size, num_true = {num_true}], got shape "
                                f"{true_classes.shape}")
        if sampled.ndim != 1:
            raise ctx.error(_E, f"sampled_candidates must be a vector, got shape {sampled.shape}")
        flat = true_classes.reshape(-1)
        if not sampled.size or not flat.size:
            return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.float32)
        # A class sampled more than once is reported at its last position (TF keeps a map
        # from class to position, the later one overwriting).
        order = np.argsort(sampled, kind="stable")
        ordered = sampled[order]
        pos = np.searchsorted(ordered, flat, side="right") - 1
        found = pos >= 0
        found[found] = ordered[pos[found]] == flat[found]
        rows = (np.flatnonzero(found) // num_true).astype(np.int32)
        ids = order[pos[found]].astype(np.int64)
        return rows, ids, np.full(rows.size, -_FLT_MAX, np.float32)
    return hits


def register(reg):
    for op in ("UniformCandidateSampler", "LogUniformCandidateSampler", "LearnedUnigramCandidateSampler",
               "FixedUnigramCandidateSampler", "AllCandidateSampler"):
        reg.register(op, CPU, factory=_candidate_sampler)
    reg.register("ComputeAccidentalHits", CPU, factory=_accidental_hits)
