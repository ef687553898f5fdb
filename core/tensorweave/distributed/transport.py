"""The transport contract: how the worker service travels between processes (DESIGN: Distributed).

A transport plugin moves **bytes**; everything above bytes — which methods exist, how
requests and tensors are encoded (``distributed/wire.py``), what a worker does with them
(``distributed/worker.py``) — lives in the core, so every transport serves exactly the same
service and the same conformance kit (``pytest --tw-transport=NAME``,
``tensorweave.testing.transport_kit``) checks each of them.

This module owns that contract — the ``Transport``, ``Server`` and ``Channel`` protocols — and
what every transport shares: ``Security`` (TLS and auth settings), ``ServiceDispatcher`` (the
server side a transport hands requests to, with the one constant-time token check),
``guarded``, the in-process transport ``inproc`` and ``get_transport``.

A transport is registered with ``tensorweave_register_transports(registry)`` as
``registry.register("grpc", GrpcTransport)``. ``Security`` carries what the cluster config
says about TLS and auth; a transport applies what it supports and raises
``UnimplementedError`` at start-up, naming itself, for a setting it cannot honour (never
silently insecure).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hmac
import itertools
import threading
from typing import Protocol, runtime_checkable

from tensorweave import plugins
from tensorweave.distributed import wire
from tensorweave.framework import errors

# ----------------------------------------------------------------------------------------
# The contract


@runtime_checkable
class Server(Protocol):
    """One served ``ServiceDispatcher``, listening from the moment ``Transport.server`` returns.

    * ``address`` is the bound ``"host:port"`` (asked for port 0, the port picked).
    * Requests are served concurrently: a handler that blocks (a RunGraph runs a whole step)
      never holds up other requests, on the same channel or not.
    * Auth: ``dispatcher.check_token(token, security)`` decides before the dispatcher sees
      anything; a refused client raises ``UnauthenticatedError``.
    * Limits: a request over the server's ``security.max_message_bytes`` is refused unread and
      a response over it is not sent; the client raises ``ResourceExhaustedError``.
    * Nothing a peer sends — a truncated or malformed frame, bytes of another protocol, a
      connection dropped half-way — stops the server: it drops that peer and goes on serving.
    """

    address: str

    def stop(self, grace: float | None = None) -> None:
        """Stop listening; calls in flight fail (after ``grace`` seconds, if given) with
        ``UnavailableError`` (or ``CancelledError``) at their clients; the port is free when
        this returns. Stopping twice is a no-op."""


@runtime_checkable
class Channel(Protocol):
    """A client of one server, safe to share between threads: concurrent calls never wait
    for each other. Its own failures are ``tw.errors``:

    * ``UnavailableError`` naming the address when the peer cannot be reached, goes away
      (a killed process included) or stops — promptly, not when the timeout runs out;
    * ``DeadlineExceededError`` after ``timeout`` seconds (the channel stays usable);
    * ``UnauthenticatedError`` when the server refuses the token;
    * ``ResourceExhaustedError`` for a request or response over either side's
      ``security.max_message_bytes`` (a request over the channel's own limit is not sent);
    * after ``close()``, ``FailedPreconditionError`` or ``UnavailableError`` saying it is closed.

    A server-side failure is not the channel's: the dispatcher encodes it as an error
    response (``wire.encode_error``), which ``call`` returns like any payload and ``fetch``
    raises.
    """

    def call(self, method: str, payload, timeout: float | None = None) -> bytes:
        """Send ``payload`` (bytes-like) to ``method``; the response payload."""

    def fetch(self, method: str, payload, timeout: float | None = None):
        """A streamed tensor: the server side's ``dispatcher.stream(method, payload)`` is an
        iterator of byte chunks (the first a wire tensor header, ``wire.decode_tensor_header``),
        assembled into one buffer preallocated from the header — never concatenating
        whole-message copies. An owned, writable ndarray, or ``frames.DEAD``; an error
        response as the stream's first chunk, or an error ending it, is raised. The tensor is
        not bounded by ``max_message_bytes`` (each chunk is a message; the tensor is many)."""

    def close(self) -> None:
        """Release the connection; calls after it fail. Closing twice is a no-op."""


@runtime_checkable
class Transport(Protocol):
    """What a transport plugin registers (a class, instantiated without arguments)."""

    name: str

    def server(self, address: str, dispatcher: ServiceDispatcher, security: Security | None = None) -> Server:
        """Serve ``dispatcher`` at ``address`` (``"host:port"``; port 0 picks a free port).
        A malformed address is ``InvalidArgumentError`` (naming ``host:port``); an address
        that cannot be bound is ``UnavailableError`` naming it."""

    def channel(self, address: str, security: Security | None = None) -> Channel:
        """A client of the server at ``address`` (connecting may wait for the first call)."""


@dataclasses.dataclass
class Security:
    """TLS and authentication settings for one server or channel."""

    tls_cert: bytes | None = None        # PEM certificate chain (server) / expected root (client)
    tls_key: bytes | None = dataclasses.field(default=None, repr=False)  # PEM private key (server only)
    tls_root: bytes | None = None        # PEM root certificates a client trusts
    tls_server_name: str | None = None   # override of the name checked in the server certificate
    # shared secret: clients send it, servers require it; kept out of repr (logs, tracebacks)
    token: str | None = dataclasses.field(default=None, repr=False)
    max_message_bytes: int = 1 << 31     # larger requests/responses are refused

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None or self.tls_root is not None


def _same_token(presented, expected: str) -> bool:
    # Constant time: how long a refusal takes must not tell a guesser how much was right.
    if presented is None:
        return False
    if isinstance(presented, str):
        presented = presented.encode()
    return hmac.compare_digest(bytes(presented), expected.encode())


def _as_op_error(method: str, exc: Exception) -> errors.OpError:
    return exc if isinstance(exc, errors.OpError) else errors.InternalError(f"{method}: {type(exc).__name__}: {exc}")


class ServiceDispatcher:
    """The server side every transport hands requests to.

    ``handlers``: method name -> fn(payload bytes) -> response bytes;
    ``streams``: method name -> fn(payload bytes) -> iterator of byte chunks (tensors).
    A name is one or the other (a transport may route by name alone, as gRPC's paths do).
    Unknown methods are an UnimplementedError response, and a handler that raises answers
    with an error response (a non-``tw.errors`` exception as ``InternalError``): never a
    crash of the server, over every transport alike.
    """

    def __init__(self, handlers: dict, streams: dict | None = None, token: str | None = None):
        self.handlers = dict(handlers)
        self.streams = dict(streams or {})
        self.token = token

    def check_token(self, token, security: Security | None = None) -> None:
        """Refuse (``UnauthenticatedError``) unless ``token`` (str, bytes or None) is each token
        this server requires: the dispatcher's own and ``security.token`` (either may be None).
        The one token check every transport uses, in constant time."""
        for expected in (self.token, security.token if security is not None else None):
            if expected is not None and not _same_token(token, expected):
                raise errors.UnauthenticatedError("the request carried no valid auth token for this server")

    def call(self, method: str, payload: bytes) -> bytes:
        fn = self.handlers.get(method)
        if fn is None:
            return wire.encode_error(errors.UnimplementedError(f"unknown method {method!r}"))
        try:
            return fn(payload)
        except Exception as e:  # noqa: BLE001 - see the class docstring
            return wire.encode_error(_as_op_error(method, e))

    def stream(self, method: str, payload: bytes):
        """The chunks of ``method``'s stream. A failure before the first chunk is the stream's
        only chunk, an error response; after it, it is raised (as a ``tw.errors`` exception)
        for the transport to end the stream with."""
        fn = self.streams.get(method)
        if fn is None:
            return iter([wire.encode_error(errors.UnimplementedError(f"unknown stream method {method!r}"))])
        return self._guarded_stream(method, fn, payload)

    @staticmethod
    def _guarded_stream(method: str, fn, payload: bytes):
        started = False
        try:
            for chunk in fn(payload):
                started = True
                yield chunk
        except Exception as e:  # noqa: BLE001 - see ``stream``
            err = _as_op_error(method, e)
            if started:
                raise err from None
            yield wire.encode_error(err)


def guarded(fn):
    """A request handler that answers every failure with an error response: a bad request
    gets a ``tw.errors`` reply and never takes the server (or its transport thread) down."""
    def handle(payload):
        try:
            return fn(payload)
        except errors.OpError as e:
            return wire.encode_error(e)
        except Exception as e:  # noqa: BLE001 - see the docstring
            return wire.encode_error(errors.InternalError(f"{type(e).__name__}: {e}"))
    return handle


# ----------------------------------------------------------------------------------------
# The in-process transport (tests and docs): servers live in a process-wide table keyed by
# address. It keeps the contract of a network transport — every request and response still
# goes through the wire format, runs on the server's own threads, honours timeouts, tokens
# and size limits, and fails when the server stops — so it exercises everything but the network.

_INPROC: dict[str, InProcServer] = {}
_INPROC_LOCK = threading.Lock()
_ports = itertools.count(40000)


def _split_address(address: str) -> tuple[str, str]:
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise errors.InvalidArgumentError(
            f"inproc transport: address {address!r} is not \"host:port\" (port 0 picks a free port)")
    return host, port


def _settle(answer: concurrent.futures.Future, result=None, error: BaseException | None = None) -> None:
    try:
        if error is None:
            answer.set_result(result)
        else:
            answer.set_exception(error)
    except concurrent.futures.InvalidStateError:  # already failed by stop()
        pass


class InProcServer:
    def __init__(self, address: str, dispatcher: ServiceDispatcher, security: Security):
        host, port = _split_address(address)
        self.dispatcher, self.security = dispatcher, security
        self._lock = threading.Lock()
        self._in_flight: set[concurrent.futures.Future] = set()
        self._stopped = False
        with _INPROC_LOCK:
            if port == "0":
                port = str(next(_ports))
                while f"{host}:{port}" in _INPROC:
                    port = str(next(_ports))
            self.address = f"{host}:{port}"
            if self.address in _INPROC:
                raise errors.UnavailableError(f"inproc transport: address {self.address} is already in use")
            _INPROC[self.address] = self
        # As many threads as a network server has: a handler blocked for a whole step must
        # not keep the request that unblocks it from running.
        self._pool = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="tw-inproc-server")

    def submit(self, fn, *args) -> concurrent.futures.Future:
        """Run ``fn(*args)`` on the server's threads; its future fails if the server stops first."""
        answer: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._stopped:
                raise errors.UnavailableError(f"inproc transport: the server at {self.address} stopped")
            self._in_flight.add(answer)

        def run():
            try:
                result, error = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                result, error = None, e
            with self._lock:
                self._in_flight.discard(answer)
            _settle(answer, result, error)

        self._pool.submit(run)
        return answer

    def stop(self, grace=None) -> None:
        with _INPROC_LOCK:
            if _INPROC.get(self.address) is self:
                del _INPROC[self.address]
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            in_flight = set(self._in_flight)
        if grace and in_flight:
            concurrent.futures.wait(in_flight, grace)
        for answer in in_flight:
            _settle(answer, error=errors.UnavailableError(f"inproc transport: the server at {self.address} stopped"))
        # Handlers still running finish on their own (nobody waits for their answers).
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __repr__(self) -> str:
        return f"InProcServer({self.address!r})"


class InProcChannel:
    def __init__(self, address: str, security: Security):
        self.address = address
        self.security = security
        self._closed = False

    def _check_size(self, what: str, method: str, n: int, limit: int, whose: str) -> None:
        if n > limit:
            raise errors.ResourceExhaustedError(
                f"inproc transport: {what} {method} of {n} bytes exceeds {whose} limit of {limit} bytes")

    def _server(self, method: str, payload) -> InProcServer:
        if self._closed:
            raise errors.FailedPreconditionError(f"inproc transport: {method} to {self.address}: the channel is closed")
        n = memoryview(payload).nbytes
        self._check_size("request", method, n, self.security.max_message_bytes, "the channel's")
        server = _INPROC.get(self.address)
        if server is None:
            raise errors.UnavailableError(f"inproc transport: nothing is serving at {self.address}")
        server.dispatcher.check_token(self.security.token, server.security)
        self._check_size("request", method, n, server.security.max_message_bytes, "the server's")
        return server

    def _wait(self, answer: concurrent.futures.Future, method: str, timeout: float | None):
        try:
            return answer.result(timeout)
        except concurrent.futures.TimeoutError:
            raise errors.DeadlineExceededError(
                f"inproc transport: {method} to {self.address}: no reply within {timeout:g} s") from None

    def call(self, method: str, payload, timeout: float | None = None) -> bytes:
        server = self._server(method, payload)
        body = self._wait(server.submit(server.dispatcher.call, method, bytes(payload)), method, timeout)
        for limit, whose in ((server.security.max_message_bytes, "the server's"),
                             (self.security.max_message_bytes, "the channel's")):
            self._check_size("the answer to", method, len(body), limit, whose)
        return bytes(body)

    def fetch(self, method: str, payload, timeout: float | None = None):
        server = self._server(method, payload)
        # Assembled on the server's thread: the bytes are copied once, as by any transport,
        # and a caller that gives up (timeout, stopped server) stops waiting at once.
        chunks = server.dispatcher.stream
        return self._wait(server.submit(lambda: wire.assemble_tensor(chunks(method, bytes(payload)))), method, timeout)

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"InProcChannel({self.address!r})"


class InProcTransport:
    """Servers and channels inside one process (tests; no network)."""

    name = "inproc"

    def server(self, address: str, dispatcher: ServiceDispatcher, security: Security | None = None):
        return InProcServer(address, dispatcher, security or Security())

    def channel(self, address: str, security: Security | None = None):
        return InProcChannel(address, security or Security())


def get_transport(name: str):
    """The registered transport ``name`` (an instance), or an error naming what is installed."""
    reg = plugins.registry().transports
    try:
        cls = reg.get(name)
    except errors.OpError:
        cls = None
    if cls is None:
        raise errors.NotFoundError(
            f"transport {name!r} is not installed (installed: {sorted(n for n, _ in reg.items())}); "
            f"install its plugin, e.g. `pip install tensorweave-{name}`")
    return cls() if isinstance(cls, type) else cls
