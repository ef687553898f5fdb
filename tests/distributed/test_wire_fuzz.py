"""Fuzzing every decode path of ``distributed/wire.py`` (hypothesis): whatever bytes or JSON
arrive, only ``tw.errors`` classes come out, and a small input never makes the decoder
allocate much more than its own size before it is validated.

Bounded for CI: each property runs ``TW_FUZZ_EXAMPLES`` examples (default 120),
derandomized so every run tries the same inputs; set ``TW_FUZZ_EXAMPLES`` to fuzz longer
with fresh random inputs. The whole module takes seconds.
"""

from __future__ import annotations

import json
import os
import struct
import tracemalloc

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tensorweave import errors, plugins  # noqa: E402
from tensorweave.distributed import wire  # noqa: E402
from tensorweave.framework import tensor_codec  # noqa: E402
from tensorweave.runtime.step import DEAD  # noqa: E402

_EXAMPLES = os.environ.get("TW_FUZZ_EXAMPLES")
FUZZ = settings(max_examples=int(_EXAMPLES or 120), derandomize=_EXAMPLES is None, deadline=None,
                database=None, suppress_health_check=list(HealthCheck))


def tw_only(fn, *args, **kwargs):
    """``fn(...)``'s result, or None when it raised a ``tw.errors`` class; anything else
    propagates and fails the property."""
    try:
        return fn(*args, **kwargs)
    except errors.OpError as e:
        assert e.message, f"{type(e).__name__} without a message"
        return None


# ----------------------------------------------------------------------------------------
# Inputs

def _frame(header_bytes: bytes, payload: bytes = b"") -> bytes:
    return wire.TENSOR_MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes + payload


def _message(header_bytes: bytes, frames=(), count=None) -> bytes:
    out = wire.MESSAGE_MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes
    out += struct.pack("<I", len(frames) if count is None else count)
    for f in frames:
        out += struct.pack("<Q", len(f)) + f
    return out


json_scalars = st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | \
    st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)

dtype_names = st.sampled_from([*tensor_codec.NAMES, "BF16", "F8_E4M3", "float32", "", "STRING"]) | json_values
dims = st.integers(-3, 2 ** 64) | st.sampled_from([0, 1, 2, 3, 2 ** 31, 2 ** 62 - 1, 2 ** 62]) | json_scalars
shapes = st.lists(dims, max_size=40) | json_values
tensor_headers = st.fixed_dictionaries(
    {}, optional={"dtype": dtype_names, "shape": shapes,
                  "nbytes": st.integers(-1, 2 ** 40) | st.sampled_from([0, 1, 8, 16]) | json_scalars,
                  "dead": st.booleans() | json_scalars, "extra": json_scalars})


def _encode_json(obj) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


@st.composite
def structured_frames(draw):
    h = draw(tensor_headers)
    payload = draw(st.binary(max_size=64))
    if draw(st.booleans()) and isinstance(h.get("nbytes"), int) and 0 <= h["nbytes"] <= 256:
        payload = draw(st.binary(min_size=h["nbytes"], max_size=h["nbytes"]))
    return _frame(_encode_json(h), payload)


def _valid_messages():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([b"a", b"", b"xyz"], dtype=object)
    return [
        wire.encode_message({}),
        wire.encode_message({"step_id": 7, "key": "a;b;c;d"}, [x, s, DEAD]),
        wire.encode_message({"handle": "h", "step_id": 1}, [np.ones(3, np.float32), np.array(True)]),
        wire.encode_response({"fetches": ["y:0"]}, [np.zeros((0, 4), np.int64), np.array(1 + 2j)]),
        wire.encode_error(errors.NotFoundError("no such thing", node_def="n")),
    ]


VALID = _valid_messages()


@st.composite
def mutated_messages(draw):
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[i] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[i:i + draw(st.integers(1, 8))]
    return bytes(data)


any_bytes = st.binary(max_size=256) | mutated_messages() | \
    st.builds(lambda h, fs: _message(h, fs), st.binary(max_size=32) | json_values.map(_encode_json),
              st.lists(structured_frames(), max_size=3))


# ----------------------------------------------------------------------------------------
# Byte-level decoders

@FUZZ
@given(any_bytes, st.booleans())
def test_decode_message_and_response_raise_only_tw_errors(data, copy):
    tw_only(wire.decode_message, data, copy=copy)
    tw_only(wire.decode_message, data, max_bytes=64, copy=copy)
    tw_only(wire.decode_response, data, copy=copy)


@FUZZ
@given(st.binary(max_size=128) | structured_frames() | mutated_messages(), st.lists(st.binary(max_size=64), max_size=3))
def test_streamed_tensor_decoders_raise_only_tw_errors(first, rest):
    tw_only(wire.decode_tensor_header, first)
    tw_only(wire.assemble_tensor, [first, *rest])
    tw_only(wire.assemble_tensor, [first, *rest], max_bytes=32)
    header = tw_only(wire.decode_tensor_header, first)
    if header is not None:
        def feed():
            asm = wire.TensorAssembler(header[0])
            for c in rest:
                asm.write(c)
            return asm.finish()
        tw_only(feed)


@FUZZ
@given(json_values, st.sampled_from(sorted(wire.REQUEST_FIELDS)))
def test_request_headers_raise_only_tw_errors(header, method):
    tw_only(wire.check_request, method, header)
    tw_only(wire.decode_request, method, _message(_encode_json(header)))


@FUZZ
@given(json_values | st.fixed_dictionaries({}, optional={
    "dev_stats": st.lists(st.fixed_dictionaries({}, optional={
        "device": json_scalars, "thread_names": json_values,
        "node_stats": st.lists(st.dictionaries(st.sampled_from(
            ["node_name", "all_start_micros", "op_start_rel_micros", "op_end_rel_micros", "all_end_rel_micros",
             "all_start_nanos", "output", "timeline_label", "thread_id", "memory", "transfers",
             "scheduled_micros", "op_start_rel_nanos"]), json_values), max_size=2)}), max_size=2),
    "clock_offsets": json_values}))
def test_decode_step_stats_raises_only_tw_errors(obj):
    tw_only(wire.decode_step_stats, obj)


# ----------------------------------------------------------------------------------------
# Graphs

_OPS = ["Const", "Placeholder", "Identity", "Add", "MatMul", "Variable", "Assign", "AssignAdd", "NoOp",
        "_Send", "_Recv", "Reshape", "Fill", "RandomUniform", "Cast", "ConcatV2", "Unpack", "LaunchMissiles"]
_ATTRS = ["dtype", "T", "value", "shape", "N", "num", "axis", "container", "shared_name", "seed", "seed2",
          "transpose_a", "use_locking", "tensor_name", "tensor_type", "send_device", "recv_device",
          "send_device_incarnation", "client_terminated", "DstT", "SrcT", "Tidx", "_class", "extra"]

tensor_json = st.fixed_dictionaries({"dtype": dtype_names, "shape": shapes,
                                     "data": st.text(max_size=12) | json_scalars})
attr_values = st.recursive(
    st.dictionaries(st.sampled_from(["type", "i", "f", "b", "s", "shape", "none", "func", "x"]),
                    json_values | st.sampled_from(["float32", "int32", "string", "nan", "inf"]),
                    min_size=1, max_size=1)
    | st.builds(lambda t: {"tensor": t}, tensor_json | st.fixed_dictionaries({"frame": st.integers(-1, 3) | json_scalars})),
    lambda inner: st.builds(lambda xs: {"list": xs}, st.lists(inner, max_size=3)), max_leaves=6)
node_names = st.sampled_from(["a", "b", "c", "a/b", "0", ""]) | st.text(max_size=6)
inputs = st.lists(st.sampled_from(["a:0", "b:0", "c:1", "^a", "^c", "x:0", "a:01", "a", "a:-1", "a:99"])
                  | st.text(max_size=6), max_size=4)
nodes = st.fixed_dictionaries(
    {"name": node_names, "op": st.sampled_from(_OPS) | json_scalars},
    optional={"input": inputs | json_values, "device": st.just("") | json_scalars,
              "attr": st.dictionaries(st.sampled_from(_ATTRS), attr_values, max_size=5) | json_values,
              "output_shapes": json_values, "bogus": json_scalars})
graph_defs = st.fixed_dictionaries({"node": st.lists(nodes, max_size=4) | json_values},
                                   optional={"versions": json_values, "library": json_values}) | json_values


@FUZZ
@given(graph_defs, st.lists(st.sampled_from([np.ones(2, np.float32), np.array(b"s", dtype=object), DEAD]), max_size=2))
def test_decode_graph_def_raises_only_tw_errors(gd, tensors):
    reg = plugins.registry()
    tw_only(wire.decode_graph_def, gd, reg, feeds=["x:0"], tensors=tensors)
    tw_only(wire.decode_graph_def, gd, reg, max_nodes=2)


@FUZZ
@given(st.lists(st.sampled_from([
    {"name": "x", "op": "Placeholder", "input": [], "attr": {"dtype": {"type": "float32"}, "shape": {"shape": [2]}}},
    {"name": "c", "op": "Const", "input": [], "attr": {"dtype": {"type": "float32"},
                                                      "value": {"tensor": {"frame": 0}}}},
    {"name": "y", "op": "Add", "input": ["x:0", "c:0"], "attr": {"T": {"type": "float32"}}},
    {"name": "z", "op": "Identity", "input": ["y:0", "^c"], "attr": {"T": {"type": "float32"}}},
]), max_size=4), st.data())
def test_mutated_valid_graph_defs_raise_only_tw_errors(node_list, data):
    """Near-valid graphs: one field of one node replaced by anything."""
    gd = {"node": json.loads(json.dumps(node_list))}
    if gd["node"]:
        n = data.draw(st.sampled_from(gd["node"]))
        key = data.draw(st.sampled_from(["name", "op", "input", "attr", "device"]))
        if key == "attr" and n["attr"] and data.draw(st.booleans()):
            n["attr"][data.draw(st.sampled_from(sorted(n["attr"])))] = data.draw(attr_values | json_values)
        else:
            n[key] = data.draw(json_values)
    tw_only(wire.decode_graph_def, gd, plugins.registry(), tensors=[np.ones(2, np.float32)])


# ----------------------------------------------------------------------------------------
# Allocation before validation

def _peak_bytes(fn, *args, **kwargs) -> int:
    """The most memory (tracemalloc, which sees NumPy's buffers too) held at once while
    ``fn`` runs, above what was held before."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        tw_only(fn, *args, **kwargs)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


# What decoding may hold beyond the input itself: Python objects for a JSON header of that
# many bytes (a list of empty dicts is about 25 bytes per input byte) and the fixed cost of
# the decoders' own frames and strings.
SLACK_PER_BYTE = 40
SLACK_BYTES = 64 << 10


@settings(FUZZ, max_examples=min(FUZZ.max_examples, 60))
@given(any_bytes | structured_frames().map(lambda f: _message(b"{}", [f])))
def test_a_small_message_allocates_about_its_own_size(data):
    limit = SLACK_PER_BYTE * len(data) + SLACK_BYTES
    assert _peak_bytes(wire.decode_message, data, copy=True) <= limit
    assert _peak_bytes(wire.decode_response, data) <= limit


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads resident memory from /proc (Linux)")
@pytest.mark.parametrize("dtype, shape, nbytes", [
    ("F32", [1 << 29], 1 << 31),         # 2 GiB of floats
    ("STR", [1 << 27], 1 << 31),         # a 63-byte string header claiming 2 GiB
    ("U8", [1 << 30], 1 << 30),
])
def test_a_stream_header_claiming_gigabytes_commits_only_what_arrives(dtype, shape, nbytes):
    head = _frame(json.dumps({"dtype": dtype, "shape": shape, "nbytes": nbytes}).encode())
    assert len(head) < 100
    for chunks in ([head], [head, b"\0" * 4096], [head + b"\0" * 100, b"\0" * (3 << 20)]):
        got = sum(len(c) for c in chunks) - len(head)
        with pytest.raises(errors.DataLossError, match=f"ended after {got} of the {nbytes} bytes"):
            wire.assemble_tensor(chunks)
        header, off = wire.decode_tensor_header(chunks[0])
        before = _resident_bytes()
        asm = wire.TensorAssembler(header)
        asm.write(chunks[0][off:])
        for c in chunks[1:]:
            asm.write(c)
        # What arrived, rounded up to the huge pages the kernel may hand out, and no more.
        assert _resident_bytes() - before <= got + (16 << 20)
        del asm
    # A frame inside a message must hold its payload: refused before anything is allocated.
    msg = _message(b"{}", [head])
    assert _peak_bytes(wire.decode_message, msg) <= SLACK_BYTES
    with pytest.raises(errors.InvalidArgumentError, match="payload bytes"):
        wire.decode_message(msg)
