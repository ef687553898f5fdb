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
``CloseSession``. Sessions are held per handle and closed by the client, or when the server
stops. A ``RunStep`` with a ``trace_level`` returns the step's merged stats (on the master
service's clock) and the service's own stamps, from which the client moves them onto its
clock the way the master does for each task (``master.ClockOffsets``).
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np

from tensorweave import plugins
from tensorweave.client import timeline
from tensorweave.client.plan import FetchMapper, convert_feed_value
from tensorweave.client.session import Session, forced_trace, register_session_factory
from tensorweave.distributed import wire
from tensorweave.distributed.master import ClockOffsets, DistributedSession
from tensorweave.distributed.transport import Security, get_transport, guarded
from tensorweave.framework import errors
from tensorweave.framework.graph import Graph
from tensorweave.framework.importer import import_graph_def
from tensorweave.framework.serialization import graph_to_dict
from tensorweave.runtime.config import RunMetadata, RunOptions, StepStats

MAX_SESSIONS = 256


class MasterService:
    """Sessions of remote clients on one server, each a ``DistributedSession`` over the
    server's cluster."""

    def __init__(self, server):
        self._server = server
        self._sessions: dict = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def handlers(self) -> dict:
        return {"CreateSession": guarded(self.create_session), "ExtendSession": guarded(self.extend_session),
                "RunStep": guarded(self.run_step), "CloseSession": guarded(self.close_session)}

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

    def create_session(self, payload: bytes) -> bytes:
        # The tensors are the graph's constants (wire.encode_graph_def), owned by the graph.
        header, constants = wire.decode_message(payload, copy=True)
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                raise errors.ResourceExhaustedError(
                    f"the master service holds {MAX_SESSIONS} sessions; close some first")
        sess = self._new_session(header.get("graph_def"), constants)
        handle = f"master-session-{next(self._ids)}"
        with self._lock:
            self._sessions[handle] = sess
        return wire.encode_response({"session": handle})

    def _lookup(self, header):
        handle = header.get("session")
        with self._lock:
            sess = self._sessions.get(handle)
        if sess is None:
            raise errors.NotFoundError(f"no master session {handle!r} on this server (closed, or the server restarted)")
        return handle, sess

    def extend_session(self, payload: bytes) -> bytes:
        header, constants = wire.decode_message(payload, copy=True)
        handle, old = self._lookup(header)
        new = self._new_session(header.get("graph_def"), constants)
        with self._lock:
            self._sessions[handle] = new
        old.close()
        return wire.encode_response({})

    def run_step(self, payload: bytes) -> bytes:
        header, tensors = wire.decode_message(payload, copy=True)
        received = time.time_ns()
        _, sess = self._lookup(header)
        feeds, fetches, targets = header.get("feeds", []), header.get("fetches", []), header.get("targets", [])
        for what, v in (("feeds", feeds), ("fetches", fetches), ("targets", targets)):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise errors.InvalidArgumentError(f"RunStep: '{what}' must be a list of names")
        if len(tensors) != len(feeds):
            raise errors.InvalidArgumentError(f"RunStep: {len(tensors)} values for {len(feeds)} feeds")
        timeout = header.get("timeout_in_ms")
        trace_level = header.get("trace_level", 0)
        if isinstance(trace_level, bool) or not isinstance(trace_level, int):
            raise errors.InvalidArgumentError("RunStep: 'trace_level' must be an integer")
        options = RunOptions(timeout_in_ms=int(timeout) if isinstance(timeout, int) and timeout > 0 else 0,
                             trace_level=trace_level)
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
        header, _ = wire.decode_message(payload)
        with self._lock:
            sess = self._sessions.pop(header.get("session"), None)
        if sess is not None:
            sess.close()
        return wire.encode_response({})

    def close(self):
        with self._lock:
            sessions = list(self._sessions.values())
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
        if self._handle is None:
            header, _ = self._call("CreateSession", {"graph_def": gd}, constants)
            self._handle = header["session"]
        else:
            self._call("ExtendSession", {"session": self._handle, "graph_def": gd}, constants)
        self._version = self._graph._version

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self._closed:
            raise errors.FailedPreconditionError("attempted to use a closed Session")
        if self._trace_dir is not None:
            options, run_metadata = forced_trace(options, run_metadata)
        mapper = FetchMapper(self._graph, fetches)
        self._sync_graph()
        feeds, values = [], []
        for k, v in (feed_dict or {}).items():
            t = self._graph.as_graph_element(k, allow_operation=False)
            feeds.append(t.name)
            values.append(np.asarray(convert_feed_value(v, t)))
        header = {"session": self._handle, "feeds": feeds, "fetches": [t.name for t in mapper.tensors],
                  "targets": [op.name for op in mapper.targets]}
        if options is not None and options.timeout_in_ms:
            header["timeout_in_ms"] = int(options.timeout_in_ms)
        tracing = bool(options is not None and options.trace_level and run_metadata is not None)
        if tracing:
            header["trace_level"] = int(options.trace_level)
        sent = time.time_ns()
        reply, out = self._call("RunStep", header, values)
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
