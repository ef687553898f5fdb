"""Gradients of the math ops, checked against central finite differences in float64.

Shapes and axes unknown at graph construction are exercised by passing tensors through
``placeholder_with_default`` with a less specific shape (``hide``): the gradient then has to
compute them in the graph. Complex gradients follow TF's convention (for a real loss L the
gradient is dL/dRe + i dL/dIm) and are checked with ``check_complex_gradients``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.testing.gradient_checker import check_gradients


def rng(seed=0):
    return np.random.default_rng(seed)


def hide(t, shape=None):
    """``t`` with its static shape forgotten (down to ``shape``), and no constant value."""
    return tw.placeholder_with_default(t, shape)


def op_types(graph=None):
    return [op.type for op in (graph or tw.get_default_graph()).get_operations()]


def check_complex_gradients(fn, values, w=None, delta=1e-6, rtol=1e-5, atol=1e-6):
    """Check tw.gradients of L = Re(sum(w * fn(*zs))) against finite differences of L in the
    real and imaginary parts of each z (TF's convention: dL/dRe + i dL/dIm)."""
    values = [np.asarray(v, dtype=np.complex128) for v in values]
    with tw.Graph().as_default():
        zs = [tw.placeholder(tw.complex128, v.shape) for v in values]
        out = fn(*zs)
        if w is None:
            w = (rng(7).standard_normal(out.shape.as_list()) + 1j * rng(8).standard_normal(out.shape.as_list()))
        loss = tw.reduce_sum(tw.cast(out * tw.constant(w, dtype=tw.complex128), tw.float64))
        grads = tw.gradients(loss, zs)
        with tw.Session() as s:
            feed = dict(zip(zs, values))
            got = s.run(grads, feed)
            for i, v in enumerate(values):
                num = np.zeros(v.shape, np.complex128)
                for e in range(v.size):
                    parts = []
                    for step in (delta, 1j * delta):
                        vals = []
                        for sign in (1, -1):
                            vp = v.copy().reshape(-1)
                            vp[e] += sign * step
                            f = dict(feed)
                            f[zs[i]] = vp.reshape(v.shape)
                            vals.append(s.run(loss, f))
                        parts.append((vals[0] - vals[1]) / (2 * delta))
                    num.reshape(-1)[e] = parts[0] + 1j * parts[1]
                np.testing.assert_allclose(got[i], num, rtol=rtol, atol=atol, err_msg=f"input {i}")


# ---------------------------------------------------------------------------------------
# element-wise binary ops, with broadcasting
BROADCAST_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 4)), ((), (3,)), ((3,), (2, 3)), ((2, 1, 3), (2, 1))]
BINARY = {
    "add": (lambda a, b: a + b, "any", "any"),
    "sub": (lambda a, b: a - b, "any", "any"),
    "mul": (lambda a, b: a * b, "any", "any"),
    "div": (tw.div, "any", "away"),
    "realdiv": (tw.realdiv, "any", "away"),
    "truediv": (lambda a, b: a / b, "any", "away"),
    "pow": (tw.pow, "pos", "any"),
    "maximum": (tw.maximum, "any", "any"),
    "minimum": (tw.minimum, "any", "any"),
    "squared_difference": (tw.squared_difference, "any", "any"),
    "floormod": (tw.floormod, "any", "away"),
}


def values(kind, shape, seed):
    r = rng(seed)
    if kind == "pos":
        return r.uniform(0.5, 2.0, shape)
    if kind == "away":  # bounded away from 0
        return r.uniform(0.5, 2.0, shape) * r.choice([-1.0, 1.0], shape)
    return r.standard_normal(shape)


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradients_with_broadcasting(name, shapes):
    fn, kx, ky = BINARY[name]
    a, b = values(kx, shapes[0], 1), values(ky, shapes[1], 2)
    if name == "floormod":  # keep x / y away from integers, where floormod jumps
        b = np.abs(b) + 1.0
        a = np.floor(rng(3).uniform(-3, 3, shapes[0])) * 3.0 + 0.5
    check_gradients(fn, [a, b])
    if name not in ("pow", "floormod", "div", "realdiv", "truediv"):  # the operands swapped
        check_gradients(lambda x, y: fn(y, x), [b, a])


@pytest.mark.parametrize("name", ["add", "mul", "div", "maximum", "squared_difference", "pow"])
def test_binary_gradients_with_unknown_shapes(name):
    fn, kx, ky = BINARY[name]
    a, b = values(kx, (2, 3), 1), values(ky, (1, 3), 2)
    check_gradients(lambda x, y: fn(hide(x, [None, 3]), hide(y)), [a, b])
    check_gradients(lambda x, y: fn(hide(x), y), [a, b])


def test_maximum_minimum_ties_go_to_x(sess):
    x = tw.constant([1.0, 2.0, 3.0], dtype=tw.float64)
    y = tw.constant([1.0, 5.0, 3.0], dtype=tw.float64)
    gmax = tw.gradients(tw.maximum(x, y), [x, y])
    gmin = tw.gradients(tw.minimum(x, y), [x, y])
    np.testing.assert_array_equal(sess.run(gmax), [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(sess.run(gmin), [[1, 1, 1], [0, 0, 0]])


def test_pow_exponent_gradient_is_zero_where_base_is_not_positive(sess):
    x = tw.constant([-2.0, 0.0, 2.0], dtype=tw.float64)
    y = tw.constant([2.0, 3.0, 3.0], dtype=tw.float64)
    gx, gy = sess.run(tw.gradients(tw.pow(x, y), [x, y]))
    np.testing.assert_allclose(gx, [-4.0, 0.0, 12.0])
    np.testing.assert_allclose(gy, [0.0, 0.0, 8.0 * np.log(2.0)])
    assert np.all(np.isfinite(gy))


def test_integer_inputs_get_no_gradient():
    i = tw.constant([1, 2])
    x = tw.constant([1.0, 2.0])
    y = tw.cast(i * 2, tw.float32) * x
    assert tw.gradients(y, [i])[0] is None


# ---------------------------------------------------------------------------------------
# element-wise unary ops
UNARY = {
    "neg": (tw.negative, "any"), "square": (tw.square, "any"), "exp": (tw.exp, "any"), "log": (tw.log, "pos"),
    "sqrt": (tw.sqrt, "pos"), "rsqrt": (tw.rsqrt, "pos"), "reciprocal": (tw.reciprocal, "away"),
    "abs": (tw.abs, "away"), "sigmoid": (tw.sigmoid, "any"), "tanh": (tw.tanh, "any"), "sin": (tw.sin, "any"),
    "cos": (tw.cos, "any"), "log1p": (tw.log1p, "pos"), "expm1": (tw.expm1, "any"),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradients(name):
    fn, kind = UNARY[name]
    check_gradients(fn, [values(kind, (2, 3), 4)])


def test_unary_gradient_at_negative_log1p_domain():
    check_gradients(tw.log1p, [np.array([-0.5, -0.25, 0.3])])


def test_non_differentiable_ops_stop_gradients(sess):
    x = tw.constant([[1.0, -2.0], [3.0, 0.5]], dtype=tw.float64)
    assert tw.gradients(tw.cast(tw.argmax(x, 1), tw.float64), [x]) == [None]
    assert tw.gradients(tw.cast(tw.argmin(x, 0), tw.float64), [x]) == [None]
    for t in (tw.floor(x), tw.ceil(x), tw.round(x), tw.sign(x)):
        assert tw.gradients(t, [x]) == [None]
    (g,) = tw.gradients(tw.cast(x > 0, tw.float64) * x, [x])
    np.testing.assert_array_equal(sess.run(g), [[1.0, 0.0], [1.0, 1.0]])
    assert tw.gradients(tw.cast(tw.reduce_all(x > 0), tw.float64), [x]) == [None]


# ---------------------------------------------------------------------------------------
# Cast, AddN
def test_cast_gradients(sess):
    check_gradients(lambda x: tw.cast(tw.cast(x, tw.float32), tw.float64) * 3.0, [np.array([0.5, -1.5, 2.25])],
                    delta=1e-2, rtol=1e-5)
    x = tw.constant([1.5, 2.5], dtype=tw.float64)
    y = tw.cast(tw.cast(x, tw.int32), tw.float64) + x
    (g,) = tw.gradients(y, [x])
    np.testing.assert_array_equal(sess.run(g), [1.0, 1.0])  # only the float path
    (g16,) = tw.gradients(tw.cast(x, tw.float16), [x])
    assert g16.dtype is tw.float64
    np.testing.assert_array_equal(sess.run(g16), [1.0, 1.0])


def test_add_n_gradient():
    check_gradients(lambda a, b: tw.add_n([a, b, a * b, a]), [values("any", (2, 3), 1), values("any", (2, 3), 2)])


# ---------------------------------------------------------------------------------------
# reductions
REDUCTIONS = {"sum": tw.reduce_sum, "mean": tw.reduce_mean, "prod": tw.reduce_prod, "max": tw.reduce_max,
              "min": tw.reduce_min}
AXES = [None, 1, -1, [0, 2], [-1, 0], [0, 1, 2], []]


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_gradients(name, axis, keep):
    x = rng(5).permutation(np.arange(1, 13, dtype=np.float64)).reshape(2, 3, 2) / 6.0  # no ties
    check_gradients(lambda t: REDUCTIONS[name](t, axis=axis, keep_dims=keep), [x])


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_gradients_with_axes_and_shapes_unknown_at_construction(name, keep):
    x = rng(5).permutation(np.arange(1, 13, dtype=np.float64)).reshape(2, 3, 2) / 6.0
    fn = REDUCTIONS[name]
    for axis in ([0, 2], [-1], [1, -3]):
        def axes(axis=axis):
            return hide(tw.constant(axis), [None])
        check_gradients(lambda t, axes=axes: fn(hide(t), axis=axes(), keep_dims=keep), [x])
        check_gradients(lambda t, axes=axes: fn(t, axis=axes(), keep_dims=keep), [x])
    check_gradients(lambda t: fn(hide(t, [None, 3, None]), axis=1, keep_dims=keep), [x])
    check_gradients(lambda t: fn(hide(t, [None, None, 2]), axis=[0, 1], keep_dims=keep), [x])
    check_gradients(lambda t: fn(hide(t), keep_dims=keep), [x])  # all axes of an unknown rank


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_of_a_scalar_and_of_a_vector(name):
    check_gradients(lambda t: REDUCTIONS[name](t), [np.array(1.5)])
    check_gradients(lambda t: REDUCTIONS[name](hide(t)), [np.array(1.5)])
    check_gradients(lambda t: REDUCTIONS[name](t, axis=0), [np.array([0.5, 2.0, -1.0])])


@pytest.mark.parametrize("zeros", [[0], [0, 4], [1, 2]])
def test_prod_gradient_with_zeros(zeros):
    x = np.arange(1.0, 7.0).reshape(2, 3) / 2
    x.reshape(-1)[zeros] = 0.0
    for axis in (None, 0, 1, [0, 1]):
        check_gradients(lambda t, axis=axis: tw.reduce_prod(t, axis=axis), [x])
    check_gradients(lambda t: tw.reduce_prod(hide(t), axis=hide(tw.constant([1, 0]), [None])), [x])


@pytest.mark.parametrize("keep", [False, True])
def test_max_min_gradient_is_shared_among_ties(sess, keep):
    xv = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    x = tw.constant(xv)
    (gmax,) = tw.gradients(tw.reduce_max(x, axis=1, keep_dims=keep), [x])
    (gmin,) = tw.gradients(tw.reduce_min(x, axis=-1, keep_dims=keep), [x])
    (gall,) = tw.gradients(tw.reduce_max(x, keep_dims=keep), [x])
    np.testing.assert_allclose(sess.run(gmax), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(sess.run(gmin), [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(sess.run(gall), [[0, 0.5, 0.5], [0, 0, 0]])


def test_static_reduction_gradients_use_constant_shapes():
    x = tw.placeholder(tw.float64, [4, 3])
    for fn in REDUCTIONS.values():
        for keep in (False, True):
            tw.gradients(fn(x, axis=[0], keep_dims=keep), [x])
    types = set(op_types())
    assert not types & {"Shape", "ReducedShape", "BroadcastGradientArgs", "Size"}, types


# ---------------------------------------------------------------------------------------
# unknown batch dimensions
def test_unknown_batch_gradients_match_numpy(sess):
    x = tw.placeholder(tw.float64, [None, 3])
    w = tw.constant(rng(1).standard_normal((3, 2)))
    b = tw.constant(rng(2).standard_normal(2))
    s = tw.constant(rng(3).standard_normal(3))
    y = tw.matmul(x * s, w) + b
    loss = tw.reduce_mean(tw.square(y)) + tw.reduce_sum(tw.reduce_max(x, axis=1)) + tw.reduce_prod(x[:, :1])
    gx, gw, gb, gs = tw.gradients(loss, [x, w, b, s])
    assert gb.shape.as_list() == [2] and gs.shape.as_list() == [3] and gw.shape.as_list() == [3, 2]
    assert gx.shape.as_list() == [None, 3]
    wv, bv, sv = sess.run([w, b, s])
    for n in (1, 4):
        xv = rng(n).standard_normal((n, 3))
        yv = (xv * sv) @ wv + bv
        dy = 2 * yv / yv.size
        onehot = (xv == xv.max(axis=1, keepdims=True)).astype(float)
        prod_g = np.zeros_like(xv)
        prod_g[:, 0] = [np.prod(np.delete(xv[:, 0], i)) for i in range(n)]
        got = sess.run([gx, gw, gb, gs], {x: xv})
        np.testing.assert_allclose(got[0], (dy @ wv.T) * sv + onehot + prod_g, rtol=1e-10)
        np.testing.assert_allclose(got[1], (xv * sv).T @ dy, rtol=1e-10)
        np.testing.assert_allclose(got[2], dy.sum(0), rtol=1e-10)
        np.testing.assert_allclose(got[3], ((dy @ wv.T) * xv).sum(0), rtol=1e-10)


def test_unknown_batch_mean_and_sum_keep_dims(sess):
    x = tw.placeholder(tw.float64, [None, 3])
    c = tw.constant(np.array([[1.0, 2.0, 3.0]]))
    m = tw.reduce_mean(x, axis=0, keep_dims=True)
    s = tw.reduce_sum(x * c, axis=1)
    gm, = tw.gradients(tw.reduce_sum(m * c), [x])
    gs, = tw.gradients(tw.reduce_sum(s * s), [x])
    for n in (2, 5):
        xv = rng(n).standard_normal((n, 3))
        np.testing.assert_allclose(sess.run(gm, {x: xv}), np.tile([1.0, 2.0, 3.0], (n, 1)) / n)
        sv = (xv * [1.0, 2.0, 3.0]).sum(1)
        np.testing.assert_allclose(sess.run(gs, {x: xv}), 2 * sv[:, None] * [1.0, 2.0, 3.0])


def test_unknown_batch_broadcast_gradient_is_static(sess):
    x = tw.placeholder(tw.float64, [None, 3])
    b = tw.constant(np.zeros(3))
    (g,) = tw.gradients(tw.reduce_sum(tw.square(x + b)), [b])
    assert g.shape.as_list() == [3]
    assert "BroadcastGradientArgs" not in op_types()  # b's axes are known: sum over axis 0
    xv = rng().standard_normal((4, 3))
    np.testing.assert_allclose(sess.run(g, {x: xv}), 2 * xv.sum(0))


# ---------------------------------------------------------------------------------------
# matrix ops
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_gradients(ta, tb):
    a = values("any", (3, 2) if ta else (2, 3), 1)
    b = values("any", (4, 3) if tb else (3, 4), 2)
    check_gradients(lambda x, y: tw.matmul(x, y, transpose_a=ta, transpose_b=tb), [a, b])


@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("adj_y", [False, True])
@pytest.mark.parametrize("batch", [((2,), (2,)), ((2, 1), (3,)), ((), (2,)), ((2,), ())], ids=str)
def test_batch_matmul_gradients(adj_x, adj_y, batch):
    bx, by = batch
    x = values("any", bx + ((3, 2) if adj_x else (2, 3)), 1)
    y = values("any", by + ((4, 3) if adj_y else (3, 4)), 2)
    check_gradients(lambda a, b: apply_op("BatchMatMul", [a, b], {"adj_x": adj_x, "adj_y": adj_y}), [x, y])


def test_batch_matmul_gradient_with_unknown_batch(sess):
    x = tw.placeholder(tw.float64, [None, 2, 3])
    y = tw.constant(rng(1).standard_normal((3, 2)))
    gx, gy = tw.gradients(tw.reduce_sum(tw.matmul(x, y)), [x, y])
    assert gy.shape.as_list() == [3, 2]
    xv = rng(2).standard_normal((4, 2, 3))
    got_x, got_y = sess.run([gx, gy], {x: xv})
    np.testing.assert_allclose(got_x, np.ones((4, 2, 2)) @ sess.run(y).T)
    np.testing.assert_allclose(got_y, np.einsum("bij,bik->jk", xv, np.ones((4, 2, 2))))


@pytest.mark.parametrize("adjoint", [False, True])
def test_matrix_inverse_gradient(adjoint):
    a = values("any", (3, 3), 3) + 3 * np.eye(3)
    check_gradients(lambda t: tw.matrix_inverse(t, adjoint=adjoint), [a])
    check_gradients(lambda t: tw.matrix_inverse(t, adjoint=adjoint), [np.stack([a, a.T + np.eye(3)])])


def test_matrix_determinant_gradient():
    a = values("any", (3, 3), 4) + 2 * np.eye(3)
    check_gradients(tw.matrix_determinant, [a])
    check_gradients(tw.matrix_determinant, [np.stack([a, a.T * 0.5])])
    check_gradients(lambda t: tw.matrix_determinant(hide(t)), [a])


# ---------------------------------------------------------------------------------------
# complex gradients (TF's convention)
def cvalues(shape, seed, away=False):
    r = rng(seed)
    z = r.standard_normal(shape) + 1j * r.standard_normal(shape)
    return z + (1.5 * np.sign(z.real) if away else 0)


@pytest.mark.parametrize("name,fn", [
    ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b), ("sub", lambda a, b: a - b),
    ("matmul", tw.matmul), ("pow", tw.pow),
])
def test_complex_binary_gradients(name, fn):
    a = cvalues((2, 2), 1, away=True)
    b = cvalues((2, 2), 2, away=True) * 0.5
    check_complex_gradients(fn, [a, b])


@pytest.mark.parametrize("name,fn", [
    ("exp", tw.exp), ("log", tw.log), ("sqrt", tw.sqrt), ("rsqrt", tw.rsqrt), ("square", tw.square),
    ("reciprocal", tw.reciprocal), ("tanh", tw.tanh), ("sigmoid", tw.sigmoid), ("sin", tw.sin), ("cos", tw.cos),
    ("log1p", tw.log1p), ("expm1", tw.expm1), ("conj", tw.conj), ("neg", tw.negative),
    ("inverse", tw.matrix_inverse), ("inverse_adjoint", lambda z: tw.matrix_inverse(z, adjoint=True)),
    ("determinant", lambda z: tw.reshape(tw.matrix_determinant(z), [1])),
    ("batch_matmul_adjoint", lambda z: tw.matmul(z[None], z, adjoint_a=True)),
    ("sum", lambda z: tw.reduce_sum(z * z, axis=0)), ("prod", lambda z: tw.reduce_prod(z, axis=1)),
    ("mean", lambda z: tw.reduce_mean(z, axis=0)),
])
def test_complex_unary_gradients(name, fn):
    check_complex_gradients(fn, [cvalues((2, 2), 3, away=True)])


def test_complex_abs_and_cast_gradients(sess):
    z = cvalues((3,), 4, away=True)
    check_complex_gradients(lambda t: tw.cast(tw.abs(t), tw.complex128), [z])
    check_complex_gradients(lambda t: tw.cast(tw.cast(t, tw.float64), tw.complex128) * t, [z])
    t = tw.constant(np.array([0j, 3 + 4j]))
    (g,) = tw.gradients(tw.abs(t), [t])
    np.testing.assert_allclose(sess.run(g), [0, 0.6 + 0.8j])  # 0 (not nan) at z == 0


# ---------------------------------------------------------------------------------------
# second order
def test_second_order_gradients(sess):
    x = tw.constant(np.array([[0.5, -1.0, 2.0]]))
    y = tw.reduce_sum(tw.sin(x) * x, axis=1)
    (g,) = tw.gradients(y, [x])
    (h,) = tw.gradients(g, [x])
    xv = sess.run(x)
    np.testing.assert_allclose(sess.run(h), 2 * np.cos(xv) - xv * np.sin(xv))
    (h2,) = tw.gradients(tw.gradients(tw.reduce_mean(tw.square(x) * x), [x])[0], [x])
    np.testing.assert_allclose(sess.run(h2), 6 * xv / 3)


# ---------------------------------------------------------------------------------------
# helper ops: Cumsum, Cumprod, UnsortedSegmentSum, ReducedShape
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_cumprod_values_and_gradients(sess, exclusive, reverse):
    xv = values("away", (2, 3), 5)
    for axis in (0, 1, -1):
        for fn, npfn, ident in ((tw.cumsum, np.cumsum, 0.0), (tw.cumprod, np.cumprod, 1.0)):
            y = fn(tw.constant(xv), axis, exclusive=exclusive, reverse=reverse)
            a = axis % 2
            v = np.flip(xv, a) if reverse else xv
            if exclusive:
                v = np.concatenate([np.full_like(np.take(v, [0], a), ident), np.delete(v, -1, a)], a)
            want = npfn(v, axis=a)
            np.testing.assert_allclose(sess.run(y), np.flip(want, a) if reverse else want)
            assert y.shape.as_list() == [2, 3]
            check_gradients(lambda t, fn=fn, axis=axis: fn(t, axis, exclusive=exclusive, reverse=reverse), [xv])


def test_cumulative_ops_dtype_and_errors(sess):
    assert sess.run(tw.cumsum(tw.constant([1, 2, 3]))).tolist() == [1, 3, 6]
    assert sess.run(tw.cumprod(tw.constant([1.0, 2.0]), exclusive=True)).tolist() == [1.0, 1.0]
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        tw.cumsum(tw.constant([1.0]), 1)
    with pytest.raises(errors.InvalidArgumentError, match="scalar"):
        tw.cumsum(tw.constant([1.0]), [0])


def test_unsorted_segment_sum_values_and_errors(sess):
    data = tw.constant(np.arange(12.0).reshape(4, 3))
    out = tw.unsorted_segment_sum(data, [0, 2, 0, -1], 3)
    assert out.shape.as_list() == [3, 3]
    np.testing.assert_array_equal(sess.run(out), [[6, 8, 10], [0, 0, 0], [3, 4, 5]])
    out2 = tw.unsorted_segment_sum(tw.constant(np.ones((2, 2, 3))), tw.constant([[1, 1], [0, 1]], tw.int64), 2)
    assert out2.shape.as_list() == [2, 3]
    np.testing.assert_array_equal(sess.run(out2), [[1] * 3, [3] * 3])
    assert sess.run(tw.unsorted_segment_sum(tw.constant([1, 2]), [1, 1], 2)).dtype == np.int32
    with pytest.raises(errors.InvalidArgumentError, match=r"segment_ids\[1\] = 5 is not in \[0, 3\)"):
        sess.run(tw.unsorted_segment_sum(data, hide(tw.constant([0, 5, 0, 0])), 3))
    with pytest.raises(errors.InvalidArgumentError, match="prefix"):
        tw.unsorted_segment_sum(data, [[0, 1]], 3)


def test_unsorted_segment_sum_gradient():
    ids = [2, 0, -1, 2]
    check_gradients(lambda d: tw.unsorted_segment_sum(d, ids, 3), [values("any", (4, 2), 1)])
    check_gradients(lambda d: tw.unsorted_segment_sum(hide(d), hide(tw.constant(ids)), 3), [values("any", (4, 2), 1)])
    check_gradients(lambda d: tw.unsorted_segment_sum(d, tw.constant([[0, 1], [1, -1]]), 2),
                    [values("any", (2, 2, 2), 1)])


def test_reduced_shape_helper(sess):
    def rs(shape, axes):
        return sess.run(apply_op("ReducedShape", [tw.constant(shape, tw.int32), tw.constant(axes, tw.int32)])).tolist()
    assert rs([2, 3, 4], [0, -1]) == [1, 3, 1]
    assert rs([2, 3, 4], 1) == [2, 1, 4]
    assert rs([2, 3], []) == [2, 3]
    assert rs([2, 3], [1, 1, -1]) == [2, 1]
    assert rs(np.zeros(0, np.int32), [0]) == []
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        rs([2, 3], [2])


# ---------------------------------------------------------------------------------------
# gradients keep the dtype of their inputs
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_gradients_keep_the_input_dtype(sess, dtype):
    x = tw.constant(np.array([[0.5, 1.5, 2.0], [1.0, 0.75, 1.25]], dtype=dtype))
    y = tw.constant(np.array([1.5, 0.5, 2.5], dtype=dtype))
    outs = [fn(x) for fn, _ in UNARY.values()] + [fn(x, y) for fn, _, _ in BINARY.values()]
    outs += [fn(x, axis=1) for fn in REDUCTIONS.values()] + [fn(tw.placeholder_with_default(x, [None, 3]))
                                                             for fn in REDUCTIONS.values()]
    outs += [tw.cumsum(x, 1), tw.cumprod(x, 0, reverse=True), tw.matmul(x, x, transpose_b=True),
             tw.matrix_inverse(x[:, :2]), tw.matrix_determinant(x[:, 1:]), tw.cast(x, tw.float64),
             tw.add_n([x, x, y * x])]
    for out in outs:
        gs = tw.gradients(out, [x, y])
        for g, t in zip(gs, (x, y)):
            if g is not None:
                assert g.dtype is t.dtype, out.op.type
                v = sess.run(g)
                assert v.dtype == np.dtype(dtype) and v.shape == tuple(t.shape.as_list()), out.op.type
