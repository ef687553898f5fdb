"""One UCX endpoint as a connection (``Conn``): the requests in flight on it fail together
when it closes, and the message I/O both ends share — receiving a slot and the payload that
came in it or follows it, posting an answer.

All of it runs on the engine's loop thread.
"""

from __future__ import annotations

import asyncio

from tensorweave.distributed import wire
from tensorweave.framework import errors

from .engine import CLOSE_PERIOD_NS, Engine
from .framing import FRAME, INLINE, RESP_BODY, RESP_HEAD, SLOT, slot, tag, unframe

CONNECT_TIMEOUT = 10.0   # connect + hello, seconds


class Conn:
    def __init__(self, eng: Engine, ep, label: str):
        self.eng, self.ep, self.label = eng, ep, label
        self.loop = eng.loop
        self.error: errors.OpError | None = None
        self.tasks: set = set()
        self.closed = asyncio.Event()
        # Server side: the CallContexts of the requests being served (told when this
        # connection goes), the deferred fetches waiting, and the request body bytes being
        # received at once (bounded by the server's max_message_bytes).
        self.calls: set = set()
        self.waiting = 0
        self.receiving = 0
        self.budget = asyncio.Condition()
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
            ep.abort(period=CLOSE_PERIOD_NS)

    def raised(self) -> errors.OpError:
        # A fresh exception each time: the stored one never gets a traceback, whose frames
        # would keep this connection's endpoint (and, server side, its listener) alive.
        return type(self.error)(self.error.message)

    def check(self):
        if self.error is not None:
            raise self.raised()
        if self.ep is None:
            raise errors.UnavailableError(f"ucx transport: connection to {self.label} is closed")

    async def _transfer(self, op: str, what: str, buf, tag):
        self.check()
        try:
            await getattr(self.ep, op)(buf, tag=tag)
        except (self.eng.UCXError, RuntimeError) as e:  # RuntimeError: ucxx's "endpoint closed"
            err = errors.UnavailableError(f"ucx transport: {what} with {self.label} failed ({type(e).__name__}: {e})")
            self.fail(err)
            raise self.raised() from None

    async def send(self, buf, tag=None):
        await self._transfer("send", "send", buf, tag)

    async def recv(self, buf, tag=None):
        await self._transfer("recv", "receive", buf, tag)

    def post(self, buf, tag=None) -> asyncio.Task:
        """Start sending ``buf`` without waiting for UCX to report it sent: a call's answer
        arrives no sooner for it, and each awaited completion is one more trip through
        ucxx's notifier thread. A failed send fails the whole connection (``send``)."""
        return self.spawn(self.send(buf, tag))

    def spawn(self, coro) -> asyncio.Task:
        """``coro`` as a task that fails (is cancelled) with the connection."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    async def guarded(self, coro, timeout: float | None, what: str):
        """Run ``coro`` until it ends, the endpoint fails (UnavailableError) or ``timeout``
        passes (DeadlineExceededError; ``coro`` goes on in the background so that a late
        answer is received and dropped rather than left queued in UCX)."""
        try:
            self.check()
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


async def recv_slot(conn: Conn, on_tag, where: str):
    """(kind, rid, length, aux, method, slot) of the next slot on ``on_tag``."""
    buf = bytearray(SLOT)
    await conn.recv(buf, on_tag)
    return (*unframe(buf, where), buf)


async def recv_body(conn: Conn, head, length: int, on_tag) -> bytearray:
    """The ``length`` bytes of payload that came in the slot ``head`` or, too large for it, follow on ``on_tag``."""
    if length <= INLINE:
        return head[FRAME.size:FRAME.size + length]
    # Reserved, not committed (``wire.reserve_buffer``): a frame announcing gigabytes costs
    # what arrives, not what it claims.
    body = wire.reserve_buffer(length, f"ucx transport: a message of {length} bytes from {conn.label}")
    await conn.recv(body, on_tag)
    return body


def post_answer(conn: Conn, kind: int, rid: int, body, length: int | None = None, aux: int = 0) -> list:
    """Send an answer (the frame says ``length``, by default ``len(body)``): ``body`` inside
    the slot when it fits, else as a second message. The sends, to await if need be."""
    length = len(body) if length is None else length
    if len(body) <= INLINE:
        return [conn.post(slot(kind, rid, length, aux, inline=body), tag(rid, RESP_HEAD))]
    return [conn.post(slot(kind, rid, length, aux), tag(rid, RESP_HEAD)),
            conn.post(body, tag(rid, RESP_BODY))]
