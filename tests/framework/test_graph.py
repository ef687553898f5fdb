"""Graph construction: names, scopes, control dependencies, devices, collections, lookup."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors


def test_unique_names_and_name_scopes():
    a = tw.constant(1.0, name="c")
    b = tw.constant(2.0, name="c")
    assert (a.name, b.name) == ("c:0", "c_1:0")
    with tw.name_scope("layer"):
        x = tw.add(a, b)
        with tw.name_scope("inner"):
            y = tw.multiply(x, x, name="m")
    with tw.name_scope("layer"):
        z = tw.add(a, b)
    assert x.op.name == "layer/Add"
    assert y.op.name == "layer/inner/m"
    assert z.op.name == "layer_1/Add"
    with tw.name_scope("layer/"):  # a trailing slash re-enters the scope as-is
        w = tw.identity(a, name="again")
    assert w.op.name == "layer/again"


def test_tensor_names_and_lookup():
    g = tw.get_default_graph()
    a = tw.constant([1.0, 2.0], name="a")
    assert g.get_tensor_by_name("a:0") is a
    assert g.get_operation_by_name("a") is a.op
    assert a.op.outputs[0] is a and a.value_index == 0
    with pytest.raises(errors.NotFoundError, match="no operation named 'nope'"):
        g.get_operation_by_name("nope")
    with pytest.raises(errors.NotFoundError, match="has 1 outputs"):
        g.get_tensor_by_name("a:3")
    with pytest.raises(errors.InvalidArgumentError, match="not a tensor name"):
        g.get_tensor_by_name("a")


def test_control_dependencies_nest_and_clear():
    a = tw.constant(1.0, name="a")
    b = tw.constant(2.0, name="b")
    with tw.control_dependencies([a]):
        x = tw.identity(b)
        with tw.control_dependencies([b.op]):
            y = tw.identity(a)
        with tw.control_dependencies(None):
            z = tw.identity(a)
    assert x.op.control_inputs == [a.op]
    # a is y's data input, so only the inner b survives as a control input
    assert y.op.control_inputs == [b.op]
    assert z.op.control_inputs == []
    with pytest.raises(errors.InvalidArgumentError, match="control_dependencies expects"):
        with tw.control_dependencies([42]):
            pass


def test_device_scopes_merge_partial_specs():
    with tw.device("/job:worker/task:1"):
        a = tw.constant(1.0)
        with tw.device("/device:GPU:*"):
            b = tw.constant(1.0)
            with tw.device("/cpu:0"):
                c = tw.constant(1.0)
        with tw.device(None):
            d = tw.constant(1.0)
    assert a.device == "/job:worker/task:1"
    assert b.device == "/job:worker/task:1/device:GPU:*"
    assert c.device == "/job:worker/task:1/device:CPU:0"
    assert d.device == ""
    with pytest.raises(errors.InvalidArgumentError, match="malformed device specification"):
        with tw.device("/job:worker/bogus"):
            pass


def test_device_spec_matching():
    spec = tw.DeviceSpec.from_string("/device:OPENCL:*")
    assert spec.matches("/job:localhost/replica:0/task:0/device:OPENCL:3")
    assert not spec.matches("/job:localhost/replica:0/task:0/device:CPU:0")
    spec = tw.DeviceSpec.from_string("/job:worker/task:17")
    assert spec.matches("/job:worker/replica:0/task:17/device:CPU:0")
    assert not spec.matches("/job:worker/replica:0/task:1/device:CPU:0")


def test_collections():
    g = tw.get_default_graph()
    a = tw.constant(1.0, name="scope1/a")
    b = tw.constant(1.0, name="scope2/b")
    tw.add_to_collection("mine", a)
    tw.add_to_collections(["mine", "other"], b)
    assert tw.get_collection("mine") == [a, b]
    assert tw.get_collection("mine", scope="scope2") == [b]
    tw.get_collection_ref("other").append(a)
    assert g.get_collection("other") == [b, a]
    v = tw.Variable(1.0, name="v")
    w = tw.Variable(1.0, name="w", trainable=False)
    assert tw.global_variables() == [v, w]
    assert tw.trainable_variables() == [v]


def test_default_graph_and_as_default():
    g = tw.Graph()
    with g.as_default():
        a = tw.constant(1.0)
        assert tw.get_default_graph() is g
    assert a.graph is g
    b = tw.constant(2.0)
    assert b.graph is not g
    with pytest.raises(errors.InvalidArgumentError, match="different graph"):
        tw.add(a, b)


def test_finalized_graph_refuses_new_ops():
    g = tw.Graph()
    with g.as_default():
        tw.constant(1.0)
        g.finalize()
        with pytest.raises(errors.FailedPreconditionError, match="finalized"):
            tw.constant(2.0)


def test_version_grows_with_each_node():
    g = tw.get_default_graph()
    v0 = g.version
    tw.constant(1.0)
    assert g.version == v0 + 1


def test_python_values_take_the_dtype_of_the_other_input():
    x = tw.placeholder(tw.float64, [2])
    y = x * 2  # the Python int becomes a float64 constant
    assert y.dtype is tw.float64
    assert tw.constant(1).dtype is tw.int32
    assert tw.constant(1.5).dtype is tw.float32
    assert tw.constant(np.float64(1.5)).dtype is tw.float64
    assert tw.constant("abc").dtype is tw.string
    assert tw.constant([True, False]).dtype is tw.bool


def test_construction_errors_name_the_node():
    with pytest.raises(errors.NotFoundError, match="op type 'NoSuchOp' is not registered"):
        from tensorweave.framework.graph import apply_op
        apply_op("NoSuchOp", [])
    with pytest.raises(errors.InvalidArgumentError, match="Add node 'Add'.*float32.*int32"):
        tw.add(tw.constant(1), tw.constant(1.0))
    with pytest.raises(errors.InvalidArgumentError, match="incompatible shapes"):
        tw.add(tw.constant(np.ones((2, 3))), tw.constant(np.ones((4,))))
    with pytest.raises(errors.InvalidArgumentError, match="expected int32.*lose information"):
        tw.add(tw.constant(1), 1.5)
    with pytest.raises(errors.InvalidArgumentError, match="attr 'transpose_a'.*expected a bool"):
        tw.matmul(tw.constant(np.ones((2, 2))), tw.constant(np.ones((2, 2))), transpose_a="yes")
    with pytest.raises(errors.InvalidArgumentError, match="dtype bool is not allowed"):
        tw.exp(tw.constant([True]))


def test_failed_construction_leaves_the_graph_unchanged():
    g = tw.get_default_graph()
    a = tw.constant(np.ones((2, 3)))
    n = len(g.get_operations())
    with pytest.raises(errors.InvalidArgumentError):
        tw.matmul(a, a)
    assert len(g.get_operations()) == n


def test_tensor_is_not_a_python_bool():
    with pytest.raises(TypeError, match="Python bool"):
        bool(tw.constant(True))


def test_shapes_are_inferred_at_construction():
    x = tw.placeholder(tw.float32, [None, 3])
    w = tw.constant(np.ones((3, 5), np.float32))
    y = tw.matmul(x, w) + tw.constant(np.ones(5, np.float32))
    assert y.shape.as_list() == [None, 5]
    y.set_shape([7, 5])
    assert y.shape.as_list() == [7, 5]
    with pytest.raises(errors.InvalidArgumentError, match="incompatible"):
        y.set_shape([7, 6])
