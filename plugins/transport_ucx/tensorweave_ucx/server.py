"""``UcxServer``: a ``ServiceDispatcher`` served on a UCX listener (on every interface, at the port).

Each accepted endpoint is a connection (``Conn``) that must first say ``HELLO`` with the
token (checked by the core's ``dispatcher.check_token``); then every request slot starts a
task of its own, and the handler runs on the server's threads, so a slow request never
holds up another. A request over ``security.max_message_bytes`` is refused unread, and so is
an answer over it; a frame that is not ours drops that connection and nothing else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading

from tensorweave.distributed import wire
from tensorweave.distributed.transport import Security, ServiceDispatcher
from tensorweave.framework import errors

from . import framing
from .connection import CONNECT_TIMEOUT, Conn, post_answer, recv_body, recv_slot
from .engine import engine


class UcxServer:
    def __init__(self, host: str, port: int, dispatcher: ServiceDispatcher, security: Security,
                 max_workers: int = 64):
        self.security = security
        self._dispatcher = dispatcher
        self._eng = engine()
        # Handlers block (RunGraph runs a whole step, RecvTensor waits for its value), so
        # they run on threads; many, because a RecvTensor waiting here must never keep
        # the RunGraph that produces its value from starting.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="tw-ucx-serve")
        self._conns: set[Conn] = set()
        self._active: set = set()
        self._serving: set = set()
        self._stopping = False
        self._stopped = threading.Event()
        self._listener = None
        try:
            self._listener = self._eng.run(self._listen(port), 30.0)
        except self._eng.UCXError as e:
            self._pool.shutdown(wait=False)
            raise errors.UnavailableError(
                f"ucx transport: cannot listen at {host}:{port} ({type(e).__name__}: {e})") from None
        self.address = f"{host}:{self._listener.port}"

    async def _listen(self, port: int):
        return self._eng.ucxx.create_listener(self._serve, port)

    async def _serve(self, ep):
        conn = Conn(self._eng, ep, "a client")
        if self._stopping:
            conn.fail(errors.UnavailableError("ucx transport: server is stopping"))
            return
        self._conns.add(conn)
        self._serving.add(asyncio.current_task())
        del ep  # only the connection holds the endpoint: stop() must be able to free it
        try:
            if not await self._hello(conn):
                return
            while not self._stopping:
                kind, rid, length, aux, method, head = await conn.guarded(
                    recv_slot(conn, None, "request"), None, "receiving a request")
                if kind not in (framing.CALL, framing.FETCH) or rid == 0:
                    raise errors.DataLossError(f"ucx transport: unexpected request frame kind {kind}")
                task = asyncio.ensure_future(self._handle(conn, kind, rid, length, method, head))
                self._active.add(task)
                task.add_done_callback(self._active.discard)
        except (errors.OpError, asyncio.CancelledError):
            pass  # the client went away, sent garbage, or the server is stopping
        finally:
            conn.fail(errors.UnavailableError("ucx transport: connection closed by the server"))
            self._conns.discard(conn)
            self._serving.discard(asyncio.current_task())

    async def _hello(self, conn: Conn) -> bool:
        kind, rid, length, _, _, head = await conn.guarded(recv_slot(conn, None, "hello"), CONNECT_TIMEOUT, "hello")
        if kind != framing.HELLO or length > framing.MAX_TOKEN:
            return False
        token = await conn.guarded(recv_body(conn, head, length, framing.tag(0, framing.REQ_BODY)),
                                   CONNECT_TIMEOUT, "hello")
        try:
            self._dispatcher.check_token(token, self.security)
        except errors.UnauthenticatedError:
            body = wire.encode_error(errors.UnauthenticatedError(
                "ucx transport: the server refused the connection: it requires an auth token and the one sent "
                "is missing or wrong"))
            await asyncio.gather(*post_answer(conn, framing.ERROR, 0, body))
            # Let the client read the refusal and hang up (closing first could drop it in flight).
            try:
                await asyncio.wait_for(conn.closed.wait(), CONNECT_TIMEOUT)
            except asyncio.TimeoutError:
                pass
            return False
        await asyncio.gather(*post_answer(conn, framing.OK, 0, b""))
        return True

    def _refusal(self, what: str, method: str, n: int) -> bytes:
        return wire.encode_error(errors.ResourceExhaustedError(
            f"ucx transport: {what} {method} of {n} bytes exceeds the server's limit of "
            f"{self.security.max_message_bytes} bytes"))

    async def _handle(self, conn: Conn, kind: int, rid: int, length: int, method: str, head):
        loop = asyncio.get_running_loop()
        try:
            if length > self.security.max_message_bytes:
                # The payload stays unread: the client drops this connection on this answer.
                await asyncio.gather(*post_answer(conn, framing.ERROR, rid, self._refusal("request", method, length)))
                return
            if length > framing.INLINE:
                payload = await conn.guarded(recv_body(conn, head, length, framing.tag(rid, framing.REQ_BODY)), None,
                                             f"receiving {method}")
            else:
                payload = head[framing.FRAME.size:framing.FRAME.size + length]
            payload = bytes(payload)
            del head
            if kind == framing.CALL:
                body = await loop.run_in_executor(self._pool, self._dispatcher.call, method, payload)
                if len(body) > self.security.max_message_bytes:
                    kind, body = framing.ERROR, self._refusal("the answer to", method, len(body))
                else:
                    kind = framing.OK
                await asyncio.gather(*post_answer(conn, kind, rid, body))
            else:
                # ``parts``: the stream's own chunks, alive until sent (the merged ones are views)
                first, chunks, parts = await loop.run_in_executor(self._pool, self._stream, method, payload)
                table = b"".join(framing.TABLE.pack(len(c)) for c in chunks)
                sends = post_answer(conn, framing.FETCH_OK, rid, first + table, len(first), len(chunks))
                # All chunks in flight at once; each lands in its own slice on the client.
                sends += [conn.post(c, framing.tag(rid, framing.CHUNK0 + i)) for i, c in enumerate(chunks) if len(c)]
                await asyncio.gather(*sends)
                del parts
        except (errors.OpError, asyncio.CancelledError, RuntimeError):
            pass  # connection lost or server stopping: the client sees UnavailableError

    def _stream(self, method: str, payload: bytes):
        """(first, [payload buffers to send], [the stream's chunks]): ``first`` is the tensor
        header (with the whole tensor when it fits the slot), or the error response that ends it."""
        try:
            it = iter(self._dispatcher.stream(method, payload))
            first = next(it, None)
            if first is None:
                raise errors.DataLossError(f"{method}: the stream produced nothing")
            parts = [memoryview(c).cast("B") for c in it]
            if len(first) + sum(map(len, parts)) <= framing.INLINE:
                # A small tensor travels whole in the answer's slot: header, then its bytes.
                return bytes(first) + b"".join(parts), [], []
            chunks = framing.coalesce(parts)
            if len(chunks) > framing.MAX_CHUNKS:
                raise errors.ResourceExhaustedError(f"{method}: {len(chunks)} chunks is more than {framing.MAX_CHUNKS}")
            return bytes(first), chunks, parts
        except Exception as e:  # noqa: BLE001 - the stream's failure travels as its first chunk
            return wire.encode_error(e if isinstance(e, errors.OpError) else
                                     errors.InternalError(f"{method}: {type(e).__name__}: {e}")), [], []

    def stop(self, grace: float | None = None) -> None:
        """Stop listening, let requests in flight finish for up to ``grace`` seconds, then
        close every connection (their clients see UnavailableError)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._eng.run(self._stop(grace), None if grace is None else grace + 10.0)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _stop(self, grace):
        self._stopping = True  # new connections are closed as soon as they arrive
        if grace and self._active:
            await asyncio.wait(set(self._active), timeout=grace)
        for conn in list(self._conns):
            conn.fail(errors.UnavailableError("ucx transport: the server stopped"))
        for t in list(self._active):
            t.cancel()
        # UCX keeps listening while an endpoint it accepted is alive: let the connection
        # coroutines end before dropping the listener, so the port is closed when stop() returns.
        if self._serving:
            await asyncio.wait(set(self._serving), timeout=5.0)
        await asyncio.sleep(0)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        gc.collect()  # an endpoint caught in a reference cycle would hold the port open

    def __repr__(self) -> str:
        return f"UcxServer({self.address!r})"
