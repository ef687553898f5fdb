"""The master service every server runs (whitepaper Figure 3, as in TensorFlow).

By default the master runs inside the client (``distributed/master.py``). A client may
instead hand its graph to the master service of any task and only send ``RunStep``
requests — ``tw.Session("grpc://host:port", config=tw.ConfigProto(use_remote_master=True))``
— useful for thin clients, or clients far from the cluster: one round trip per step to one
task, which then drives every worker.

Methods: ``CreateSession`` (a full GraphDef, its constants as the message's tensors;
validated against the op registry — the server runs only registered ops), ``ExtendSession``
(the graph grew: its new full GraphDef),
``RunStep`` (feeds by tensor name with their values, fetch and target names), and
``CloseSession``; every request's header is checked against its schema
(``wire.REQUEST_FIELDS``). Sessions are held per handle and closed by the client, when the
server stops, or after ``Limits.session_idle_seconds`` unused (a client that died never
closes its session; at most ``Limits.max_sessions`` are held). A client whose session
expired gets a new one on its next step, transparently (``RemoteMasterSession``). A
``RunStep`` with a ``trace_level`` returns the step's merged stats (on the master service's
clock) and the service's own stamps, from which the client moves them onto its clock the
way the master does for each task (``master.ClockOffsets``).
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np

from tensorweave import plugins
from tensorweave.client import timeline
from tensorweave.client.plan import FetchMapper, convert_feed_value, expand_composite_feeds
from tensorweave.client.session import Session, forced_trace, register_session_factory
from tensorweave.distributed import wire
from tensorweave.distributed.master import ClockOffsets, DistributedSession
from tensorweave.distributed.transport import Security, get_transport, guarded
from tensorweave.distributed.worker import Limits
from tensorweave.framework import errors
from tensorweave.framework.graph import Graph
from tensorweave.framework.importer import import_graph_def
from tensorweave.framework.serialization import graph_to_dict
from tensorweave.runtime.config import RunMetadata, RunOptions, StepStats

MAX_SESSIONS = Limits.max_sessions
# The start of the NotFoundError for a session handle the service does not hold (closed,
# expired, or the server restarted): the client then creates a new session.
_NO_SESSION = "no master session "


class _Held:
    """A session the service holds, with when it was last used and how many calls use it now."""

    __slots__ = ("session", "last_used", "active")

    def __init__(self, session):
        self.session, self.last_used, self.active = session, time.monotonic(), 0


class MasterService:
    """Sessions of remote clients on one server, each a ``DistributedSession`` over the
    server's cluster; at most ``limits.max_sessions``, each closed after
    ``limits.session_idle_seconds`` unused (a thread sweeps them while there are any)."""

    def __init__(self, server, limits: Limits | None = None):
        self._server = server
        self.limits = limits or Limits()
        self._sessions: dict[str, _Held] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._sweeper = None
        self._closed = threading.Event()

    def handlers(self) -> dict:
        return {"CreateSession": guarded(self.create_session), "ExtendSession": guarded(self.extend_session),
                "RunStep": guarded(self.run_step), "CloseSession": guarded(self.close_session)}

    def _request(self, method: str, payload):
        security = getattr(self._server, "_security", None)
        limit = security.max_message_bytes if security is not None else wire.DEFAULT_MAX_BYTES
        # The tensors are feeds or a graph's constants: owned copies (kernels and graphs keep them).
        return wire.decode_request(method, payload, limit, copy=True)

    def _graph(self, gd, constants):
        checked = wire.decode_graph_def(gd, plugins.registry().ops, tensors=constants)
        g = Graph()
        with g.as_default():
            import_graph_def(checked, name="")
        return g

    def _new_session(self, gd, constants):
        srv = self._server
        sess = DistributedSession(None, graph=self._graph(gd, constants), cluster=srv.worker.cluster,
                                  transport=srv._control.name, security=srv._security)
        # The client asks for traces (RunStep's trace_level) and writes them where it was told;
        # a TENSORWEAVE_TRACE_DIR this server inherited is not for its clients' steps.
        sess._trace_dir = None
        return sess

    def sessions(self) -> int:
        """How many sessions the service holds now."""
        with self._lock:
            return len(self._sessions)

    def _expired(self, now: float) -> list:
        """Remove and return the sessions unused for ``limits.session_idle_seconds``. Lock held."""
        idle = self.limits.session_idle_seconds
        gone = [h for h, held in self._sessions.items() if held.active == 0 and now - held.last_used >= idle]
        return [self._sessions.pop(h).session for h in gone]

    def _sweep(self):
        period = min(30.0, max(0.05, self.limits.session_idle_seconds / 4))
        while not self._closed.wait(period):
            with self._lock:
                if not self._sessions:
                    self._sweeper = None  # the next CreateSession starts another
                    return
                expired = self._expired(time.monotonic())
            for sess in expired:
                sess.close()

    def create_session(self, payload: bytes) -> bytes:
        header, constants = self._request("CreateSession", payload)
        with self._lock:
            expired = self._expired(time.monotonic())
            full = len(self._sessions) >= self.limits.max_sessions
        for sess in expired:
            sess.close()
        if full:
            raise errors.ResourceExhaustedError(self._full_message())
        sess = self._new_session(header["graph_def"], constants)
        handle = f"master-session-{next(self._ids)}"
        with self._lock:
            full = len(self._sessions) >= self.limits.max_sessions or self._closed.is_set()
            if not full:
                self._sessions[handle] = _Held(sess)
                if self._sweeper is None:
                    self._sweeper = threading.Thread(target=self._sweep, name="tw-master-sessions", daemon=True)
                    self._sweeper.start()
        if full:
            sess.close()
            raise errors.ResourceExhaustedError(self._full_message())
        return wire.encode_response({"session": handle})

    def _full_message(self) -> str:
        return (f"the master service holds {self.limits.max_sessions} sessions, the most it keeps "
                f"(Limits.max_sessions); close sessions no longer used (a session unused for "
                f"{self.limits.session_idle_seconds:g} s is closed by the service)")

    def _use(self, header) -> tuple[str, _Held]:
        handle = header["session"]
        with self._lock:
            held = self._sessions.get(handle)
            if held is not None:
                held.active += 1
                held.last_used = time.monotonic()
        if held is None:
            raise errors.NotFoundError(
                f"{_NO_SESSION}{handle[:100]!r} on this server (closed, unused for more than "
                f"{self.limits.session_idle_seconds:g} s, or the server restarted)")
        return handle, held

    def _release(self, held: _Held) -> None:
        with self._lock:
            held.active -= 1
            held.last_used = time.monotonic()

    def extend_session(self, payload: bytes) -> bytes:
        header, constants = self._request("ExtendSession", payload)
        handle, held = self._use(header)
        try:
            new = self._new_session(header["graph_def"], constants)
            with self._lock:
                old, held.session = held.session, new
        finally:
            self._release(held)
        old.close()
        return wire.encode_response({})

    def run_step(self, payload: bytes) -> bytes:
        header, tensors = self._request("RunStep", payload)
        received = time.time_ns()
        _, held = self._use(header)
        try:
            return self._run_step(held.session, header, tensors, received)
        finally:
            self._release(held)

    def _run_step(self, sess, header, tensors, received) -> bytes:
        feeds, fetches, targets = header.get("feeds", []), header.get("fetches", []), header.get("targets", [])
        if len(tensors) != len(feeds):
            raise errors.InvalidArgumentError(f"RunStep: {len(tensors)} values for {len(feeds)} feeds")
        timeout = header.get("timeout_in_ms", 0)
        trace_level = header.get("trace_level", 0)
        options = RunOptions(timeout_in_ms=timeout if timeout > 0 else 0, trace_level=trace_level)
        md = RunMetadata() if trace_level else None
        g = sess.graph
        feed_dict = {g.as_graph_element(n, allow_operation=False): v for n, v in zip(feeds, tensors)}
        values = sess.run([g.as_graph_element(n, allow_operation=False) for n in fetches]
                          + [g.as_graph_element(n) for n in targets], feed_dict, options=options, run_metadata=md)
        out = {"fetches": fetches}
        if md is not None:
            out["step_stats"] = wire.encode_step_stats(md.step_stats)
            out["clock"] = {"received_ns": received, "replied_ns": time.time_ns()}
        return wire.encode_response(out, list(values[:len(fetches)]))

    def close_session(self, payload: bytes) -> bytes:
        header, _ = self._request("CloseSession", payload)
        with self._lock:
            held = self._sessions.pop(header["session"], None)
        if held is not None:
            held.session.close()
        return wire.encode_response({})

    def close(self):
        self._closed.set()
        with self._lock:
            sessions = [h.session for h in self._sessions.values()]
            self._sessions.clear()
        for s in sessions:
            s.close()


class RemoteMasterSession(Session):
    """The client side: a Session whose master is a server's master service."""

    def __init__(self, target: str, graph=None, config=None, security=None):
        scheme, sep, address = target.partition("://")
        if not sep:
            raise errors.InvalidArgumentError(f"session target {target!r}: expected 'grpc://host:port'")
        self._init_state(graph, config, "client")  # plans are built in the master service
        self._security = security or Security(token=os.environ.get("TENSORWEAVE_TOKEN") or None)
        self._channel = get_transport(scheme).channel(address, self._security)
        self._target = target
        self._handle = None
        self._version = None
        self._clocks = ClockOffsets()

    def placement(self, fetches, feed_dict=None):
        raise errors.UnimplementedError(
            "placement() is not available through a remote master; use the client-side master "
            "(the default: ConfigProto(use_remote_master=False))")

    graph = property(lambda self: self._graph)
    sess_str = property(lambda self: self._target)

    def _call(self, method, header, tensors=()):
        return wire.decode_response(self._channel.call(method, wire.encode_message(header, list(tensors)), None))

    def _sync_graph(self):
        if self._version == self._graph._version:
            return
        constants = []
        gd = wire.encode_graph_def(graph_to_dict(self._graph, arrays=True), constants)
        if self._handle is not None:
            try:
                self._call("ExtendSession", {"session": self._handle, "graph_def": gd}, constants)
                self._version = self._graph._version
                return
            except errors.NotFoundError as e:
                if not e.message.startswith(_NO_SESSION):
                    raise
                self._handle = None  # expired, or the server restarted: a new session below
        header, _ = self._call("CreateSession", {"graph_def": gd}, constants)
        self._handle = header["session"]
        self._version = self._graph._version

    def _run_step(self, header, values):
        header["session"] = self._handle
        try:
            return self._call("RunStep", header, values)
        except errors.NotFoundError as e:
            if not e.message.startswith(_NO_SESSION):
                raise
        # The service closed our session (unused too long) or restarted before this step ran
        # (the lookup is the first thing RunStep does): a new session, and the step once more.
        self._handle, self._version = None, None
        self._sync_graph()
        header["session"] = self._handle
        return self._call("RunStep", header, values)

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self._closed:
            raise errors.FailedPreconditionError("attempted to use a closed Session")
        if self._trace_dir is not None:
            options, run_metadata = forced_trace(options, run_metadata)
        mapper = FetchMapper(self._graph, fetches)
        self._sync_graph()
        feeds, values = [], []
        for k, v in expand_composite_feeds(feed_dict or {}).items():
            t = self._graph.as_graph_element(k, allow_operation=False)
            feeds.append(t.name)
            values.append(np.asarray(convert_feed_value(v, t)))
        header = {"feeds": feeds, "fetches": [t.name for t in mapper.tensors],
                  "targets": [op.name for op in mapper.targets]}
        if options is not None and options.timeout_in_ms:
            header["timeout_in_ms"] = int(options.timeout_in_ms)
        tracing = bool(options is not None and options.trace_level and run_metadata is not None)
        if tracing:
            header["trace_level"] = int(options.trace_level)
        sent = time.time_ns()
        reply, out = self._run_step(header, values)
        if tracing:
            run_metadata.step_stats = self._step_stats(reply, sent, time.time_ns())
            if self._trace_dir is not None:
                timeline.write_step_trace(self._trace_dir, run_metadata.step_stats, self._graph)
        return mapper.build(list(out))

    def _step_stats(self, reply, sent, answered) -> StepStats:
        """The master service's merged stats, moved onto this process's clock; each task's
        offset becomes its offset from here (the service's own, plus its offset from there),
        its bound the sum of both."""
        where = f"the step stats from the master service at {self._target}"
        offset, error, source = self._clocks.estimate("master", sent, answered, reply.get("clock"), where)
        remote = wire.decode_step_stats(reply.get("step_stats", {}), where)
        stats = StepStats()
        stats.merge(StepStats(remote.dev_stats), offset)
        for task, c in remote.clock_offsets.items():
            stats.clock_offsets[task] = {"offset_nanos": c["offset_nanos"] + offset,
                                         "error_nanos": c["error_nanos"] + error,
                                         "source": f"{c['source']} via the master service ({source})"}
        return stats

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._handle is not None:
            try:
                self._call("CloseSession", {"session": self._handle})
            except errors.OpError:
                pass
        self._channel.close()



# tw.Session(target, config=ConfigProto(use_remote_master=True)): the master in a server.
register_session_factory("remote master service",
                         lambda target, config: getattr(config, "use_remote_master", False),
                         RemoteMasterSession)
