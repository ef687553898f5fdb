"""Checking symbolic gradients against central finite differences.

``compute_gradient`` follows TF1's ``tf.test.compute_gradient``: it returns, for each input,
the Jacobian computed from ``tw.gradients`` (theoretical) and by central differences
(numerical). ``check_gradients`` is the one-call form used in tests::

    check_gradients(lambda a, b: tw.matmul(a, b), [np.random.randn(2, 3), np.random.randn(3, 4)])

Inputs are fed as float64 placeholders (unless given other float dtypes), so differences of
1e-6 are meaningful. A gradient that is an ``IndexedSlices`` (a gather's) is densified from
its fetched value (rows of repeated indices summed) for the comparison.
"""

from __future__ import annotations

import numpy as np

import tensorweave as tw


def _dense(value, shape) -> np.ndarray:
    """A fetched gradient as a dense float64 array of ``shape``: an ``IndexedSlicesValue``
    is scattered (repeated indices add up); a dense value is taken as it is."""
    if isinstance(value, tw.IndexedSlicesValue):
        if value.dense_shape is not None and tuple(np.asarray(value.dense_shape).reshape(-1)) != tuple(shape):
            raise AssertionError(f"the IndexedSlices gradient has dense_shape {value.dense_shape}, the input {shape}")
        out = np.zeros(shape, dtype=np.float64)
        np.add.at(out, np.asarray(value.indices), np.asarray(value.values, dtype=np.float64))
        return out
    return np.asarray(value, dtype=np.float64)


def _jacobians(sess, ys, xs, x_values, dys, delta):
    """(theoretical, numerical) Jacobians of the flattened ``ys`` w.r.t. each x."""
    feed = dict(zip(xs, x_values))
    y_shapes = [np.shape(v) for v in sess.run(ys, feed)]
    y_sizes = [int(np.prod(s)) for s in y_shapes]
    y_total = sum(y_sizes)
    grads = tw.gradients(ys, xs, grad_ys=dys)
    theo = [np.zeros((x.size, y_total)) for x in x_values]
    # One backward run per output element: a one-hot grad_ys.
    col = 0
    for k, size in enumerate(y_sizes):
        for j in range(size):
            one_hot = np.zeros(size)
            one_hot[j] = 1.0
            f = dict(feed)
            for m, (dy, s) in enumerate(zip(dys, y_shapes)):
                f[dy] = (one_hot if m == k else np.zeros(int(np.prod(s)))).reshape(s).astype(dy.dtype.np_dtype)
            for i, g in enumerate(grads):
                if g is not None:
                    theo[i][:, col] = _dense(sess.run(g, f), x_values[i].shape).reshape(-1)
            col += 1
    num = []
    for i, xv in enumerate(x_values):
        jac = np.zeros((xv.size, y_total))
        for e in range(xv.size):
            vals = []
            for sign in (1, -1):
                xp = xv.copy().reshape(-1)
                xp[e] += sign * delta
                f = dict(feed)
                f[xs[i]] = xp.reshape(xv.shape)
                vals.append(np.concatenate([np.asarray(v, np.float64).reshape(-1) for v in sess.run(ys, f)]))
            jac[e] = (vals[0] - vals[1]) / (2 * delta)
        num.append(jac)
    return theo, num


def compute_gradient(fn, x_values, delta=1e-6, dtype=tw.float64, seed_graph=None):
    """Theoretical and numerical Jacobians of ``fn(*placeholders)`` at ``x_values``.

    Returns a list of ``(theoretical, numerical)`` pairs, one per input, each of shape
    ``(x.size, total size of fn's outputs)``.
    """
    g = seed_graph or tw.Graph()
    with g.as_default():
        x_values = [np.asarray(v, dtype=dtype.np_dtype) for v in x_values]
        xs = [tw.placeholder(dtype, v.shape, name=f"x{i}") for i, v in enumerate(x_values)]
        ys = fn(*xs)
        ys = list(ys) if isinstance(ys, list | tuple) else [ys]
        dys = [tw.placeholder(y.dtype, y.shape, name=f"dy{i}") for i, y in enumerate(ys)]
        with tw.Session() as sess:
            theo, num = _jacobians(sess, ys, xs, x_values, dys, delta)
    return list(zip(theo, num))


def check_gradients(fn, x_values, delta=1e-6, rtol=1e-5, atol=1e-6, dtype=tw.float64):
    """Assert that ``tw.gradients`` matches central differences for ``fn`` at ``x_values``."""
    for i, (theo, num) in enumerate(compute_gradient(fn, x_values, delta, dtype)):
        np.testing.assert_allclose(theo, num, rtol=rtol, atol=atol,
                                   err_msg=f"gradient w.r.t. input {i} differs from finite differences")


def compute_gradient_error(fn, x_values, delta=1e-6, dtype=tw.float64) -> float:
    """The largest absolute difference between theoretical and numerical Jacobians."""
    return max(float(np.max(np.abs(t - n))) if t.size else 0.0 for t, n in compute_gradient(fn, x_values, delta, dtype))
