"""The ``ucx`` transport: the worker service over UCX endpoints through ``ucxx``.

What this module owns: the process-wide UCX engine (one ucxx context, driven by an asyncio
loop in a daemon thread the transport starts on first use), the framing of requests,
responses and tensor streams on a UCX endpoint, and ``UcxServer`` / ``UcxChannel`` as
``tensorweave.distributed.transport`` specifies them.

Framing. One UCX endpoint per channel carries every request of that channel, concurrently.
Every request and answer is one fixed-size *slot* message (``_SLOT`` bytes: the frame, then
up to ``_INLINE`` bytes of payload, zero padded; UCX tag receives need the exact length up
front, and padding a small message costs far less than a second message and its
completion hops). A request's slot goes on the endpoint's own tag, its answer's slot on a
tag made from the request id, so concurrent requests never wait for each other. A payload
too large for the slot follows it as its own message on a request-id tag. A tensor
(``fetch``) comes back as the wire tensor header plus a table of chunk sizes (with the data
itself in the slot when all of it fits), then one UCX message per payload chunk, each
received straight into its slice of the preallocated array (``wire.TensorAssembler``): the
bytes cross once, no concatenation. A connection starts with a hello carrying the auth
token; a wrong token is refused before any request is served.

Failures: a refused connection, a peer that dies or a server that stops fails every call
in flight on that endpoint with ``UnavailableError`` as soon as UCX reports it (the
endpoint's close callback); a call past its timeout raises ``DeadlineExceededError`` (its
late response is drained and dropped). UCX has no TLS: asking for it is
``UnimplementedError`` at start-up, naming ``ucx``.

Environment: the variables in ``UCX_ENV_DEFAULTS`` are set (unless already set) before
ucxx is first imported, so no GPU, CUDA driver or user shell setting is needed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import hmac
import itertools
import os
import struct
import threading

from tensorweave.distributed.transport import Security
from tensorweave.framework import errors

# Set before ucxx is imported (UCX reads its environment once, at context creation).
UCX_ENV_DEFAULTS = {
    # ucxx asks rendezvous fragments to be staged in CUDA memory unless told otherwise;
    # tensors here are host memory and the machine may have no GPU at all.
    "UCX_RNDV_FRAG_MEM_TYPE": "host",
    # ucxx sets UCX_MEMTYPE_CACHE, which UCX >= 1.19 no longer knows: a warning per process.
    "UCX_WARN_UNUSED_ENV_VARS": "n",
    # UCX's TCP transport moves data in segments of 8 KiB (send) / 64 KiB (receive) by
    # default; 1 MiB ones make a 64 MiB fetch ~2.5x faster on loopback (1.3 -> 3+ GB/s),
    # for 8 MiB of buffers per direction and process (allocated 8 at a time).
    "UCX_TCP_TX_SEG_SIZE": "1m",
    "UCX_TCP_RX_SEG_SIZE": "1m",
    # A task restarted at its port after a crash must be able to listen again while the old
    # connections linger in TIME_WAIT (SO_REUSEADDR; a live listener still holds the port).
    "UCX_TCP_CM_REUSEADDR": "y",
    # ucxx logs every endpoint error at ERROR level; a peer going away is reported to the
    # caller as UnavailableError instead.
    "UCXX_LOG_LEVEL": "FATAL",
}

MAGIC = b"TWU2"
# magic, kind, request id, length, aux, method (utf-8, zero padded)
_FRAME = struct.Struct("<4sB3xQQQ64s")
# Every request and answer travels in one slot of this size: the frame, then the payload
# when it fits (``_INLINE`` bytes; the hot control calls are a few hundred bytes).
_SLOT = 4096
_INLINE = _SLOT - _FRAME.size
_TABLE = struct.Struct("<Q")

# frame kinds: client -> server
HELLO, CALL, FETCH = 1, 2, 3
# frame kinds: server -> client
OK, FETCH_OK, ERROR = 16, 17, 18

# tags are (request id << 24) | part; parts 16+ are the payload chunks of a fetch
_REQ_BODY, _RESP_HEAD, _RESP_BODY, _CHUNK0 = 1, 2, 3, 16
_MAX_CHUNKS = (1 << 24) - _CHUNK0
_MAX_TOKEN = 4096
_MAX_TENSOR_HEAD = 1 << 20

CONNECT_TIMEOUT = 10.0   # connect + hello, seconds
_CLOSE_PERIOD_NS = 10 ** 9  # bound on how long aborting an endpoint may wait for UCX


def _tag(rid: int, part: int) -> int:
    return (rid << 24) | part


def _slot(kind: int, rid: int, length: int = 0, aux: int = 0, method: str = "", inline=b"") -> bytearray:
    """One slot message: the frame, then ``inline`` (the whole payload when ``length`` fits)."""
    m = method.encode()
    if len(m) > 64:
        raise errors.InvalidArgumentError(f"ucx transport: method name {method!r} is longer than 64 bytes")
    buf = bytearray(_SLOT)
    _FRAME.pack_into(buf, 0, MAGIC, kind, rid, length, aux, m)
    if len(inline):
        buf[_FRAME.size:_FRAME.size + len(inline)] = inline
    return buf


def _unframe(buf, where: str):
    magic, kind, rid, length, aux, method = _FRAME.unpack_from(buf)
    if magic != MAGIC:
        raise errors.DataLossError(f"ucx transport: {where}: not a tensorweave UCX frame (magic {magic!r})")
    try:
        name = method.rstrip(b"\0").decode()
    except UnicodeDecodeError:
        raise errors.DataLossError(f"ucx transport: {where}: method name is not UTF-8") from None
    return kind, rid, length, aux, name


def _split_address(address: str, what: str) -> tuple[str, int]:
    host, sep, port = str(address).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise errors.InvalidArgumentError(f"ucx transport: {what} address {address!r} is not host:port")
    return host, int(port)


def _refuse_tls(security: Security | None, what: str) -> Security:
    security = security or Security()
    if security.tls:
        raise errors.UnimplementedError(
            f"transport 'ucx' cannot use TLS ({what}): UCX has no encryption. Use TLS over grpc for the "
            "control channel and UCX for tensors only on a trusted network, e.g. "
            "transport = {control = \"grpc\", tensors = \"ucx\"} without TLS, or grpc for both")
    return security


# ----------------------------------------------------------------------------------------
# The engine: one ucxx context per process, driven by an asyncio loop in a daemon thread.

class _Engine:
    def __init__(self):
        for k, v in UCX_ENV_DEFAULTS.items():
            os.environ.setdefault(k, v)
        try:
            import ucxx
            from ucxx._lib import libucxx
            from ucxx._lib_async.endpoint import Endpoint
            from ucxx._lib_async.exchange_peer_info import exchange_peer_info
            from ucxx._lib_async.utils import hash64bits
        except Exception as e:  # noqa: BLE001 - any import failure means the transport cannot start
            raise errors.UnavailableError(
                f"transport 'ucx' cannot start: importing ucxx failed ({type(e).__name__}: {e}); "
                "install it with `pip install ucxx-cu12` (Linux)") from None
        self.ucxx, self.libucxx = ucxx, libucxx
        self._Endpoint, self._exchange, self._hash64 = Endpoint, exchange_peer_info, hash64bits
        self.UCXError = libucxx.UCXError
        self.loop = asyncio.new_event_loop()
        # Daemon thread: threads ucxx starts from it (its notifier thread) are daemons too,
        # so a process that never closes its servers still exits.
        self.thread = threading.Thread(target=self._run, name="tensorweave-ucx", daemon=True)
        self.thread.start()
        try:
            self.run(self._init(), 30.0)
        except errors.OpError:
            raise
        except Exception as e:  # noqa: BLE001
            raise errors.UnavailableError(
                f"transport 'ucx' cannot start: initialising UCX failed ({type(e).__name__}: {e})") from None

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _init(self):
        # Python futures: a waiting request costs no CPU (without them ucxx polls in a loop).
        self.ucxx.init(progress_mode="thread", enable_python_future=True)
        self.ctx = self.ucxx.core._get_ctx()

    def run(self, coro, timeout: float | None):
        """Run ``coro`` on the engine's loop; the caller's thread waits at most ``timeout``
        (plus a margin: the coroutine enforces its own deadline, this only guards the loop)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(None if timeout is None else timeout + 5.0)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise errors.DeadlineExceededError("ucx transport: the UCX engine did not answer in time") from None

    async def connect(self, host: str, port: int, timeout: float):
        """An endpoint to a listener; a refused or unreachable peer fails as soon as UCX says so
        (``ucxx.create_endpoint`` would wait out its whole connect timeout)."""
        loop = asyncio.get_running_loop()
        failed = loop.create_future()

        def on_close():
            try:
                loop.call_soon_threadsafe(lambda: failed.done() or failed.set_result(None))
            except RuntimeError:  # loop already closed (process exit)
                pass

        try:
            ucx_ep = self.libucxx.UCXEndpoint.create(self.ctx.worker, host, port, True)
            ucx_ep.set_close_callback(on_close, None, None)
        except (self.UCXError, RuntimeError) as e:  # RuntimeError: refused before the callback was set
            raise errors.UnavailableError(f"ucx transport: cannot connect to {host}:{port} ({e})") from None
        msg_tag = self._hash64("msg_tag", os.urandom(16), ucx_ep.handle)
        xchg = asyncio.ensure_future(self._exchange(ucx_ep, msg_tag, False, timeout))
        # its failure after a refusal is expected, and reported below, not by asyncio
        xchg.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            done, _ = await asyncio.wait({xchg, failed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if xchg in done and xchg.exception() is None:
                peer = xchg.result()
                ucx_ep.remove_close_callback()
                return self._Endpoint(ucx_ep, self.ctx, {"msg_send": peer["msg_tag"], "msg_recv": msg_tag})
            if xchg in done:
                why = f"{type(xchg.exception()).__name__}: {xchg.exception()}"
            elif failed.done():
                why = "connection refused or reset"
            else:
                why = f"no answer within {timeout:g}s"
        finally:
            if not xchg.done():
                xchg.cancel()
            if not failed.done():
                failed.cancel()
        ucx_ep.remove_close_callback()
        ucx_ep.close_blocking(period=_CLOSE_PERIOD_NS, max_attempts=1)
        raise errors.UnavailableError(f"ucx transport: cannot connect to {host}:{port} ({why})")


_ENGINE: _Engine | None = None
_ENGINE_LOCK = threading.Lock()


def engine() -> _Engine:
    global _ENGINE
    # Imported here, in the caller's thread: the loop and handler threads then only look the
    # module up (Python 3.11 can fail compiling modules in two threads at once).
    from tensorweave.distributed import wire  # noqa: F401

    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = _Engine()
        return _ENGINE


# ----------------------------------------------------------------------------------------
# One endpoint: requests in flight on it fail together when it closes.

class _Conn:
    def __init__(self, eng: _Engine, ep, label: str):
        self.eng, self.ep, self.label = eng, ep, label
        self.loop = eng.loop
        self.error: errors.OpError | None = None
        self.tasks: set = set()
        self.closed = asyncio.Event()
        ep.set_close_callback(self._on_close)

    def _on_close(self):  # UCX's progress thread: the peer went away or the endpoint failed
        try:
            self.loop.call_soon_threadsafe(
                self.fail, errors.UnavailableError(f"ucx transport: connection to {self.label} was lost"))
        except RuntimeError:
            pass

    def fail(self, err: errors.OpError) -> None:
        """(loop thread) Fail every call in flight and close the endpoint."""
        if self.error is None:
            self.error = type(err)(err.message)  # a copy: callers may raise ``err`` itself
        for t in list(self.tasks):
            t.cancel()
        self.closed.set()
        ep, self.ep = self.ep, None
        if ep is not None and ep._ep is not None:
            ep._ep.remove_close_callback()
            ep.abort(period=_CLOSE_PERIOD_NS)

    def raised(self) -> errors.OpError:
        # A fresh exception each time: the stored one never gets a traceback, whose frames
        # would keep this connection's endpoint (and, server side, its listener) alive.
        return type(self.error)(self.error.message)

    def _check(self):
        if self.error is not None:
            raise self.raised()
        if self.ep is None:
            raise errors.UnavailableError(f"ucx transport: connection to {self.label} is closed")

    def _ucx_failure(self, e: Exception, what: str) -> errors.OpError:
        err = errors.UnavailableError(f"ucx transport: {what} with {self.label} failed ({type(e).__name__}: {e})")
        self.fail(err)
        return self.raised()

    async def send(self, buf, tag=None):
        self._check()
        try:
            await self.ep.send(buf, tag=tag)
        except self.eng.UCXError as e:
            raise self._ucx_failure(e, "send") from None

    def post(self, buf, tag=None) -> asyncio.Task:
        """Start sending ``buf`` without waiting for UCX to report it sent: a call's answer
        arrives no sooner for it, and each awaited completion is one more trip through
        ucxx's notifier thread. A failed send fails the whole connection (``send``)."""
        task = asyncio.ensure_future(self.send(buf, tag))
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    async def recv(self, buf, tag=None):
        self._check()
        try:
            await self.ep.recv(buf, tag=tag)
        except self.eng.UCXError as e:
            raise self._ucx_failure(e, "receive") from None

    async def guarded(self, coro, timeout: float | None, what: str):
        """Run ``coro`` until it ends, the endpoint fails (UnavailableError) or ``timeout``
        passes (DeadlineExceededError; ``coro`` goes on in the background so that a late
        answer is received and dropped rather than left queued in UCX)."""
        try:
            self._check()
        except errors.OpError:
            coro.close()  # never started: no "coroutine was never awaited" warning
            raise
        inner = asyncio.ensure_future(coro)
        self.tasks.add(inner)
        inner.add_done_callback(self._done)
        try:
            return await asyncio.wait_for(asyncio.shield(inner), timeout)
        except asyncio.TimeoutError:
            raise errors.DeadlineExceededError(
                f"ucx transport: {what} with {self.label} did not finish within {timeout:g}s") from None
        except asyncio.CancelledError:
            if self.error is not None:
                raise self.raised() from None
            raise

    def _done(self, task):
        self.tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a dropped late answer's failure is not an error


async def _recv_slot(conn: _Conn, tag, where: str):
    """(kind, rid, length, aux, method, slot) of the next slot on ``tag``."""
    buf = bytearray(_SLOT)
    await conn.recv(buf, tag)
    return (*_unframe(buf, where), buf)


async def _recv_body(conn: _Conn, slot, length: int, tag) -> bytearray:
    """The ``length`` bytes of payload that came in ``slot`` or, too large for it, follow on ``tag``."""
    if length <= _INLINE:
        return slot[_FRAME.size:_FRAME.size + length]
    body = bytearray(length)
    await conn.recv(body, tag)
    return body


def _post_answer(conn: _Conn, kind: int, rid: int, body, length: int | None = None, aux: int = 0) -> list:
    """Send an answer (the frame says ``length``, by default ``len(body)``): ``body`` inside
    the slot when it fits, else as a second message. The sends, to await if need be."""
    length = len(body) if length is None else length
    if len(body) <= _INLINE:
        return [conn.post(_slot(kind, rid, length, aux, inline=body), _tag(rid, _RESP_HEAD))]
    return [conn.post(_slot(kind, rid, length, aux), _tag(rid, _RESP_HEAD)),
            conn.post(body, _tag(rid, _RESP_BODY))]


def _coalesce(chunks: list) -> list:
    """Merge chunks that lie back to back in memory (``wire.tensor_chunks`` slices one array)
    into one message each: UCX moves one large message faster than many 1 MiB ones. The
    merged buffers are views of the same memory (no copy); the caller keeps ``chunks`` alive
    until they are sent, since a run may span the memory of more than one chunk's owner."""
    import numpy as np

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


# ----------------------------------------------------------------------------------------
# Server

class UcxServer:
    """Serves a ``ServiceDispatcher`` on a UCX listener (on every interface, at the port)."""

    def __init__(self, address: str, dispatcher, security: Security | None = None, max_workers: int = 64):
        self.security = _refuse_tls(security, f"server at {address}")
        host, port = _split_address(address, "server")
        self._dispatcher = dispatcher
        self._eng = engine()
        # Handlers block (RunGraph runs a whole step, RecvTensor waits for its value), so
        # they run on threads; many, because a RecvTensor waiting here must never keep
        # the RunGraph that produces its value from starting.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="tw-ucx-serve")
        self._conns: set[_Conn] = set()
        self._active: set = set()
        self._serving: set = set()
        self._stopping = False
        self._stopped = threading.Event()
        self._listener = None
        try:
            self._listener = self._eng.run(self._listen(port), 30.0)
        except self._eng.UCXError as e:
            self._pool.shutdown(wait=False)
            raise errors.UnavailableError(f"ucx transport: cannot listen at {address} ({type(e).__name__}: {e})") from None
        self.address = f"{host}:{self._listener.port}"

    async def _listen(self, port: int):
        return self._eng.ucxx.create_listener(self._serve, port)

    def _expected_tokens(self):
        return [t for t in (self.security.token, self._dispatcher.token) if t is not None]

    async def _serve(self, ep):
        conn = _Conn(self._eng, ep, "a client")
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
                kind, rid, length, aux, method, slot = await conn.guarded(
                    _recv_slot(conn, None, "request"), None, "receiving a request")
                if kind not in (CALL, FETCH) or rid == 0:
                    raise errors.DataLossError(f"ucx transport: unexpected request frame kind {kind}")
                task = asyncio.ensure_future(self._handle(conn, kind, rid, length, method, slot))
                self._active.add(task)
                task.add_done_callback(self._active.discard)
        except (errors.OpError, asyncio.CancelledError):
            pass  # the client went away, sent garbage, or the server is stopping
        finally:
            conn.fail(errors.UnavailableError("ucx transport: connection closed by the server"))
            self._conns.discard(conn)
            self._serving.discard(asyncio.current_task())

    async def _hello(self, conn: _Conn) -> bool:
        kind, rid, length, _, _, slot = await conn.guarded(_recv_slot(conn, None, "hello"), CONNECT_TIMEOUT, "hello")
        if kind != HELLO or length > _MAX_TOKEN:
            return False
        token = await conn.guarded(_recv_body(conn, slot, length, _tag(0, _REQ_BODY)), CONNECT_TIMEOUT, "hello")
        expected = self._expected_tokens()
        if all(hmac.compare_digest(bytes(token), t.encode()) for t in expected):
            await asyncio.gather(*_post_answer(conn, OK, 0, b""))
            return True
        from tensorweave.distributed import wire

        body = wire.encode_error(errors.UnauthenticatedError(
            "ucx transport: the server refused the connection: it requires an auth token and the one sent "
            "is missing or wrong"))
        await asyncio.gather(*_post_answer(conn, ERROR, 0, body))
        # Let the client read the refusal and hang up (closing first could drop it in flight).
        try:
            await asyncio.wait_for(conn.closed.wait(), CONNECT_TIMEOUT)
        except asyncio.TimeoutError:
            pass
        return False

    async def _handle(self, conn: _Conn, kind: int, rid: int, length: int, method: str, slot):
        from tensorweave.distributed import wire

        loop = asyncio.get_running_loop()
        try:
            if length > self.security.max_message_bytes:
                # The payload stays unread: the client drops this connection on this answer.
                body = wire.encode_error(errors.ResourceExhaustedError(
                    f"ucx transport: request {method} of {length} bytes exceeds the server's limit of "
                    f"{self.security.max_message_bytes} bytes"))
                await asyncio.gather(*_post_answer(conn, ERROR, rid, body))
                return
            if length > _INLINE:
                payload = await conn.guarded(_recv_body(conn, slot, length, _tag(rid, _REQ_BODY)), None,
                                             f"receiving {method}")
            else:
                payload = slot[_FRAME.size:_FRAME.size + length]
            payload = bytes(payload)
            del slot
            if kind == CALL:
                body = await loop.run_in_executor(self._pool, self._call, method, payload)
                await asyncio.gather(*_post_answer(conn, OK, rid, body))
            else:
                # ``parts``: the stream's own chunks, alive until sent (the merged ones are views)
                head, chunks, parts = await loop.run_in_executor(self._pool, self._stream, method, payload)
                table = b"".join(_TABLE.pack(len(c)) for c in chunks)
                sends = _post_answer(conn, FETCH_OK, rid, head + table, len(head), len(chunks))
                # All chunks in flight at once; each lands in its own slice on the client.
                sends += [conn.post(c, _tag(rid, _CHUNK0 + i)) for i, c in enumerate(chunks) if len(c)]
                await asyncio.gather(*sends)
                del parts
        except (errors.OpError, asyncio.CancelledError, RuntimeError):
            pass  # connection lost or server stopping: the client sees UnavailableError

    def _call(self, method: str, payload: bytes) -> bytes:
        from tensorweave.distributed import wire

        try:
            return bytes(self._dispatcher.call(method, payload))
        except Exception as e:  # noqa: BLE001 - a handler's bug travels as an error response
            return wire.encode_error(e if isinstance(e, errors.OpError) else
                                     errors.InternalError(f"{method}: {type(e).__name__}: {e}"))

    def _stream(self, method: str, payload: bytes):
        """(head, [payload buffers to send], [the stream's chunks]); an error travels as the head."""
        from tensorweave.distributed import wire

        try:
            it = iter(self._dispatcher.stream(method, payload))
            head = next(it, None)
            if head is None:
                raise errors.DataLossError(f"{method}: the stream produced nothing")
            parts = [memoryview(c).cast("B") for c in it]
            if len(head) + sum(map(len, parts)) <= _INLINE:
                # A small tensor travels whole in the answer's slot: header, then its bytes.
                return bytes(head) + b"".join(parts), [], []
            chunks = _coalesce(parts)
            if len(chunks) > _MAX_CHUNKS:
                raise errors.ResourceExhaustedError(f"{method}: {len(chunks)} chunks is more than {_MAX_CHUNKS}")
            return bytes(head), chunks, parts
        except Exception as e:  # noqa: BLE001
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


# ----------------------------------------------------------------------------------------
# Channel

class UcxChannel:
    """A client of one UCX server: one endpoint, opened on first use and again after a failure."""

    def __init__(self, address: str, security: Security | None = None):
        self.security = _refuse_tls(security, f"channel to {address}")
        self.address = address
        self._host, self._port = _split_address(address, "channel")
        self._eng = engine()
        self._conn: _Conn | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False

    # -- connection ----------------------------------------------------------------------
    def _connection(self, timeout: float | None) -> _Conn:
        with self._lock:
            if self._closed:
                raise errors.UnavailableError(f"ucx transport: channel to {self.address} is closed")
            conn = self._conn
            if conn is None or conn.error is not None or conn.ep is None:
                t = CONNECT_TIMEOUT if timeout is None else min(timeout, CONNECT_TIMEOUT)
                self._conn = conn = self._eng.run(self._open(t), t)
            return conn

    async def _open(self, timeout: float) -> _Conn:
        from tensorweave.distributed import wire

        ep = await self._eng.connect(self._host, self._port, timeout)
        conn = _Conn(self._eng, ep, self.address)
        try:
            token = (self.security.token or "").encode()
            inline = len(token) <= _INLINE
            conn.post(_slot(HELLO, 0, len(token), inline=token if inline else b""))
            if not inline:
                conn.post(token, _tag(0, _REQ_BODY))
            kind, _, length, _, _, slot = await conn.guarded(
                _recv_slot(conn, _tag(0, _RESP_HEAD), "hello answer"), timeout, "connect")
            if kind == ERROR and length <= _MAX_TENSOR_HEAD:
                body = await conn.guarded(_recv_body(conn, slot, length, _tag(0, _RESP_BODY)), timeout, "connect")
                wire.decode_response(body)  # raises the refusal (UnauthenticatedError)
            if kind != OK:
                raise errors.DataLossError(f"ucx transport: {self.address} answered the hello with frame kind {kind}")
            return conn
        except BaseException as e:
            conn.fail(e if isinstance(e, errors.OpError) else errors.UnavailableError(str(e)))
            if isinstance(e, errors.DeadlineExceededError):
                raise errors.UnavailableError(f"ucx transport: {self.address} did not answer the hello in time") from None
            raise

    def _check_size(self, method: str, payload) -> None:
        if len(payload) > self.security.max_message_bytes:
            raise errors.ResourceExhaustedError(
                f"ucx transport: request {method} of {len(payload)} bytes exceeds {self.security.max_message_bytes}")

    # -- calls ---------------------------------------------------------------------------
    def call(self, method: str, payload, timeout: float | None = None) -> bytes:
        self._check_size(method, payload)
        conn = self._connection(timeout)
        return self._eng.run(conn.guarded(self._call(conn, method, payload), timeout, method), timeout)

    async def _call(self, conn: _Conn, method: str, payload) -> bytes:
        rid = next(self._ids)
        kind, length, _, slot = await self._request(conn, CALL, rid, method, payload)
        body = await _recv_body(conn, slot, length, _tag(rid, _RESP_BODY))
        if kind == ERROR:
            self._drop_if_refused(conn, body)
        elif kind != OK:
            conn.fail(errors.DataLossError(f"ucx transport: {method}: unexpected answer frame kind {kind}"))
            conn._check()
        return bytes(body)

    async def _request(self, conn: _Conn, kind: int, rid: int, method: str, payload):
        """Send a request; (kind, length, aux, slot) of its answer. Nothing sent is awaited
        before the answer: an answer implies the request arrived, and a large payload goes
        by rendezvous, which waits for the server to take it (a server refusing it, too
        large, never does)."""
        inline = len(payload) <= _INLINE
        request = _slot(kind, rid, len(payload), 0, method, payload if inline else b"")
        conn.post(request)
        sending = None if inline else conn.post(payload, _tag(rid, _REQ_BODY))
        # The answer's receive is posted before this task first waits, so before the sends
        # start: an answer that finds its receive posted skips UCX's unexpected-message queue.
        akind, arid, length, aux, _, slot = await _recv_slot(conn, _tag(rid, _RESP_HEAD), f"{method} answer")
        if sending is not None and akind != ERROR:
            await sending
        limit = self.security.max_message_bytes if akind != FETCH_OK else _MAX_TENSOR_HEAD
        if arid != rid or length > limit:
            # Its body is already on the way and cannot be skipped: drop the connection.
            err = errors.ResourceExhaustedError(
                f"ucx transport: the answer to {method} from {self.address} ({length} bytes) exceeds {limit}")
            conn.fail(err)
            raise err
        return akind, length, aux, slot

    def _drop_if_refused(self, conn: _Conn, body) -> None:
        """A transport-level refusal (oversize request) leaves the request's payload unread on
        the server: drop the connection, then raise the error it carries."""
        from tensorweave.distributed import wire

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

    async def _fetch(self, conn: _Conn, method: str, payload):
        from tensorweave.distributed import wire

        rid = next(self._ids)
        kind, length, n, slot = await self._request(conn, FETCH, rid, method, payload)
        if kind == ERROR:
            self._drop_if_refused(conn, await _recv_body(conn, slot, length, _tag(rid, _RESP_BODY)))
        if kind != FETCH_OK or n > _MAX_CHUNKS:
            err = errors.DataLossError(f"ucx transport: {method}: malformed tensor answer from {self.address}")
            conn.fail(err)
            raise err
        body = await _recv_body(conn, slot, length + n * _TABLE.size, _tag(rid, _RESP_BODY))
        del slot
        head = memoryview(body)[:length]
        sizes = [s for (s,) in _TABLE.iter_unpack(memoryview(body)[length:])]
        try:
            if bytes(head[:4]) == wire.MESSAGE_MAGIC:
                if n:
                    raise errors.DataLossError(f"{method}: an error answer followed by payload chunks")
                wire.decode_response(head, self.security.max_message_bytes)  # raises the error it carries
                raise errors.DataLossError(f"{method}: the stream began with a response, not a tensor header")
            header, off = wire.decode_tensor_header(head, self.security.max_message_bytes)
            asm = wire.TensorAssembler(header, f"tensor from {method} at {self.address}")
            if off < length:
                asm.write(head[off:])
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
                recvs.append(conn.recv(asm.buffer[at:at + size], _tag(rid, _CHUNK0 + i)))
            at += size
        await asyncio.gather(*recvs)
        asm.advance(at - asm.pos)
        return asm.finish()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            err = errors.UnavailableError(f"ucx transport: channel to {self.address} is closed")
            try:
                self._eng.loop.call_soon_threadsafe(conn.fail, err)
            except RuntimeError:
                pass

    def __repr__(self) -> str:
        return f"UcxChannel({self.address!r})"


class UcxTransport:
    """The ``ucx`` transport: servers and channels over UCX (TCP, shared memory) via ucxx."""

    name = "ucx"

    def server(self, address: str, dispatcher, security: Security | None = None) -> UcxServer:
        return UcxServer(address, dispatcher, security)

    def channel(self, address: str, security: Security | None = None) -> UcxChannel:
        return UcxChannel(address, security)
