"""The server side of ``tensorweave.WorkerService`` over grpcio: method paths, auth, routing.

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
"""

from __future__ import annotations

import grpc

from tensorweave.distributed import transport
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


class WorkerServiceHandler(grpc.GenericRpcHandler):
    """Routes ``/tensorweave.WorkerService/*`` to a ServiceDispatcher (see the module docstring)."""

    def __init__(self, dispatcher: transport.ServiceDispatcher, security: transport.Security):
        self._dispatcher = dispatcher
        self._security = security
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def _authenticate(self, context) -> None:
        try:
            self._dispatcher.check_token(_bearer(context), self._security)
        except errors.UnauthenticatedError as e:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))

    def _unary(self, method: str):
        def handle(payload: memoryview, context):
            self._authenticate(context)
            return self._dispatcher.call(method, bytes(payload))

        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=codec.decode, response_serializer=codec.encode)

    def _stream(self, method: str):
        def handle(payload: memoryview, context):
            self._authenticate(context)
            try:
                yield from self._dispatcher.stream(method, bytes(payload))
            except errors.OpError as e:
                # Chunks are already on the wire, so the error cannot be a response chunk:
                # it ends the stream with the status of the same code; the client maps it back.
                context.abort(_grpc_code(e), str(e))

        return grpc.unary_stream_rpc_method_handler(
            handle, request_deserializer=codec.decode, response_serializer=codec.encode)

    def service(self, handler_call_details):
        path = handler_call_details.method
        if not path.startswith(_PREFIX):
            return None
        handler = self._handlers.get(path)
        if handler is None:
            method = path[len(_PREFIX):]
            is_stream = method in STREAM_METHODS or method in self._dispatcher.streams
            handler = self._stream(method) if is_stream else self._unary(method)
            # Cache only methods that exist (a client cannot grow the table with made-up
            # names); a race just builds the same handler twice.
            if is_stream or method in UNARY_METHODS or method in self._dispatcher.handlers:
                self._handlers[path] = handler
        return handler
