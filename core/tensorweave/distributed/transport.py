"""The transport hook: how the worker service travels between processes (DESIGN: Distributed).

A transport plugin moves **bytes**; everything above bytes — which methods exist, how
requests and tensors are encoded (``distributed/wire.py``), what a worker does with them
(``distributed/worker.py``) — lives in the core, so every transport serves exactly the same
service and the same test suite runs over each of them.

A transport (registered with ``tensorweave_register_transports(registry)`` as
``registry.register("grpc", GrpcTransport)``) is a class with:

* ``server(address, dispatcher, security) -> Server``: serve ``dispatcher`` (a
  ``ServiceDispatcher``) at ``address`` ("host:port"; port 0 picks a free port). It must
  be listening when this returns. ``Server.address`` is the bound "host:port";
  ``Server.stop(grace=None)`` stops it.
* ``channel(address, security) -> Channel``: a client connection to a server. A channel
  has ``call(method, payload, timeout) -> bytes`` for unary requests and
  ``fetch(method, payload, timeout) -> ndarray`` (or ``step.DEAD``) for a tensor: the server side
  produces it with ``dispatcher.stream(method, payload)``, an iterator of byte chunks
  (the first is a wire tensor header, see ``wire.decode_tensor_header``), and the channel
  assembles the chunks into one preallocated buffer of the size the header announces —
  never concatenating whole-message copies. ``close()`` releases it.

Errors: a server-side failure travels as an error response inside the payload (the
dispatcher encodes ``tw.errors`` itself), so a transport only reports its own failures: it
raises ``tw.errors.UnavailableError`` when the peer cannot be reached or the connection
breaks, ``DeadlineExceededError`` on timeout, ``UnauthenticatedError`` when the server
refuses the token, and ``ResourceExhaustedError`` for a message over ``security.max_message_bytes``.

``Security`` carries what the cluster config says about TLS and auth; each transport
applies what it supports and raises ``UnimplementedError`` at start-up, naming itself, for
a setting it cannot honour (never silently insecure).

The in-process transport (``inproc``) below is registered by the core for tests: it still
encodes every request and response through the wire format, so it exercises everything
except the network.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading

from tensorweave import plugins
from tensorweave.distributed import wire
from tensorweave.framework import errors


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


class ServiceDispatcher:
    """The server side every transport hands requests to.

    ``handlers``: method name -> fn(payload bytes) -> response bytes;
    ``streams``: method name -> fn(payload bytes) -> iterator of byte chunks (tensors).
    Unknown methods are an UnimplementedError response, never a crash of the server.
    """

    def __init__(self, handlers: dict, streams: dict | None = None, token: str | None = None):
        self.handlers = dict(handlers)
        self.streams = dict(streams or {})
        self.token = token

    def check_token(self, token: str | None) -> None:
        if self.token is not None and token != self.token:
            raise errors.UnauthenticatedError("the request carried no valid auth token for this server")

    def call(self, method: str, payload: bytes) -> bytes:
        fn = self.handlers.get(method)
        if fn is None:
            return wire.encode_error(errors.UnimplementedError(f"unknown method {method!r}"))
        return fn(payload)

    def stream(self, method: str, payload: bytes):
        fn = self.streams.get(method)
        if fn is None:
            return iter([wire.encode_error(errors.UnimplementedError(f"unknown stream method {method!r}"))])
        return fn(payload)


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
# The in-process transport: servers live in a process-wide table keyed by address.

_INPROC: dict[str, ServiceDispatcher] = {}
_INPROC_LOCK = threading.Lock()
_ports = itertools.count(40000)


class InProcServer:
    def __init__(self, address: str, dispatcher: ServiceDispatcher):
        host, _, port = address.rpartition(":")
        with _INPROC_LOCK:
            if port in ("0", ""):
                port = str(next(_ports))
                while f"{host}:{port}" in _INPROC:
                    port = str(next(_ports))
            self.address = f"{host}:{port}"
            if self.address in _INPROC:
                raise errors.UnavailableError(f"inproc transport: address {self.address} is already in use")
            _INPROC[self.address] = dispatcher
        self._dispatcher = dispatcher

    def stop(self, grace=None) -> None:
        with _INPROC_LOCK:
            if _INPROC.get(self.address) is self._dispatcher:
                del _INPROC[self.address]


class InProcChannel:
    def __init__(self, address: str, security: Security):
        self.address = address
        self.security = security

    def _dispatcher(self) -> ServiceDispatcher:
        d = _INPROC.get(self.address)
        if d is None:
            raise errors.UnavailableError(f"inproc transport: nothing is serving at {self.address}")
        d.check_token(self.security.token)
        return d

    def call(self, method: str, payload: bytes, timeout: float | None = None) -> bytes:
        if len(payload) > self.security.max_message_bytes:
            raise errors.ResourceExhaustedError(
                f"inproc transport: request of {len(payload)} bytes exceeds {self.security.max_message_bytes}")
        return self._dispatcher().call(method, bytes(payload))

    def fetch(self, method: str, payload: bytes, timeout: float | None = None):
        chunks = self._dispatcher().stream(method, bytes(payload))
        return wire.assemble_tensor(chunks)

    def close(self) -> None:
        pass


class InProcTransport:
    """Servers and channels inside one process (tests; no network)."""

    name = "inproc"

    def server(self, address: str, dispatcher: ServiceDispatcher, security: Security | None = None):
        return InProcServer(address, dispatcher)

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
