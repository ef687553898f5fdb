"""The protobuf framing of the worker service's messages: ``bytes data = 1``, by hand.

Every request, response and stream chunk of ``tensorweave.WorkerService`` (see
``worker_service.proto``) is a protobuf message with one field, ``bytes data = 1`` — the
same wire layout as ``google.protobuf.BytesValue``. Encoding it by hand (a one-byte tag and a
varint length in front of the payload) keeps the transport free of generated code and of a
protoc step, while a client generated from the .proto in any language still talks to it.

Decoding returns a memoryview of the received buffer (no copy); a tensor chunk goes from there
straight into ``wire.assemble_tensor``'s preallocated array.
"""

from __future__ import annotations

_TAG_DATA = 0x0A  # field 1, wire type 2 (length-delimited)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint in a WorkerService message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes in a WorkerService message")


def encode(payload) -> bytes:
    """``payload`` (bytes, bytearray or memoryview) as a ``{bytes data = 1}`` message.

    One copy of the payload: grpcio sends only ``bytes`` objects, so a memoryview chunk has
    to become one anyway; the prefix rides along in the same copy."""
    n = memoryview(payload).nbytes
    if n == 0:
        return b""  # proto3: an empty bytes field is not written
    return b"".join((bytes((_TAG_DATA,)), _varint(n), payload))


def decode(data: bytes) -> memoryview:
    """The ``data`` field of a received message, as a memoryview into ``data`` (no copy).

    Follows protobuf's rules: unknown fields are skipped and the last ``data`` field wins."""
    buf = memoryview(data)
    # Fast path: what ``encode`` (and any protobuf library) writes for a single field.
    if len(buf) >= 2 and buf[0] == _TAG_DATA:
        n, pos = _read_varint(buf, 1)
        if pos + n == len(buf):
            return buf[pos:]
    value = buf[0:0]
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = _read_varint(buf, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 2:
            n, pos = _read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError(f"WorkerService message truncated: field {field} announces {n} bytes, "
                                 f"{len(buf) - pos} remain")
            if field == 1:
                value = buf[pos:pos + n]
            pos += n
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"WorkerService message has field {field} with unsupported wire type {wire_type}")
        if pos > len(buf):
            raise ValueError("WorkerService message truncated inside a fixed-width field")
    return value
