"""Candidate sampling ops (TF1 ``tf.nn.*_candidate_sampler``, ``tf.nn.compute_accidental_hits``):
UniformCandidateSampler, LogUniformCandidateSampler, LearnedUnigramCandidateSampler,
FixedUnigramCandidateSampler, AllCandidateSampler and ComputeAccidentalHits.

A sampler op takes the true classes (int64 ``[batch, num_true]``) and returns TensorFlow's
three outputs: ``sampled_candidates`` (int64 ``[num_sampled]``), ``true_expected_count``
(float32 ``[batch, num_true]``) and ``sampled_expected_count`` (float32 ``[num_sampled]``).
An expected count is how many times a class is expected among the samples: ``p *
num_sampled`` when sampling with replacement; with ``unique=True`` (without replacement, by
redrawing repeats as TF does) it is ``1 - (1 - p)^num_tries``, ``num_tries`` being the draws
it took to find ``num_sampled`` distinct classes.

Samplers are random ops: stateful, seeded like ``ops/random_ops.py`` (graph seed + op seed,
``get_seed``), and built once per Session, so LearnedUnigramCandidateSampler's counts of
the true classes it has seen carry over from step to step. None has a gradient.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, apply_op, convert_to_tensor
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops.random_ops import get_seed

__all__ = [
    "uniform_candidate_sampler", "log_uniform_candidate_sampler", "learned_unigram_candidate_sampler",
    "fixed_unigram_candidate_sampler", "all_candidate_sampler", "compute_accidental_hits",
]

_E = errors.InvalidArgumentError
_INT32_MAX = 2**31 - 1
_SEEDS = ["seed: int = 0", "seed2: int = 0"]
_IO = dict(inputs=["true_classes: int64"],
           outputs=["sampled_candidates: int64", "true_expected_count: float32", "sampled_expected_count: float32"])
_COMMON = ["num_true: int >= 1", "num_sampled: int >= 1", "unique: bool"]
SAMPLERS = ("UniformCandidateSampler", "LogUniformCandidateSampler", "LearnedUnigramCandidateSampler",
            "FixedUnigramCandidateSampler", "AllCandidateSampler")


def _true_classes_shape(op, what="true_classes"):
    t = op.inputs[0].shape
    num_true = op.get_attr("num_true")
    if t.ndims is not None and t.ndims != 2:
        raise _E(f"{what} must be a matrix [batch_size, num_true], got shape {t}")
    if t.ndims == 2 and t[1] is not None and t[1] != num_true:
        raise _E(f"{what} must have num_true = {num_true} columns, got shape {t}")
    return t[0] if t.ndims == 2 else None


def _sampler_shape(op):
    batch = _true_classes_shape(op)
    num_sampled, num_true = op.get_attr("num_sampled"), op.get_attr("num_true")
    if op.type != "AllCandidateSampler":
        range_max = op.get_attr("range_max")
        if op.get_attr("unique") and num_sampled > range_max:
            raise _E(f"cannot sample num_sampled = {num_sampled} distinct classes (unique=True) from range_max = "
                     f"{range_max} classes")
        if op.type == "LearnedUnigramCandidateSampler" and range_max >= _INT32_MAX:
            raise _E(f"range_max must be less than {_INT32_MAX} for unigram samplers, got {range_max}")
    if op.type == "FixedUnigramCandidateSampler":
        vocab_file, unigrams = op.get_attr("vocab_file"), op.get_attr("unigrams")
        if bool(vocab_file) == bool(unigrams):
            raise _E("give exactly one of vocab_file and unigrams (the class weights)")
        shards, shard = op.get_attr("num_shards"), op.get_attr("shard")
        if not 0 <= shard < shards:
            raise _E(f"shard must be in [0, num_shards = {shards}), got {shard}")
        if op.get_attr("distortion") < 0:
            raise _E(f"distortion must be >= 0, got {op.get_attr('distortion')}")
    return [TensorShape([num_sampled]), TensorShape([batch, num_true]), TensorShape([num_sampled])]


def _accidental_hits_shape(op):
    _true_classes_shape(op, "true_classes")
    s = op.inputs[1].shape
    if s.ndims is not None and s.ndims != 1:
        raise _E(f"sampled_candidates must be a vector (a sampler's first output), got shape {s}")
    return [TensorShape([None])] * 3


def register_ops(reg):
    docs = {
        "UniformCandidateSampler": "num_sampled classes drawn uniformly from [0, range_max).",
        "LogUniformCandidateSampler": "num_sampled classes from [0, range_max) with the log-uniform (Zipfian) "
                                      "distribution P(k) = log((k + 2) / (k + 1)) / log(range_max + 1).",
        "LearnedUnigramCandidateSampler": "num_sampled classes from [0, range_max) in proportion to how often each "
                                          "was a true class in earlier runs (each starts at one count).",
        "FixedUnigramCandidateSampler": "num_sampled classes from [0, range_max) in proportion to given weights "
                                        "(unigrams or a CSV vocab_file, last column), raised to distortion.",
        "AllCandidateSampler": "All classes 0 .. num_sampled - 1, each with expected count 1.",
    }
    for name in SAMPLERS:
        attrs = list(_COMMON)
        if name != "AllCandidateSampler":
            attrs.append("range_max: int >= 1")
        if name == "FixedUnigramCandidateSampler":
            attrs += ["vocab_file: string = ''", "distortion: float = 1.0", "num_reserved_ids: int >= 0 = 0",
                      "num_shards: int >= 1 = 1", "shard: int >= 0 = 0", "unigrams: list(float) = []"]
        reg.op(name, **_IO, attrs=attrs + _SEEDS, shape_fn=_sampler_shape, stateful=True, doc=docs[name])
    reg.op("ComputeAccidentalHits", inputs=["true_classes: int64", "sampled_candidates: int64"],
           outputs=["indices: int32", "ids: int64", "weights: float32"], attrs=["num_true: int"] + _SEEDS,
           shape_fn=_accidental_hits_shape,
           doc="Where a sampled candidate equals a true class of an example: the example (indices), the position "
               "in sampled_candidates (ids) and weight -FLT_MAX, to add to that sampled logit.")
    reg.no_gradient(*SAMPLERS, "ComputeAccidentalHits")


# ---------------------------------------------------------------------------------------
# wrappers (TF1 argument names and order)
def _int64_input(value, op_type, what):
    """``value`` as an int64 tensor: Python and NumPy integers are converted, a graph tensor
    of another dtype is refused (TF1 requires int64 here) with the op's name."""
    if isinstance(value, Tensor) or hasattr(value, "_as_graph_element"):
        t = convert_to_tensor(value)
        if t.dtype is not dtypes.int64:
            raise _E(f"{op_type}: {what} must be int64, got tensor '{t.name}' of dtype {t.dtype.name} "
                     "(use tw.cast)")
        return t
    return convert_to_tensor(value, dtype=dtypes.int64, name=what)


def _sample(op_type, true_classes, num_true, num_sampled, unique, seed, name, **attrs):
    true_classes = _int64_input(true_classes, op_type, "true_classes")
    s1, s2 = get_seed(seed)
    attrs.update(num_true=int(num_true), num_sampled=int(num_sampled), unique=bool(unique), seed=s1, seed2=s2)
    return apply_op(op_type, [true_classes], attrs, name=name)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """Sample ``num_sampled`` classes uniformly from ``[0, range_max)`` (without repeats when
    ``unique``). Returns ``(sampled_candidates, true_expected_count, sampled_expected_count)``."""
    return _sample("UniformCandidateSampler", true_classes, num_true, num_sampled, unique, seed, name,
                   range_max=int(range_max))


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """Sample ``num_sampled`` classes from ``[0, range_max)`` with the log-uniform (Zipfian)
    distribution ``P(k) = (log(k + 2) - log(k + 1)) / log(range_max + 1)``: small ids are
    frequent, so sort the vocabulary by decreasing frequency. Returns
    ``(sampled_candidates, true_expected_count, sampled_expected_count)``."""
    return _sample("LogUniformCandidateSampler", true_classes, num_true, num_sampled, unique, seed, name,
                   range_max=int(range_max))


def learned_unigram_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None,
                                      name=None):
    """Sample ``num_sampled`` classes from ``[0, range_max)`` in proportion to how often each
    was a true class so far (every class starts with one count; each run adds the true
    classes it was given after sampling). The counts live in the op's kernel for the
    Session's life. Returns ``(sampled_candidates, true_expected_count, sampled_expected_count)``."""
    return _sample("LearnedUnigramCandidateSampler", true_classes, num_true, num_sampled, unique, seed, name,
                   range_max=int(range_max))


def fixed_unigram_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, vocab_file="",
                                    distortion=1.0, num_reserved_ids=0, num_shards=1, shard=0, unigrams=(),
                                    seed=None, name=None):
    """Sample ``num_sampled`` classes from ``[0, range_max)`` in proportion to fixed weights:
    ``unigrams`` (one per class) or ``vocab_file`` (a CSV line per class, the weight in the
    last column), each raised to ``distortion``. ``num_reserved_ids`` ids come first with
    weight 0; with ``num_shards`` > 1 only ids ``id % num_shards == shard`` are this op's
    classes (``range_max`` must then equal their number). Returns
    ``(sampled_candidates, true_expected_count, sampled_expected_count)``."""
    return _sample("FixedUnigramCandidateSampler", true_classes, num_true, num_sampled, unique, seed, name,
                   range_max=int(range_max), vocab_file=str(vocab_file or ""), distortion=float(distortion),
                   num_reserved_ids=int(num_reserved_ids), num_shards=int(num_shards), shard=int(shard),
                   unigrams=[float(u) for u in unigrams])


def all_candidate_sampler(true_classes, num_true, num_sampled, unique, seed=None, name=None):
    """Every class ``0 .. num_sampled - 1``, each with expected count 1 (for testing: the
    sampled losses become the full ones)."""
    return _sample("AllCandidateSampler", true_classes, num_true, num_sampled, unique, seed, name)


def compute_accidental_hits(true_classes, sampled_candidates, num_true, seed=None, name=None):
    """Find sampled candidates that equal a true class of an example: returns
    ``(indices, ids, weights)``, for each hit the example's row (int32), the position in
    ``sampled_candidates`` (int64) and ``-FLT_MAX`` (float32), ready to be added to the
    sampled logits so that hits do not count as negatives."""
    true_classes = _int64_input(true_classes, "ComputeAccidentalHits", "true_classes")
    sampled_candidates = _int64_input(sampled_candidates, "ComputeAccidentalHits", "sampled_candidates")
    s1, s2 = get_seed(seed)
    return apply_op("ComputeAccidentalHits", [true_classes, sampled_candidates],
                    {"num_true": int(num_true), "seed": s1, "seed2": s2}, name=name)
