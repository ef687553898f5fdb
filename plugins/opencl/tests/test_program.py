"""Programs are built once per (source, defines) and context; a broken source is a tw error
carrying the compiler's log and the node it was built for."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_opencl import program


def test_programs_are_cached_per_source_and_defines(device):
    rt = device.runtime
    a = program.build(rt, "elementwise.cl", {"T": "float", "EXPR": "(a * a)"})
    b = program.build(rt, "elementwise.cl", {"EXPR": "(a * a)", "T": "float"})
    c = program.build(rt, "elementwise.cl", {"T": "int", "EXPR": "(a * a)"})
    assert a is b and a is not c


def test_broken_source_reports_the_compiler_log_and_the_node(monkeypatch):
    real = program.source

    def broken(name):
        text = real(name)
        return text.replace("out[i] = (R)(EXPR);", "out[i] = (R)(EXPR) +;", 1) if name == "elementwise.cl" else text

    monkeypatch.setattr(program, "source", broken)
    g = tw.Graph()
    with g.as_default(), tw.device("/device:OPENCL:0"):
        x = tw.placeholder(tw.float32, [3], name="x")
        y = tw.exp(x, name="my_exp")
    with tw.Session(graph=g) as sess:
        with pytest.raises(tw.errors.InternalError) as e:
            sess.run(y, {x: np.zeros(3, np.float32)})
    msg = str(e.value)
    assert "Exp node 'my_exp'" in msg
    assert "building OpenCL program elementwise.cl" in msg and "EXPR=(exp(a))" in msg
    assert "compiler log" in msg and "error" in msg.lower()
    assert "elementwise.cl" in msg


def test_build_error_of_a_source_text(device):
    with pytest.raises(tw.errors.InternalError, match=r"(?s)MyOp node 'n'.*compiler log.*undeclared"):
        program.build(device.runtime, "mine.cl", {"T": "float"}, what="MyOp node 'n'",
                      text="__kernel void k(__global T* x) { x[0] = not_declared; }")


def test_double_needs_fp64(device, monkeypatch):
    monkeypatch.setattr(device.runtime, "has_fp64", False)
    with pytest.raises(tw.errors.UnimplementedError, match="does not support double precision"):
        program.build(device.runtime, "elementwise.cl", {"T": "double", "EXPR": "(a + 1)", "FRESH": 1})
