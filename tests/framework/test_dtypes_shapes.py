"""dtypes, TensorShape, DeviceSpec and the error hierarchy."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.framework.tensor_shape import TensorShape


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                                  "uint16", "uint32", "uint64", "complex64", "complex128", "bool", "string"])
def test_every_dtype_round_trips_names_and_numpy(name):
    dt = tw.as_dtype(name)
    assert dt.name == name and getattr(tw, name) is dt
    if name != "string":
        assert tw.as_dtype(dt.np_dtype) is dt
        assert tw.as_dtype(dt.as_numpy_dtype) is dt
    with tw.Session() as s:
        value = ["x", "yz"] if name == "string" else np.array([1, 0], dtype=dt.np_dtype)
        out = s.run(tw.identity(tw.constant(value, dtype=dt)))
        if name == "string":
            assert list(out) == [b"x", b"yz"]
        else:
            assert out.dtype == dt.np_dtype


def test_dtype_properties_and_errors():
    assert tw.float32.is_floating and not tw.float32.is_integer
    assert tw.uint8.is_unsigned and tw.complex64.is_complex and tw.complex64.real_dtype is tw.float32
    assert tw.as_dtype(float) is tw.float32 and tw.as_dtype(int) is tw.int32
    with pytest.raises(errors.InvalidArgumentError, match="unknown dtype 'float128x'"):
        tw.as_dtype("float128x")


def test_tensor_shape():
    s = TensorShape([None, 3])
    assert s.ndims == 2 and not s.is_fully_defined() and s[1] == 3
    assert s.merge_with([4, None]).as_list() == [4, 3]
    assert s.is_compatible_with([7, 3]) and not s.is_compatible_with([7, 4])
    assert TensorShape(None).ndims is None and TensorShape(None).is_compatible_with([1, 2, 3])
    assert TensorShape([2, 3]).num_elements() == 6
    assert str(TensorShape([None, 3])) == "(?, 3)"
    with pytest.raises(errors.InvalidArgumentError):
        s.merge_with([1, 2, 3])
    with pytest.raises(errors.InvalidArgumentError, match="negative dimension"):
        TensorShape([-3])


def test_device_spec_parsing_and_merging():
    d = tw.DeviceSpec.from_string("/job:worker/replica:0/task:3/device:OPENCL:1")
    assert (d.job, d.replica, d.task, d.device_type, d.device_index) == ("worker", 0, 3, "OPENCL", 1)
    assert tw.DeviceSpec.from_string("/gpu:1").to_string() == "/device:GPU:1"
    merged = tw.DeviceSpec.from_string("/job:ps/task:0").merge_from("/device:CPU:0")
    assert merged.to_string() == "/job:ps/task:0/device:CPU:0"


def test_error_hierarchy_mirrors_tf_errors():
    for name in ["InvalidArgumentError", "NotFoundError", "FailedPreconditionError", "ResourceExhaustedError",
                 "UnavailableError", "AbortedError", "DeadlineExceededError", "UnimplementedError",
                 "InternalError", "OutOfRangeError", "DataLossError", "CancelledError", "AlreadyExistsError",
                 "PermissionDeniedError", "UnauthenticatedError", "UnknownError"]:
        cls = getattr(tw.errors, name)
        assert issubclass(cls, tw.errors.OpError)
        assert tw.errors.exception_type_from_error_code(cls.error_code) is cls
    assert issubclass(tw.errors.InvalidArgumentError, ValueError)
    e = tw.errors.NotFoundError("missing thing", node_def="n")
    assert str(e) == "missing thing" and e.node_def == "n" and e.error_code == tw.errors.NOT_FOUND
