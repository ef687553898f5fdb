"""Graph functions (framework/function.py, runtime/functions.py): tracing moves the body out of
the caller's graph and turns outside tensors into captures; the FunctionDef travels as a
string attr, so graphs with datasets serialise, import and run elsewhere."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import data as tw_data
from tensorweave.framework import function
from tensorweave.runtime.containers import SessionResources
from tensorweave.runtime.device import create_local_devices
from tensorweave.runtime.functions import Function


def test_trace_moves_the_body_out_and_captures_outside_tensors():
    g = tw.get_default_graph()
    c = tw.constant(3.0, name="c")
    p = tw.placeholder(tw.float32, [], name="p")
    before = [op.name for op in g.get_operations()]
    fg = function.trace(lambda x: [x * c + p, tw.constant(1.0)], [(tw.float32, [2])], name="f")
    assert [op.name for op in g.get_operations()] == before   # the caller's graph is as it was
    assert fg.captured_inputs == [c, p]                       # in order of first use
    assert [t.op.type for t in fg.inputs] == ["Placeholder"] * 3
    assert fg.output_dtypes == [tw.float32, tw.float32]
    assert fg.output_shapes == [tw.TensorShape([2]), tw.TensorShape([])]
    assert all(op.graph is fg for op in fg.get_operations())
    with pytest.raises(tw.errors.InvalidArgumentError, match="not an element of this graph"):
        g.as_graph_element(fg.outputs[0])


def test_function_def_runs_on_a_device():
    c = tw.constant(np.float32(10))
    fg = function.trace(lambda x, y: [x + y * c, tw.reduce_sum(x)], [(tw.float32, [None]), (tw.float32, [])],
                        name="g")
    fdef = json.loads(fg.definition)
    assert fdef["name"] == "g" and len(fdef["inputs"]) == 3 and len(fdef["outputs"]) == 2
    device = create_local_devices()[0]
    fn = Function(fg.definition, device, SessionResources("test"), what="test")
    out = fn([np.array([1.0, 2.0], np.float32), np.float32(2), np.float32(10)])
    assert out[0].tolist() == [21.0, 22.0] and float(out[1]) == 3.0
    with pytest.raises(tw.errors.InvalidArgumentError, match="malformed function definition"):
        Function("{}", device, SessionResources("test"))


def test_trace_of_a_failing_function_leaves_the_graph_unchanged():
    g = tw.get_default_graph()
    n = len(g.get_operations())

    def bad(x):
        tw.square(x)
        raise ValueError("user error")

    with pytest.raises(ValueError, match="user error"):
        function.trace(bad, [(tw.float32, [])], name="bad")
    assert len(g.get_operations()) == n


def test_graph_with_datasets_serialises_imports_and_runs():
    scale = tw.constant(np.int64(3))
    ds = (tw_data.Dataset.range(10).map(lambda x: x * scale).filter(lambda x: x > 5)
          .flat_map(lambda x: tw_data.Dataset.from_tensors(x).repeat(2)).batch(3))
    nxt = ds.make_one_shot_iterator().get_next(name="next")
    graph_def = json.loads(json.dumps(tw.get_default_graph().as_graph_def()))  # plain JSON, no Python objects
    g2 = tw.Graph()
    with g2.as_default():
        tw.import_graph_def(graph_def, name="")
    with tw.Session(graph=g2) as sess:
        t = g2.get_tensor_by_name("next:0")
        assert sess.run(t).tolist() == [6, 6, 9]
    with tw.Session() as sess:
        assert sess.run(nxt).tolist() == [6, 6, 9]


def test_functions_have_their_own_random_state_and_graph_seed():
    tw.set_random_seed(1)
    ds = tw_data.Dataset.range(3).map(lambda x: tw.random_uniform([]))
    nxt = ds.make_one_shot_iterator().get_next()
    with tw.Session() as s1:
        a = [float(s1.run(nxt)) for _ in range(3)]
    with tw.Session() as s2:
        b = [float(s2.run(nxt)) for _ in range(3)]
    assert a == b and len(set(a)) == 3


def test_every_dataset_op_survives_a_graph_def_round_trip(tmp_path):
    from tensorweave.ops import dataset_ops

    p = str(tmp_path / "r.tfrecord")
    with tw.python_io.TFRecordWriter(p) as w:
        w.write(b"abc")
    (tmp_path / "t.txt").write_bytes(b"line\n")
    (tmp_path / "f.bin").write_bytes(b"xyz")
    D = tw_data.Dataset
    files = (tw_data.TFRecordDataset(p).concatenate(tw_data.TextLineDataset(str(tmp_path / "t.txt")))
             .concatenate(tw_data.FixedLengthRecordDataset(str(tmp_path / "f.bin"), 3)))
    numbers = (D.range(12).map(lambda x: x + 1).map(lambda x: x * 2, num_parallel_calls=2)
               .filter(lambda x: x > 2).flat_map(lambda x: D.from_tensors(x))
               .interleave(lambda x: D.from_tensor_slices(tw.stack([x, x])), cycle_length=2)
               .shuffle(4, seed=3).repeat(2).take(20).skip(1).shard(2, 0).cache().prefetch(2)
               .map(lambda x: tw.fill(tw.reshape(tw.cast(x % 3, tw.int32), [1]), x)).padded_batch(3, [None]))
    ds = D.zip((numbers, files.batch(3), D.from_generator(lambda: iter([1]), tw.int64, []).repeat(),
                D.from_tensor_slices([7, 8]).concatenate(D.from_tensors(9))))
    used = {op.type for op in tw.get_default_graph().get_operations()}
    # every dataset op is in this pipeline (the one-shot iterator's factory holds them all)
    assert set(dataset_ops.DATASET_OPS) - used == set()
    nxt = ds.make_one_shot_iterator().get_next(name="next")
    with tw.Session() as sess:
        expected = sess.run(nxt)
    graph_def = json.loads(json.dumps(tw.get_default_graph().as_graph_def()))
    g2 = tw.Graph()
    with g2.as_default():
        tw.import_graph_def(graph_def, name="")
    with tw.Session(graph=g2) as sess:
        got = sess.run([g2.get_tensor_by_name(f"next:{i}") for i in range(4)])
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1].tolist() == expected[1].tolist() == [b"abc", b"line", b"xyz"]
    assert int(got[2]) == 1 and int(got[3]) == 7
