"""Array ops against NumPy: values, inferred static shapes (== run-time shapes where fully
known), output dtypes, construction-time and run-time errors, and ``Tensor.__getitem__``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op

DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "complex64", "bool", "string"]
NUMERIC = [d for d in DTYPES if d not in ("bool", "string")]


def values(dtype, shape, seed=0):
    """Distinct-ish test values of ``dtype`` (NumPy object arrays of bytes for string)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "string":
        flat = np.empty(n, dtype=object)
        flat[:] = [f"s{i}".encode() for i in rng.integers(0, 100, n)]
        return flat.reshape(shape)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(0, 100, size=shape).astype(dt)
    return rng.uniform(-10, 10, size=shape).astype(dt)


def run(fetches, feed_dict=None):
    with tw.Session() as s:
        return s.run(fetches, feed_dict)


def check(t, expected, feed_dict=None):
    """Run ``t`` and compare value, dtype, and static with run-time shape."""
    got = run(t, feed_dict)
    expected = np.asarray(expected)
    if expected.ndim == 0:
        # TF1 fetch semantics: a scalar comes back as a NumPy scalar, a string scalar as bytes.
        if t.dtype.is_string:
            assert type(got) is bytes, type(got)
            assert got == expected[()]
            assert t.shape.is_compatible_with(())
            return got
        assert isinstance(got, np.generic), type(got)
        got = np.asarray(got)
    else:
        assert isinstance(got, np.ndarray), type(got)
    if t.dtype.is_string:
        assert got.dtype == object
    else:
        assert got.dtype == t.dtype.np_dtype
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    assert t.shape.is_compatible_with(got.shape), (t.shape, got.shape)
    if t.shape.is_fully_defined():
        assert tuple(t.shape.as_list()) == got.shape
    return got


def const(dtype, shape, seed=0):
    v = values(dtype, shape, seed)
    return tw.constant(v, dtype=dtype), v


# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_identity_and_stop_gradient(dtype):
    t, v = const(dtype, (2, 3))
    check(tw.identity(t), v)
    check(tw.stop_gradient(t), v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(dtype, axis):
    (a, va), (b, vb) = const(dtype, (2, 3), 1), const(dtype, (2, 3), 2)
    c, vc = const(dtype, (2, 3), 3)
    check(tw.concat([a, b, c], axis), np.concatenate([va, vb, vc], axis=axis))


def test_concat_partial_shapes_and_single_input():
    p = tw.placeholder(tw.float32, [None, 3])
    q = tw.placeholder(tw.float32, [2, None])
    r = tw.concat([p, q], 0)
    assert r.shape.as_list() == [None, 3]
    r1 = tw.concat([p, q], 1)
    assert r1.shape.as_list() == [2, None]
    vp, vq = np.ones((4, 3), np.float32), np.zeros((2, 3), np.float32)
    check(r, np.concatenate([vp, vq]), {p: vp, q: vq})
    single = tw.concat([p], 0)
    check(single, vp, {p: vp})
    axis = tw.placeholder(tw.int32, [])
    dyn = tw.concat([p, p], axis)
    assert dyn.shape.as_list() == [None, None]
    check(dyn, np.concatenate([vp, vp], 1), {p: vp, axis: 1})


def test_concat_errors():
    a = tw.constant(np.zeros((2, 3), np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="same rank"):
        tw.concat([a, tw.constant(np.zeros((2, 3, 1), np.float32))], 0)
    with pytest.raises(errors.InvalidArgumentError, match="dimension 1"):
        tw.concat([a, tw.constant(np.zeros((2, 4), np.float32))], 0)
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        tw.concat([a, a], 2)
    with pytest.raises(errors.InvalidArgumentError, match="scalars"):
        tw.concat([tw.constant(1.0), tw.constant(2.0)], 0)
    with pytest.raises(errors.InvalidArgumentError):
        tw.concat([a, tw.constant(np.zeros((2, 3), np.int32))], 0)
    # Unknown shapes: the mismatch surfaces at run time, naming the node.
    p, q = tw.placeholder(tw.float32), tw.placeholder(tw.float32)
    c = tw.concat([p, q], 0, name="joined")
    with pytest.raises(errors.InvalidArgumentError, match="joined"):
        run(c, {p: np.zeros((2, 3)), q: np.zeros((2, 4))})


@pytest.mark.parametrize("dtype", ["float32", "int64", "string"])
def test_slice(dtype):
    t, v = const(dtype, (4, 5, 3))
    check(tw.slice(t, [1, 0, 2], [2, -1, 1]), v[1:3, :, 2:3])
    check(tw.slice(t, [0, 0, 0], [-1, -1, -1]), v)
    check(tw.slice(t, [4, 5, 3], [0, 0, 0]), v[4:, 5:, 3:])


def test_slice_errors_and_dynamic():
    t = tw.constant(np.arange(12).reshape(3, 4))
    with pytest.raises(errors.InvalidArgumentError, match="out of bounds"):
        tw.slice(t, [2, 0], [2, 1])
    with pytest.raises(errors.InvalidArgumentError, match="rank"):
        tw.slice(t, [0], [1])
    b = tw.placeholder(tw.int32, [2])
    s = tw.slice(t, b, [1, 2])
    assert s.shape.as_list() == [1, 2]
    check(s, np.arange(12).reshape(3, 4)[2:3, 1:3], {b: [2, 1]})
    with pytest.raises(errors.InvalidArgumentError, match="out of bounds"):
        run(s, {b: [3, 0]})


@pytest.mark.parametrize("dtype", ["float32", "int32", "string"])
def test_split(dtype):
    t, v = const(dtype, (4, 6))
    parts = tw.split(t, 3, axis=1)
    assert isinstance(parts, list) and len(parts) == 3
    got = run(parts)
    for g, e, p in zip(got, np.split(v, 3, axis=1), parts, strict=True):
        np.testing.assert_array_equal(g, e)
        assert p.shape.as_list() == list(e.shape)
    one = tw.split(t, 1, axis=0)
    assert len(one) == 1
    check(one[0], v)
    sized = tw.split(t, [1, -1, 2], axis=-1)
    exp = np.split(v, [1, 4], axis=1)
    for p, e in zip(sized, exp, strict=True):
        check(p, e)


def test_split_errors():
    t = tw.constant(np.zeros((4, 5), np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="evenly divide"):
        tw.split(t, 2, axis=1)
    with pytest.raises(errors.InvalidArgumentError, match="add up"):
        tw.split(t, [1, 2], axis=1)
    with pytest.raises(errors.InvalidArgumentError, match="at most one -1"):
        tw.split(t, [-1, -1, 5], axis=1)
    with pytest.raises(errors.InvalidArgumentError):
        tw.split(t, 0)
    p = tw.placeholder(tw.float32, [None, 5])
    parts = tw.split(p, 2, axis=0)
    assert parts[0].shape.as_list() == [None, 5]
    np.testing.assert_array_equal(run(parts[1], {p: np.ones((4, 5))}), np.ones((2, 5), np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="evenly divide"):
        run(parts[0], {p: np.ones((3, 5))})


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape(dtype):
    t, v = const(dtype, (2, 3, 4))
    check(tw.reshape(t, [6, 4]), v.reshape(6, 4))
    check(tw.reshape(t, [-1]), v.reshape(-1))
    check(tw.reshape(t, [4, -1, 2]), v.reshape(4, -1, 2))
    s, vs = const(dtype, (1, 1))
    check(tw.reshape(s, []), vs.reshape(()))


def test_reshape_errors_and_partial_shapes():
    t = tw.constant(np.zeros((2, 3), np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="6 elements"):
        tw.reshape(t, [4])
    with pytest.raises(errors.InvalidArgumentError, match="at most one -1"):
        tw.reshape(t, [-1, -1])
    with pytest.raises(errors.InvalidArgumentError, match="not a multiple"):
        tw.reshape(t, [4, -1])
    with pytest.raises(errors.InvalidArgumentError, match="cannot be inferred"):
        tw.reshape(tw.zeros([0, 3]), [-1, 0])
    check(tw.reshape(tw.zeros([0, 3]), [3, 0]), np.zeros((3, 0), np.float32))
    p = tw.placeholder(tw.float32, [None, 3])
    r = tw.reshape(p, [-1, 6])
    assert r.shape.as_list() == [None, 6]
    check(r, np.ones((2, 6), np.float32), {p: np.ones((4, 3))})
    with pytest.raises(errors.InvalidArgumentError, match="cannot reshape"):
        run(r, {p: np.ones((3, 3))})
    # A shape computed from another tensor's shape.
    q = tw.placeholder(tw.float32, [2, 3])
    r2 = tw.reshape(q, tw.shape(tw.transpose(q)))
    assert r2.shape.as_list() == [3, 2]
    shp = tw.placeholder(tw.int32, [2])
    r3 = tw.reshape(q, shp)
    assert r3.shape.as_list() == [None, None]
    check(r3, np.zeros((1, 6), np.float32), {q: np.zeros((2, 3)), shp: [1, 6]})


@pytest.mark.parametrize("dtype", ["float32", "int8", "complex64", "string"])
def test_transpose(dtype):
    t, v = const(dtype, (2, 3, 4))
    check(tw.transpose(t), v.transpose())
    check(tw.transpose(t, [1, 0, 2]), v.transpose(1, 0, 2))
    m, vm = const(dtype, (3, 5))
    check(tw.transpose(m), vm.T)


def test_transpose_unknown_rank_and_errors():
    p = tw.placeholder(tw.float32)
    t = tw.transpose(p)
    v = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    check(t, v.transpose(), {p: v})
    c = tw.constant(v)
    with pytest.raises(errors.InvalidArgumentError, match="perm"):
        tw.transpose(c, [1, 0])
    with pytest.raises(errors.InvalidArgumentError, match="permutation"):
        tw.transpose(c, [0, 0, 1])
    bad = tw.transpose(p, [1, 0])
    with pytest.raises(errors.InvalidArgumentError, match="perm"):
        run(bad, {p: v})


def test_rank_shape_size():
    p = tw.placeholder(tw.float32, [None, 3, 2])
    v = np.zeros((5, 3, 2), np.float32)
    assert tw.shape(p).shape.as_list() == [3]
    check(tw.shape(p), np.array([5, 3, 2], np.int32), {p: v})
    check(tw.shape(p, out_type=tw.int64), np.array([5, 3, 2], np.int64), {p: v})
    check(tw.rank(p), np.array(3, np.int32), {p: v})
    check(tw.size(p), np.array(30, np.int32), {p: v})
    check(tw.size(p, out_type=tw.int64), np.array(30, np.int64), {p: v})
    s = tw.constant(["a", "b"])
    check(tw.shape(s), np.array([2], np.int32))
    check(tw.rank(tw.constant(1.0)), np.array(0, np.int32))
    u = tw.placeholder(tw.int32)
    assert tw.shape(u).shape.as_list() == [None]


@pytest.mark.parametrize("dtype", ["float16", "int64", "bool", "string", "complex64"])
def test_fill_zeros_ones(dtype):
    value = values(dtype, ())
    check(tw.fill([2, 3], tw.constant(value, dtype=dtype)), np.full((2, 3), value, dtype=np.asarray(value).dtype))
    dt = tw.as_dtype(dtype)
    zero = np.full((2, 3), b"", dtype=object) if dtype == "string" else np.zeros((2, 3), dt.np_dtype)
    check(tw.zeros([2, 3], dtype), zero)
    check(tw.zeros_like(tw.constant(values(dtype, (2, 3)), dtype=dtype)), zero)
    if dtype != "string":
        check(tw.ones([2, 3], dtype), np.ones((2, 3), dt.np_dtype))
        check(tw.ones_like(tw.constant(values(dtype, (2, 3)), dtype=dtype)), np.ones((2, 3), dt.np_dtype))


def test_zeros_ones_forms():
    big = tw.zeros([100, 100])
    assert big.op.type == "Fill" and big.shape.as_list() == [100, 100]
    check(big, np.zeros((100, 100), np.float32))
    small = tw.ones((2, 2), tw.int32)
    assert small.op.type == "Const"
    check(tw.zeros([]), np.zeros((), np.float32))
    check(tw.ones(tw.TensorShape([3])), np.ones(3, np.float32))
    check(tw.ones(3, tw.int8), np.ones(3, np.int8))
    check(tw.zeros(2000, tw.float64), np.zeros(2000))
    p = tw.placeholder(tw.float32, [None, 2])
    z = tw.zeros(tw.shape(p))
    assert z.shape.as_list() == [None, 2]
    check(z, np.zeros((3, 2), np.float32), {p: np.ones((3, 2))})
    n = tw.placeholder(tw.int32, [])
    check(tw.ones([n, 2]), np.ones((4, 2), np.float32), {n: 4})
    check(tw.zeros_like(p, dtype=tw.int64), np.zeros((3, 2), np.int64), {p: np.ones((3, 2))})
    check(tw.ones_like(p, dtype=tw.bool), np.ones((3, 2), bool), {p: np.ones((3, 2))})
    with pytest.raises(errors.InvalidArgumentError):
        tw.ones([2], tw.string)
    with pytest.raises(errors.InvalidArgumentError, match="scalar"):
        tw.fill([2], [1.0, 2.0])
    with pytest.raises(errors.InvalidArgumentError):
        tw.fill([-1, 2], 1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype):
    t, v = const(dtype, (5, 3))
    check(tw.gather(t, [4, 0, 0, 2]), v[[4, 0, 0, 2]])
    check(tw.gather(t, [[1, 2], [0, 1]], axis=1), np.take(v, [[1, 2], [0, 1]], axis=1))
    check(tw.gather(t, 3), v[3])
    check(tw.gather(t[:, 0], 3), np.asarray(v[3, 0]) if dtype != "string" else np.array(v[3, 0], dtype=object))
    check(tw.gather(t, np.array([1, 2], np.int64), axis=-1), v[:, [1, 2]])


def test_gather_v1_and_errors():
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    t = tw.constant(v)
    check(apply_op("Gather", [t, [3, 1]]), v[[3, 1]])
    idx = tw.placeholder(tw.int32, [None])
    g = tw.gather(t, idx, name="lookup")
    assert g.shape.as_list() == [None, 3]
    check(g, v[[0, 3]], {idx: [0, 3]})
    with pytest.raises(errors.InvalidArgumentError, match=r"lookup.*indices\[1\] = 4 is not in \[0, 4\)"):
        run(g, {idx: [0, 4]})
    with pytest.raises(errors.InvalidArgumentError, match="is not in"):
        run(g, {idx: [-1]})
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        tw.gather(t, [0], axis=2)
    with pytest.raises(errors.InvalidArgumentError):
        tw.gather(t, [0.5])


@pytest.mark.parametrize("dtype", ["float32", "int32", "string"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unstack_and_stack(dtype, axis):
    t, v = const(dtype, (2, 3, 4))
    parts = tw.unstack(t, axis=axis)
    assert len(parts) == v.shape[axis]
    for i, p in enumerate(parts):
        check(p, np.take(v, i, axis=axis))
    check(tw.stack(parts, axis=axis), v)


def test_unstack_errors():
    with pytest.raises(errors.InvalidArgumentError, match="num"):
        tw.unstack(tw.placeholder(tw.float32))
    with pytest.raises(errors.InvalidArgumentError, match="num"):
        tw.unstack(tw.placeholder(tw.float32, [None, 2]))
    with pytest.raises(errors.InvalidArgumentError, match="num"):
        tw.unstack(tw.constant(np.zeros((3, 2))), num=2)
    p = tw.placeholder(tw.float32, [None, 2])
    parts = tw.unstack(p, num=2)
    np.testing.assert_array_equal(run(parts[1], {p: [[1, 2], [3, 4]]}), [3, 4])
    with pytest.raises(errors.InvalidArgumentError, match="num"):
        run(parts[1], {p: np.zeros((3, 2))})
    assert tw.unstack(tw.zeros([0, 3])) == []
    one = tw.unstack(tw.constant([[1, 2]]))
    assert len(one) == 1
    check(one[0], np.array([1, 2], np.int32))


@pytest.mark.parametrize("dtype", ["float64", "uint8", "string"])
def test_expand_dims_squeeze(dtype):
    t, v = const(dtype, (2, 1, 3))
    for axis in (0, 1, 3, -1, -4):
        check(tw.expand_dims(t, axis), np.expand_dims(v, axis))
    check(tw.expand_dims(t, dim=2), np.expand_dims(v, 2))
    check(tw.squeeze(t), np.squeeze(v))
    check(tw.squeeze(t, [1]), np.squeeze(v, 1))
    check(tw.squeeze(t, axis=-2), np.squeeze(v, -2))
    check(tw.squeeze(t, squeeze_dims=[1]), np.squeeze(v, 1))


def test_expand_dims_squeeze_errors_and_unknown():
    t = tw.constant(np.zeros((2, 1, 3)))
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        tw.expand_dims(t, 4)
    with pytest.raises(errors.InvalidArgumentError, match="not 1"):
        tw.squeeze(t, [0])
    p = tw.placeholder(tw.float32, [None, 1])
    s = tw.squeeze(p)
    assert s.shape.ndims is None
    check(s, np.zeros(4, np.float32), {p: np.zeros((4, 1))})
    s1 = tw.squeeze(p, [1])
    assert s1.shape.as_list() == [None]
    q = tw.placeholder(tw.float32, [2, None])
    sq = tw.squeeze(q, [1])
    with pytest.raises(errors.InvalidArgumentError, match="not 1"):
        run(sq, {q: np.zeros((2, 3))})


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool", "string"])
def test_tile(dtype):
    t, v = const(dtype, (2, 3))
    check(tw.tile(t, [2, 3]), np.tile(v, (2, 3)))
    check(tw.tile(t, [1, 0]), np.tile(v, (1, 0)))
    with pytest.raises(errors.InvalidArgumentError, match="multiples"):
        tw.tile(t, [2])
    p = tw.placeholder(tw.float32, [None, 2])
    tp = tw.tile(p, [3, 1])
    assert tp.shape.as_list() == [None, 2]
    check(tp, np.ones((6, 2), np.float32), {p: np.ones((2, 2))})


def test_range():
    check(tw.range(5), np.arange(5, dtype=np.int32))
    check(tw.range(2, 11, 3), np.arange(2, 11, 3, dtype=np.int32))
    check(tw.range(10, 2, -3), np.arange(10, 2, -3, dtype=np.int32))
    check(tw.range(3, 3), np.arange(3, 3, dtype=np.int32))
    r = tw.range(0, 1, 0.1)
    assert r.dtype == tw.float32 and r.shape.as_list() == [10]
    np.testing.assert_allclose(run(r), np.arange(0, 1, 0.1), rtol=1e-6, atol=1e-6)
    check(tw.range(5, dtype=tw.int64), np.arange(5, dtype=np.int64))
    check(tw.range(0.5, 3, dtype=tw.float64), np.arange(0.5, 3, dtype=np.float64))
    n = tw.placeholder(tw.int64, [])
    rn = tw.range(n)
    assert rn.dtype == tw.int64 and rn.shape.as_list() == [None]
    check(rn, np.arange(4, dtype=np.int64), {n: 4})
    with pytest.raises(errors.InvalidArgumentError, match="delta"):
        tw.range(0, 5, 0)
    with pytest.raises(errors.InvalidArgumentError, match="start"):
        tw.range(5, 0)
    with pytest.raises(errors.InvalidArgumentError, match="start"):
        run(rn, {n: -3})


def test_one_hot():
    idx = np.array([[0, 2], [5, -1]])
    eye = (idx[..., None] == np.arange(3)).astype(np.float32)
    check(tw.one_hot(idx, 3), eye)
    check(tw.one_hot(idx, 3, axis=0), np.moveaxis(eye, -1, 0))
    check(tw.one_hot(idx, 3, axis=1), np.moveaxis(eye, -1, 1))
    check(tw.one_hot([1, 0], 2, on_value=5, off_value=-1), np.array([[-1, 5], [5, -1]], np.int32))
    check(tw.one_hot([1], 2, dtype=tw.float64), np.array([[0, 1]], np.float64))
    check(tw.one_hot(tw.constant([1], tw.int64), 2, on_value=True, off_value=False), np.array([[False, True]]))
    with pytest.raises(errors.InvalidArgumentError, match="axis"):
        tw.one_hot([1], 2, axis=3)
    p = tw.placeholder(tw.int32, [None])
    oh = tw.one_hot(p, 4)
    assert oh.shape.as_list() == [None, 4]
    check(oh, np.eye(4, dtype=np.float32)[[3, 1]], {p: [3, 1]})


def test_placeholder_with_default():
    d = tw.constant(np.ones((2, 3), np.float32))
    p = tw.placeholder_with_default(d, [None, 3])
    assert p.shape.as_list() == [None, 3] and p.op.type == "PlaceholderWithDefault"
    out = p * 2.0
    check(out, np.full((2, 3), 2.0, np.float32))
    check(out, np.full((4, 3), 2.0, np.float32), {p: np.ones((4, 3))})
    with pytest.raises(errors.InvalidArgumentError, match="cannot feed"):
        run(out, {p: np.ones((4, 2))})
    with pytest.raises(errors.InvalidArgumentError, match="compatible"):
        tw.placeholder_with_default(d, [2, 2])


# ---------------------------------------------------------------------------------------
# indexing
SPECS = [
    1, -1, np.int64(2), slice(1, None), slice(None, None, 2), slice(None, None, -1), slice(-2, None),
    slice(5, 1, -2), slice(10, 20), (1, 2), (1, slice(None), 0), (Ellipsis, 1), (Ellipsis, slice(1, 3)),
    (1, Ellipsis), (None,), (Ellipsis, None), (1, None, slice(None, None, -1), None), (slice(None), None, 2),
    (0, 0, 0), (-1, -1, -1), (slice(1, 2), Ellipsis, 0), (), Ellipsis, (slice(None, None, -2), Ellipsis, slice(3, 0, -1)),
]


@pytest.mark.parametrize("spec", SPECS, ids=[repr(s) for s in SPECS])
def test_getitem_matches_numpy(spec):
    v = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = tw.constant(v)
    check(t[spec], np.asarray(v[spec]))


def test_getitem_strings_and_unknown_shapes():
    s = tw.constant([["a", "b"], ["c", "d"]])
    got = check(s[1, 0], np.array(b"c", dtype=object))
    assert got == b"c"  # a scalar string is fetched as bytes (TF1)
    check(s[:, 1], np.array([b"b", b"d"], dtype=object))
    p = tw.placeholder(tw.float32, [None, 4])
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert p[1:].shape.as_list() == [None, 4]
    assert p[:, ::2].shape.as_list() == [None, 2]
    assert p[0].shape.as_list() == [4]
    check(p[1:, ::-2], v[1:, ::-2], {p: v})
    u = tw.placeholder(tw.float32)
    assert u[0, ..., None].shape.ndims is None
    check(u[0, ..., None], v[0, ..., None], {u: v})


def test_getitem_tensor_indices():
    v = np.arange(20, dtype=np.int32).reshape(4, 5)
    t = tw.constant(v)
    i = tw.placeholder(tw.int32, [])
    j = tw.placeholder(tw.int64, [])
    row = t[i]
    assert row.shape.as_list() == [5]
    check(row, v[2], {i: 2})
    check(t[i, 1:i], v[3, 1:3], {i: 3})
    check(t[:, j], v[:, 4], {j: 4})
    check(t[i:], v[1:], {i: 1})
    with pytest.raises(errors.InvalidArgumentError):
        run(row, {i: 4})


def test_getitem_errors():
    t = tw.constant(np.zeros((3, 4)))
    with pytest.raises(errors.InvalidArgumentError, match="out of bounds"):
        t[3]
    with pytest.raises(errors.InvalidArgumentError, match="rank"):
        t[0, 0, 0]
    with pytest.raises(errors.InvalidArgumentError, match="ellipsis"):
        t[..., 0, ...]
    with pytest.raises(errors.InvalidArgumentError, match="step"):
        t[::0]
    with pytest.raises(TypeError, match="gather"):
        t[[0, 1]]
    with pytest.raises(TypeError):
        t[0.5]
    with pytest.raises(TypeError):
        t[tw.constant([0, 1])]
    with pytest.raises(TypeError):
        t[tw.constant(1.0)]


def test_tensor_iteration_uses_indexing():
    v = np.arange(6, dtype=np.float32).reshape(3, 2)
    rows = list(tw.constant(v))
    assert len(rows) == 3
    for r, e in zip(rows, v, strict=True):
        check(r, e)
    a, b = tw.constant([1, 2])
    check(b, np.array(2, np.int32))


def test_strided_slice_masks():
    v = np.arange(60).reshape(3, 4, 5).astype(np.int64)
    t = tw.constant(v)
    check(tw.strided_slice(t, [1, 0, 0], [3, 0, 4], [1, 1, 2], end_mask=2), v[1:3, :, 0:4:2])
    check(tw.strided_slice(t, [0, 1], [0, 2], shrink_axis_mask=2, ellipsis_mask=1), v[..., 1])
    check(tw.strided_slice(t, [0, 0], [0, 0], [1, -1], new_axis_mask=1, begin_mask=2, end_mask=2), v[None, ::-1])
    check(tw.strided_slice(t, [-1], [0], [1], shrink_axis_mask=1), v[-1])
    with pytest.raises(errors.InvalidArgumentError, match="strides"):
        tw.strided_slice(t, [0], [1], [0])
    b = tw.placeholder(tw.int32, [2])
    s = tw.strided_slice(t, b, [3, 4])
    assert s.shape.as_list() == [None, None, 5]
    check(s, v[1:3, 2:4], {b: [1, 2]})
    np.testing.assert_array_equal(run(s, {b: [0, 0]}), v[0:3, 0:4])  # a fed begin is not cached


def test_array_ops_api_is_exported():
    import tensorweave.ops.array_ops as array_ops
    for name in array_ops.__all__:
        assert getattr(tw, name) is getattr(array_ops, name), name
    assert tw.newaxis is None
    import builtins
    assert tw.range is not builtins.range and tw.slice is not builtins.slice
