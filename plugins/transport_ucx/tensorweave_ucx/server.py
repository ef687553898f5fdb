"""``UcxServer``: a ``ServiceDispatcher`` served on a UCX listener.

Each accepted endpoint is a connection (``Conn``) that must first say ``HELLO`` with the
token (checked by the core's ``dispatcher.check_token``); then every request slot starts a
task of its own, and the handler runs on the server's threads, so a slow request never
holds up another: the control methods (Health, AbortStep, ...) on threads of their own, and a
RecvTensor (``dispatcher.deferred``) on none while it waits for its value. A request over
``security.max_message_bytes`` is refused unread, and so is an answer over it; a frame that
is not ours drops that connection and nothing else. When a connection goes, the requests it
was waiting for hear it (``transport.CallContext``: a RunGraph whose master died aborts its step).

What a client may make the server hold is bounded: a request body is received into memory
that is reserved, not committed (``wire.reserve_buffer``: a frame announcing a gigabyte costs
what arrives), the bodies being received on one connection at once are at most
``max_message_bytes`` together (more wait their turn), a body arrives in pieces and a
connection that sends none of them for ``idle_timeout`` seconds is dropped (that connection
only); at most ``MAX_WAITING_PER_CONNECTION`` deferred fetches wait, and
``MAX_CALLS_PER_CONNECTION`` requests are in flight, on one connection.

Where it listens: ucxx's listener takes only a port (it binds every interface: ucxx
``Listener`` calls ``getaddrinfo(NULL, port)``; no UCX option moves it). So the server closes,
before its hello, every connection that arrived at an address the configured host does not
name, and the engine keeps UCX's own TCP listeners to the interfaces that carry it
(``env.net_devices_for``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import os
import threading

from tensorweave.distributed import wire
from tensorweave.distributed.transport import CONTROL_METHODS, CallContext, Security, ServiceDispatcher, deferred_answer
from tensorweave.framework import errors

from . import env, framing
from .connection import CONNECT_TIMEOUT, Conn, post_answer, recv_body, recv_slot
from .engine import engine

log = logging.getLogger("tensorweave.ucx")

# How long a connection may leave a request body unfinished without sending a piece of it
# (seconds); then it is dropped. TENSORWEAVE_UCX_IDLE_TIMEOUT overrides the default.
IDLE_TIMEOUT = 60.0
# Deferred fetches (RecvTensor) waiting at once on one connection; more are refused
# (ResourceExhaustedError). A worker pulls with at most 64 at once.
MAX_WAITING_PER_CONNECTION = 1024
# Requests in flight at once on one connection (any method); more are refused at once.
MAX_CALLS_PER_CONNECTION = 4096
CONTROL_THREADS = 8  # Health, AbortStep, CleanupStep, GetStatus: never queued behind others
SEND_THREADS = 8     # make the chunks of a fetch whose value came (a device copy at most)


def default_idle_timeout() -> float:
    value = os.environ.get("TENSORWEAVE_UCX_IDLE_TIMEOUT")
    try:
        return float(value) if value else IDLE_TIMEOUT
    except ValueError:
        raise errors.InvalidArgumentError(
            f"TENSORWEAVE_UCX_IDLE_TIMEOUT must be a number of seconds, got {value!r}") from None


class UcxServer:
    def __init__(self, host: str, port: int, dispatcher: ServiceDispatcher, security: Security,
                 max_workers: int = 64, idle_timeout: float | None = None):
        self.security = security
        self._dispatcher = dispatcher
        self.idle_timeout = default_idle_timeout() if idle_timeout is None else float(idle_timeout)
        self._eng = engine(host)
        # Connections are accepted on every interface (see the module docstring): those that
        # arrive at another address than the host's are closed. None: the host is a wildcard.
        self._addresses = env.host_addresses(host)
        # Handlers block (RunGraph runs a whole step), so they run on threads; many, because
        # one blocked RunGraph must never keep another request from starting. The control
        # methods have threads of their own; a RecvTensor waits on none.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="tw-ucx-serve")
        self._control = concurrent.futures.ThreadPoolExecutor(CONTROL_THREADS, thread_name_prefix="tw-ucx-control")
        self._send = concurrent.futures.ThreadPoolExecutor(SEND_THREADS, thread_name_prefix="tw-ucx-send")
        self._conns: set[Conn] = set()
        self._active: set = set()
        self._serving: set = set()
        self._stopping = False
        self._stopped = threading.Event()
        self._listener = None
        try:
            self._listener = self._eng.run(self._listen(port), 30.0)
        except self._eng.UCXError as e:
            self._shutdown_pools()
            raise errors.UnavailableError(
                f"ucx transport: cannot listen at {host}:{port} ({type(e).__name__}: {e})") from None
        self.address = f"{host}:{self._listener.port}"
        if self._addresses is not None:
            log.info("ucx transport: the listener at port %d is bound on every interface (ucxx's listener "
                     "takes only a port); connections that arrive at another address than %s are closed "
                     "before their hello", self._listener.port, host)

    def _shutdown_pools(self):
        for pool in (self._pool, self._control, self._send):
            pool.shutdown(wait=False, cancel_futures=True)

    def _refused_address(self, ep) -> str | None:
        """Why a connection must be closed at once (it arrived at an address the server was
        not configured for), or None."""
        if self._addresses is None:
            return None
        local = self._eng.local_address(ep)
        if local is None or local in self._addresses:
            return None  # None: UCX cannot tell (then the host-restricted TCP transport is all)
        return f"it arrived at {local}, not at an address of {sorted(map(str, self._addresses))}"

    async def _listen(self, port: int):
        return self._eng.ucxx.create_listener(self._serve, port)

    async def _serve(self, ep):
        conn = Conn(self._eng, ep, "a client")
        if self._stopping:
            conn.fail(errors.UnavailableError("ucx transport: server is stopping"))
            return
        refused = self._refused_address(ep)
        if refused is not None:
            log.warning("ucx transport: closed a connection to the server at %s: %s", self.address, refused)
            conn.fail(errors.UnavailableError(f"ucx transport: connection refused: {refused}"))
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
            for call in list(conn.calls):  # their caller can no longer get an answer
                call.client_gone(in_thread=True)

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
        call = CallContext()
        conn.calls.add(call)
        try:
            if len(conn.calls) > MAX_CALLS_PER_CONNECTION:
                # Answered unread, like an oversize request: the client drops this connection.
                await asyncio.gather(*post_answer(conn, framing.ERROR, rid, wire.encode_error(
                    errors.ResourceExhaustedError(
                        f"ucx transport: {MAX_CALLS_PER_CONNECTION} requests are already in flight on this "
                        "connection, the most a server takes (MAX_CALLS_PER_CONNECTION)"))))
                return
            if length > self.security.max_message_bytes:
                # The payload stays unread: the client drops this connection on this answer.
                await asyncio.gather(*post_answer(conn, framing.ERROR, rid, self._refusal("request", method, length)))
                return
            if length > framing.INLINE:
                payload = await self._recv_body(conn, rid, length, method)
            else:
                payload = head[framing.FRAME.size:framing.FRAME.size + length]
            payload = bytes(payload)
            del head
            if kind == framing.CALL:
                pool = self._control if method in CONTROL_METHODS else self._pool
                body = await loop.run_in_executor(pool, self._dispatcher.call, method, payload, call)
                if len(body) > self.security.max_message_bytes:
                    kind, body = framing.ERROR, self._refusal("the answer to", method, len(body))
                else:
                    kind = framing.OK
                await asyncio.gather(*post_answer(conn, kind, rid, body))
            else:
                if method in self._dispatcher.deferred:
                    (make, made), pool = await self._deferred(conn, method, payload), self._send
                else:
                    make, made, pool = (lambda: self._dispatcher.stream(method, payload)), None, self._pool
                if made is None:
                    made = await loop.run_in_executor(pool, self._stream, method, make)
                # ``parts``: the stream's own chunks, alive until sent (the merged ones are views)
                first, chunks, parts = made
                table = b"".join(framing.TABLE.pack(len(c)) for c in chunks)
                sends = post_answer(conn, framing.FETCH_OK, rid, first + table, len(first), len(chunks))
                # All chunks in flight at once; each lands in its own slice on the client.
                sends += [conn.post(c, framing.tag(rid, framing.CHUNK0 + i)) for i, c in enumerate(chunks) if len(c)]
                await asyncio.gather(*sends)
                del parts
        except (errors.OpError, asyncio.CancelledError, RuntimeError):
            pass  # connection lost or server stopping: the client sees UnavailableError
        finally:
            conn.calls.discard(call)

    async def _recv_body(self, conn: Conn, rid: int, length: int, method: str):
        """The ``length`` bytes of a request body, received piece by piece into reserved
        memory. The bodies being received on one connection are at most ``max_message_bytes``
        together (this one waits its turn); a connection that sends no piece for
        ``idle_timeout`` seconds is dropped."""
        async def reserve():
            async with conn.budget:
                await conn.budget.wait_for(
                    lambda: conn.receiving == 0 or conn.receiving + length <= self.security.max_message_bytes)
                conn.receiving += length
        # guarded: a connection that fails ends the wait for its budget too
        await conn.guarded(reserve(), None, f"receiving {method}")
        try:
            body = wire.reserve_buffer(length, f"ucx transport: the {method} request of {length} bytes")
            view = memoryview(body)
            pending = {conn.spawn(conn.recv(view[at:at + n], framing.tag(rid, framing.CHUNK0 + i)))
                       for i, (at, n) in enumerate(framing.pieces(length))}
            while pending:
                done, pending = await asyncio.wait(pending, timeout=self.idle_timeout,
                                                   return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    err = errors.DeadlineExceededError(
                        f"ucx transport: a client sent no part of its {length}-byte {method} request for "
                        f"{self.idle_timeout:g} s: connection dropped")
                    log.warning("%s (server at %s)", err.message, self.address)
                    conn.fail(err)  # aborts the endpoint: UCX writes no more into ``body``
                    raise err
                for task in done:
                    task.result()  # a failed piece: the connection failed with it
            return body
        finally:
            async with conn.budget:
                conn.receiving -= length
                conn.budget.notify_all()

    async def _deferred(self, conn: Conn, method: str, payload: bytes):
        """Wait, holding no thread, for a deferred stream's answer (``dispatcher.start_stream``);
        ``(make_chunks, None)`` or ``(None, made)`` (``deferred_answer``). Withdrawn when the
        connection goes or ``deferred_timeout`` passes."""
        if conn.waiting >= MAX_WAITING_PER_CONNECTION:
            err = errors.ResourceExhaustedError(
                f"{method}: {conn.waiting} requests already wait on this connection, the most a server keeps "
                f"(MAX_WAITING_PER_CONNECTION)")
            return (lambda: iter([wire.encode_error(err)])), None
        answer, done = deferred_answer(asyncio.get_running_loop(), lambda make: self._stream(method, make))

        conn.waiting += 1
        cancel = self._dispatcher.start_stream(method, payload, done)
        closed = asyncio.ensure_future(conn.closed.wait())
        try:
            await asyncio.wait({answer, closed}, timeout=self._dispatcher.deferred_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            cancel()
            raise
        finally:
            conn.waiting -= 1
            closed.cancel()
        if not answer.done() and cancel():
            if conn.closed.is_set():
                raise conn.raised() if conn.error is not None else errors.UnavailableError("connection closed")
            err = self._dispatcher.deadline_error(method)
            return (lambda: iter([wire.encode_error(err)])), None
        return await answer

    def _stream(self, method: str, make):
        """(first, [payload buffers to send], [the stream's chunks]): ``first`` is the tensor
        header (with the whole tensor when it fits the slot), or the error response that ends it."""
        try:
            it = iter(make())
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
        self._shutdown_pools()

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
