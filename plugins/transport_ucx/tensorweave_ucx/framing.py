"""The framing of requests, answers and tensors on a UCX endpoint (``TWU3``; both ends need it).

Every request and answer is one fixed-size *slot* message (``SLOT`` bytes: the frame, then
up to ``INLINE`` bytes of payload, zero padded; UCX tag receives need the exact length up
front, and padding a small message costs far less than a second message and its
completion hops). A request's slot goes on the endpoint's own tag, its answer's slot on a
tag made from the request id (``tag``), so concurrent requests never wait for each other. A
request payload too large for the slot follows it in pieces of at most ``BODY_PIECE`` bytes
(``pieces``), each a message on its own request-id tag, so that the server sees a body arrive
piece by piece (and drops a connection whose body stops coming); an answer payload too large
for its slot follows as one message. A tensor
comes back as the wire tensor header plus a table of chunk sizes (with the data itself in
the slot when all of it fits), then one UCX message per run of payload chunks that lie back
to back in memory (``coalesce``). A connection starts with a ``HELLO`` carrying the token.
"""

from __future__ import annotations

import struct

import numpy as np

from tensorweave.framework import errors

MAGIC = b"TWU3"  # TWU2 sent a request body as one message
# magic, kind, request id, length, aux, method (utf-8, zero padded)
FRAME = struct.Struct("<4sB3xQQQ64s")
# Every request and answer travels in one slot of this size: the frame, then the payload
# when it fits (``INLINE`` bytes; the hot control calls are a few hundred bytes).
SLOT = 4096
INLINE = SLOT - FRAME.size
TABLE = struct.Struct("<Q")  # one entry per payload chunk of a tensor: its size

# frame kinds: client -> server
HELLO, CALL, FETCH = 1, 2, 3
# frame kinds: server -> client
OK, FETCH_OK, ERROR = 16, 17, 18

# tags are (request id << 24) | part; parts 16+ are the pieces of a request body (client to
# server) or the payload chunks of a fetch (server to client)
REQ_BODY, RESP_HEAD, RESP_BODY, CHUNK0 = 1, 2, 3, 16
MAX_CHUNKS = (1 << 24) - CHUNK0
MAX_TOKEN = 4096
MAX_TENSOR_HEAD = 1 << 20
# A request body travels in pieces of this many bytes (the last one shorter), on tags CHUNK0 + i.
BODY_PIECE = 4 << 20


def tag(rid: int, part: int) -> int:
    return (rid << 24) | part


def pieces(length: int) -> list[tuple[int, int]]:
    """(offset, size) of each piece of a request body of ``length`` bytes."""
    return [(at, min(BODY_PIECE, length - at)) for at in range(0, length, BODY_PIECE)]


def slot(kind: int, rid: int, length: int = 0, aux: int = 0, method: str = "", inline=b"") -> bytearray:
    """One slot message: the frame, then ``inline`` (the whole payload when ``length`` fits)."""
    m = method.encode()
    if len(m) > 64:
        raise errors.InvalidArgumentError(f"ucx transport: method name {method!r} is longer than 64 bytes")
    buf = bytearray(SLOT)
    FRAME.pack_into(buf, 0, MAGIC, kind, rid, length, aux, m)
    if len(inline):
        buf[FRAME.size:FRAME.size + len(inline)] = inline
    return buf


def unframe(buf, where: str):
    """(kind, request id, length, aux, method) of a slot; DataLossError for one that is not ours."""
    magic, kind, rid, length, aux, method = FRAME.unpack_from(buf)
    if magic != MAGIC:
        raise errors.DataLossError(f"ucx transport: {where}: not a tensorweave UCX frame (magic {magic!r})")
    try:
        name = method.rstrip(b"\0").decode()
    except UnicodeDecodeError:
        raise errors.DataLossError(f"ucx transport: {where}: method name is not UTF-8") from None
    return kind, rid, length, aux, name


def coalesce(chunks: list) -> list:
    """Merge chunks that lie back to back in memory (``wire.tensor_chunks`` slices one array)
    into one message each: UCX moves one large message faster than many 1 MiB ones. The
    merged buffers are views of the same memory (no copy); the caller keeps ``chunks`` alive
    until they are sent, since a run may span the memory of more than one chunk's owner."""
    runs, end = [], None
    for c in chunks:
        if not len(c):
            continue
        a = np.frombuffer(c, np.uint8)
        addr = a.__array_interface__["data"][0]
        if runs and addr == end:
            runs[-1].append(a)
        else:
            runs.append([a])
        end = addr + len(a)
    return [r[0] if len(r) == 1 else
            np.lib.stride_tricks.as_strided(r[0], shape=(sum(map(len, r)),), strides=(1,), writeable=False)
            for r in runs]
