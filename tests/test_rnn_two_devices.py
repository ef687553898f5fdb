"""``tw.nn.dynamic_rnn`` with its layers on two devices of this process (issue 12): a
MultiRNNCell whose layers are wrapped in ``DeviceWrapper`` for CPU:0 and OPENCL:0 gives the
values and gradients of the same model on one device; the loop's stacks and tensor arrays
stay on the host, each layer's ops and variables on its device. Skips without an OpenCL
device (PoCL). The same over two grpc tasks: tests/distributed/test_loops_across_tasks.py."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw

rnn_cell = tw.nn.rnn_cell
CPU, OPENCL = "/device:CPU:0", "/device:OPENCL:0"


def _has_opencl() -> bool:
    try:
        with tw.Graph().as_default(), tw.Session() as sess:
            return any("OPENCL" in d.name for d in sess.list_devices())
    except Exception:  # noqa: BLE001 - no plugin, no ICD: no device
        return False


pytestmark = pytest.mark.skipif(not _has_opencl(), reason="no OpenCL device (PoCL) here")


# A control-flow bug shows up as a step that never finishes: fail loudly instead of hanging.
pytestmark = pytest.mark.usefixtures("bounded_time")


def build(devices, make_cells, lengths=None, dtype=tw.float32):
    """(graph, init, fetches [outputs, state parts, gradients], variables): a MultiRNNCell
    over ``make_cells()``, each wrapped for its device when ``devices`` is given."""
    g = tw.Graph()
    with g.as_default():
        x = tw.constant(np.random.default_rng(5).standard_normal((3, 6, 2)).astype(dtype.np_dtype), name="x")
        cells = make_cells()
        if devices:
            cells = [rnn_cell.DeviceWrapper(c, d) for c, d in zip(cells, devices)]
        seq = None if lengths is None else tw.constant(lengths)
        outputs, state = tw.nn.dynamic_rnn(rnn_cell.MultiRNNCell(cells), x, sequence_length=seq, dtype=dtype)
        loss = tw.reduce_sum(tw.square(outputs)) + sum(tw.reduce_sum(tw.sin(s)) for s in rnn_cell.flatten(state))
        variables = tw.trainable_variables()
        grads = tw.gradients(loss, [x] + variables)
        init = tw.global_variables_initializer()
    return g, init, [outputs, *rnn_cell.flatten(state), *grads], variables


@pytest.mark.parametrize("make_cells,lengths", [
    (lambda: [rnn_cell.BasicLSTMCell(4), rnn_cell.BasicLSTMCell(3)], None),
    (lambda: [rnn_cell.GRUCell(4), rnn_cell.BasicRNNCell(3)], [6, 3, 1]),
], ids=["lstm_lstm", "gru_rnn_lengths"])
def test_dynamic_rnn_layers_on_cpu_and_opencl_match_one_device(make_cells, lengths):
    g, init, fetches, variables = build(None, make_cells, lengths)
    names = [v.op.name for v in variables]
    with tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0, "CUDA": 0})) as sess:
        sess.run(init)
        weights = dict(zip(names, sess.run(variables)))
        expected = sess.run(fetches)

    g, init, fetches, variables = build([CPU, OPENCL], make_cells, lengths)
    assert [v.op.name for v in variables] == names
    with g.as_default():
        assign = [v.assign(weights[v.op.name]) for v in variables]
    with tw.Session(graph=g) as sess:
        placement = sess.placement(fetches)
        for v in variables:  # each layer's variables on its device
            want = "CPU:0" if "cell_0" in v.op.name else "OPENCL:0"
            assert placement[v.op.name].endswith(want), (v.op.name, placement[v.op.name])
        layer1 = [n for n, d in placement.items() if "/while/multi_rnn_cell/cell_1/" in n and "gradients" not in n]
        assert layer1 and all(placement[n].endswith("OPENCL:0") for n in layer1)
        for op in g.get_operations():  # the loop's history stays with the host stacks
            if op.type in ("StackV2", "StackPushV2", "StackPopV2") and op.name in placement:
                assert placement[op.name].endswith("CPU:0"), op.name
        sess.run(init)
        sess.run(assign)
        got = sess.run(fetches)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    if lengths is not None:
        assert np.all(got[0][1, 3:] == 0) and np.all(got[0][2, 1:] == 0)
