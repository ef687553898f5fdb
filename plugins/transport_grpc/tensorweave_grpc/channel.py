"""``GrpcChannel``: the client side of the worker service over one grpc channel.

``call`` is a unary request; ``fetch`` consumes a RecvTensor stream and assembles its chunks
into one preallocated buffer with ``wire.assemble_tensor`` (each chunk arrives as its own
message and is copied once, into place). Failures of the call itself become ``tw.errors``
naming the method and the peer (``status.py``). A channel is reusable and thread-safe (grpc
channels are); ``close()`` closes the grpc channel.
"""

from __future__ import annotations

import grpc
import grpc.experimental

from tensorweave.distributed import wire
from tensorweave.framework import errors

from . import codec
from .server import message_limit
from .service import auth_metadata, method_path
from .status import to_op_error


class GrpcChannel:
    def __init__(self, address: str, security):
        self.address = address
        self.security = security
        self._limit = message_limit(security)
        options = [
            ("grpc.max_send_message_length", self._limit),
            ("grpc.max_receive_message_length", self._limit),
            # Connections of its own, not grpc's process-wide pool: a new channel to a task
            # that restarted connects now, instead of sharing an old subchannel's reconnect
            # back-off (the runtime replaces a channel that found its peer gone).
            ("grpc.use_local_subchannel_pool", 1),
            # A RecvTensor stream is read on the calling thread. Without this grpcio starts a
            # thread for every stream call on a channel with none in flight (its "channel spin"
            # thread, which exits when the call ends): a thread start per pulled tensor.
            (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
        ]
        if security.tls:
            root = security.tls_root if security.tls_root is not None else security.tls_cert
            creds = grpc.ssl_channel_credentials(root_certificates=root)
            if security.tls_server_name:
                options.append(("grpc.ssl_target_name_override", security.tls_server_name))
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._metadata = auth_metadata(security.token)
        self._unary: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._streams: dict[str, grpc.UnaryStreamMultiCallable] = {}
        self._closed = False

    def _check(self, method: str, payload) -> bytes:
        if self._closed:
            raise errors.FailedPreconditionError(f"grpc transport: {method} to {self.address}: the channel is closed")
        n = memoryview(payload).nbytes
        if n > self._limit:
            raise errors.ResourceExhaustedError(
                f"grpc transport: {method} to {self.address}: request of {n} bytes exceeds the "
                f"limit of {self._limit} bytes (security.max_message_bytes)")
        return payload

    def call(self, method: str, payload, timeout: float | None = None) -> bytes:
        """Send ``payload`` to ``method``; the response payload (bytes)."""
        self._check(method, payload)
        stub = self._unary.get(method)
        if stub is None:  # a race builds two equal stubs; both work
            stub = self._unary[method] = self._channel.unary_unary(
                method_path(method), request_serializer=codec.encode, response_deserializer=codec.decode)
        try:
            return bytes(stub(payload, timeout=timeout, metadata=self._metadata))
        except grpc.RpcError as e:
            raise to_op_error(e, method, self.address, timeout) from None
        except ValueError as e:  # grpc: "Cannot invoke RPC on closed channel!"
            raise errors.FailedPreconditionError(f"grpc transport: {method} to {self.address}: {e}") from None

    def fetch(self, method: str, payload, timeout: float | None = None):
        """Stream a tensor from ``method``; what ``wire.assemble_tensor`` makes of the chunks."""
        self._check(method, payload)
        stub = self._streams.get(method)
        if stub is None:
            stub = self._streams[method] = self._channel.unary_stream(
                method_path(method), request_serializer=codec.encode, response_deserializer=codec.decode)
        try:
            responses = stub(payload, timeout=timeout, metadata=self._metadata)
        except ValueError as e:
            raise errors.FailedPreconditionError(f"grpc transport: {method} to {self.address}: {e}") from None

        def chunks():
            try:
                yield from responses
            except grpc.RpcError as e:
                raise to_op_error(e, method, self.address, timeout) from None

        try:
            return wire.assemble_tensor(chunks())
        finally:
            # Ends the server's stream when assembly stopped early (an error chunk, a bad
            # header); a no-op on a finished call.
            responses.cancel()

    def close(self) -> None:
        self._closed = True
        self._channel.close()

    def __repr__(self) -> str:
        return f"GrpcChannel({self.address!r}{', tls' if self.security.tls else ''})"
