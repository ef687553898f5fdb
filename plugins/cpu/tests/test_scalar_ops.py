"""Binary element-wise kernels whose output is statically a scalar (a loop's ``i + 1``,
``i < n``) use Python's operator on NumPy scalars instead of the ufunc
(kernels/math.py ``_scalar_fast``): same values, same types, integers wrapping as in TF."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.framework.kernel_registry import KernelContext
from tensorweave_cpu.device import CPUDeviceFactory
from tensorweave_cpu.kernels.math import _SCALAR_OPERATORS, _UFUNCS

DTYPES = [tw.int32, tw.int64, tw.float32, tw.float64]


@pytest.fixture(autouse=True)
def _fresh_graph():
    tw.reset_default_graph()
    yield


def _kernel(op):
    (dev,) = CPUDeviceFactory().create_devices("/job:localhost/replica:0/task:0")
    kd = plugins.registry().kernels.find(op, "CPU")
    return kd.factory(KernelContext(op, dev, None))


def _node(op_type, dtype, shape):
    from tensorweave.framework.graph import apply_op
    a, b = tw.placeholder(dtype, shape), tw.placeholder(dtype, shape)
    return apply_op(op_type, [a, b]).op


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op_type", sorted(_SCALAR_OPERATORS))
def test_scalar_kernel_gives_the_ufuncs_values_and_types(op_type, dtype):
    kernel = _kernel(_node(op_type, dtype, []))
    ufunc = _UFUNCS[op_type]
    assert kernel is not ufunc
    st = dtype.np_dtype.type
    info = np.iinfo(st) if dtype.is_integer else np.finfo(st)
    values = [st(0), st(3), st(-7), st(info.max), st(info.min)]
    if dtype.is_floating:
        values += [st(np.nan), st(np.inf), st(0.1)]
    with np.errstate(all="ignore"):  # as every executor runs kernels
        for x in values:
            for y in values:
                # NumPy scalars (a ufunc's results), 0-d arrays (constants) and both mixed
                for a, b in ((x, y), (np.asarray(x), y), (x, np.asarray(y)), (np.asarray(x), np.asarray(y))):
                    got, want = kernel(a, b), ufunc(a, b)
                    assert type(got) is type(want), (a, b)
                    np.testing.assert_array_equal(got, want)


def test_non_scalar_or_unknown_shapes_keep_the_ufunc():
    assert _kernel(_node("Less", tw.int32, [3])) is np.less
    assert _kernel(_node("Less", tw.int32, None)) is np.less
    assert _kernel(_node("Add", tw.float32, [None])) is np.add
    assert _kernel(_node("Add", tw.int8, [])) is np.add  # only the four common types


def test_a_loop_counter_wraps_as_int32_does():
    start = np.int32(2**31 - 3)
    _, out = tw.while_loop(lambda k, i: k < 5, lambda k, i: (k + 1, i + 1), [tw.constant(0), tw.constant(start)])
    with tw.Session() as sess:
        got = sess.run(out)
    assert got.dtype == np.int32 and got == np.int32(-(2**31) + 2)  # 2**31 - 3 + 5, wrapped
