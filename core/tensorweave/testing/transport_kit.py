"""The transport conformance kit: does a transport keep the contract of
``tensorweave.distributed.transport`` (``Transport``, ``Server``, ``Channel``)?

``pytest --tw-transport=NAME`` (``pytest_plugin.py``) runs every check in ``CHECKS`` against
the installed transport ``NAME``, with real servers and channels: in this process, and, for a
transport that crosses processes, with a server in a subprocess (``python -m
tensorweave.testing.transport_kit NAME``) that is killed mid-call. The checks: unary calls of
every size around common inline thresholds, concurrent calls on one channel, streamed tensors
(every kind, and big ones past the message limit), error responses, unknown methods, auth,
size limits, timeouts, streams that fail half-way, stopping servers, closed channels, dead or
absent peers, bytes that are not the transport's own on its port, and bad addresses.

Each check runs in a ``Kit`` that stops its servers, closes its channels, reaps its
processes and then requires every thread the check started to end; a check is bounded in
time (a hang fails, naming the check). A transport's own tests use the same ``Kit`` through
the ``tw_transport_kit`` fixture. A check that cannot apply to a transport — another
process for the in-process transport, a socket where there is none — is skipped, saying why.

``run_in_subprocess(name, directory)`` runs the kit in a fresh pytest process and returns its
report; ``assert_passes(name, directory)`` also requires every check to pass: what a transport
plugin's own tests call.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorweave.distributed import wire
from tensorweave.distributed.transport import (
    Channel,
    InProcTransport,
    Security,
    Server,
    ServiceDispatcher,
    Transport,
    get_transport,
    guarded,
)
from tensorweave.framework import errors
from tensorweave.runtime.frames import DEAD

PROMPT = 5.0          # seconds within which a failure the transport can see must surface
CALL_TIMEOUT = 10.0   # seconds given to calls that should succeed
CHECK_TIMEOUT = 180.0  # seconds a whole check may take; past it, something hangs
# Sizes around which transports typically switch paths (a payload inline in a fixed-size
# message or on its own, one chunk or two): every k * 1000, k * 1024 for k <= 8 and powers of two.
THRESHOLDS = sorted({k * 1000 for k in range(1, 9)} | {k * 1024 for k in range(1, 9)} | {1 << k for k in range(8, 21)})


class Unsupported(Exception):
    """The check does not apply to this transport; the message says why."""


@dataclass(frozen=True)
class Check:
    name: str
    fn: Callable[[Kit], None]

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip().split("\n")[0]


CHECKS: dict[str, Check] = {}


def _check(fn):
    name = fn.__name__.removeprefix("check_")
    CHECKS[name] = Check(name, fn)
    return fn


class Kit:
    """What one check works with: the transport under test, and the servers, channels and
    peer processes it makes, which ``close`` stops, closes and reaps."""

    def __init__(self, name: str):
        self.name = name
        self.transport = get_transport(name)
        self.release = threading.Event()  # blocking handlers wait on it; set by close()
        self._servers: list[Server] = []
        self._channels: list[Channel] = []
        self._peers: list[subprocess.Popen] = []
        self._threads = set(threading.enumerate())
        self._entered = threading.Semaphore(0)

    @property
    def in_process(self) -> bool:
        return isinstance(self.transport, InProcTransport)

    def serve(self, dispatcher: ServiceDispatcher, security: Security | None = None,
              address: str = "127.0.0.1:0") -> Server:
        server = self.transport.server(address, dispatcher, security or Security())
        self._servers.append(server)
        return server

    def channel(self, address: str, security: Security | None = None) -> Channel:
        ch = self.transport.channel(address, security or Security())
        self._channels.append(ch)
        return ch

    def blocked(self, answer=b""):
        """A handler that answers (``answer``, or what it returns when callable) only once the
        check releases it, or after 60 s; ``wait_entered`` sees it start."""
        def handle(payload):
            self._entered.release()
            self.release.wait(60)
            return answer() if callable(answer) else answer
        return handle

    def wait_entered(self, n: int, timeout: float = 30) -> None:
        """Until ``n`` more blocked handlers have started (they are in flight, not merely sent)."""
        deadline = time.monotonic() + timeout
        for _ in range(n):
            assert self._entered.acquire(timeout=max(0.0, deadline - time.monotonic())), (
                f"a blocked handler was not called within {timeout:g} s")

    def peer(self, token: str | None = None, mib: int = 1) -> tuple[str, subprocess.Popen]:
        """A server of this transport in another process (``serve_peer``): (address, process)."""
        if self.in_process:
            raise Unsupported("the in-process transport cannot reach another process")
        args = [sys.executable, "-m", __name__, self.name, "--mib", str(mib)] + (["--token", token] if token else [])
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                bufsize=0, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._peers.append(proc)
        address = _read_line(proc, 60)
        assert address.startswith("127.0.0.1:"), f"the peer process printed {address!r} instead of its address"
        return address, proc

    def close(self) -> None:
        """Release blocked handlers, close the channels, stop the servers, kill and reap the peers."""
        self.release.set()
        for ch in self._channels:
            ch.close()
        for server in self._servers:
            server.stop()
        for proc in self._peers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
            proc.stdin.close()
            proc.stdout.close()

    def finish(self, timeout: float = 10) -> None:
        """``close``, then require every thread started since the kit was made to end within ``timeout``."""
        self.close()
        deadline = time.monotonic() + timeout
        while True:  # polling a condition with a deadline: handler threads end once released
            left = sorted(t.name for t in threading.enumerate() if t not in self._threads)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert not left, f"threads started by the kit's servers and channels outlived them: {left}"


_WARM: set[str] = set()  # transports whose process-lifetime threads have been started


def open_kit(name: str) -> Kit:
    """A ``Kit`` for transport ``name``, made once the transport has started what it keeps for
    the life of the process (an engine thread, say), so that only the threads a check starts count."""
    if name not in _WARM:
        kit = Kit(name)
        try:
            ch = kit.channel(kit.serve(ServiceDispatcher({"Echo": echo}, {"Tensor": _stream_of(np.zeros(3))})).address)
            ch.call("Echo", wire.encode_message({}), CALL_TIMEOUT)
            ch.fetch("Tensor", b"", CALL_TIMEOUT)
        finally:
            kit.close()
        _WARM.add(name)
    return Kit(name)


def run_check(name: str, check: Check) -> None:
    """Run ``check`` against transport ``name`` in a fresh ``Kit``; a check that does not end
    within ``CHECK_TIMEOUT`` fails. ``Unsupported`` propagates (the caller skips)."""
    kit = open_kit(name)
    outcome: list[BaseException] = []

    def body():
        try:
            check.fn(kit)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(e)

    runner = threading.Thread(target=body, name=f"transport-kit-{check.name}", daemon=True)
    runner.start()
    runner.join(CHECK_TIMEOUT)
    if runner.is_alive():
        kit.release.set()
        raise AssertionError(f"{check.name} did not finish within {CHECK_TIMEOUT:g} s: a call hangs")
    if outcome:
        kit.close()
        raise outcome[0]
    kit.finish()


# ----------------------------------------------------------------------------------------
# Helpers of the checks


def echo(payload):
    """A handler answering a wire message with its header (under ``"echo"``) and its tensors."""
    header, tensors = wire.decode_message(payload)
    return wire.encode_response({"echo": header}, tensors)


def _stream_of(value):
    return lambda payload: wire.tensor_chunks(value)


def _echoed(ch: Channel, header: dict, tensors=(), method: str = "Echo"):
    got, out = wire.decode_response(ch.call(method, wire.encode_message(header, list(tensors)), CALL_TIMEOUT))
    assert got == {"echo": header}, f"{method} answered {got!r} to {header!r}"
    return out


@contextlib.contextmanager
def _raises(cls, match: str | None = None, within: float | None = None):
    """Like ``pytest.raises``, plus a bound on how long the failure may take to surface."""
    t0 = time.monotonic()
    try:
        yield
    except cls as e:
        if match is not None:
            assert re.search(match, str(e)), f"{type(e).__name__} {str(e)!r} does not match {match!r}"
    except Exception as e:
        raise AssertionError(f"expected {_names(cls)}, got {type(e).__name__}: {e}") from e
    else:
        raise AssertionError(f"expected {_names(cls)}, nothing was raised")
    took = time.monotonic() - t0
    assert within is None or took < within, f"{_names(cls)} took {took:.1f} s to surface (more than {within:g} s)"


def _names(cls) -> str:
    return " or ".join(c.__name__ for c in cls) if isinstance(cls, tuple) else cls.__name__


def _free_address() -> str:
    """An address nothing listens at: a port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _read_line(proc, timeout: float) -> str:
    """The next line the process prints, read a byte at a time (nothing is left in a buffer
    that the next wait could not see)."""
    deadline = time.monotonic() + timeout
    line = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            if not sel.select(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"the peer process printed no line within {timeout:g} s (so far {bytes(line)!r})")
            byte = os.read(proc.stdout.fileno(), 1)
            if not byte:
                raise AssertionError(f"the peer process exited (status {proc.wait(10)}) after printing {bytes(line)!r}")
            line += byte
    return line.decode().strip()


def _tensor_sizes_straddling(total: int) -> list[int]:
    """uint8 tensor lengths whose header plus payload is ``total`` - 1, ``total`` and ``total`` + 1 bytes."""
    out = []
    for n in range(max(0, total - 400), total + 2):
        if len(next(wire.tensor_chunks(np.empty(n, np.uint8)))) + n in (total - 1, total, total + 1):
            out.append(n)
    return out


# ----------------------------------------------------------------------------------------
# The checks


@_check
def check_protocol(kit):
    """The transport, its servers and channels have the members of the contract's protocols."""
    assert isinstance(kit.transport, Transport), f"{type(kit.transport).__name__} is not a Transport"
    assert kit.transport.name == kit.name, f"registered as {kit.name!r}, named {kit.transport.name!r}"
    server = kit.serve(ServiceDispatcher({"Echo": echo}))
    assert isinstance(server, Server), f"{type(server).__name__} is not a Server"
    host, _, port = server.address.rpartition(":")
    assert host == "127.0.0.1" and port.isdigit() and int(port) > 0, f"bound address {server.address!r}"
    ch = kit.channel(server.address)
    assert isinstance(ch, Channel), f"{type(ch).__name__} is not a Channel"


@_check
def check_unary_round_trip(kit):
    """A request and its response arrive intact, as bytes; empty ones too."""
    server = kit.serve(ServiceDispatcher({"Echo": echo, "Nothing": lambda p: b"" if p == b"" else b"?"}))
    ch = kit.channel(server.address)
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    resp = ch.call("Echo", wire.encode_message({"step": 7, "name": "a/b"}, [x]), CALL_TIMEOUT)
    assert isinstance(resp, bytes), f"call returned {type(resp).__name__}, not bytes"
    header, (y,) = wire.decode_response(resp)
    assert header == {"echo": {"step": 7, "name": "a/b"}} and np.array_equal(y, x) and y.dtype == x.dtype
    assert ch.call("Nothing", b"", CALL_TIMEOUT) == b""
    assert ch.call("Nothing", memoryview(b""), CALL_TIMEOUT) == b""


@_check
def check_payload_sizes(kit):
    """Requests and responses of every size around common inline thresholds (and the same
    bytes in a memoryview or bytearray) arrive intact both ways."""
    server = kit.serve(ServiceDispatcher({"Reverse": lambda p: bytes(p)[::-1],
                                          "Sized": lambda p: b"y" * int(bytes(p))}))
    ch = kit.channel(server.address)
    rng = np.random.default_rng(0)
    for n in sorted({0, 1, 2} | {t + d for t in THRESHOLDS for d in (-1, 0, 1)}):
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert ch.call("Reverse", payload, CALL_TIMEOUT) == payload[::-1], f"a request of {n} bytes"
        assert ch.call("Sized", str(n).encode(), CALL_TIMEOUT) == b"y" * n, f"a response of {n} bytes"
    payload = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    for view in (memoryview(payload), bytearray(payload)):
        assert ch.call("Reverse", view, CALL_TIMEOUT) == payload[::-1], f"a request in a {type(view).__name__}"


@_check
def check_concurrent_calls(kit):
    """One channel serves many threads at once, calls and fetches mixed, and a call that
    blocks on the server holds up no other."""
    def recv(payload):
        return wire.tensor_chunks(np.full(1 << 16, wire.decode_message(payload)[0]["v"], np.int32), chunk_bytes=1 << 14)

    server = kit.serve(ServiceDispatcher({"Echo": echo, "Slow": kit.blocked(wire.encode_response({"slow": True}))},
                                         {"Tensor": recv}))
    ch = kit.channel(server.address)

    def many(i):
        for j in range(8):
            x = np.full((i + 1, j + 1), i * 100 + j, np.int32)
            np.testing.assert_array_equal(_echoed(ch, {"i": i, "j": j}, [x])[0], x)
            out = ch.fetch("Tensor", wire.encode_message({"v": i * 10 + j}), CALL_TIMEOUT)
            assert out.shape == (1 << 16,) and (out == i * 10 + j).all(), f"thread {i}, fetch {j}"
        return i

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        blocked = pool.submit(ch.call, "Slow", b"", 60)
        assert sorted(pool.map(many, range(8), timeout=120)) == list(range(8))
        assert not blocked.done(), "the blocked call ended before it was released"
        kit.release.set()
        assert wire.decode_response(blocked.result(30))[0] == {"slow": True}


@_check
def check_tensor_values(kit):
    """Streamed tensors of every kind arrive equal, dtype and shape included: 0-d, empty,
    bool, strided, strings, DEAD, each numeric dtype, in chunks of 8 bytes or 1 MiB."""
    values = {
        "scalar": np.float64(3.5),
        "int0d": np.array(7, np.int64),
        "empty": np.zeros((0, 3), np.float32),
        "bool": np.array([True, False, True]),
        "strided": np.arange(30, dtype=np.int32).reshape(5, 6)[:, ::2],
        "strings": np.array([b"a", b"bcd", b""], dtype=object),
        "no-strings": np.array([], dtype=object),
        "dead": DEAD,
        **{dt: (np.arange(-50, 50) * 3).astype(dt).reshape(10, 10)
           for dt in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                      "complex64", "complex128")},
    }

    def stream(payload):
        header, _ = wire.decode_message(payload)
        return wire.tensor_chunks(values[header["key"]], chunk_bytes=header["chunk"])

    ch = kit.channel(kit.serve(ServiceDispatcher({}, {"Tensor": stream})).address)
    for chunk in (8, 1 << 20):
        for key, v in values.items():
            out = ch.fetch("Tensor", wire.encode_message({"key": key, "chunk": chunk}), CALL_TIMEOUT)
            if v is DEAD:
                assert out is DEAD, f"DEAD arrived as {out!r}"
                continue
            want = np.asarray(v)
            assert out.dtype == want.dtype and out.shape == want.shape, (
                f"{key}: {out.dtype}{out.shape} arrived for {want.dtype}{want.shape}")
            assert np.array_equal(out, want), f"{key}: the values differ"


@_check
def check_tensor_sizes(kit):
    """Tensors whose header plus payload lies around common inline thresholds, in chunks
    of 1000 bytes, arrive intact."""
    arrays = {}

    def stream(payload):
        return wire.tensor_chunks(arrays[int(bytes(payload))], chunk_bytes=1000)

    ch = kit.channel(kit.serve(ServiceDispatcher({}, {"Tensor": stream})).address)
    rng = np.random.default_rng(1)
    for total in [t for t in THRESHOLDS if t <= 1 << 17]:
        for n in _tensor_sizes_straddling(total):
            arrays[n] = rng.integers(0, 256, n, dtype=np.uint8)
            out = ch.fetch("Tensor", str(n).encode(), CALL_TIMEOUT)
            assert np.array_equal(out, arrays[n]), f"a tensor of {n} bytes (with its header about {total})"


@_check
def check_big_tensor(kit):
    """A 16 MiB tensor streams in 1 MiB chunks into one writable array, although the channel
    and the server refuse any single message over 4 MiB."""
    big = np.random.default_rng(0).standard_normal(4 << 20).astype(np.float32)
    sent = []

    def stream(payload):
        assert wire.decode_message(payload)[0] == {"key": "w:0"}
        for chunk in wire.tensor_chunks(big):
            sent.append(memoryview(chunk).nbytes)
            yield chunk

    limit = Security(max_message_bytes=4 << 20)
    ch = kit.channel(kit.serve(ServiceDispatcher({}, {"Tensor": stream}), limit).address, limit)
    out = ch.fetch("Tensor", wire.encode_message({"key": "w:0"}), 60)
    assert out.dtype == np.float32 and out.shape == big.shape and np.array_equal(out, big)
    assert out.flags.writeable, "a fetched tensor must be the caller's to write"
    assert len(sent) == 1 + 16 and max(sent[1:]) == 1 << 20, f"the stream's chunks: {sent}"


@_check
def check_error_responses(kit):
    """A handler's failure comes back as an error response of its class (a Python exception
    as InternalError naming it), and a stream's as that error raised by ``fetch``; the
    channel stays usable."""
    def broken(payload):
        raise KeyError("oops")

    def not_found(payload):
        raise errors.NotFoundError("no tensor 'x' in this step")

    def broken_stream(payload):
        raise RuntimeError("handler bug")

    def aborted_midway(payload):
        yield from wire.tensor_chunks(np.zeros(1 << 18), chunk_bytes=1 << 16)
        raise errors.AbortedError("step 3 was aborted")

    def partial(payload):
        chunks = wire.tensor_chunks(np.zeros(1 << 18))
        yield next(chunks)
        yield next(chunks)  # 1 of 2 MiB, then the stream just ends

    server = kit.serve(ServiceDispatcher(
        {"Broken": broken, "NotFound": not_found, "Decode": guarded(echo), "Echo": echo},
        {"Missing": lambda p: iter([wire.encode_error(errors.NotFoundError("no tensor 'missing' in this step"))]),
         "BrokenTensor": broken_stream, "Aborted": aborted_midway, "Partial": partial}))
    ch = kit.channel(server.address)
    with _raises(errors.InternalError, "KeyError"):
        wire.decode_response(ch.call("Broken", b"", CALL_TIMEOUT))
    with _raises(errors.NotFoundError, "no tensor 'x'"):
        wire.decode_response(ch.call("NotFound", b"", CALL_TIMEOUT))
    with _raises(errors.DataLossError):  # a truncated request, decoded by the handler
        wire.decode_response(ch.call("Decode", wire.encode_message({}, [np.ones(3)])[:-1], CALL_TIMEOUT))
    with _raises(errors.NotFoundError, "missing"):
        ch.fetch("Missing", b"", CALL_TIMEOUT)
    with _raises(errors.InternalError, "RuntimeError: handler bug"):
        ch.fetch("BrokenTensor", b"", CALL_TIMEOUT)
    with _raises(errors.AbortedError, "step 3 was aborted"):
        ch.fetch("Aborted", b"", CALL_TIMEOUT)
    with _raises(errors.DataLossError):
        ch.fetch("Partial", b"", CALL_TIMEOUT)
    _echoed(ch, {"still": "good"})


@_check
def check_unknown_methods(kit):
    """An unknown method, called or fetched, is UnimplementedError naming it; the server goes on."""
    ch = kit.channel(kit.serve(ServiceDispatcher({"Echo": echo})).address)
    with _raises(errors.UnimplementedError, "Bogus"):
        wire.decode_response(ch.call("Bogus", wire.encode_message({}), CALL_TIMEOUT))
    with _raises(errors.UnimplementedError, "Bogus"):
        ch.fetch("Bogus", wire.encode_message({}), CALL_TIMEOUT)
    with _raises(errors.UnimplementedError, "RecvTensor"):  # a worker-service method this dispatcher lacks
        ch.fetch("RecvTensor", wire.encode_message({}), CALL_TIMEOUT)
    _echoed(ch, {"ok": 1})


@_check
def check_auth(kit):
    """A wrong or missing token is UnauthenticatedError before the dispatcher sees anything,
    whether the server's security or its dispatcher holds the token; the right one is served."""
    seen = []

    def handler(payload):
        seen.append(payload)
        return echo(payload)

    msg = wire.encode_message({"x": 1})
    for dispatcher_token, security_token in (("s3cret", "s3cret"), (None, "s3cret"), ("s3cret", None)):
        server = kit.serve(ServiceDispatcher({"Echo": handler}, {"Tensor": _stream_of(np.zeros(3))},
                                             token=dispatcher_token), Security(token=security_token))
        for bad in (Security(token="wrong"), Security(), Security(token="s3cret-and-more")):
            ch = kit.channel(server.address, bad)
            with _raises(errors.UnauthenticatedError, "token", within=PROMPT):
                ch.call("Echo", msg, CALL_TIMEOUT)
            with _raises(errors.UnauthenticatedError, "token", within=PROMPT):
                ch.fetch("Tensor", msg, CALL_TIMEOUT)
        assert seen == [], "the dispatcher saw a request whose token was refused"
        good = kit.channel(server.address, Security(token="s3cret"))
        assert _echoed(good, {"x": 1}) == []
        assert np.array_equal(good.fetch("Tensor", msg, CALL_TIMEOUT), np.zeros(3))
        seen.clear()


@_check
def check_message_limits(kit):
    """A request over the channel's limit is not sent, one over the server's limit is refused
    unread, and a response over either side's limit is refused: ResourceExhaustedError each
    time, and the channel goes on."""
    seen = []
    handlers = {"Echo": lambda p: seen.append(len(p)) or echo(p),
                "Big": lambda p: wire.encode_response({}, [np.zeros(1 << 17)])}  # 1 MiB
    server = kit.serve(ServiceDispatcher(handlers, {"Tensor": _stream_of(np.zeros(3))}),
                       Security(max_message_bytes=1 << 20))
    payload = wire.encode_message({}, [np.zeros(300_000)])  # 2.4 MB
    small = kit.channel(server.address, Security(max_message_bytes=1 << 20))
    with _raises(errors.ResourceExhaustedError, within=PROMPT):  # the channel's own limit
        small.call("Echo", payload, CALL_TIMEOUT)
    with _raises(errors.ResourceExhaustedError, within=PROMPT):
        small.fetch("Tensor", payload, CALL_TIMEOUT)
    large = kit.channel(server.address, Security(max_message_bytes=64 << 20))
    with _raises(errors.ResourceExhaustedError, within=PROMPT):  # the server's limit
        large.call("Echo", payload, CALL_TIMEOUT)
    assert seen == [], "a handler saw a request over the limit"
    _echoed(large, {"after": "refusal"})
    with _raises(errors.ResourceExhaustedError, within=PROMPT):  # an answer over the server's limit
        large.call("Big", b"", CALL_TIMEOUT)
    other = kit.channel(kit.serve(ServiceDispatcher(handlers)).address, Security(max_message_bytes=1 << 16))
    with _raises(errors.ResourceExhaustedError, within=PROMPT):  # an answer over the channel's limit
        other.call("Big", b"", CALL_TIMEOUT)
    _echoed(other, {"small": 1})
    _echoed(small, {"small": 1})


@_check
def check_deadlines(kit):
    """A call or fetch past its timeout is DeadlineExceededError naming the method, at about
    the timeout; the channel goes on (the late answer is dropped)."""
    slow_stream = kit.blocked(lambda: wire.tensor_chunks(np.ones(3)))
    ch = kit.channel(kit.serve(ServiceDispatcher({"Echo": echo, "Slow": kit.blocked()},
                                                 {"SlowTensor": slow_stream})).address)
    with _raises(errors.DeadlineExceededError, "Slow", within=PROMPT):
        ch.call("Slow", b"", 0.3)
    with _raises(errors.DeadlineExceededError, "SlowTensor", within=PROMPT):
        ch.fetch("SlowTensor", b"", 0.3)
    kit.release.set()  # the late answers arrive and are dropped
    _echoed(ch, {"n": 2})


@_check
def check_stop_fails_calls_in_flight(kit):
    """Stopping a server fails its calls and fetches in flight promptly (UnavailableError,
    or CancelledError), and the channel's next call is UnavailableError naming the address."""
    server = kit.serve(ServiceDispatcher({"Echo": echo, "Slow": kit.blocked()},
                                         {"SlowTensor": kit.blocked(lambda: wire.tensor_chunks(np.ones(3)))}))
    ch = kit.channel(server.address)
    _echoed(ch, {})
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        in_flight = [pool.submit(ch.call, "Slow", b"", 60), pool.submit(ch.fetch, "SlowTensor", b"", 60)]
        kit.wait_entered(2)
        server.stop()
        t0 = time.monotonic()
        for f in in_flight:
            with _raises((errors.UnavailableError, errors.CancelledError)):
                f.result(30)
        assert time.monotonic() - t0 < PROMPT, "calls in flight outlived the stopped server"
    with _raises(errors.UnavailableError, re.escape(server.address), within=PROMPT):
        ch.call("Echo", wire.encode_message({}), 30)


@_check
def check_stopped_server(kit):
    """After ``stop`` (twice is fine) calls and fetches fail promptly with UnavailableError
    naming the address, on an old channel and on a new one."""
    server = kit.serve(ServiceDispatcher({"Echo": echo}, {"Tensor": _stream_of(np.ones(4))}))
    ch = kit.channel(server.address)
    _echoed(ch, {})
    server.stop()
    server.stop()
    with _raises(errors.UnavailableError, re.escape(server.address), within=PROMPT):
        ch.call("Echo", wire.encode_message({}), 30)
    with _raises(errors.UnavailableError, re.escape(server.address), within=PROMPT):
        ch.fetch("Tensor", wire.encode_message({}), 30)
    with _raises(errors.UnavailableError, within=PROMPT):
        kit.channel(server.address).call("Echo", b"", 30)


@_check
def check_nothing_listening(kit):
    """A channel to an address where nothing listens fails promptly with UnavailableError naming it."""
    address = _free_address()
    with _raises(errors.UnavailableError, re.escape(address), within=PROMPT):
        kit.channel(address).call("Echo", b"", 30)
    with _raises(errors.UnavailableError, within=PROMPT):
        kit.channel(address).fetch("Tensor", b"", 30)


@_check
def check_address_in_use(kit):
    """A second server at a served address is UnavailableError naming it; the first goes on."""
    server = kit.serve(ServiceDispatcher({"Echo": echo}))
    with _raises(errors.UnavailableError, re.escape(server.address)):
        kit.serve(ServiceDispatcher({}), address=server.address)
    _echoed(kit.channel(server.address), {})


@_check
def check_malformed_address(kit):
    """A server address that is not ``host:port`` is InvalidArgumentError saying so."""
    for address in ("127.0.0.1", "127.0.0.1:http"):
        with _raises(errors.InvalidArgumentError, "host:port"):
            kit.transport.server(address, ServiceDispatcher({}), Security())


@_check
def check_closed_channel(kit):
    """Calls on a closed channel fail (FailedPreconditionError or UnavailableError saying it
    is closed); closing twice is fine; other channels are not affected."""
    server = kit.serve(ServiceDispatcher({"Echo": echo}, {"Tensor": _stream_of(np.ones(4))}))
    ch = kit.channel(server.address)
    _echoed(ch, {})
    ch.close()
    ch.close()
    closed = (errors.FailedPreconditionError, errors.UnavailableError)
    with _raises(closed, "closed", within=PROMPT):
        ch.call("Echo", wire.encode_message({}), CALL_TIMEOUT)
    with _raises(closed, "closed", within=PROMPT):
        ch.fetch("Tensor", b"", CALL_TIMEOUT)
    _echoed(kit.channel(server.address), {"other": 1})


@_check
def check_foreign_bytes(kit):
    """Bytes that are not the transport's own on its port — nothing, garbage, another
    protocol, a connection left open half-way — never stop the server."""
    if kit.in_process:
        raise Unsupported("the in-process transport has no port to send bytes to")
    server = kit.serve(ServiceDispatcher({"Echo": echo}))
    ch = kit.channel(server.address)
    host, _, port = server.address.rpartition(":")
    rng = np.random.default_rng(2)
    for junk in (b"", bytes(7), bytes(range(256)) * 16, rng.bytes(100_000), b"\xff" * 4096,
                 b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + rng.bytes(30)):
        with socket.create_connection((host, int(port)), timeout=PROMPT) as s:
            with contextlib.suppress(OSError):  # the server may hang up first: that is fine
                s.sendall(junk)
        _echoed(ch, {"after": len(junk)})
    with socket.create_connection((host, int(port)), timeout=PROMPT) as s:
        s.sendall(b"\x01\x02\x03")
        _echoed(ch, {"while": "half-open"})
        _echoed(kit.channel(server.address), {"new": "channel"})


@_check
def check_peer_process(kit):
    """A server in another process: calls with the token, a 64 MiB tensor, refusals without it."""
    address, _ = kit.peer(token="s3cret", mib=64)
    ch = kit.channel(address, Security(token="s3cret"))
    x = np.linspace(0, 1, 10)
    assert np.array_equal(_echoed(ch, {"from": "parent"}, [x])[0], x)
    out = ch.fetch("Tensor", wire.encode_message({}), 60)
    assert out.dtype == np.float32 and np.array_equal(out, np.arange(64 << 18, dtype=np.float32))
    _echoed(ch, {"after": 1})
    for bad in (Security(token="wrong"), Security()):
        with _raises(errors.UnauthenticatedError, "token", within=PROMPT):
            kit.channel(address, bad).call("Echo", wire.encode_message({}), CALL_TIMEOUT)


@_check
def check_killed_peer(kit):
    """When the server's process is killed (SIGKILL), its calls and fetches in flight and the
    next call fail promptly with UnavailableError naming its address."""
    address, proc = kit.peer()
    ch = kit.channel(address)
    _echoed(ch, {})
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        in_flight = [pool.submit(ch.call, "Hang", b"", 120), pool.submit(ch.fetch, "HangTensor", b"", 120)]
        entered = {_read_line(proc, 30), _read_line(proc, 30)}  # the peer says when each has started
        assert entered == {"entered Hang", "entered HangTensor"}, entered
        proc.kill()
        proc.wait(30)
        t0 = time.monotonic()
        for f in in_flight:
            with _raises(errors.UnavailableError, re.escape(address)):
                f.result(60)
        assert time.monotonic() - t0 < PROMPT, "calls in flight outlived the killed peer"
    with _raises(errors.UnavailableError, within=PROMPT):
        ch.call("Echo", wire.encode_message({}), 30)


# ----------------------------------------------------------------------------------------
# The peer process and running the kit in a subprocess


def serve_peer(argv=None) -> None:
    """``python -m tensorweave.testing.transport_kit NAME [--token T] [--mib N]``: serve
    transport NAME on a free loopback port, print the address on the first line, and serve
    until stdin closes (so a test that dies takes it down too). Methods: ``Echo`` (the
    request's header and tensors back), ``Hang`` (no answer); streams ``Tensor`` (an N MiB
    float32 arange) and ``HangTensor`` (no answer). ``Hang`` and ``HangTensor`` print
    ``entered <method>`` when called."""
    ap = argparse.ArgumentParser(prog="python -m tensorweave.testing.transport_kit")
    ap.add_argument("transport")
    ap.add_argument("--token")
    ap.add_argument("--mib", type=int, default=1)
    args = ap.parse_args(argv)
    big = np.arange(args.mib << 18, dtype=np.float32)
    done, printing = threading.Event(), threading.Lock()

    def hang(method, answer):
        def handle(payload):
            with printing:  # whole lines, though two handlers start at once
                print(f"entered {method}", flush=True)
            done.wait()
            return answer()
        return handle

    dispatcher = ServiceDispatcher({"Echo": echo, "Hang": hang("Hang", lambda: wire.encode_response({}))},
                                   {"Tensor": _stream_of(big), "HangTensor": hang("HangTensor", lambda: iter([]))},
                                   token=args.token)
    server = get_transport(args.transport).server("127.0.0.1:0", dispatcher, Security(token=args.token))
    print(server.address, flush=True)
    sys.stdin.read()  # until the parent closes stdin or dies
    done.set()
    server.stop()


def run_in_subprocess(name: str, directory, timeout: float = 600) -> tuple[dict, str]:
    """Run ``pytest --tw-transport=NAME`` in ``directory`` (best an empty one) in a fresh
    process: (the report, as ``--tw-transport-report`` writes it, and pytest's output)."""
    report = Path(directory) / f"transport-kit-{name}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "TENSORWEAVE_DISABLE_PLUGINS")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--tw-transport={name}",
                           f"--tw-transport-report={report}"],
                          cwd=directory, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    if not report.exists():
        raise AssertionError(f"the transport kit wrote no report (exit status {proc.returncode}):\n{output[-3000:]}")
    return json.loads(report.read_text()), output


def assert_passes(name: str, directory) -> dict:
    """Run the kit on transport ``name`` in a subprocess (``run_in_subprocess``) and require
    every check to pass, none skipped; the report."""
    report, output = run_in_subprocess(name, directory)
    assert report["passed"] == list(CHECKS), (
        f"transport {name!r}: failed {report['failed']}, skipped {report['skipped']}, "
        f"not run {report['not_run']}\n{output[-5000:]}")
    return report


if __name__ == "__main__":
    serve_peer()
