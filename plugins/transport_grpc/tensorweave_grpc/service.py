"""The server side of ``tensorweave.WorkerService`` over grpcio's asyncio server: method paths,
auth, routing, and which thread runs what.

Method names and paths follow ``worker_service.proto``: ``/tensorweave.WorkerService/<Method>``,
unary for everything but ``RecvTensor``, which is server-streaming. Every request is routed to
the core's ``ServiceDispatcher``; the dispatcher, not this module, decides which methods
exist, so a method it does not know is answered exactly as by every other transport (an
UnimplementedError *response*, which the client raises when it decodes it). That is why this
is a ``grpc.GenericRpcHandler`` that routes any method under the service rather than
``grpc.method_handlers_generic_handler`` with a fixed table; paths outside the service get
gRPC's own UNIMPLEMENTED status.

Auth: a client sends ``authorization: Bearer <token>`` metadata; the handler passes it to the
core's ``dispatcher.check_token(token, security)`` before touching the payload. A refused token
ends the call with UNAUTHENTICATED.

Threads (the handlers themselves are coroutines on the server's event loop):

* a unary method runs on the server's pool — the control methods
  (``transport.CONTROL_METHODS``: Health, AbortStep, ...) on a pool of their own, so they are
  answered while every other thread is blocked in a RunGraph;
* a deferred stream (``dispatcher.deferred``: RecvTensor) waits on no thread at all: it is
  answered when its value is sent (``dispatcher.start_stream``), and a caller that cancels,
  times out or disconnects withdraws its wait — thousands may wait at once for the cost of
  their bookkeeping;
* a caller that goes away (its call cancelled, its connection lost, or found dead by the
  server's keepalive pings) is reported to the handler (``transport.CallContext``).
"""

from __future__ import annotations

import asyncio

import grpc

from tensorweave.distributed import transport, wire
from tensorweave.framework import errors

from . import codec

SERVICE = "tensorweave.WorkerService"
UNARY_METHODS = ("GetStatus", "RegisterGraph", "DeregisterGraph", "RunGraph", "AbortStep",
                 "CleanupStep", "ResetContainers", "Health")
STREAM_METHODS = ("RecvTensor",)
AUTH_KEY = "authorization"
_PREFIX = f"/{SERVICE}/"


def method_path(method: str) -> str:
    return _PREFIX + method


def auth_metadata(token: str | None):
    return ((AUTH_KEY, f"Bearer {token}"),) if token is not None else None


def _bearer(context) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTH_KEY and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):]
    return None


def _grpc_code(exc: errors.OpError) -> grpc.StatusCode:
    for code in grpc.StatusCode:
        if code.value[0] == exc.error_code:
            return code
    return grpc.StatusCode.UNKNOWN


def _drain(make):
    """(the chunks of the stream ``make()`` gives, the error that ended it after its first
    chunk or None): run on a pool thread, so that a stream that blocks never blocks the loop.
    The worker's chunks are views of its tensor: collecting them copies nothing."""
    chunks = []
    try:
        for chunk in make():
            chunks.append(chunk)
    except errors.OpError as e:
        return chunks, e
    return chunks, None


class WorkerServiceHandler(grpc.GenericRpcHandler):
    """Routes ``/tensorweave.WorkerService/*`` to a ServiceDispatcher (see the module docstring).
    ``pool`` runs handlers and blocking streams, ``control`` the control methods, ``send``
    makes the chunks of a deferred stream whose answer came."""

    def __init__(self, dispatcher: transport.ServiceDispatcher, security: transport.Security,
                 pool=None, control=None, send=None):
        self._dispatcher = dispatcher
        self._security = security
        self._pool, self._control, self._send = pool, control or pool, send or pool
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def _accept(self, data: bytes, context) -> bytes:
        """The request's payload, once its token is checked; a body that is not a
        WorkerService message ends the call with INTERNAL (decoded here, not by grpc, whose
        asyncio server would log it and answer UNKNOWN)."""
        try:
            self._dispatcher.check_token(_bearer(context), self._security)
        except errors.UnauthenticatedError as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        try:
            return bytes(codec.decode(data))
        except ValueError as e:
            await context.abort(grpc.StatusCode.INTERNAL, f"malformed request: {e}")

    def _unary(self, method: str):
        pool = self._control if method in transport.CONTROL_METHODS else self._pool

        async def handle(data: bytes, context):
            payload = await self._accept(data, context)
            call = transport.CallContext()
            loop = asyncio.get_running_loop()
            try:
                return await loop.run_in_executor(pool, self._dispatcher.call, method, payload, call)
            except asyncio.CancelledError:
                # The caller cancelled, passed its deadline or disconnected (grpc cancels the
                # handler); the handler thread goes on until what it runs notices.
                call.client_gone(in_thread=True)
                raise

        return grpc.unary_unary_rpc_method_handler(handle, response_serializer=codec.encode)

    async def _deferred(self, method: str, payload: bytes):
        """Wait, holding no thread, for the deferred stream's answer: ``(make_chunks, None)``
        to drain on a pool thread, or ``(None, drained)`` (``transport.deferred_answer``)."""
        answer, done = transport.deferred_answer(asyncio.get_running_loop(), _drain)
        cancel = self._dispatcher.start_stream(method, payload, done)
        try:
            finished, _ = await asyncio.wait({answer}, timeout=self._dispatcher.deferred_timeout)
        except asyncio.CancelledError:
            cancel()  # the caller went away: nothing waits for it any more
            raise
        if not finished and cancel():
            err = self._dispatcher.deadline_error(method)
            return (lambda: iter([wire.encode_error(err)])), None
        return await answer

    def _stream(self, method: str):
        async def handle(data: bytes, context):
            payload = await self._accept(data, context)
            if method in self._dispatcher.deferred:
                (make, drained), pool = await self._deferred(method, payload), self._send
            else:
                make, drained, pool = (lambda: self._dispatcher.stream(method, payload)), None, self._pool
            if drained is None:
                drained = await asyncio.get_running_loop().run_in_executor(pool, _drain, make)
            chunks, err = drained
            for chunk in chunks:
                yield chunk
            if err is not None:
                # Chunks are already on the wire, so the error cannot be a response chunk:
                # it ends the stream with the status of the same code; the client maps it back.
                await context.abort(_grpc_code(err), str(err))

        return grpc.unary_stream_rpc_method_handler(handle, response_serializer=codec.encode)

    def service(self, handler_call_details):
        path = handler_call_details.method
        if not path.startswith(_PREFIX):
            return None
        handler = self._handlers.get(path)
        if handler is None:
            method = path[len(_PREFIX):]
            d = self._dispatcher
            is_stream = method in STREAM_METHODS or method in d.streams or method in d.deferred
            handler = self._stream(method) if is_stream else self._unary(method)
            # Cache only methods that exist (a client cannot grow the table with made-up
            # names); a race just builds the same handler twice.
            if is_stream or method in UNARY_METHODS or method in d.handlers:
                self._handlers[path] = handler
        return handler
