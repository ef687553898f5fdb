"""The transport contract: how the worker service travels between processes (DESIGN: Distributed).

A transport plugin moves **bytes**; everything above bytes — which methods exist, how
requests and tensors are encoded (``distributed/wire.py``), what a worker does with them
(``distributed/worker.py``) — lives in the core, so every transport serves exactly the same
service and the same conformance kit (``pytest --tw-transport=NAME``,
``tensorweave.testing.transport_kit``) checks each of them.

This module owns that contract — the ``Transport``, ``Server`` and ``Channel`` protocols — and
what every transport shares: ``Security`` (TLS and auth settings), ``ServiceDispatcher`` (the
server side a transport hands requests to, with the one constant-time token check),
``CallContext`` (how a server tells a handler that its caller went away), ``guarded``, the
in-process transport ``inproc`` and ``get_transport``.

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
    * A caller that goes away — its process killed, its connection lost, its call cancelled or
      past its deadline — is reported to the handler serving it: ``dispatcher.call(method,
      payload, context)`` with a ``CallContext`` whose ``client_gone()`` the server calls (the
      worker aborts a step whose master died mid-step). A transport that cannot tell passes
      no context; such steps then end only by their timeout or ``Limits.step_idle_seconds``.
    * A method of ``dispatcher.deferred`` (RecvTensor) should be served without holding a thread
      while it waits (``dispatcher.start_stream``): thousands may wait at once. A transport that
      cannot do that may serve it with the blocking ``dispatcher.stream``.
    * Methods of ``CONTROL_METHODS`` (Health, AbortStep, ...) answer at once whatever else is in
      flight: they should have threads of their own, never queued behind blocked handlers.
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
    # seconds a server lets a connection leave a request unfinished before dropping it
    # (None: the transport's default; the config's [timeouts] idle)
    idle_timeout: float | None = None

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


# Quick methods a task must answer whatever else is in flight (health checks, and the requests
# that end or forget a step): servers run them on threads of their own, so a pool full of
# blocked RunGraphs never delays the verdict of a health check or the abort that unblocks them.
CONTROL_METHODS = frozenset({"Health", "AbortStep", "CleanupStep", "GetStatus"})


class CallContext:
    """What a server tells the handler of one request about its caller.

    ``client_gone()`` is called by the server when the caller can no longer receive the answer:
    its connection was lost (a killed process: the peer's kernel closes its sockets; a host
    that vanished: the transport's keepalive), or it cancelled the call or let its deadline
    pass. A handler that holds something for its caller registers ``on_gone(fn)`` (``fn()``
    runs once, on a thread of the server's, never on an event loop: it may take locks and
    abort a step) and ``forget(fn)`` when it is done. Why connection loss and not a lease the master renews: the request *is*
    the lease — it lives exactly as long as its caller waits for it, every transport already
    watches its connections (gRPC's HTTP/2 streams and keepalive pings, UCX's peer-failure
    detection), and it costs no message, no schema and no timer.
    """

    __slots__ = ("_lock", "_fns", "gone")

    def __init__(self):
        self._lock = threading.Lock()
        self._fns: list = []
        self.gone = False

    def on_gone(self, fn) -> bool:
        """Run ``fn()`` when the caller goes away; False (not registered) if it already has."""
        with self._lock:
            if self.gone:
                return False
            self._fns.append(fn)
            return True

    def forget(self, fn) -> None:
        with self._lock:
            if fn in self._fns:
                self._fns.remove(fn)

    def client_gone(self, in_thread: bool = False) -> None:
        """(the server) The caller went away: run what handlers registered, once — on a thread
        of its own with ``in_thread`` (what a server calls from its event loop)."""
        with self._lock:
            if self.gone:
                return
            self.gone = True
            fns, self._fns = self._fns, []
        if fns and in_thread:
            threading.Thread(target=_run_all, args=(fns,), name="tw-caller-gone", daemon=True).start()
        elif fns:
            _run_all(fns)


def _run_all(fns) -> None:
    for fn in fns:
        try:
            fn()
        except Exception:  # noqa: BLE001 - one handler's clean-up must not stop the others'
            pass


_CALL = threading.local()


def loop_future(loop):
    """(a future of the asyncio ``loop``, ``settle(value)``): ``settle`` may be called from any
    thread; the first value wins, later ones are ignored, and so is a loop already closed (the
    process is exiting). How a server running on an event loop waits, holding no thread, for
    the answer of a deferred stream (``ServiceDispatcher.start_stream``)."""
    future = loop.create_future()

    def settle(value):
        def set_result():
            if not future.done():
                future.set_result(value)
        try:
            loop.call_soon_threadsafe(set_result)
        except RuntimeError:  # the loop is closed
            pass
    return future, settle


def deferred_answer(loop, prepare):
    """(a future of the asyncio ``loop``, ``done(make_chunks)`` to pass to
    ``ServiceDispatcher.start_stream``); call it on the loop's thread. The future's result is
    ``(None, prepare(make_chunks))`` when the answer came from another thread (the step that
    produced the value): prepared there, so that the loop does not hand it to a thread of its
    own and take it back, two thread switches per answer (about 0.25 ms on a 2-core VM); or
    ``(make_chunks, None)`` when it came at once, on the loop's thread, which must not block:
    the server prepares it on a thread of its own."""
    future, settle = loop_future(loop)
    loop_thread = threading.get_ident()

    def done(make):
        if threading.get_ident() != loop_thread:
            try:
                settle((None, prepare(make)))
                return
            except Exception:  # noqa: BLE001 - not the producer's failure to carry:
                pass  # the server's own thread makes it again below, and answers its error
        settle((make, None))
    return future, done


def current_call() -> CallContext | None:
    """The ``CallContext`` of the request this thread is serving, or None (no request, or a
    transport that cannot tell when its caller goes away)."""
    return getattr(_CALL, "context", None)


class ServiceDispatcher:
    """The server side every transport hands requests to.

    ``handlers``: method name -> fn(payload bytes) -> response bytes;
    ``streams``: method name -> fn(payload bytes) -> iterator of byte chunks (tensors);
    ``deferred``: method name -> fn(payload bytes, done) -> cancel: a stream whose answer may
    take long to exist (RecvTensor waits for its value) and is started without blocking; see
    ``start_stream``. A name is a handler or a stream (a transport may route by name alone, as
    gRPC's paths do); a stream may have both forms, for transports that wait on a thread.
    Unknown methods are an UnimplementedError response, and a handler that raises answers
    with an error response (a non-``tw.errors`` exception as ``InternalError``): never a
    crash of the server, over every transport alike.
    """

    def __init__(self, handlers: dict, streams: dict | None = None, token: str | None = None,
                 deferred: dict | None = None, deferred_timeout: float = 600.0):
        self.handlers = dict(handlers)
        self.streams = dict(streams or {})
        self.token = token
        self.deferred = dict(deferred or {})
        # How long a deferred stream may wait for its answer; then DeadlineExceededError.
        self.deferred_timeout = deferred_timeout

    def check_token(self, token, security: Security | None = None) -> None:
        """Refuse (``UnauthenticatedError``) unless ``token`` (str, bytes or None) is each token
        this server requires: the dispatcher's own and ``security.token`` (either may be None).
        The one token check every transport uses, in constant time."""
        for expected in (self.token, security.token if security is not None else None):
            if expected is not None and not _same_token(token, expected):
                raise errors.UnauthenticatedError("the request carried no valid auth token for this server")

    def call(self, method: str, payload: bytes, context: CallContext | None = None) -> bytes:
        """``method``'s answer to ``payload``. ``context``: the server's ``CallContext`` for this
        request (the handler finds it with ``current_call()``)."""
        fn = self.handlers.get(method)
        if fn is None:
            return wire.encode_error(errors.UnimplementedError(f"unknown method {method!r}"))
        outer = getattr(_CALL, "context", None)
        _CALL.context = context
        try:
            return fn(payload)
        except Exception as e:  # noqa: BLE001 - see the class docstring
            return wire.encode_error(_as_op_error(method, e))
        finally:
            _CALL.context = outer

    def stream(self, method: str, payload: bytes):
        """The chunks of ``method``'s stream. A failure before the first chunk is the stream's
        only chunk, an error response; after it, it is raised (as a ``tw.errors`` exception)
        for the transport to end the stream with. A deferred stream with no blocking form is
        waited for here, on the caller's thread (at most ``deferred_timeout``)."""
        fn = self.streams.get(method)
        if fn is None and method in self.deferred:
            return self._wait_deferred(method, payload)
        if fn is None:
            return iter([wire.encode_error(errors.UnimplementedError(f"unknown stream method {method!r}"))])
        return self._guarded_stream(method, fn, payload)

    def start_stream(self, method: str, payload: bytes, done):
        """Start the deferred stream ``method`` without blocking: ``done(make_chunks)`` is
        called exactly once — possibly right away, else later in whichever thread produced the
        answer — unless the returned ``cancel()`` came first. ``make_chunks()`` returns the
        stream's chunks as ``stream`` would (an error as the only chunk, or raised after the
        first); it may block briefly (a device-to-host copy), so call it on a thread of the
        server's, or in ``done`` itself when that is not the server's event loop
        (``deferred_answer``). ``cancel()`` withdraws the wait (the caller went away, or
        ``deferred_timeout`` passed): True when withdrawn, False when ``done`` was or is being
        called (then the answer stands). A request the method refuses at once is ``done`` with its error."""
        fn = self.deferred[method]

        def ready(make):
            done(lambda: self._guarded_stream(method, lambda _payload: make(), payload))
        try:
            return fn(payload, ready)
        except Exception as e:  # noqa: BLE001 - the stream's failure travels as its only chunk
            err = _as_op_error(method, e)
            done(lambda: iter([wire.encode_error(err)]))
            return lambda: False

    def deadline_error(self, method: str) -> errors.OpError:
        """What a deferred stream that waited ``deferred_timeout`` in vain answers."""
        return errors.DeadlineExceededError(
            f"{method}: no answer within {self.deferred_timeout:g} s (the value was never produced)")

    def _wait_deferred(self, method: str, payload: bytes):
        box, ready = [], threading.Event()

        def done(make):
            box.append(make)
            ready.set()
        cancel = self.start_stream(method, payload, done)
        if not ready.wait(self.deferred_timeout) and cancel():
            return iter([wire.encode_error(self.deadline_error(method))])
        ready.wait()
        return box[0]()

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
