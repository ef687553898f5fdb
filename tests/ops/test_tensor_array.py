"""tw.TensorArray: every method, in and out of tw.while_loop, gradients against float64 finite
differences, and bad input (clear errors naming the op)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.testing.gradient_checker import check_gradients

# A control-flow bug shows up as a step that never finishes: fail loudly instead of hanging.
pytestmark = pytest.mark.usefixtures("bounded_time")


def rng(seed=0):
    return np.random.default_rng(seed)


def run(fetches, feed=None):
    with tw.Session() as sess:
        return sess.run(fetches, feed)


# ----------------------------------------------------------------------------------------
# methods
def test_write_read_size_and_shape_inference():
    ta = tw.TensorArray(tw.float32, size=3)
    ta = ta.write(0, [1.0, 2.0]).write(1, [3.0, 4.0]).write(2, tw.constant([5.0, 6.0]))
    r0, r2 = ta.read(0), ta.read(2)
    assert r0.shape.as_list() == [2] and ta.element_shape.as_list() == [2]
    got = run([r0, r2, ta.size()])
    np.testing.assert_array_equal(got[0], [1, 2])
    np.testing.assert_array_equal(got[1], [5, 6])
    assert got[2] == 3


def test_stack_unstack_gather_scatter():
    x = rng().standard_normal((4, 2, 3)).astype(np.float32)
    ta = tw.TensorArray(tw.float32, size=4).unstack(x)
    st = ta.stack()
    assert st.shape.as_list() == [None, 2, 3]
    ta2 = tw.TensorArray(tw.float32, size=4, clear_after_read=False).unstack(x)
    gat = ta2.gather([3, 0])
    sc = tw.TensorArray(tw.float32, size=5).scatter([4, 1, 0], x[:3]).gather([0, 1, 4])
    got = run([st, gat, sc])
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], x[[3, 0]])
    np.testing.assert_array_equal(got[2], x[[2, 1, 0]])


def test_split_concat():
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    ta = tw.TensorArray(tw.float64, size=3).split(x, [1, 3, 2])
    got = run([ta.concat(), ta.size()])
    np.testing.assert_array_equal(got[0], x)
    assert got[1] == 3
    eq = tw.TensorArray(tw.float64, size=3).split(x, [2, 2, 2])
    assert eq.element_shape.as_list() == [2, 2]
    np.testing.assert_array_equal(run(eq.read(1)), x[2:4])


def test_dynamic_size_grows_and_identity_close():
    ta = tw.TensorArray(tw.int32, size=0, dynamic_size=True)
    ta = ta.write(0, 7).write(4, 9).identity()
    assert ta.dynamic_size
    close = ta.close()
    got = run([ta.size(), ta.read(4)])
    assert got == [5, 9]
    run(close)


def test_element_shape_and_handle_flow_wrapping():
    ta = tw.TensorArray(tw.float32, size=2, element_shape=[None, 3])
    ta = ta.write(0, tw.zeros([2, 3])).write(1, tw.ones([2, 3]))
    assert ta.element_shape.as_list() == [2, 3]
    same = tw.TensorArray(tw.float32, handle=ta.handle, flow=ta.flow)
    np.testing.assert_array_equal(run(same.read(1)), np.ones((2, 3)))


def test_clear_after_read_false_allows_rereads():
    ta = tw.TensorArray(tw.float32, size=1, clear_after_read=False).write(0, 2.0)
    assert run([ta.read(0), ta.read(0)]) == [2.0, 2.0]


def test_empty_stack_with_known_element_shape():
    ta = tw.TensorArray(tw.float32, size=0, element_shape=[3])
    assert run(ta.stack()).shape == (0, 3)


# ----------------------------------------------------------------------------------------
# loops
def test_while_loop_writes_and_reads():
    x = tw.placeholder(tw.float32, [5, 2])
    inp = tw.TensorArray(tw.float32, size=5).unstack(x)
    out = tw.TensorArray(tw.float32, size=5)

    def body(i, acc, out):
        v = inp.read(i)
        return i + 1, acc + v, out.write(i, acc + v)

    _, total, out = tw.while_loop(lambda i, *_: i < 5, body, [0, tw.zeros([2]), out])
    assert isinstance(out, tw.TensorArray)
    xv = rng().standard_normal((5, 2)).astype(np.float32)
    got = run([total, out.stack()], {x: xv})
    np.testing.assert_allclose(got[0], xv.sum(0), rtol=1e-6)
    np.testing.assert_allclose(got[1], np.cumsum(xv, 0), rtol=1e-6)


def test_single_tensor_array_loop_var_and_dynamic_size():
    ta = tw.TensorArray(tw.int32, size=0, dynamic_size=True)

    def body(i, ta):
        return i + 1, ta.write(i, i * i)

    _, ta = tw.while_loop(lambda i, ta: i < 6, body, (0, ta), parallel_iterations=1)
    np.testing.assert_array_equal(run(ta.stack()), [0, 1, 4, 9, 16, 25])


def test_parallel_iterations_give_same_result():
    x = rng(3).standard_normal((7, 3))

    def build(pi):
        inp = tw.TensorArray(tw.float64, size=7).unstack(x)
        out = tw.TensorArray(tw.float64, size=7)
        _, out = tw.while_loop(lambda i, o: i < 7, lambda i, o: (i + 1, o.write(i, tw.sin(inp.read(i)))),
                               [0, out], parallel_iterations=pi)
        return out.stack()

    a, b = run([build(1), build(10)])
    np.testing.assert_allclose(a, np.sin(x))
    np.testing.assert_allclose(b, np.sin(x))


# ----------------------------------------------------------------------------------------
# gradients (float64 finite differences)
def test_grad_write_read():
    def fn(a, b):
        ta = tw.TensorArray(tw.float64, size=2).write(0, a).write(1, b)
        return ta.read(0) * ta.read(1) + tw.sin(a)
    check_gradients(fn, [rng().standard_normal(3), rng(1).standard_normal(3)])


def test_grad_stack_unstack_and_gather_scatter():
    def fn(x):
        ta = tw.TensorArray(tw.float64, size=4).unstack(x * 2.0)
        return tw.square(ta.stack())
    check_gradients(fn, [rng().standard_normal((4, 3))])

    def fn2(x):
        ta = tw.TensorArray(tw.float64, size=5, clear_after_read=False).scatter([4, 0, 2], x)
        return ta.gather([2, 4]) * 3.0 + ta.read(2)
    check_gradients(fn2, [rng(2).standard_normal((3, 2))])


def test_grad_split_concat():
    def fn(x):
        ta = tw.TensorArray(tw.float64, size=3).split(x, [2, 1, 3])
        return tw.tanh(ta.concat())
    check_gradients(fn, [rng().standard_normal((6, 2))])


def test_grad_multiple_reads_accumulate():
    def fn(x):
        ta = tw.TensorArray(tw.float64, size=2, clear_after_read=False).write(0, x).write(1, 2.0 * x)
        return ta.read(0) * ta.read(0) + ta.read(1) + ta.read(0)
    check_gradients(fn, [rng().standard_normal(4)])


def test_grad_unread_element_is_zero():
    def fn(x, y):
        ta = tw.TensorArray(tw.float64, size=2).write(0, x).write(1, y)
        return ta.read(1) * 2.0
    check_gradients(fn, [rng().standard_normal(3), rng(1).standard_normal(3)])


def test_grad_in_while_loop():
    def fn(x, w):
        inp = tw.TensorArray(tw.float64, size=4).unstack(x)
        out = tw.TensorArray(tw.float64, size=4)

        def body(i, h, out):
            h = tw.tanh(inp.read(i) * w + h)
            return i + 1, h, out.write(i, h)

        _, h, out = tw.while_loop(lambda i, *_: i < 4, body, [0, tw.zeros([3], tw.float64), out])
        return [out.stack(), h * 2.0]
    check_gradients(fn, [rng().standard_normal((4, 3)), rng(1).standard_normal(3)])


def test_grad_in_while_loop_parallel_iterations_and_dynamic_size():
    def fn(x):
        inp = tw.TensorArray(tw.float64, size=5).unstack(x)
        out = tw.TensorArray(tw.float64, size=0, dynamic_size=True)
        _, out = tw.while_loop(lambda i, o: i < 5, lambda i, o: (i + 1, o.write(i, tw.exp(inp.read(i)))),
                               [0, out], parallel_iterations=10)
        return out.stack()
    check_gradients(fn, [rng(4).standard_normal((5, 2)) * 0.3])


def test_grad_array_is_per_source_and_accumulates():
    x = tw.constant([1.0, 2.0], tw.float64)
    ta = tw.TensorArray(tw.float64, size=1).write(0, x)
    g = ta.grad("mysource").write(0, tw.constant([1.0, 1.0], tw.float64))
    g = ta.grad("mysource", flow=g.flow).write(0, tw.constant([2.0, 3.0], tw.float64))
    np.testing.assert_array_equal(run(g.read(0)), [3.0, 4.0])


# ----------------------------------------------------------------------------------------
# bad input
def test_read_unwritten_index():
    ta = tw.TensorArray(tw.float32, size=3).write(0, 1.0)
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayReadV3.*index 2.*not been written"):
        run(ta.read(2))


def test_write_twice():
    ta = tw.TensorArray(tw.float32, size=3).write(1, 1.0).write(1, 2.0)
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayWriteV3.*index 1.*already been written"):
        run(ta.read(1))


def test_read_twice_when_cleared():
    ta = tw.TensorArray(tw.float32, size=1).write(0, 1.0)
    r = ta.read(0)
    with tw.control_dependencies([r]):
        r2 = ta.read(0)
    with pytest.raises(errors.InvalidArgumentError, match="clear_after_read"):
        run(r2)


def test_out_of_range_without_dynamic_size():
    ta = tw.TensorArray(tw.float32, size=2).write(5, 1.0)
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayWriteV3.*index 5.*size 2.*not dynamic_size"):
        run(ta.flow)
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayReadV3.*index 3.*size 2"):
        run(tw.TensorArray(tw.float32, size=2).read(3))


def test_element_shape_mismatch_at_build_and_run_time():
    ta = tw.TensorArray(tw.float32, size=2).write(0, tw.zeros([2, 3]))
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayWriteV3.*shape \(3, 2\).*\(2, 3\)"):
        ta.write(1, tw.zeros([3, 2]))
    with pytest.raises(errors.InvalidArgumentError, match=r"element_shape"):
        tw.TensorArray(tw.float32, size=2, element_shape=[3]).write(0, [1.0, 2.0])
    p = tw.placeholder(tw.float32, None)
    ta = tw.TensorArray(tw.float32, size=2, element_shape=[3]).write(0, p)
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayWriteV3.*shape \(2,\).*\(3,\)"):
        run(ta.flow, {p: [1.0, 2.0]})


def test_stack_of_different_shapes_and_bad_dtype():
    p = tw.placeholder(tw.float32, None)
    ta = tw.TensorArray(tw.float32, size=2, infer_shape=False).write(0, [1.0]).write(1, p)
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayGatherV3.*one shape"):
        run(ta.stack(), {p: [1.0, 2.0]})
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArrayWriteV3.*float32.*int32"):
        tw.TensorArray(tw.float32, size=1).write(0, tw.constant(1))
    with pytest.raises(errors.InvalidArgumentError, match="size is required"):
        tw.TensorArray(tw.float32)


def test_split_lengths_must_add_up():
    ta = tw.TensorArray(tw.float32, size=2).split(tw.zeros([5]), [2, 2])
    with pytest.raises(errors.InvalidArgumentError, match=r"TensorArraySplitV3.*add up"):
        run(ta.flow)


# ----------------------------------------------------------------------------------------
# another device
def _has_opencl():
    try:
        with tw.Session() as sess:
            return any("OPENCL" in d.name for d in sess.list_devices())
    except Exception:  # noqa: BLE001 - no such device or plugin
        return False


@pytest.mark.skipif(not _has_opencl(), reason="no OpenCL device (PoCL) here")
def test_on_opencl_in_a_loop_with_gradients():
    with tw.device("/device:OPENCL:0"):
        x = tw.placeholder(tw.float32, [4, 3])
        inp = tw.TensorArray(tw.float32, size=4).unstack(x)
        out = tw.TensorArray(tw.float32, size=4)
        _, out = tw.while_loop(lambda i, o: i < 4, lambda i, o: (i + 1, o.write(i, inp.read(i) * 2.0)), [0, out])
        y = out.stack()
    xv = np.arange(12, dtype=np.float32).reshape(4, 3)
    with tw.Session() as sess:  # the forward loop needs no soft placement
        np.testing.assert_allclose(sess.run(y, {x: xv}), 2 * xv)
    g, = tw.gradients(tw.reduce_sum(y * y), [x])
    # the loop gradient's stacks are CPU-only (control_flow_grad): soft placement moves them
    with tw.Session(config=tw.ConfigProto(allow_soft_placement=True)) as sess:
        np.testing.assert_allclose(sess.run(g, {x: xv}), 8 * xv)
