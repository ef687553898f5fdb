"""The hand-written `bytes data = 1` framing is byte-for-byte protobuf's (google.protobuf.BytesValue)."""

import pytest
from google.protobuf import wrappers_pb2

from tensorweave_grpc import codec


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 1 << 20])
def test_encode_matches_protobuf(n):
    payload = bytes(range(256)) * (n // 256) + bytes(n % 256)
    assert codec.encode(payload) == wrappers_pb2.BytesValue(value=payload).SerializeToString()
    assert codec.encode(memoryview(payload)) == codec.encode(payload)
    assert bytes(codec.decode(wrappers_pb2.BytesValue(value=payload).SerializeToString())) == payload


def test_decode_is_a_view_not_a_copy():
    data = codec.encode(b"x" * 1000)
    view = codec.decode(data)
    assert isinstance(view, memoryview) and view.obj is data


def test_decode_skips_unknown_fields_and_last_data_wins():
    # field 2 varint, field 3 fixed64, field 1 twice, field 4 fixed32
    data = (b"\x10\x96\x01" + b"\x19" + bytes(8) + b"\x0a\x02ab" + b"\x0a\x03xyz" + b"\x25" + bytes(4))
    assert bytes(codec.decode(data)) == b"xyz"
    assert bytes(codec.decode(b"")) == b""


@pytest.mark.parametrize("data", [b"\x0a\x05abc", b"\x0a", b"\x0a\xff", b"\x19\x00", b"\x0b"])
def test_malformed_messages_are_refused(data):
    with pytest.raises(ValueError, match="WorkerService message"):
        codec.decode(data)
