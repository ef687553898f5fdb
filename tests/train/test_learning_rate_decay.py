"""tw.train's learning-rate schedules against their closed forms at several steps, with the
global step as a variable and as a tensor; staircase, cycle and restarts; the errors."""

import math

import numpy as np
import pytest

import tensorweave as tw

STEPS = [0, 1, 5, 10, 15, 37, 100]


def _values(make, steps=STEPS):
    """``make(global_step)`` evaluated with the global step (a variable) at each of ``steps``."""
    with tw.Graph().as_default():
        gs = tw.train.get_or_create_global_step()
        lr = make(gs)
        assert lr.shape.ndims == 0
        out = []
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            for s in steps:
                sess.run(gs.assign(s))
                out.append(sess.run(lr))
        return np.array(out, np.float64)


def _close(got, want, rtol=1e-5):
    np.testing.assert_allclose(got, [want(s) for s in STEPS], rtol=rtol, atol=1e-7)


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_natural_exp_and_inverse_time_decay(staircase):
    def p(s):
        return math.floor(s / 10) if staircase else s / 10
    _close(_values(lambda gs: tw.train.exponential_decay(0.1, gs, 10, 0.5, staircase=staircase)),
           lambda s: 0.1 * 0.5 ** p(s))
    _close(_values(lambda gs: tw.train.natural_exp_decay(0.1, gs, 10, 0.5, staircase=staircase)),
           lambda s: 0.1 * math.exp(-0.5 * p(s)))
    _close(_values(lambda gs: tw.train.inverse_time_decay(0.1, gs, 10, 0.5, staircase=staircase)),
           lambda s: 0.1 / (1 + 0.5 * p(s)))


@pytest.mark.parametrize("cycle", [False, True])
def test_polynomial_decay(cycle):
    def want(s, lr=0.1, end=0.01, power=2.0, steps=10):
        if cycle:
            steps = steps * (1 if s == 0 else math.ceil(s / steps))
        else:
            s = min(s, steps)
        return (lr - end) * (1 - s / steps) ** power + end
    _close(_values(lambda gs: tw.train.polynomial_decay(0.1, gs, 10, 0.01, power=2.0, cycle=cycle)), want)


def test_piecewise_constant():
    got = _values(lambda gs: tw.train.piecewise_constant(gs, [5, 15], [1.0, 0.5, 0.1]))
    np.testing.assert_allclose(got, [1.0 if s <= 5 else 0.5 if s <= 15 else 0.1 for s in STEPS], rtol=1e-6)
    single = _values(lambda gs: tw.train.piecewise_constant(gs, [10], [0.3, 0.2]))
    np.testing.assert_allclose(single, [0.3 if s <= 10 else 0.2 for s in STEPS], rtol=1e-6)


def test_cosine_decays():
    _close(_values(lambda gs: tw.train.cosine_decay(2.0, gs, 40, alpha=0.1)),
           lambda s: 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(s, 40) / 40)) + 0.1))

    def sgdr(s, first=10, t_mul=2.0, m_mul=0.5, alpha=0.0):
        frac = s / first
        if t_mul == 1.0:
            i = math.floor(frac)
            frac -= i
        else:
            i = math.floor(math.log(1 - frac * (1 - t_mul)) / math.log(t_mul))
            frac = (frac - (1 - t_mul ** i) / (1 - t_mul)) / t_mul ** i
        return 1.0 * ((1 - alpha) * 0.5 * m_mul ** i * (1 + math.cos(math.pi * frac)) + alpha)
    _close(_values(lambda gs: tw.train.cosine_decay_restarts(1.0, gs, 10, t_mul=2.0, m_mul=0.5)), sgdr, rtol=1e-4)
    _close(_values(lambda gs: tw.train.cosine_decay_restarts(1.0, gs, 10, t_mul=1.0, m_mul=0.5, alpha=0.2)),
           lambda s: sgdr(s, t_mul=1.0, alpha=0.2), rtol=1e-4)
    # t_mul given as a tensor: the branch is chosen when the graph runs
    _close(_values(lambda gs: tw.train.cosine_decay_restarts(1.0, gs, 10, t_mul=tw.constant(2.0), m_mul=0.5)),
           sgdr, rtol=1e-4)

    def linear_cosine(s, steps=40, periods=0.5, alpha=0.0, beta=0.001):
        s = min(s, steps)
        return 0.5 * ((alpha + (steps - s) / steps) * 0.5 * (1 + math.cos(math.pi * 2 * periods * s / steps)) + beta)
    _close(_values(lambda gs: tw.train.linear_cosine_decay(0.5, gs, 40)), linear_cosine)


def test_noisy_linear_cosine_decay_is_noisy_around_the_linear_cosine():
    got = _values(lambda gs: tw.train.noisy_linear_cosine_decay(1.0, gs, 100, initial_variance=0.0), [0, 50, 100])
    np.testing.assert_allclose(got, [1.001, 0.5 * 0.5 * (1 + math.cos(math.pi * 0.5)) + 0.001, 0.001], rtol=1e-5)
    noisy = _values(lambda gs: tw.train.noisy_linear_cosine_decay(1.0, gs, 100), [10] * 5)
    assert len(set(noisy.tolist())) > 1


def test_global_step_may_be_a_tensor_and_the_rate_a_float64_tensor():
    step = tw.placeholder(tw.int64, [])
    lr = tw.train.exponential_decay(tw.constant(0.2, tw.float64), step, 4, 0.5, staircase=True)
    assert lr.dtype is tw.float64 and lr.op.name == "ExponentialDecay"
    with tw.Session() as sess:
        assert [sess.run(lr, {step: s}) for s in (0, 3, 4, 9)] == [0.2, 0.2, 0.1, 0.05]
    named = tw.train.polynomial_decay(0.1, step, 10, name="poly")
    assert named.op.name == "poly"


def test_training_with_a_decayed_rate_follows_it():
    with tw.Graph().as_default():
        gs = tw.train.get_or_create_global_step()
        x = tw.Variable(0.0)
        lr = tw.train.exponential_decay(1.0, gs, 1, 0.5)
        train = tw.train.GradientDescentOptimizer(lr).minimize(-x, global_step=gs)   # d(-x)/dx = -1: x += lr
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            for _ in range(4):
                sess.run(train)
            assert sess.run(gs) == 4
            np.testing.assert_allclose(sess.run(x), 1 + 0.5 + 0.25 + 0.125)


def test_errors():
    for fn in (tw.train.exponential_decay, tw.train.natural_exp_decay, tw.train.inverse_time_decay):
        with pytest.raises(ValueError, match=f"global_step is required for {fn.__name__}"):
            fn(0.1, None, 10, 0.5)
    with pytest.raises(tw.errors.InvalidArgumentError, match="global_step is required for polynomial_decay"):
        tw.train.polynomial_decay(0.1, None, 10)
    with pytest.raises(ValueError, match="global_step is required for cosine_decay_restarts"):
        tw.train.cosine_decay_restarts(0.1, None, 10)
    gs = tw.train.get_or_create_global_step()
    with pytest.raises(ValueError, match="length of boundaries should be 1 less than the length of values"):
        tw.train.piecewise_constant(gs, [1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="values must have the same dtype"):
        tw.train.piecewise_constant(gs, [1], [0.1, 2])
    with pytest.raises(ValueError, match="decay_steps must be positive"):
        tw.train.exponential_decay(0.1, gs, 0, 0.5)
    with pytest.raises(ValueError, match="learning_rate must be a number"):
        tw.train.cosine_decay("fast", gs, 10)
