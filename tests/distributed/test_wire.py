"""The wire format (distributed/wire.py): round trips of every dtype, streamed tensors, responses,
graph defs, and bad input of every kind — always a tw.errors class, never another exception."""

import json
import random
import struct

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.distributed import transport, wire
from tensorweave.framework import dtypes, serialization
from tensorweave.runtime.step import DEAD

NUMERIC = [d for d in dtypes.ALL_DTYPES if not d.is_string]
WIRE_ERRORS = (tw.errors.InvalidArgumentError, tw.errors.DataLossError, tw.errors.ResourceExhaustedError)


def _sample(dt, shape=(3, 4), seed=0):
    rng = np.random.default_rng(seed)
    if dt.is_bool:
        return rng.random(shape) < 0.5
    if dt.is_complex:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt.np_dtype)
    if dt.is_floating:
        return rng.standard_normal(shape).astype(dt.np_dtype)
    info = np.iinfo(dt.np_dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dt.np_dtype, endpoint=True)


def _same(a, b):
    assert type(a) is type(b)
    if a is DEAD:
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype == object:
        assert a.tolist() == b.tolist()
    else:
        np.testing.assert_array_equal(a, b)


def _frame(header, payload=b"", raw_header=None):
    """A tensor frame built by hand (for bad input)."""
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return wire.TENSOR_MAGIC + struct.pack("<I", len(h)) + h + payload


def _message(header=b"{}", frames=(), count=None):
    """A message built by hand around raw header bytes and tensor frames."""
    out = wire.MESSAGE_MAGIC + struct.pack("<I", len(header)) + header
    out += struct.pack("<I", len(frames) if count is None else count)
    for f in frames:
        out += struct.pack("<Q", len(f)) + f
    return out


# ----------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("dt", NUMERIC, ids=lambda d: d.name)
def test_every_dtype_round_trips_as_a_read_only_zero_copy_view(dt):
    x = _sample(dt)
    data = wire.encode_message({"step": 7, "names": ["a"]}, [x])
    header, (y,) = wire.decode_message(data)
    assert header == {"step": 7, "names": ["a"]}
    _same(x, y)
    assert not y.flags.writeable
    assert np.shares_memory(y, np.frombuffer(data, np.uint8))  # no copy of the payload
    (z,) = wire.decode_message(data, copy=True)[1]
    _same(x, z)
    assert z.flags.writeable and not np.shares_memory(z, np.frombuffer(data, np.uint8))


@pytest.mark.parametrize("dt", NUMERIC, ids=lambda d: d.name)
def test_every_dtype_streams(dt):
    x = _sample(dt, (5, 7), seed=1)
    y = wire.assemble_tensor(wire.tensor_chunks(x, chunk_bytes=13))
    _same(x, y)
    assert y.flags.writeable


def test_payloads_start_16_byte_aligned_in_a_message():
    ts = [np.arange(3, dtype=np.int8), np.arange(5, dtype=np.complex128), np.ones((), np.float16),
          np.arange(7, dtype=np.float64)]
    data = wire.encode_message({"k": "v" * 13}, ts)
    base = np.frombuffer(data, np.uint8).ctypes.data
    for t in wire.decode_message(data)[1]:
        assert (t.ctypes.data - base) % 16 == 0
        assert t.flags.aligned


def test_strings_round_trip_as_object_arrays_of_bytes():
    x = np.array([[b"ab", b""], ["x\u00e9", b"\x00\xff"]], dtype=object)
    for y in (wire.decode_message(wire.encode_message({}, [x]))[1][0],
              wire.assemble_tensor(wire.tensor_chunks(x, chunk_bytes=3))):
        assert y.dtype == object and y.shape == (2, 2)
        assert y.tolist() == [[b"ab", b""], ["x\u00e9".encode(), b"\x00\xff"]]
    for s in (np.array(b"scalar", dtype=object), np.array(["u", "v"]), np.array([b"f", b"ixed"]),
              np.empty((0, 3), dtype=object)):
        want = np.array([v.encode() if isinstance(v, str) else v for v in s.reshape(-1).tolist()],
                        dtype=object).reshape(s.shape)
        _same(want, wire.decode_message(wire.encode_message({}, [s]))[1][0])
        _same(want, wire.assemble_tensor(wire.tensor_chunks(s)))


def test_a_bytes_scalar_travels_as_a_0d_string_tensor():
    """What ``sess.run`` returns for a scalar string (bytes) keeps its trailing NULs."""
    for v in (b"ab\x00\x00", "x\u00e9"):
        y = wire.decode_message(wire.encode_message({}, [v]))[1][0]
        assert y.dtype == object and y.shape == ()
        assert y[()] == (v.encode() if isinstance(v, str) else v)


def test_scalars_empty_and_odd_layouts():
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    cases = [np.array(3.5), np.float64(2.0), 7, np.zeros((0,), np.int32), np.zeros((4, 0, 2), np.float64),
             base.T, base[:, ::2, 1:], np.asfortranarray(base), base.astype(">f4"), np.arange(5, dtype=">i8")[::-2]]
    data = wire.encode_message({}, cases)
    out = wire.decode_message(data)[1]
    for x, y in zip(cases, out):
        x = np.asarray(x)
        assert y.shape == x.shape and y.dtype == x.dtype.newbyteorder("=")
        np.testing.assert_array_equal(x, y)
        assert y.flags.c_contiguous
        _same(y.copy(), wire.assemble_tensor(wire.tensor_chunks(x, chunk_bytes=8)))


def test_dead_tensors_are_a_header_flag():
    data = wire.encode_message({}, [np.ones(2), DEAD, np.zeros(0)])
    out = wire.decode_message(data)[1]
    assert out[1] is DEAD and out[0].tolist() == [1.0, 1.0]
    chunks = list(wire.tensor_chunks(DEAD))
    assert len(chunks) == 1 and json.loads(bytes(chunks[0][8:]))["dead"] is True
    assert wire.assemble_tensor(chunks) is DEAD


def test_messages_without_tensors_and_responses_round_trip():
    assert wire.decode_message(wire.encode_message({})) == ({}, [])
    h = {"a": [1, 2.5, None, True, "é"], "b": {"c": {}}}
    assert wire.decode_message(bytearray(wire.encode_message(h)))[0] == h
    header, tensors = wire.decode_response(wire.encode_response(h, [np.arange(3)]))
    assert header == h and tensors[0].tolist() == [0, 1, 2]
    assert wire.decode_response(wire.encode_response()) == ({}, [])


def test_big_tensor_streams_in_chunks_that_are_views():
    x = np.random.default_rng(0).standard_normal(16 << 20).astype(np.float32)  # 64 MiB
    chunks = wire.tensor_chunks(x, chunk_bytes=1 << 20)
    head = next(chunks)
    assert isinstance(head, bytes) and wire.decode_tensor_header(head)[0]["nbytes"] == x.nbytes
    sizes = []

    def data():
        yield head
        for c in chunks:
            assert isinstance(c, memoryview) and np.shares_memory(np.frombuffer(c, np.uint8), x)
            sizes.append(len(c))
            yield c

    y = wire.assemble_tensor(data())
    assert sizes == [1 << 20] * 64
    assert y.flags.writeable and not np.shares_memory(x, y)
    np.testing.assert_array_equal(x, y)
    # the same tensor in one message, decoded without copying it
    data = wire.encode_message({"big": True}, [x])
    (z,) = wire.decode_message(data)[1]
    assert np.shares_memory(z, np.frombuffer(data, np.uint8))
    np.testing.assert_array_equal(x, z)


def test_assembly_accepts_any_chunking_and_a_header_chunk_carrying_data():
    x = np.arange(1000, dtype=np.int16).reshape(10, 100)
    stream = b"".join(bytes(c) for c in wire.tensor_chunks(x))
    header, off = wire.decode_tensor_header(stream)
    assert header == {"dtype": "I16", "shape": (10, 100), "nbytes": 2000, "dead": False}
    pieces = [stream[:off + 5]] + [memoryview(stream)[i:i + 37] for i in range(off + 5, len(stream), 37)]
    np.testing.assert_array_equal(wire.assemble_tensor(pieces), x)
    asm = wire.TensorAssembler(header)
    payload = memoryview(stream)[off:]
    asm.buffer[:1000] = payload[:1000]  # a transport that receives straight into the buffer
    asm.advance(1000)
    asm.write(payload[1000:])
    np.testing.assert_array_equal(asm.finish(), x)


# ----------------------------------------------------------------------------------------
# Bad messages


def _small_message():
    return wire.encode_message({"method": "RunGraph", "step": 3},
                               [np.arange(3, dtype=np.int32), np.array([b"x", b"yz"], dtype=object), DEAD,
                                np.array(True)])


def test_truncation_at_every_byte_position_raises_a_wire_error():
    data = _small_message()
    kinds = set()
    for n in range(len(data)):
        with pytest.raises(WIRE_ERRORS) as e:
            wire.decode_message(data[:n])
        kinds.add(type(e.value))
        with pytest.raises(WIRE_ERRORS):
            wire.decode_response(memoryview(data)[:n])
    assert tw.errors.DataLossError in kinds
    wire.decode_message(data)  # the whole message is fine


def test_truncated_streams_raise_data_loss():
    chunks = [bytes(c) for c in wire.tensor_chunks(np.arange(10, dtype=np.float64), chunk_bytes=16)]
    with pytest.raises(tw.errors.DataLossError, match="ended before its header"):
        wire.assemble_tensor([])
    with pytest.raises(tw.errors.DataLossError, match="ended after 64 of the 80 bytes"):
        wire.assemble_tensor(chunks[:-1])
    with pytest.raises(tw.errors.DataLossError, match="more than the 80 bytes"):
        wire.assemble_tensor(chunks + [b"\x00"])
    for n in range(len(chunks[0])):
        with pytest.raises(WIRE_ERRORS):
            wire.assemble_tensor([chunks[0][:n]] + chunks[1:])


def test_random_corruption_never_leaks_other_exceptions():
    data = _small_message()
    rng = random.Random(1234)
    decoded = 0
    for _ in range(3000):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        try:
            wire.decode_message(bytes(b))
            decoded += 1  # a flipped payload byte still decodes: the format has no checksum
        except WIRE_ERRORS:
            pass
    assert decoded < 3000


def test_wrong_magic():
    data = _small_message()
    with pytest.raises(tw.errors.InvalidArgumentError, match="magic"):
        wire.decode_message(b"XWM1" + data[4:])
    with pytest.raises(tw.errors.InvalidArgumentError, match="magic"):
        wire.decode_message(b"TX")
    bad_frame = b"TWT2" + _frame({"dtype": "I8", "shape": [1], "nbytes": 1}, b"\x01")[4:]
    with pytest.raises(tw.errors.InvalidArgumentError, match="tensor 0 of 1.*magic"):
        wire.decode_message(_message(frames=[bad_frame]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="magic"):
        wire.assemble_tensor([b"\x93NUMPY" + b"\x00" * 20])


def test_header_byte_count_not_matching_shape():
    frame = _frame({"dtype": "F32", "shape": [2, 2], "nbytes": 12}, b"\x00" * 12)
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=r"byte count 12 does not match shape \[2, 2\] of float32 .* = 16 bytes"):
        wire.decode_message(_message(frames=[frame]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="byte count 12 does not match"):
        wire.assemble_tensor([frame])
    # the header agrees with its shape but the frame holds fewer bytes than it says
    short = _frame({"dtype": "F32", "shape": [2, 2], "nbytes": 16}, b"\x00" * 12)
    with pytest.raises(tw.errors.InvalidArgumentError, match="12 payload bytes but its header says nbytes=16"):
        wire.decode_message(_message(frames=[short]))


def test_oversize():
    data = wire.encode_message({}, [np.zeros(1000, np.float64)])
    with pytest.raises(tw.errors.ResourceExhaustedError, match=f"{len(data)} bytes exceeds the limit of 4000"):
        wire.decode_message(data, max_bytes=4000)
    with pytest.raises(tw.errors.ResourceExhaustedError, match="exceeds the limit of 4000"):
        wire.encode_message({}, [np.zeros(1000, np.float64)], max_bytes=4000)
    # a stream announcing 4 TiB is refused before anything is allocated
    huge = _frame({"dtype": "F32", "shape": [1 << 40], "nbytes": 4 << 40})
    with pytest.raises(tw.errors.ResourceExhaustedError, match="exceeds the limit"):
        wire.assemble_tensor([huge])
    with pytest.raises(tw.errors.ResourceExhaustedError):
        wire.assemble_tensor(wire.tensor_chunks(np.zeros(100)), max_bytes=799)


@pytest.mark.parametrize("raw, match", [
    (b"[1, 2]", "must be a JSON object, got list"),
    (b"null", "must be a JSON object, got NoneType"),
    (b"{'a': 1}", "not valid JSON"),
    (b"{\"a\": 1", "not valid JSON"),
    (b"\xff\xfe{}", "not valid UTF-8"),
    (b"[" * 100000 + b"]" * 100000, "not valid JSON"),
    (b"{\"a\": " + b"9" * 5000 + b"}", "not valid JSON"),
])
def test_header_json_must_be_an_object(raw, match):
    with pytest.raises(tw.errors.InvalidArgumentError, match=match):
        wire.decode_message(_message(raw))
    with pytest.raises(tw.errors.InvalidArgumentError, match=match):
        wire.decode_tensor_header(_frame(None, raw_header=raw))


@pytest.mark.parametrize("header, match", [
    ({"dtype": "float8", "shape": [1], "nbytes": 1}, "unknown dtype 'float8'"),
    ({"dtype": "object", "shape": [1], "nbytes": 8}, "unknown dtype 'object'"),
    ({"dtype": 3, "shape": [1], "nbytes": 8}, "unknown dtype 3"),
    ({"shape": [1], "nbytes": 8}, "unknown dtype None"),
    ({"dtype": "I8", "shape": [-1], "nbytes": 1}, "non-negative ints"),
    ({"dtype": "I8", "shape": [True], "nbytes": 1}, "non-negative ints"),
    ({"dtype": "I8", "shape": [1.0], "nbytes": 1}, "non-negative ints"),
    ({"dtype": "I8", "shape": 1, "nbytes": 1}, "non-negative ints"),
    ({"dtype": "I8", "shape": [1] * 40, "nbytes": 1}, "at most 32"),
    ({"dtype": "I8", "shape": [1], "nbytes": -1}, "nbytes must be a non-negative int"),
    ({"dtype": "I8", "shape": [1], "nbytes": "1"}, "nbytes must be a non-negative int"),
    ({"dtype": "I8", "shape": [1], "nbytes": 1, "dead": 1}, "'dead' must be a bool"),
    ({"dtype": "I8", "shape": [1], "nbytes": 1, "dead": True}, "a dead tensor carries no bytes"),
    ({"dtype": "I8", "shape": [1], "nbytes": 1, "pickle": True}, r"unknown header field\(s\) \['pickle'\]"),
    ({"dtype": "STR", "shape": [3], "nbytes": 24}, "cannot hold the 4 string offsets"),
    ({"dtype": "float32", "shape": [1], "nbytes": 4}, "unknown dtype 'float32'"),  # tensorweave's name: not a wire name
])
def test_bad_tensor_headers(header, match):
    frame = _frame(header, b"\x00" * max(0, header.get("nbytes", 0) if isinstance(header.get("nbytes"), int) else 0))
    with pytest.raises(tw.errors.InvalidArgumentError, match=match):
        wire.decode_message(_message(frames=[frame]))
    with pytest.raises(tw.errors.InvalidArgumentError, match=match):
        wire.assemble_tensor([frame])


def test_bad_payloads():
    with pytest.raises(tw.errors.InvalidArgumentError, match="bytes other than 0 and 1"):
        wire.decode_message(_message(frames=[_frame({"dtype": "BOOL", "shape": [2], "nbytes": 2}, b"\x01\x02")]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="bytes other than 0 and 1"):
        wire.assemble_tensor([_frame({"dtype": "BOOL", "shape": [2], "nbytes": 2}, b"\x01\x02")])

    def strings(offsets, body, shape=(2,)):
        payload = struct.pack(f"<{len(offsets)}q", *offsets) + body
        return _frame({"dtype": "STR", "shape": list(shape), "nbytes": len(payload)}, payload)

    wire.decode_message(_message(frames=[strings([0, 1, 3], b"abc")]))  # well formed
    for frame, match in [
        (strings([0, 1, 3, 3], b"abc"), "its offsets do not describe its 11 bytes"),  # one offset too many
        (strings([0, 1, 4], b"abc"), "its offsets do not describe its 3 bytes"),
        (strings([1, 1, 3], b"abc"), "its offsets do not describe"),
        (strings([0, 2, 1], b"abc"), "its offsets do not describe"),
        (strings([0, -1, 3], b"abc"), "its offsets do not describe"),
        (strings([0, 2**62, 3], b"abc"), "its offsets do not describe"),
        (strings([0], b"zz", shape=(0,)), "its offsets do not describe its 2 bytes"),
        (strings([0], b"", shape=(2,)), "cannot hold the 3 string offsets"),
    ]:
        with pytest.raises(tw.errors.InvalidArgumentError, match=match):
            wire.decode_message(_message(frames=[frame]))
        with pytest.raises(tw.errors.InvalidArgumentError, match=match):
            wire.assemble_tensor([frame])


def test_trailing_garbage_and_tensor_count():
    data = _small_message()
    with pytest.raises(tw.errors.InvalidArgumentError, match="1 trailing bytes after its 4 tensor"):
        wire.decode_message(data + b"\x00")
    with pytest.raises(tw.errors.DataLossError, match="tensor 0 of 4294967295"):
        wire.decode_message(_message(count=2**32 - 1))


def test_not_bytes_and_unencodable_values():
    with pytest.raises(tw.errors.InvalidArgumentError, match="must be bytes"):
        wire.decode_message("TWM1")
    with pytest.raises(tw.errors.InvalidArgumentError, match="must be bytes"):
        wire.decode_message(np.arange(4)[::2])
    with pytest.raises(tw.errors.InvalidArgumentError, match="header must be a dict"):
        wire.encode_message([1])
    with pytest.raises(tw.errors.InvalidArgumentError, match="not JSON-serialisable"):
        wire.encode_message({"a": object()})
    with pytest.raises(tw.errors.InvalidArgumentError, match="must be a list or tuple"):
        wire.encode_message({}, np.zeros(3))
    with pytest.raises(tw.errors.InvalidArgumentError, match="tensor 1: NumPy dtype datetime64"):
        wire.encode_message({}, [np.zeros(1), np.array(["2020-01-01"], dtype="datetime64[D]")])
    with pytest.raises(tw.errors.InvalidArgumentError, match="holds bytes or str, got int"):
        wire.encode_message({}, [np.array([b"a", 3], dtype=object)])
    with pytest.raises(tw.errors.InvalidArgumentError, match="holds bytes or str"):
        wire.tensor_chunks(np.array([None], dtype=object))  # checked at once, not mid-stream
    with pytest.raises(tw.errors.InvalidArgumentError, match="chunk_bytes"):
        wire.tensor_chunks(np.zeros(2), chunk_bytes=0)


# ----------------------------------------------------------------------------------------
# Responses and errors


@pytest.mark.parametrize("cls", [c for c in vars(tw.errors).values()
                                 if isinstance(c, type) and issubclass(c, tw.errors.OpError) and c is not tw.errors.OpError])
def test_error_responses_raise_their_class(cls):
    data = wire.encode_error(cls("went wrong on /job:worker/task:1", node_def="mul_3"))
    with pytest.raises(cls) as e:
        wire.decode_response(data)
    assert type(e.value) is cls
    assert e.value.message == "went wrong on /job:worker/task:1" and e.value.node_def == "mul_3"
    assert wire.decode_message(data)[0]["error"]["error_code"] == cls.error_code


def test_error_classes_travel_by_their_nearest_tw_errors_class():
    class PluginError(tw.errors.NotFoundError):
        pass

    with pytest.raises(tw.errors.NotFoundError) as e:
        wire.decode_response(wire.encode_error(PluginError("no such thing")))
    assert type(e.value) is tw.errors.NotFoundError
    with pytest.raises(tw.errors.UnknownError, match="KeyError: 'x'"):
        wire.decode_response(wire.encode_error(KeyError("x")))
    for code in ("NoSuchError", "OpError", "ValueError", "__class__", "errors", 3, None):
        with pytest.raises(tw.errors.UnknownError, match="boom") as e:
            wire.decode_response(wire.encode_message({"error": {"code": code, "message": "boom"}}))
        assert type(e.value) is tw.errors.UnknownError


def test_malformed_responses():
    with pytest.raises(tw.errors.InvalidArgumentError, match="neither"):
        wire.decode_response(wire.encode_message({"result": 1}))
    with pytest.raises(tw.errors.InvalidArgumentError, match="neither"):
        wire.decode_response(wire.encode_message({"ok": 1}))
    with pytest.raises(tw.errors.InvalidArgumentError, match="'error' is str"):
        wire.decode_response(wire.encode_message({"error": "bad"}))
    with pytest.raises(tw.errors.InvalidArgumentError, match="reserved"):
        wire.encode_response({"ok": False})
    with pytest.raises(tw.errors.InvalidArgumentError, match="began with a response message"):
        wire.assemble_tensor([wire.encode_response({})])


def test_through_the_inproc_transport():
    """A dispatcher's unary and stream methods, and its errors, over the in-process transport."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    def echo(payload):
        header, tensors = wire.decode_message(payload)
        return wire.encode_response({"got": header["n"]}, [t * 2 for t in tensors])

    def fail(payload):
        return wire.encode_error(tw.errors.FailedPreconditionError("not initialised", node_def="v"))

    def recv(payload):
        key = wire.decode_message(payload)[0]["key"]
        if key != "x:0":
            return iter([wire.encode_error(tw.errors.NotFoundError(f"no tensor {key!r}"))])
        return wire.tensor_chunks(x, chunk_bytes=10)

    d = transport.ServiceDispatcher({"Echo": echo, "Fail": fail}, {"RecvTensor": recv})
    t = transport.InProcTransport()
    server = t.server("127.0.0.1:0", d)
    ch = t.channel(server.address)
    try:
        header, (y,) = wire.decode_response(ch.call("Echo", wire.encode_message({"n": 5}, [x])))
        assert header == {"got": 5}
        np.testing.assert_array_equal(y, x * 2)
        with pytest.raises(tw.errors.FailedPreconditionError, match="not initialised"):
            wire.decode_response(ch.call("Fail", wire.encode_message({})))
        with pytest.raises(tw.errors.UnimplementedError, match="Nope"):
            wire.decode_response(ch.call("Nope", b""))
        np.testing.assert_array_equal(ch.fetch("RecvTensor", wire.encode_message({"key": "x:0"})), x)
        with pytest.raises(tw.errors.NotFoundError, match="'y:0'"):
            ch.fetch("RecvTensor", wire.encode_message({"key": "y:0"}))
        with pytest.raises(tw.errors.UnimplementedError, match="Other"):
            ch.fetch("Other", b"")
    finally:
        ch.close()
        server.stop()


# ----------------------------------------------------------------------------------------
# Graph defs


@pytest.fixture
def two_device_partitions():
    """The partition GraphDefs of a CPU + FAKE plan, with the fed tensor names."""
    from tensorweave.testing.fake_device import register_fake_devices

    register_fake_devices(count=1)
    try:
        x = tw.placeholder(tw.float32, [4], name="x")
        with tw.device("/device:CPU:0"):
            a = tw.identity(x, name="a")
            v = tw.Variable(np.zeros(4, np.float32), name="v")
            c = tw.constant(np.arange(4, dtype=np.float32), name="c")
        with tw.device("/device:FAKE:0"):
            r = tw.reduce_sum(tw.multiply(a, 2.0, name="y"), name="r")
            with tw.control_dependencies([v.initializer]):
                z = tw.add_n([r + 1.0, tw.reduce_sum(v), tw.reduce_sum(c)], name="z")
        md = tw.RunMetadata()
        with tw.Session() as s:
            s.run(tw.global_variables_initializer())
            s.run(z, {x: [1, 2, 3, 4]}, options=tw.RunOptions(output_partition_graphs=True), run_metadata=md)
        yield md.partition_graphs, ["x:0"]
    finally:
        plugins._reset_for_tests()


def _json(gd):
    """A decoded graph def with its tensor values (arrays) in the JSON form, comparable with ==."""
    def attr(v):
        (kind, x), = v.items()
        if kind == "tensor":
            return {"tensor": serialization.encode_tensor(x)}
        return {"list": [attr(e) for e in x]} if kind == "list" else v
    return json.loads(json.dumps({**gd, "node": [{**n, "attr": {k: attr(v) for k, v in n["attr"].items()}}
                                                 for n in gd["node"]]}))


def test_partition_graph_defs_round_trip_through_a_message(two_device_partitions):
    gds, feeds = two_device_partitions
    assert len(gds) == 2 and {"_Send", "_Recv"} <= {n["op"] for gd in gds for n in gd["node"]}
    constants = []
    enc = [wire.encode_graph_def(gd, constants) for gd in gds]
    # every constant (v's initial value, c, 2.0, 1.0, the reduction axes) travels as a frame, not as base64
    assert len(constants) == sum("value" in n["attr"] for gd in gds for n in gd["node"]) == 6
    assert '"data"' not in json.dumps(enc) and '{"frame": 1}' in json.dumps(enc)
    header, tensors = wire.decode_message(wire.encode_message({"partitions": enc}, constants))
    for gd, got in zip(gds, header["partitions"]):
        out = wire.decode_graph_def(got, plugins.registry(), feeds=feeds, tensors=tensors)
        assert _json(out) == json.loads(json.dumps({"versions": {"producer": 1}, **gd}))
        assert _json(wire.decode_graph_def(got, plugins.registry().ops, feeds=feeds, tensors=tensors)) == _json(out)
    fed_part = next(gd for gd in header["partitions"] if any(n["name"] == "a" for n in gd["node"]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="node 'a': input 'x:0' names no node of this graph"):
        wire.decode_graph_def(fed_part, tensors=tensors)  # without feeds=["x:0"]
    const_part = next(gd for gd in header["partitions"] if any(n["name"] == "c" for n in gd["node"]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="attr 'value': tensor frame 0 is not one of "
                                                             "the message's 0 tensor"):
        wire.decode_graph_def(const_part, feeds=feeds)  # without the message's tensors


def test_a_user_graph_round_trips_and_imports():
    x = tw.placeholder(tw.float32, [None, 3], name="x")
    with tw.name_scope("layer"):
        y = tw.nn.relu(tw.matmul(x, tw.constant(np.eye(3, dtype=np.float32))) + 1.0)
    parts = tw.split(y, 3, axis=1)
    tw.identity(tw.concat([parts[2], parts[0]], axis=1), name="out")
    gd = tw.get_default_graph().as_graph_def()
    constants = []
    header, tensors = wire.decode_message(wire.encode_message({"g": wire.encode_graph_def(gd, constants)}, constants))
    got = wire.decode_graph_def(header["g"], tensors=tensors)
    g = tw.Graph()
    with g.as_default():
        tw.import_graph_def(got, name="")
        with tw.Session() as s:
            out = s.run("out:0", {"x:0": [[1.0, -5.0, 2.0]]})
    np.testing.assert_array_equal(out, [[3.0, 2.0]])


def _gd(*nodes):
    return {"versions": {"producer": 1}, "node": list(nodes)}


def _const(name, value=1.0):
    return {"name": name, "op": "Const", "input": [], "device": "",
            "attr": {"dtype": {"type": "float32"},
                     "value": {"tensor": {"dtype": "F32", "shape": [], "data": "AACAPw=="}}}}


def _add(name, *inputs, **attr):
    return {"name": name, "op": "Add", "input": list(inputs), "attr": {"T": {"type": "float32"}, **attr}}


def test_graph_def_checks_pass_for_a_good_graph():
    gd = _gd(_const("a"), _const("b"), _add("c", "a:0", "b:0", _class={"list": [{"s": "loc:@a"}]}),
             {"name": "n", "op": "NoOp", "input": ["^c"]})
    out = wire.decode_graph_def(gd)
    assert [n["name"] for n in out["node"]] == ["a", "b", "c", "n"] and out["node"][3]["device"] == ""


@pytest.mark.parametrize("gd, match", [
    (_gd({"name": "w", "op": "EvalPython", "input": []}), "node 'w': op 'EvalPython' is not registered"),
    (_gd(_const("a"), _add("c", "a:0", "missing:0")), "node 'c': input 'missing:0' names no node of this graph"),
    (_gd(_const("a"), {"name": "n", "op": "NoOp", "input": ["^gone"]}), "control input '\\^gone' names no node"),
    (_gd(_const("a"), _add("c", "a", "a:0")), "'a' is not of the form 'node:index'"),
    (_gd(_const("a"), _add("c", "a:x", "a:0")), "'a:x' is not of the form"),
    (_gd(_const("a"), _add("c", "a:-1", "a:0")), "'a:-1' is not of the form"),
    (_gd(_const("a"), _add("c", "a:01", "a:0")), "'a:01' is not of the form"),
    (_gd(_const("a"), _add("c", "a:0", ":0")), "':0' is not of the form"),
    (_gd(_const("a"), _add("c", "a:1", "a:0")), "output 1 of Const node 'a', which has 1 output"),
    (_gd(_const("a"), _add("c", "a:0", "^a", "a:0")), "comes after a control input"),
    (_gd(_const("a"), _add("c", "a:0")), "op Add takes 2 data input\\(s\\), got 1"),
    (_gd(_const("a"), _const("a")), "two nodes named 'a'"),
    (_gd({**_const("a"), "name": "bad name"}), "invalid node name 'bad name'"),
    (_gd({**_const("a"), "name": "/abs"}), "invalid node name"),
    (_gd({**_const("a"), "name": 7}), "invalid node name"),
    (_gd({**_const("a"), "op": ""}), "'op' must be a non-empty string"),
    (_gd({**_const("a"), "input": "b:0"}), "'input' must be a list of strings"),
    (_gd({**_const("a"), "input": [1]}), "'input' must be a list of strings"),
    (_gd({**_const("a"), "device": 3}), "'device' must be a string"),
    (_gd({**_const("a"), "code": "x"}), "unknown field\\(s\\) \\['code'\\]"),
    (_gd(_const("a"), _add("c", "a:0", "a:0", T={"i": 1})), "attr 'T': declared type, so expected kind 'type', got 'i'"),
    (_gd(_const("a"), _add("c", "a:0", "a:0", T={"type": "bool"})), "dtype bool is not allowed"),
    (_gd(_const("a"), _add("c", "a:0", "a:0", T={"type": "float8"})), "unknown dtype 'float8'"),
    (_gd(_const("a"), _add("c", "a:0", "a:0", T={"type": "float32", "i": 1})), "one tagged value"),
    (_gd(_const("a"), _add("c", "a:0", "a:0", T={"none": True})), "\"none\"\\) is not allowed"),
    (_gd(_const("a"), _add("c", "a:0", "a:0", alpha={"f": 1.0})), "unknown attr 'alpha' for op Add"),
    (_gd(_const("a"), {"name": "c", "op": "Add", "input": ["a:0", "a:0"]}), "op Add needs attr\\(s\\) \\['T'\\]"),
    (_gd({**_const("a"), "attr": {"dtype": {"type": "float32"},
                                  "value": {"tensor": {"dtype": "F32", "shape": [2], "data": "AACAPw=="}}}}),
     "attr 'value': malformed tensor value"),
    (_gd({**_const("a"), "attr": {"dtype": {"type": "float32"}, "value": {"tensor": "AACAPw=="}}}), "attr 'value'"),
    (_gd({**_const("a"), "attr": []}), "'attr' must be an object"),
    (_gd({**_const("a"), "output_shapes": [[-1]]}), "malformed 'output_shapes'"),
    ({"node": [], "library": {}}, "unknown field\\(s\\) \\['library'\\]"),
    ({"versions": {"producer": 99}, "node": []}, "version 99 is newer"),
    ({"versions": [], "node": []}, "'versions' must be"),
    ({"node": {}}, "must have a 'node' list"),
    ([], "graph def must be a JSON object"),
    (_gd("Const"), "node 0 must be an object"),
])
def test_bad_graph_defs(gd, match):
    with pytest.raises(tw.errors.InvalidArgumentError, match=match):
        wire.decode_graph_def(gd, plugins.registry())


def test_graph_def_attr_kinds_and_runtime_ops():
    sum_node = {"name": "s", "op": "Sum", "input": ["a:0", "i:0"],
                "attr": {"T": {"type": "float32"}, "Tidx": {"type": "int32"}, "keep_dims": {"b": 1}}}
    i_node = {"name": "i", "op": "Const", "input": [], "attr": {
        "dtype": {"type": "int32"}, "value": {"tensor": {"dtype": "I32", "shape": [0], "data": ""}}}}
    with pytest.raises(tw.errors.InvalidArgumentError, match="attr 'keep_dims': malformed 'b' value 1"):
        wire.decode_graph_def(_gd(_const("a"), i_node, sum_node))
    sum_node["attr"]["keep_dims"] = {"b": True}
    wire.decode_graph_def(_gd(_const("a"), i_node, sum_node))
    # a list input: AddN's input count comes from N
    addn = {"name": "n", "op": "AddN", "input": ["a:0", "a:0", "a:0"], "attr": {"N": {"i": 3}, "T": {"type": "float32"}}}
    wire.decode_graph_def(_gd(_const("a"), addn))
    addn["attr"]["N"] = {"i": 2}
    with pytest.raises(tw.errors.InvalidArgumentError, match="op AddN takes 2 data input"):
        wire.decode_graph_def(_gd(_const("a"), addn))
    addn["attr"]["N"] = {"i": 0}
    with pytest.raises(tw.errors.InvalidArgumentError, match="attr 'N': must be >= 1"):
        wire.decode_graph_def(_gd(_const("a"), addn))
    # the runtime's _Send/_Recv, as passes/partition.py writes them
    recv = {"name": "_recv_0", "op": "_Recv", "input": [], "attr": {
        "tensor_name": {"s": "a:0"}, "send_device": {"s": "/cpu:0"}, "recv_device": {"s": "/cpu:1"},
        "tensor_type": {"type": "float32"}, "iterations": {"s": "all"}}}
    send = {"name": "_send_0", "op": "_Send", "input": ["c:0"], "attr": {
        "tensor_name": {"s": "c:0"}, "send_device": {"s": "/cpu:1"}, "recv_device": {"s": "/cpu:0"}}}
    wire.decode_graph_def(_gd(recv, _add("c", "_recv_0:0", "_recv_0:0"), send))
    for bad, match in [({**recv, "attr": {**recv["attr"], "iterations": {"s": "most"}}}, "'most' is not one of"),
                       ({**recv, "attr": {k: v for k, v in recv["attr"].items() if k != "send_device"}},
                        "needs attr\\(s\\) \\['send_device'\\]"),
                       ({**recv, "input": ["c:0"]}, "_Recv takes at most 0 data input")]:
        with pytest.raises(tw.errors.InvalidArgumentError, match=match):
            wire.decode_graph_def(_gd(bad, _add("c", "_recv_0:0", "_recv_0:0"), send))


def test_graph_def_deep_attr_nesting_and_encoding_a_graph():
    deep = {"s": "x"}
    for _ in range(5000):
        deep = {"list": [deep]}
    with pytest.raises(tw.errors.InvalidArgumentError, match="nested too deeply"):
        wire.decode_graph_def(_gd({**_const("a"), "attr": {**_const("a")["attr"], "_deep": deep}}))
    tw.add(tw.constant(1.0, name="one"), 2.0, name="three")
    constants = []
    enc = wire.encode_graph_def(tw.get_default_graph(), constants)  # anything with as_graph_def()/to_graph_def()
    assert [n["name"] for n in wire.decode_graph_def(enc, tensors=constants)["node"]] == ["one", "Const", "three"]
    assert [t.tolist() for t in constants] == [1.0, 2.0]
    with pytest.raises(tw.errors.InvalidArgumentError, match="control input '\\^gone' names no node"):
        wire.encode_graph_def(_gd({"name": "n", "op": "NoOp", "input": ["^gone"]}), [])


def test_graph_def_node_limit():
    gd = _gd(_const("a"), _const("b"), _const("c"))
    wire.decode_graph_def(gd, max_nodes=3)
    with pytest.raises(tw.errors.ResourceExhaustedError, match="3 nodes, more than the limit of 2"):
        wire.decode_graph_def(gd, max_nodes=2)


def test_graph_constants_travel_as_frames_of_every_dtype():
    consts = {f"c_{dt.name}": (["a", "\u00e9", ""] if dt.is_string else _sample(dt, (3,)))
              for dt in dtypes.ALL_DTYPES}
    for name, v in consts.items():
        tw.constant(v, name=name)
    gd = tw.get_default_graph().as_graph_def()
    constants = []
    header, tensors = wire.decode_message(wire.encode_message({"g": wire.encode_graph_def(gd, constants)}, constants),
                                          copy=True)
    assert len(tensors) == len(consts) and "data" not in json.dumps(header)
    got = wire.decode_graph_def(header["g"], tensors=tensors)
    assert _json(got) == gd
    g = tw.Graph()
    with g.as_default(), tw.Session() as s:
        tw.import_graph_def(got, name="")
        for name, v in consts.items():
            out = s.run(f"{name}:0")
            want = np.array([x.encode() for x in v], dtype=object) if isinstance(v, list) else v
            _same(np.asarray(out), want)


@pytest.mark.parametrize("ref, match", [
    ({"frame": 1}, "tensor frame 1 is not one of the message's 1 tensor"),
    ({"frame": -1}, "tensor frame -1 is not one of"),
    ({"frame": "0"}, "tensor frame 0 is not one of"),
    ({"frame": True}, "tensor frame True is not one of"),
    ({"frame": 0, "dtype": "F32"}, "malformed tensor value"),
])
def test_bad_frame_references(ref, match):
    gd = _gd({**_const("a"), "attr": {"dtype": {"type": "float32"}, "value": {"tensor": ref}}})
    with pytest.raises(tw.errors.InvalidArgumentError, match="node 'a': attr 'value': " + match):
        wire.decode_graph_def(gd, tensors=[np.float32(1.0)])
    with pytest.raises(tw.errors.InvalidArgumentError, match="tensor frame 0 is a dead tensor, not a value"):
        wire.decode_graph_def(_gd({**_const("a"), "attr": {"dtype": {"type": "float32"},
                                                           "value": {"tensor": {"frame": 0}}}}), tensors=[DEAD])


def test_transfer_nodes_need_their_names():
    recv = {"name": "_recv_0", "op": "_Recv", "input": [], "attr": {
        "tensor_name": {"s": ""}, "send_device": {"s": "/cpu:0"}, "recv_device": {"s": "/cpu:1"}}}
    with pytest.raises(tw.errors.InvalidArgumentError, match="transfer node '_recv_0' needs a non-empty 'tensor_name'"):
        wire.decode_graph_def(_gd(recv))
