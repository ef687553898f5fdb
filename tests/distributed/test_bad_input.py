"""Bad input against a real worker, over every installed transport (``inproc`` in this
process, the others in a task process started by ``LocalCluster``): malformed and truncated
messages to every method, wrongly typed fields, an unknown op in a registered graph, tensor
headers whose byte count does not match their shape, oversize messages, RunGraph with the
wrong number of feeds or an unknown handle, RecvTensor with malformed keys. Each is rejected
with a clear tw error, the worker keeps serving (a normal step works right after), and the
variable on it keeps its value."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tensorweave import errors, plugins
from tensorweave.distributed import wire
from tensorweave.distributed.server import Server
from tensorweave.distributed.testing import LocalCluster
from tensorweave.distributed.transport import Security, get_transport

DEV = "/job:worker/replica:0/task:0/device:CPU:0"
LIMIT = 1 << 20          # the worker's max_message_bytes
INITIAL = np.array([1.0, 2.0, 3.0], np.float32)
METHODS = ("GetStatus", "RegisterGraph", "DeregisterGraph", "RunGraph", "AbortStep", "CleanupStep",
           "ResetContainers", "Health")


def _node(name, op, inputs=(), **attr):
    return {"name": name, "op": op, "input": list(inputs), "device": DEV, "attr": attr}


F32 = {"type": "float32"}
VAR = _node("v", "Variable", container={"s": ""}, dtype=F32, shape={"shape": [3]}, shared_name={"s": ""})


def _register(graph_nodes, feeds=(), fetches=()):
    return {"partitions": [{"device": DEV, "graph_def": {"node": graph_nodes}, "loops": {}}],
            "feeds": list(feeds), "fetches": list(fetches), "feed_types": {f: "float32" for f in feeds}}


INIT = _register([VAR, _node("init", "Const", dtype=F32,
                            value={"tensor": {"dtype": "F32", "shape": [3], "data": "AACAPwAAAEAAAEBA"}}),
    _node("assign", "Assign", ["v:0", "init:0"], T=F32, use_locking={"b": True}, validate_shape={"b": True})],
    fetches=["assign:0"])
READ = _register([VAR, _node("read", "Identity", ["v:0"], T=F32)], fetches=["read:0"])
ADD = _register([VAR, _node("x", "Placeholder", dtype=F32, shape={"shape": [3]}),
                 _node("upd", "AssignAdd", ["v:0", "x:0"], T=F32, use_locking={"b": False})],
                feeds=["x:0"], fetches=["upd:0"])


def _transports():
    return sorted(n for n, _ in plugins.registry().transports.items())


class Worker:
    """A client's raw view of one worker: encode, call, decode."""

    def __init__(self, transport, address):
        # The client would send up to 64 MiB: the worker's own limit must refuse what is over LIMIT.
        self.channel = get_transport(transport).channel(address, Security(max_message_bytes=64 << 20))
        self.step = 0

    def raw(self, method, payload):
        return wire.decode_response(self.channel.call(method, payload, 30.0))

    def call(self, method, header, tensors=()):
        return self.raw(method, wire.encode_message(header, list(tensors)))

    def run(self, handle, feeds=()):
        self.step += 1
        _, out = self.call("RunGraph", {"handle": handle, "step_id": self.step}, feeds)
        self.call("CleanupStep", {"step_id": self.step})
        return out


@pytest.fixture(scope="module", params=_transports())
def served(request):
    transport = request.param
    if transport == "inproc":
        spec = {"worker": ["inproc-bad-input:1"]}
        server = Server(spec, "worker", 0, transport="inproc", security=Security(max_message_bytes=LIMIT))
        try:
            yield transport, server.address
        finally:
            server.stop()
    else:
        with LocalCluster({"worker": 1}, transport, extra={"max_message_bytes": LIMIT}) as c:
            yield transport, c.address("worker", 0)


@pytest.fixture
def worker(served):
    w = Worker(*served)
    try:
        (w.read,) = [w.call("RegisterGraph", READ)[0]["handle"]]
        w.add = w.call("RegisterGraph", ADD)[0]["handle"]
        init = w.call("RegisterGraph", INIT)[0]["handle"]
        w.run(init)
        np.testing.assert_array_equal(w.run(w.read)[0], INITIAL)
        yield w
        # The worker still serves a normal step, and nothing changed the variable.
        np.testing.assert_array_equal(w.run(w.read)[0], INITIAL)
        np.testing.assert_array_equal(w.run(w.add, [np.ones(3, np.float32)])[0], INITIAL + 1)
        w.call("Health", {})
    finally:
        w.channel.close()


def _valid(worker):
    """One well-formed request per method."""
    return {
        "GetStatus": wire.encode_message({}),
        "RegisterGraph": wire.encode_message(ADD),
        "DeregisterGraph": wire.encode_message({"handle": "no-such-graph"}),
        "RunGraph": wire.encode_message({"handle": worker.add, "step_id": 999}, [np.ones(3, np.float32)]),
        "AbortStep": wire.encode_message({"step_id": 998}),
        "CleanupStep": wire.encode_message({"step_id": 998}),
        "ResetContainers": wire.encode_message({"containers": ["no-such-container"]}),
        "Health": wire.encode_message({}),
    }


def test_malformed_and_truncated_messages_to_every_method(worker):
    valid = _valid(worker)
    for method in METHODS:
        good = valid[method]
        bad = {
            "empty": b"",
            "garbage": b"this is not a wire message",
            "bad magic": b"XXXX" + good[4:],
            "truncated": good[:len(good) // 2],
            "one byte short": good[:-1],
            "trailing bytes": good + b"\0",
            "header not an object": wire.encode_message({})[:4] + b"\x02\x00\x00\x00[]" + b"\0\0\0\0",
            "header not JSON": b"TWM1\x03\x00\x00\x00{{{" + b"\0\0\0\0",
            "huge length": b"TWM1\xff\xff\xff\x7f{}",
        }
        for what, payload in bad.items():
            with pytest.raises((errors.InvalidArgumentError, errors.DataLossError)) as info:
                worker.raw(method, payload)
            assert info.value.message, (method, what)
    key = f"{DEV};1;{DEV};x:0"
    good = wire.encode_message({"step_id": 1, "key": key})
    for payload in (b"", b"garbage", good[:len(good) // 2], good + b"\0"):
        with pytest.raises((errors.InvalidArgumentError, errors.DataLossError)):
            worker.channel.fetch("RecvTensor", payload, 10.0)


def test_wrongly_typed_fields_are_invalid_argument(worker):
    cases = [
        ("RunGraph", {"handle": worker.add, "step_id": "1"}, [np.ones(3, np.float32)], "step_id"),
        ("RunGraph", {"handle": worker.add, "step_id": True}, [np.ones(3, np.float32)], "step_id"),
        ("AbortStep", {"step_id": [1]}, [], "step_id"),
        ("CleanupStep", {"step_id": {"a": 1}}, [], "step_id"),
        ("DeregisterGraph", {"handle": 5}, [], "handle"),
        ("ResetContainers", {"containers": "all"}, [], "containers"),
        ("RegisterGraph", {"partitions": "x"}, [], "partitions"),
        ("RegisterGraph", {**ADD, "feeds": [1]}, [], "feeds"),
        ("RegisterGraph", {**ADD, "partitions": [{"device": "/job:ps/task:9/device:CPU:0", "graph_def": {}}]}, [],
         "not on this task"),
        ("RegisterGraph", {**ADD, "partitions": [{"device": DEV, "graph_def": {"node": "v"}}]}, [], "graph_def"),
    ]
    for method, header, tensors, needle in cases:
        with pytest.raises(errors.InvalidArgumentError, match=needle):
            worker.call(method, header, tensors)


def test_unknown_op_in_a_registered_graph_is_refused_naming_it(worker):
    nodes = [VAR, _node("x", "Placeholder", dtype=F32, shape={"shape": [3]}),
             _node("upd", "AssignAdd", ["v:0", "x:0"], T=F32, use_locking={"b": False}),
             _node("evil", "LaunchMissiles", ["upd:0"])]
    with pytest.raises(errors.InvalidArgumentError, match="LaunchMissiles"):
        worker.call("RegisterGraph", _register(nodes, feeds=["x:0"], fetches=["upd:0"]))
    # An input naming a node that is not there, and a transfer node without its attrs.
    nodes = [VAR, _node("upd", "AssignAdd", ["v:0", "ghost:0"], T=F32, use_locking={"b": False})]
    with pytest.raises(errors.InvalidArgumentError, match="ghost"):
        worker.call("RegisterGraph", _register(nodes, fetches=["upd:0"]))
    with pytest.raises(errors.InvalidArgumentError, match="_Recv|tensor_name"):
        worker.call("RegisterGraph", _register([VAR, _node("r", "_Recv")], fetches=["r:0"]))


def _lying_feed(worker, **fields):
    """A RunGraph request for ``worker.add`` whose tensor header says ``fields`` instead of the
    truth, the framing intact (the new header takes the place of the old one and its padding)."""
    for step_id in range(555, 600):  # the padding depends on the header's length: find room
        msg = wire.encode_message({"handle": worker.add, "step_id": step_id}, [np.ones(3, np.float32)])
        m = re.search(rb'\{"dtype"[^}]*\} *', msg)
        header = {**json.loads(m.group()), **fields}
        new = json.dumps(header, separators=(",", ":")).encode()
        if len(new) <= len(m.group()):
            return msg[:m.start()] + new.ljust(len(m.group())) + msg[m.end():]
    raise AssertionError(f"no room for {fields}")


def test_tensor_header_byte_count_not_matching_shape(worker):
    for lie in ({"nbytes": 16},          # more bytes than the shape holds
                {"nbytes": 8},           # fewer
                {"shape": [4]},          # shape larger than the bytes
                {"shape": [1]},
                {"shape": [-3]},
                {"shape": [3, 0.5]},
                {"dtype": "float64"},
                {"dtype": "float99"},
                {"nbytes": -12},
                {"dead": 1},
                {"x": 0}):
        with pytest.raises(errors.InvalidArgumentError):
            worker.raw("RunGraph", _lying_feed(worker, **lie))
    with pytest.raises(errors.DataLossError):  # payload cut short
        worker.raw("RunGraph", wire.encode_message({"handle": worker.add, "step_id": 556},
                                                   [np.ones(3, np.float32)])[:-4])


def test_oversize_messages_are_refused(worker):
    big = np.ones(LIMIT // 4 + 16, np.float32)   # just over the worker's limit
    with pytest.raises(errors.ResourceExhaustedError):
        worker.call("RunGraph", {"handle": worker.add, "step_id": 777}, [big])
    with pytest.raises(errors.ResourceExhaustedError):
        worker.call("RegisterGraph", {**ADD, "padding": "x" * (LIMIT + 1)})
    # A tensor header announcing more than the limit, in a small message.
    with pytest.raises(errors.ResourceExhaustedError):
        worker.raw("RunGraph", _lying_feed(worker, nbytes=LIMIT * 4))


def test_run_graph_with_wrong_feeds_or_unknown_handle(worker):
    for feeds in ([], [np.ones(3, np.float32)] * 2):
        with pytest.raises(errors.InvalidArgumentError, match="feed"):
            worker.call("RunGraph", {"handle": worker.add, "step_id": 888}, feeds)
    with pytest.raises(errors.NotFoundError, match="no graph"):
        worker.call("RunGraph", {"handle": "/job:worker/replica:0/task:0/graph-999999", "step_id": 889},
                    [np.ones(3, np.float32)])
    with pytest.raises(errors.InvalidArgumentError, match="'handle'"):  # a request without one
        worker.call("RunGraph", {"step_id": 890}, [np.ones(3, np.float32)])
    # A feed of the wrong shape or dtype fails in the kernel, before anything is assigned.
    for bad in (np.ones(4, np.float32), np.array([b"a", b"b", b"c"], object)):
        with pytest.raises(errors.OpError):
            worker.call("RunGraph", {"handle": worker.add, "step_id": 891}, [bad])


def test_recv_tensor_with_malformed_keys(worker):
    for header in ({"step_id": 1, "key": "no separators"},
                   {"step_id": 1, "key": "a;b;c;d;e"},
                   {"step_id": 1, "key": "/job:ps/replica:0/task:0/device:CPU:0;1;x;y"},  # not this task's device
                   {"step_id": "1", "key": f"{DEV};1;{DEV};x:0"},
                   {"step_id": 1, "key": 7},
                   {"key": f"{DEV};1;{DEV};x:0"}):
        with pytest.raises(errors.InvalidArgumentError):
            worker.channel.fetch("RecvTensor", wire.encode_message(header), 10.0)


def test_unknown_method_is_unimplemented(worker):
    with pytest.raises(errors.UnimplementedError):
        worker.call("FormatDisk", {})
