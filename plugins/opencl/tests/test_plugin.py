"""The plugin is found through its entry point, says what it found, and registers nothing
(saying why) when pyopencl or an OpenCL driver is missing."""

import importlib.util

import pytest

from tensorweave import plugins
from tensorweave.framework.kernel_registry import KernelRegistry
from tensorweave.plugins import AllocatorRegistry
from tensorweave_opencl import plugin


@pytest.mark.no_device
def test_discovered_and_loaded():
    info = {p.name: p for p in plugins.registry().plugins}["opencl"]
    assert info.distribution == "tensorweave-opencl"
    assert info.status == "loaded", info.error
    if plugin.missing() is None:
        assert info.note.startswith("OPENCL devices through pyopencl")
        assert info.registered["kernels"] > 90
        assert info.registered["devices"] == 1 and info.registered["allocators"] == 2
    else:
        assert info.note.startswith("inactive, registers nothing")
        assert info.registered == {}


@pytest.mark.no_device
def test_without_pyopencl_registers_nothing_and_says_why(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyopencl" else real(name, *a))
    assert plugin.status() == "inactive, registers nothing: pyopencl is not installed (pip install pyopencl)"
    kernels, allocators = KernelRegistry(), AllocatorRegistry("allocator")
    plugin.tensorweave_register_kernels(kernels)
    plugin.tensorweave_register_allocators(allocators)
    assert len(kernels) == 0 and len(allocators) == 0
    assert plugin.tensorweave_device_factories() == []


@pytest.mark.no_device
def test_without_icd_says_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path))
    if importlib.util.find_spec("pyopencl") is None:
        pytest.skip("pyopencl is not installed: the ICD check comes second")
    assert plugin.icd_files() == []
    note = plugin.status()
    assert note.startswith("inactive, registers nothing: no OpenCL ICD in ") and "pocl-opencl-icd" in note
    assert plugin.tensorweave_device_factories() == []


def test_devices_are_named_by_index(device):
    import tensorweave as tw

    assert device.name == "/job:localhost/replica:0/task:0/device:OPENCL:0"
    assert device.device_type == "OPENCL" and not device.host_tensors
    with tw.Session() as sess:
        names = [d.name for d in sess.list_devices()]
    assert "/job:localhost/replica:0/task:0/device:OPENCL:0" in names
    factory = plugins.registry().device_factories["OPENCL"]
    assert factory.count() >= 1
    assert factory.describe()[0].startswith("OPENCL:0 ")


def test_every_op_the_mlp_needs_has_a_kernel():
    reg = plugins.registry()
    ops = reg.kernels.ops_for_device("OPENCL")
    for op in ("MatMul", "Add", "Relu", "ReluGrad", "SparseSoftmaxCrossEntropyWithLogits",
               "SoftmaxCrossEntropyWithLogits", "Mean", "Sum", "ApplyGradientDescent", "Assign", "Variable",
               "Const", "Identity", "Reshape", "BroadcastTo", "Shape", "Size", "Maximum", "FloorDiv", "Cast",
               "RealDiv", "OnesLike", "ZerosLike", "ExpandDims", "Mul", "NoOp", "ArgMax", "Equal", "OneHot"):
        assert op in ops, op
    kd = reg.kernels.lookup("Reshape", "OPENCL", {"T": __import__("tensorweave").float32})
    assert kd.host_memory == ("shape",)
