"""Initialisers: shapes, dtypes, values, statistics (loose bounds) and seeds."""

import math

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors

SHAPE = [200, 300]  # fan_in 200, fan_out 300


def _eval(t):
    with tw.Session() as s:
        return s.run(t)


def test_zeros_ones_constant():
    z = tw.zeros_initializer()([2, 3])
    assert z.dtype is tw.float32 and z.shape.as_list() == [2, 3]
    np.testing.assert_array_equal(_eval(z), np.zeros((2, 3)))
    o = tw.ones_initializer(dtype=tw.int32)([4])
    assert o.dtype is tw.int32
    np.testing.assert_array_equal(_eval(o), [1, 1, 1, 1])
    assert tw.ones_initializer()([2], dtype=tw.float64).dtype is tw.float64
    c = tw.constant_initializer(0.5)([2, 2])
    np.testing.assert_array_equal(_eval(c), np.full((2, 2), 0.5, np.float32))
    c = tw.constant_initializer([1, 2, 3, 4, 5, 6])(tw.TensorShape([2, 3]), dtype=tw.float64)
    assert c.dtype is tw.float64
    np.testing.assert_array_equal(_eval(c), [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(errors.InvalidArgumentError):
        tw.constant_initializer([1, 2, 3])([2, 2])
    with pytest.raises(errors.InvalidArgumentError):
        tw.constant_initializer(np.ones((3, 2)), verify_shape=True)([2, 3])


def test_random_uniform_initializer():
    t = tw.random_uniform_initializer(-0.5, 2.0, seed=3)(SHAPE)
    assert t.dtype is tw.float32 and t.shape.as_list() == SHAPE
    v = _eval(t)
    assert v.min() >= -0.5 and v.max() < 2.0
    assert abs(v.mean() - 0.75) < 0.05 and abs(v.std() - 2.5 / math.sqrt(12)) < 0.05
    ints = _eval(tw.random_uniform_initializer(0, 10, seed=1, dtype=tw.int32)([1000]))
    assert ints.dtype == np.int32 and ints.min() >= 0 and ints.max() < 10


def test_random_normal_and_truncated_normal_initializers():
    v = _eval(tw.random_normal_initializer(1.0, 2.0, seed=1, dtype=tw.float64)(SHAPE))
    assert v.dtype == np.float64
    assert abs(v.mean() - 1.0) < 0.05 and abs(v.std() - 2.0) < 0.05
    t = _eval(tw.truncated_normal_initializer(0.0, 0.5, seed=2)(SHAPE))
    assert np.abs(t).max() <= 1.0 + 1e-6
    assert abs(t.std() - 0.5 * 0.8796) < 0.02
    with pytest.raises(errors.InvalidArgumentError, match="floating-point"):
        tw.random_normal_initializer(dtype=tw.int32)


def test_glorot_uniform():
    v = _eval(tw.glorot_uniform_initializer(seed=4)(SHAPE))
    limit = math.sqrt(6.0 / (200 + 300))
    assert v.shape == tuple(SHAPE) and v.dtype == np.float32
    assert v.min() >= -limit and v.max() <= limit
    assert abs(v.std() - limit / math.sqrt(3)) < 0.05 * limit
    assert abs(v.mean()) < 0.01


def test_glorot_normal():
    v = _eval(tw.glorot_normal_initializer(seed=5)(SHAPE))
    std = math.sqrt(2.0 / (200 + 300))
    assert abs(v.std() - std) < 0.05 * std
    assert np.abs(v).max() <= 2 * std / 0.87962566 + 1e-6


@pytest.mark.parametrize("mode,fan", [("fan_in", 200), ("fan_out", 300), ("fan_avg", 250)])
@pytest.mark.parametrize("distribution", ["truncated_normal", "normal", "untruncated_normal", "uniform"])
def test_variance_scaling(mode, fan, distribution):
    init = tw.variance_scaling_initializer(scale=2.0, mode=mode, distribution=distribution, seed=6)
    v = _eval(init(SHAPE))
    std = math.sqrt(2.0 / fan)
    assert abs(v.std() - std) < 0.05 * std
    if distribution == "uniform":
        assert np.abs(v).max() <= math.sqrt(3) * std * (1 + 1e-6)
    elif distribution != "untruncated_normal":
        assert np.abs(v).max() <= 2 * std / 0.87962566 * (1 + 1e-6)


def test_variance_scaling_counts_the_receptive_field_of_conv_kernels():
    v = _eval(tw.variance_scaling_initializer(seed=1, distribution="untruncated_normal")([5, 5, 16, 32]))
    std = math.sqrt(1.0 / (5 * 5 * 16))
    assert abs(v.std() - std) < 0.05 * std


def test_variance_scaling_bad_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="mode"):
        tw.variance_scaling_initializer(mode="fan_sideways")
    with pytest.raises(errors.InvalidArgumentError, match="distribution"):
        tw.variance_scaling_initializer(distribution="cauchy")
    with pytest.raises(errors.InvalidArgumentError, match="scale"):
        tw.variance_scaling_initializer(scale=0.0)
    with pytest.raises(errors.InvalidArgumentError, match="fully defined"):
        tw.glorot_uniform_initializer()([None, 3])


@pytest.mark.parametrize("make", [
    lambda: tw.random_uniform_initializer(seed=11),
    lambda: tw.random_normal_initializer(seed=11),
    lambda: tw.truncated_normal_initializer(seed=11),
    lambda: tw.glorot_uniform_initializer(seed=11),
    lambda: tw.glorot_normal_initializer(seed=11),
])
def test_seeded_initializers_are_reproducible_across_graphs(make):
    values = []
    for seed in (11, 11, 12):
        g = tw.Graph()
        with g.as_default():
            init = make()
            init.seed = seed
            t = init([4, 5])
        with tw.Session(graph=g) as s:
            values.append(s.run(t))
    np.testing.assert_array_equal(values[0], values[1])
    assert not np.array_equal(values[0], values[2])


def test_same_seeded_initializer_gives_equal_variables():
    init = tw.glorot_uniform_initializer(seed=7)
    a = tw.get_variable("a", [3, 4], initializer=init)
    b = tw.get_variable("b", [3, 4], initializer=init)
    c = tw.get_variable("c", [3, 4], initializer=tw.glorot_uniform_initializer(seed=8))
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        va, vb, vc = s.run([a, b, c])
    np.testing.assert_array_equal(va, vb)
    assert not np.array_equal(va, vc)


def test_graph_seed_makes_unseeded_initializers_deterministic():
    def build():
        g = tw.Graph()
        with g.as_default():
            tw.set_random_seed(42)
            t = tw.glorot_uniform_initializer()([3, 3])
        with tw.Session(graph=g) as s:
            return s.run(t)
    np.testing.assert_array_equal(build(), build())


def test_get_config_round_trip():
    init = tw.variance_scaling_initializer(scale=3.0, mode="fan_out", distribution="uniform", seed=1)
    again = type(init).from_config(init.get_config())
    assert again.get_config() == init.get_config()
    assert "fan_out" in repr(init)
