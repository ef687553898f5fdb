"""Array kernels: metadata-only views, fills, shapes, strided copies, OneHot."""

import numpy as np
import pytest

import tensorweave as tw

RNG = np.random.default_rng(3)


def test_views_share_the_buffer(device):
    from tensorweave.framework.kernel_registry import KernelContext
    from tensorweave.kernels import shapes
    from tensorweave.runtime.containers import SessionResources

    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [2, 3])
        r = tw.reshape(x, [3, -1])
        e = tw.expand_dims(x, 1)
    t = device.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    reshape = shapes._reshape(KernelContext(r.op, device, SessionResources("t")))
    y = reshape(t, np.array([3, -1], np.int32))
    assert y.shape == (3, 2) and y.block is t.block
    expand = shapes._expand_dims(KernelContext(e.op, device, SessionResources("t")))
    z = expand(t, np.array(1, np.int32))
    assert z.shape == (2, 1, 3) and z.block is t.block
    np.testing.assert_array_equal(device.to_host(y), np.arange(6).reshape(3, 2))


def test_reshape_expand_squeeze_identity(ocl):
    x = RNG.standard_normal((2, 1, 6)).astype(np.float32)
    got = ocl.on_opencl(lambda x: [tw.reshape(x, [3, -1]), tw.expand_dims(x, -1), tw.squeeze(x), tw.squeeze(x, [1]),
                                   tw.identity(x), tw.stop_gradient(x)], {"x": x})
    ocl.assert_same(got[0], x.reshape(3, -1))
    ocl.assert_same(got[1], x[..., None])
    ocl.assert_same(got[2], x.squeeze())
    ocl.assert_same(got[3], x.squeeze(1))
    ocl.assert_same(got[4], x)
    ocl.assert_same(got[5], x)


def test_bad_reshape(ocl):
    with pytest.raises(tw.errors.InvalidArgumentError, match="cannot reshape"):
        g = tw.Graph()
        with g.as_default(), tw.device("/device:OPENCL:0"):
            x = tw.placeholder(tw.float32, None)
            y = tw.reshape(x, [4, -1])
        with tw.Session(graph=g) as s:
            s.run(y, {x: np.zeros(6, np.float32)})


def test_shape_size_rank_fills(ocl):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    got = ocl.on_opencl(lambda x: [tw.shape(x), tw.size(x), tw.rank(x), tw.zeros_like(x), tw.ones_like(x),
                                   tw.fill([2, 3], tw.reduce_sum(x)), tw.ones_like(tw.cast(x, tw.bool))], {"x": x})
    ocl.assert_same(got[0], np.array([3, 4], np.int32))
    ocl.assert_same(got[1], np.array(12, np.int32))
    ocl.assert_same(got[2], np.array(2, np.int32))
    ocl.assert_same(got[3], np.zeros_like(x))
    ocl.assert_same(got[4], np.ones_like(x))
    ocl.assert_same(got[5], np.full((2, 3), x.sum(), np.float32), rtol=1e-5)
    ocl.assert_same(got[6], np.ones((3, 4), bool))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_strided_copies(ocl, dtype):
    x = (RNG.standard_normal((2, 3, 4)) * 5).astype(dtype)
    y = (RNG.standard_normal((2, 2, 4)) * 5).astype(dtype)
    got = ocl.on_opencl(lambda x, y: [tw.broadcast_to(x, [5, 2, 3, 4]), tw.tile(x, [2, 1, 3]),
                                      tw.transpose(x, [2, 0, 1]), tw.slice(x, [1, 1, 0], [1, -1, 2]),
                                      tw.concat([x, y], 1), tw.stack([x, x], 1), tw.concat([x, x], 0)],
                        {"x": x, "y": y})
    ocl.assert_same(got[0], np.broadcast_to(x, (5, 2, 3, 4)))
    ocl.assert_same(got[1], np.tile(x, (2, 1, 3)))
    ocl.assert_same(got[2], x.transpose(2, 0, 1))
    ocl.assert_same(got[3], x[1:2, 1:, 0:2])
    ocl.assert_same(got[4], np.concatenate([x, y], 1))
    ocl.assert_same(got[5], np.stack([x, x], 1))
    ocl.assert_same(got[6], np.concatenate([x, x], 0))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(ocl, axis):
    idx = np.array([[0, 3, 1], [2, -1, 5]], np.int32)
    got, want = ocl.both(lambda i: tw.one_hot(i, 4, on_value=2.0, off_value=-1.0, axis=axis), {"i": idx})
    ocl.assert_same(got, want)
