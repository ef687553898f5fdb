"""``UcxChannel``: a client of one UCX server over one endpoint, opened on first use (connect,
then a ``HELLO`` with the token) and again after a failure, shared by every request of the
channel at once.

A small call is one slot message each way; a larger request payload follows its slot in
pieces of 4 MiB (``framing.pieces``), a larger answer as one message. ``fetch`` receives the tensor header and chunk table, preallocates the array and
posts one UCX receive per chunk straight into its slice (``wire.TensorAssembler``): the
bytes cross once, no concatenation. A call past its timeout raises ``DeadlineExceededError``
and its late answer is received and dropped; a lost endpoint fails every call in flight
with ``UnavailableError``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading

from tensorweave.distributed import wire
from tensorweave.distributed.transport import Security
from tensorweave.framework import errors

from . import framing
from .connection import CONNECT_TIMEOUT, Conn, recv_body, recv_slot
from .engine import engine


class UcxChannel:
    def __init__(self, address: str, host: str, port: int, security: Security):
        self.security = security
        self.address = address
        self._host, self._port = host, port
        self._eng = engine()
        self._conn: Conn | None = None
        self._lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False

    # -- connection ----------------------------------------------------------------------
    def _current(self) -> Conn | None:
        """The open connection, or None; raises once the channel is closed."""
        with self._lock:
            if self._closed:
                raise errors.UnavailableError(f"ucx transport: channel to {self.address} is closed")
            conn = self._conn
            return conn if conn is not None and conn.error is None and conn.ep is not None else None

    def _connection(self, timeout: float | None) -> Conn:
        conn = self._current()
        if conn is not None:
            return conn
        # One connect at a time; the state lock is never held across one, so that close()
        # returns at once while a connect to a hung peer waits out its timeout.
        with self._connect_lock:
            conn = self._current()
            if conn is not None:
                return conn
            t = CONNECT_TIMEOUT if timeout is None else min(timeout, CONNECT_TIMEOUT)
            conn = self._eng.run(self._open(t), t)
            with self._lock:
                if not self._closed:
                    self._conn = conn
                    return conn
            self._fail_soon(conn)
            raise errors.UnavailableError(f"ucx transport: channel to {self.address} is closed")

    def _fail_soon(self, conn: Conn) -> None:
        err = errors.UnavailableError(f"ucx transport: channel to {self.address} is closed")
        try:
            self._eng.loop.call_soon_threadsafe(conn.fail, err)
        except RuntimeError:
            pass

    async def _open(self, timeout: float) -> Conn:
        ep = await self._eng.connect(self._host, self._port, timeout)
        conn = Conn(self._eng, ep, self.address)
        try:
            token = (self.security.token or "").encode()
            inline = len(token) <= framing.INLINE
            conn.post(framing.slot(framing.HELLO, 0, len(token), inline=token if inline else b""))
            if not inline:
                conn.post(token, framing.tag(0, framing.REQ_BODY))
            kind, _, length, _, _, head = await conn.guarded(
                recv_slot(conn, framing.tag(0, framing.RESP_HEAD), "hello answer"), timeout, "connect")
            if kind == framing.ERROR and length <= framing.MAX_TENSOR_HEAD:
                body = await conn.guarded(recv_body(conn, head, length, framing.tag(0, framing.RESP_BODY)),
                                          timeout, "connect")
                wire.decode_response(body)  # raises the refusal (UnauthenticatedError)
            if kind != framing.OK:
                raise errors.DataLossError(f"ucx transport: {self.address} answered the hello with frame kind {kind}")
            return conn
        except BaseException as e:
            conn.fail(e if isinstance(e, errors.OpError) else errors.UnavailableError(str(e)))
            if isinstance(e, errors.DeadlineExceededError):
                raise errors.UnavailableError(
                    f"ucx transport: {self.address} did not answer the hello in time") from None
            if isinstance(e, errors.OpError | asyncio.CancelledError) or not isinstance(e, Exception):
                raise
            # ucxx reports an endpoint the peer closed mid-handshake as a bare RuntimeError
            # (seen under load when the server refuses the connection): still a tw error.
            raise errors.UnavailableError(
                f"ucx transport: connecting to {self.address} failed ({type(e).__name__}: {e})") from None

    def _check_size(self, method: str, payload) -> None:
        if len(payload) > self.security.max_message_bytes:
            raise errors.ResourceExhaustedError(
                f"ucx transport: request {method} of {len(payload)} bytes exceeds {self.security.max_message_bytes}")

    # -- calls ---------------------------------------------------------------------------
    def call(self, method: str, payload, timeout: float | None = None) -> bytes:
        self._check_size(method, payload)
        conn = self._connection(timeout)
        return self._eng.run(conn.guarded(self._call(conn, method, payload), timeout, method), timeout)

    async def _call(self, conn: Conn, method: str, payload) -> bytes:
        rid = next(self._ids)
        kind, length, _, head = await self._request(conn, framing.CALL, rid, method, payload)
        body = await recv_body(conn, head, length, framing.tag(rid, framing.RESP_BODY))
        if kind == framing.ERROR:
            self._drop_if_refused(conn, body)
        elif kind != framing.OK:
            conn.fail(errors.DataLossError(f"ucx transport: {method}: unexpected answer frame kind {kind}"))
            conn.check()
        return bytes(body)

    async def _request(self, conn: Conn, kind: int, rid: int, method: str, payload):
        """Send a request; (kind, length, aux, framing.slot) of its answer. Nothing sent is awaited
        before the answer: an answer implies the request arrived, and a large payload goes
        by rendezvous, which waits for the server to take it (a server refusing it, too
        large, never does)."""
        inline = len(payload) <= framing.INLINE
        request = framing.slot(kind, rid, len(payload), 0, method, payload if inline else b"")
        conn.post(request)
        sending = None
        if not inline:  # in pieces, each on its own tag (views: nothing is copied)
            view = memoryview(payload).cast("B")
            sending = asyncio.gather(*(conn.post(view[at:at + n], framing.tag(rid, framing.CHUNK0 + i))
                                       for i, (at, n) in enumerate(framing.pieces(len(view)))))
            sending.add_done_callback(lambda f: f.cancelled() or f.exception())  # an ERROR answer skips it
        # The answer's receive is posted before this task first waits, so before the sends
        # start: an answer that finds its receive posted skips UCX's unexpected-message queue.
        answer_tag = framing.tag(rid, framing.RESP_HEAD)
        akind, arid, length, aux, _, head = await recv_slot(conn, answer_tag, f"{method} answer")
        if sending is not None and akind != framing.ERROR:
            await sending
        limit = self.security.max_message_bytes if akind != framing.FETCH_OK else framing.MAX_TENSOR_HEAD
        if arid != rid or length > limit:
            # Its body is already on the way and cannot be skipped: drop the connection.
            err = errors.ResourceExhaustedError(
                f"ucx transport: the answer to {method} from {self.address} ({length} bytes) exceeds {limit}")
            conn.fail(err)
            raise err
        return akind, length, aux, head

    def _drop_if_refused(self, conn: Conn, body) -> None:
        """A transport-level refusal (an oversize request or answer) may leave the request's
        payload unread on the server: drop the connection, then raise the error it carries."""
        try:
            wire.decode_response(body)
        except errors.OpError as e:
            conn.fail(errors.UnavailableError(f"ucx transport: connection to {self.address} dropped after: {e}"))
            raise e from None

    def fetch(self, method: str, payload, timeout: float | None = None):
        """A streamed tensor, received into its preallocated array: what ``wire.assemble_tensor``
        would make of the chunks (an array, ``DEAD``, or the error the stream carries)."""
        self._check_size(method, payload)
        conn = self._connection(timeout)
        return self._eng.run(conn.guarded(self._fetch(conn, method, payload), timeout, method), timeout)

    async def _fetch(self, conn: Conn, method: str, payload):
        rid = next(self._ids)
        kind, length, n, head = await self._request(conn, framing.FETCH, rid, method, payload)
        if kind == framing.ERROR:
            self._drop_if_refused(conn, await recv_body(conn, head, length, framing.tag(rid, framing.RESP_BODY)))
        if kind != framing.FETCH_OK or n > framing.MAX_CHUNKS:
            err = errors.DataLossError(f"ucx transport: {method}: malformed tensor answer from {self.address}")
            conn.fail(err)
            raise err
        body = await recv_body(conn, head, length + n * framing.TABLE.size, framing.tag(rid, framing.RESP_BODY))
        del head
        first = memoryview(body)[:length]
        sizes = [s for (s,) in framing.TABLE.iter_unpack(memoryview(body)[length:])]
        try:
            if bytes(first[:4]) == wire.MESSAGE_MAGIC:
                if n:
                    raise errors.DataLossError(f"{method}: an error answer followed by payload chunks")
                wire.decode_response(first, self.security.max_message_bytes)  # raises the error it carries
                raise errors.DataLossError(f"{method}: the stream began with a response, not a tensor header")
            # A tensor is not bounded by max_message_bytes (grpc streams it in many messages too).
            header, off = wire.decode_tensor_header(first)
            asm = wire.TensorAssembler(header, f"tensor from {method} at {self.address}")
            if off < length:
                asm.write(first[off:])
            if asm.pos + sum(sizes) != asm.nbytes:
                raise errors.DataLossError(
                    f"ucx transport: {method}: the tensor header announces {asm.nbytes} bytes but "
                    f"{asm.pos + sum(sizes)} are coming")
        except errors.OpError as e:
            if n:  # chunks are already on their way: the connection cannot be reused
                conn.fail(errors.UnavailableError(f"ucx transport: connection to {self.address} dropped after: {e}"))
            raise
        recvs, at = [], asm.pos
        for i, size in enumerate(sizes):
            if size:
                recvs.append(conn.recv(asm.buffer[at:at + size], framing.tag(rid, framing.CHUNK0 + i)))
            at += size
        await asyncio.gather(*recvs)
        asm.advance(at - asm.pos)
        return asm.finish()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            self._fail_soon(conn)

    def __repr__(self) -> str:
        return f"UcxChannel({self.address!r})"
