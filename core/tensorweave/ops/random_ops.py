"""Random ops: uniform, normal, truncated normal, uniform integers and shuffle, with TF1's
graph- and op-level seeds.

Every random op is stateful: its kernel (and the stream inside it) is built once per
Session, so successive runs give new values while a new Session with the same seeds replays
the same sequence. RandomUniform, RandomStandardNormal, TruncatedNormal and RandomUniformInt
draw from the Philox4x32-10 streams of ``kernels/random.py`` on every device, so a seed gives
the same values on the CPU, OpenCL and CUDA. Seeds (TF1 semantics, see ``get_seed``):

- neither a graph seed (``tw.set_random_seed``) nor an op seed: nondeterministic;
- a graph seed only: each op's seed is derived from the graph, in construction order;
- an op seed only: the graph seed defaults to ``DEFAULT_GRAPH_SEED``;
- both: used as given.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    apply_op,
    constant_value,
    constant_value_as_shape,
    convert_to_tensor,
    get_default_graph,
)
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops.array_ops import _index_tensor

__all__ = ["random_uniform", "random_normal", "truncated_normal", "random_shuffle"]

DEFAULT_GRAPH_SEED = 87654321
_MAXINT32 = 2**31 - 1

_SEEDS = ["seed: int = 0", "seed2: int = 0"]
_FLOATS = "{float16, float32, float64}"
_INDEX = "{int32, int64}"


def get_seed(op_seed):
    """The (seed, seed2) pair for a new random op in the default graph; (None, None) means
    nondeterministic."""
    g = get_default_graph()
    g._last_seed_id += 1
    if g.seed is not None:
        seeds = (int(g.seed), int(op_seed) if op_seed is not None else g._last_seed_id)
    elif op_seed is not None:
        seeds = (DEFAULT_GRAPH_SEED, int(op_seed))
    else:
        return None, None
    if seeds == (0, 0):  # (0, 0) is the kernels' "nondeterministic"; keep seed 0 deterministic
        seeds = (0, _MAXINT32)
    return seeds


def _shape_from_input(op):
    t = op.inputs[0]
    if t.shape.ndims is not None and t.shape.ndims != 1:
        raise errors.InvalidArgumentError(f"shape must be a vector, got '{t.name}' of shape {t.shape}")
    v = constant_value(t)
    if v is not None and (v < 0).any():
        raise errors.InvalidArgumentError(f"shape {v.tolist()} must not have negative dimensions")
    return constant_value_as_shape(t)


def _random_shape(op):
    return [_shape_from_input(op)]


def _uniform_int_shape(op):
    for t, what in ((op.inputs[1], "minval"), (op.inputs[2], "maxval")):
        if t.shape.ndims is not None and t.shape.ndims != 0:
            raise errors.InvalidArgumentError(f"{what} must be a scalar, got shape {t.shape}")
    lo, hi = constant_value(op.inputs[1]), constant_value(op.inputs[2])
    if lo is not None and hi is not None and lo.size == 1 and hi.size == 1 and lo.item() >= hi.item():
        raise errors.InvalidArgumentError(f"need minval < maxval, got minval {lo.item()} and maxval {hi.item()}")
    return [_shape_from_input(op)]


def _shuffle_shape(op):
    return [TensorShape(op.inputs[0].shape)]


def register_ops(reg):
    for name, doc in (("RandomUniform", "Uniform values in [0, 1)."),
                      ("RandomStandardNormal", "Normal values with mean 0 and standard deviation 1."),
                      ("TruncatedNormal", "Standard normal values, redrawn until within 2 standard deviations.")):
        reg.op(name, inputs=["shape: T"], outputs=["output: dtype"],
               attrs=_SEEDS + [f"dtype: {_FLOATS}", f"T: {_INDEX}"],
               shape_fn=_random_shape, stateful=True, doc=doc)
    reg.op("RandomUniformInt", inputs=["shape: T", "minval: Tout", "maxval: Tout"], outputs=["output: Tout"],
           attrs=_SEEDS + [f"Tout: {_INDEX}", f"T: {_INDEX}"], shape_fn=_uniform_int_shape, stateful=True,
           doc="Uniform integers in [minval, maxval).")
    reg.op("RandomShuffle", inputs=["value: T"], outputs=["output: T"], attrs=_SEEDS + ["T: type"],
           shape_fn=_shuffle_shape, stateful=True, doc="The input with its first dimension randomly permuted.")


# ---------------------------------------------------------------------------------------
def _shape_tensor(shape):
    return _index_tensor(shape, "shape", "shape")


def _seed_attrs(seed):
    s1, s2 = get_seed(seed)
    return {"seed": s1, "seed2": s2}  # None: the attr default 0, i.e. nondeterministic


def _float_dtype(dtype, what):
    dtype = dtypes.as_dtype(dtype)
    if not dtype.is_floating:
        raise errors.InvalidArgumentError(f"{what}: dtype must be float16, float32 or float64, got {dtype.name}")
    return dtype


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None):
    """Uniform values in ``[minval, maxval)`` (maxval defaults to 1 for floats and is
    required for int32/int64)."""
    dtype = dtypes.as_dtype(dtype)
    if dtype not in (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64):
        raise errors.InvalidArgumentError(f"random_uniform: dtype {dtype.name} is not supported")
    if maxval is None:
        if dtype.is_integer:
            raise errors.InvalidArgumentError(f"random_uniform: maxval is required for dtype {dtype.name}")
        maxval = 1
    g = get_default_graph()
    with g.name_scope(name or "random_uniform") as scope:
        shape_t = _shape_tensor(shape)
        lo = convert_to_tensor(minval, dtype=dtype, name="min")
        hi = convert_to_tensor(maxval, dtype=dtype, name="max")
        attrs = _seed_attrs(seed)
        if dtype.is_integer:
            return apply_op("RandomUniformInt", [shape_t, lo, hi], attrs, _exact_name=scope.rstrip("/"))
        attrs["dtype"] = dtype
        rnd = apply_op("RandomUniform", [shape_t], attrs)
        scaled = apply_op("Mul", [rnd, apply_op("Sub", [hi, lo], name="sub")], name="mul")
        return apply_op("Add", [scaled, lo], _exact_name=scope.rstrip("/"))


def _normal(op_type, default_name, shape, mean, stddev, dtype, seed, name):
    dtype = _float_dtype(dtype, default_name)
    g = get_default_graph()
    with g.name_scope(name or default_name) as scope:
        shape_t = _shape_tensor(shape)
        mean_t = convert_to_tensor(mean, dtype=dtype, name="mean")
        std_t = convert_to_tensor(stddev, dtype=dtype, name="stddev")
        attrs = _seed_attrs(seed)
        attrs["dtype"] = dtype
        rnd = apply_op(op_type, [shape_t], attrs)
        return apply_op("Add", [apply_op("Mul", [rnd, std_t], name="mul"), mean_t], _exact_name=scope.rstrip("/"))


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Normally distributed values."""
    return _normal("RandomStandardNormal", "random_normal", shape, mean, stddev, dtype, seed, name)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Normal values with those more than 2 standard deviations from the mean redrawn."""
    return _normal("TruncatedNormal", "truncated_normal", shape, mean, stddev, dtype, seed, name)


def random_shuffle(value, seed=None, name=None):
    """``value`` with its first dimension randomly permuted (a new permutation per run)."""
    return apply_op("RandomShuffle", [value], _seed_attrs(seed), name=name)
