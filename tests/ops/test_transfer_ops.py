"""The runtime's _Send/_Recv (ops/transfer_ops.py): one encoding of their attrs, written by
partitioning and read back to the same transfer; defined privately, so user graphs cannot hold them."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.distributed import wire
from tensorweave.ops import transfer_ops
from tensorweave.testing.fake_device import register_fake_devices


def test_attrs_round_trip_and_take_declared_defaults():
    t = transfer_ops.TransferAttrs("^loop/cond", "/job:a/device:CPU:0", "/job:b/device:CPU:0", tw.int64,
                                   control=False, frame_name="loop", iterations="later", loop_cond_of="loop")
    assert transfer_ops.decode_attrs(transfer_ops.encode_attrs(t), "n") == t
    minimal = {k: v for k, v in transfer_ops.encode_attrs(t).items()
               if k in ("tensor_name", "send_device", "recv_device")}
    assert transfer_ops.decode_attrs(minimal, "n") == transfer_ops.TransferAttrs(t.tensor_name, t.send_device,
                                                                                 t.recv_device)
    for name in ("tensor_name", "send_device", "recv_device"):
        with pytest.raises(tw.errors.InvalidArgumentError, match=f"transfer node 'n' needs a non-empty '{name}'"):
            transfer_ops.decode_attrs({**transfer_ops.encode_attrs(t), name: {"s": ""}}, "n")


def test_partitioning_writes_what_the_worker_reads():
    register_fake_devices(count=1)
    try:
        x = tw.placeholder(tw.float32, [2], name="x")
        with tw.device("/device:FAKE:0"):
            y = tw.multiply(x, 2.0, name="y")
        with tw.device("/device:CPU:0"):
            z = tw.add(y, 1.0, name="z")
        with tw.Session() as s:
            md = tw.RunMetadata()
            out = s.run(z, {x: [1.0, 2.0]}, options=tw.RunOptions(output_partition_graphs=True), run_metadata=md)
        np.testing.assert_array_equal(out, [3.0, 5.0])
        nodes = [n for gd in md.partition_graphs for n in gd["node"] if n["op"] in (transfer_ops.SEND, transfer_ops.RECV)]
        assert {n["op"] for n in nodes} == {transfer_ops.SEND, transfer_ops.RECV}
        (recv,) = [transfer_ops.decode_attrs(n["attr"], n["name"]) for n in nodes if n["op"] == transfer_ops.RECV]
        (send,) = [transfer_ops.decode_attrs(n["attr"], n["name"]) for n in nodes if n["op"] == transfer_ops.SEND]
        assert recv == send and recv.tensor_name == "y:0" and recv.tensor_type is tw.float32
        assert "FAKE" in recv.send_device and "CPU" in recv.recv_device
        for gd in md.partition_graphs:  # and the wire validates them against RUNTIME_OPS
            wire.decode_graph_def(gd, feeds=["x:0"])
    finally:
        plugins._reset_for_tests()


def test_user_graphs_cannot_hold_transfer_ops():
    assert transfer_ops.SEND not in plugins.registry().ops and transfer_ops.RECV not in plugins.registry().ops
    with pytest.raises(tw.errors.NotFoundError, match="not registered"):
        tw.get_default_graph().create_op(transfer_ops.RECV, [], attrs={"tensor_name": "a:0", "send_device": "/cpu:0",
                                                                        "recv_device": "/cpu:0"})
    gd = {"node": [{"name": "r", "op": transfer_ops.RECV, "input": [],
                    "attr": transfer_ops.encode_attrs(transfer_ops.TransferAttrs("a:0", "/cpu:0", "/cpu:1"))}]}
    with pytest.raises(tw.errors.NotFoundError, match="not registered"):
        tw.import_graph_def(gd)
