"""Partial runs (whitepaper 4.2; TF1's ``Session.partial_run_setup`` / ``partial_run``): one
step whose feeds and fetches are supplied over several calls.

``partial_run_setup(fetches, feeds)`` builds a plan for every fetch and feed at once and
starts its partitions; they run as far as the values they have allow and wait. The feeds
and fetches are the step's edges to the client, so each becomes a transfer with the client
at the other end (the way TF's executor sees them): a fed tensor is a Recv that waits in the
step's rendezvous until a ``partial_run`` call sends its value, and a fetched one a Send
that the call waits for. Every node therefore runs once per partial run, however the feeds
and fetches are spread over the calls (``r1 = a + b`` fetched first and ``r2 = r1 * c``
later does not compute ``r1`` again), as in TF.

A fetch is waited for only when every feed it depends on has been fed, so a call that asks
too early fails at once naming the missing feed instead of hanging. The step ends when every
declared fetch has been fetched; closing the session aborts partial runs still open.
"""

from __future__ import annotations

import itertools
import threading

from tensorweave.client.plan import FetchMapper, Plan
from tensorweave.framework import errors
from tensorweave.framework.graph import Operation
from tensorweave.passes.partition import Transfer
from tensorweave.runtime.executor import CompiledPartition
from tensorweave.runtime.rendezvous import LocalRendezvous, make_key
from tensorweave.runtime.step import StepContext


class ClientEndpoint:
    """The other end of a partial run's feed and fetch transfers: host memory, in this process."""

    name = "/job:localhost/replica:0/task:0/client:0"
    host_tensors = True
    device_type = "CLIENT"


CLIENT = ClientEndpoint()


class PartialRunPlan(Plan):
    """A plan whose feeds arrive as Recvs from the client and whose fetches leave as Sends to
    it, so its partitions can start before any value is fed."""

    def _compile(self, parts, placement, reg, session):
        self.partition = None
        self.partitions = []
        self.dynamic = True
        fed = set(self.feeds)
        self.fetch_keys = {}   # plan tensor or target op -> (rendezvous key, device of the Send)
        self.feed_keys_of = {t: [] for t in self.feeds}  # fed tensor -> keys of the Recvs that wait for it
        for dev, p in parts.items():
            consumed = [t for t in self.feeds if any(t in op.inputs for op in p.nodes)]
            produced = [t for t in self.fetches if t not in fed and placement[t.op] is dev]
            targets = [op for op in self.targets if placement.get(op) is dev]
            recvs = [*p.recvs, *(Transfer(t, CLIENT, dev) for t in consumed)]
            sends = [*p.sends, *(Transfer(t, dev, CLIENT) for t in produced),
                     *(Transfer(None, dev, CLIENT, control_op=op) for op in targets)]
            cp = CompiledPartition(p.nodes, [], [], dev, reg.kernels, session._resources, session._kernel_cache,
                                   session, recvs=recvs, sends=sends, loops=p.loops)
            self.partitions.append(cp)
            for t in consumed:
                self.feed_keys_of[t].append(make_key(CLIENT.name, dev.name, t.name))
            for t in produced:
                self.fetch_keys[t] = (make_key(dev.name, CLIENT.name, t.name), dev)
            for op in targets:
                self.fetch_keys[op] = (make_key(dev.name, CLIENT.name, "^" + op.name), dev)
        # Which declared feeds each fetch needs (a wait for one of them could never end).
        self.needs = {f: self._feeds_needed(f.op if not isinstance(f, Operation) else f, fed)
                      for f in (*self.fetches, *self.targets) if f not in fed}

    def _feeds_needed(self, op, fed) -> set:
        needed, seen, stack = set(), set(), [op]
        while stack:
            o = stack.pop()
            if o in seen:
                continue
            seen.add(o)
            for t in o.inputs:
                if t in fed:
                    needed.add(t)
                else:
                    stack.append(t.op)
            stack.extend(o.control_inputs)
        return needed


class PartialRun:
    """One open partial run of a session: its plan, step and started partitions."""

    _handles = itertools.count(1)

    def __init__(self, session, fetches, feeds):
        feeds = list(feeds or ())
        self.session = session
        self.plan = plan = PartialRunPlan(session, fetches, tuple(feeds))
        self.handle = f"partial_run;{session._id};{next(self._handles)}"
        # User tensors and ops by name -> the plan's copies (the calls name the user's).
        self.fetch_by_name = {t.name: pt for t, pt in zip(plan.mapper.tensors, plan.fetches)}
        self.target_by_name = {op.name: pt for op, pt in zip(plan.mapper.targets, plan.targets)}
        self.feed_by_name = {t.name: (pt, conv) for t, pt, conv in
                             zip((plan.source_graph.as_graph_element(k, allow_operation=False) for k in plan.feed_keys),
                                 plan.feeds, plan.converters)}
        self.fed: dict = {}        # plan tensor -> the value fed
        self.fetched: set = set()  # plan tensors and ops already fetched
        self.lock = threading.Lock()
        step_id = next(session._step_ids)
        self.rendezvous = LocalRendezvous(step_id)
        self.step = StepContext(step_id, self.rendezvous, None, session, None)
        self.states = []
        session._active_steps.add(self.step)
        pool = session._thread_pool()
        try:
            for cp in plan.partitions:
                self.states.append((cp, cp.start([], self.step, pool, None)))
        except Exception as e:
            self.rendezvous.abort(e)
            session._active_steps.discard(self.step)
            raise

    def run(self, fetches, feed_dict, timeout):
        """One ``partial_run`` call: feed ``feed_dict``, wait for ``fetches``."""
        plan = self.plan
        mapper = FetchMapper(plan.source_graph, fetches)
        with self.lock:
            wanted = []
            for t in mapper.tensors:
                pt = self.fetch_by_name.get(t.name)
                if pt is None:
                    raise errors.InvalidArgumentError(
                        f"partial_run: fetch '{t.name}' was not declared in partial_run_setup")
                wanted.append(pt)
            for op in mapper.targets:
                pt = self.target_by_name.get(op.name)
                if pt is None:
                    raise errors.InvalidArgumentError(
                        f"partial_run: fetch '{op.name}' was not declared in partial_run_setup")
                wanted.append(pt)
            for pt in wanted:
                if pt in self.fetched:
                    raise errors.InvalidArgumentError(f"partial_run: '{pt.name}' has already been fetched")
            sends = []
            for k, v in (feed_dict or {}).items():
                try:
                    t = plan.source_graph.as_graph_element(k, allow_operation=False)
                except (errors.InvalidArgumentError, errors.NotFoundError) as e:
                    raise errors.InvalidArgumentError(f"partial_run: cannot feed {k!r}: {e.message}") from None
                entry = self.feed_by_name.get(t.name)
                if entry is None:
                    raise errors.InvalidArgumentError(
                        f"partial_run: feed '{t.name}' was not declared in partial_run_setup")
                pt, conv = entry
                if pt in self.fed:
                    raise errors.InvalidArgumentError(f"partial_run: '{t.name}' has already been fed")
                sends.append((pt, conv(v)))
            now_fed = set(self.fed) | {pt for pt, _ in sends}
            for pt in wanted:
                missing = plan.needs.get(pt, set()) - now_fed
                if pt in plan.feeds and pt not in now_fed:
                    missing = {pt}
                if missing:
                    names = ", ".join(sorted(f"'{m.name}'" for m in missing))
                    raise errors.InvalidArgumentError(
                        f"partial_run: cannot fetch '{pt.name}' yet: it depends on {names}, not fed so far")
            for pt, value in sends:
                self.fed[pt] = value
                for key in plan.feed_keys_of[pt]:
                    self.rendezvous.send(key, value)
            self.fetched.update(wanted)
        values = []
        for pt in mapper.tensors:
            pt = self.fetch_by_name[pt.name]
            values.append(self.fed[pt] if pt in self.fed else self._receive(pt, timeout))
        for op in mapper.targets:
            self._receive(self.target_by_name[op.name], timeout)
        if len(self.fetched) == len(self.fetch_by_name) + len(self.target_by_name):
            self.finish(timeout)
        return mapper.build(values)

    def _receive(self, what, timeout):
        key, dev = self.plan.fetch_keys[what]
        try:
            value = self.rendezvous.recv(key, timeout if timeout is not None else 1e9)
        except errors.OpError:
            self.finish(timeout)  # raises the error that ended the step, naming its node
            raise
        return value if value is None or dev.host_tensors else dev.to_host(value)

    def finish(self, timeout):
        """Wait for the partitions (all they had to do is done once every fetch arrived)."""
        self.session._partial_runs.pop(self.handle, None)
        try:
            errs = []
            for cp, state in self.states:
                try:
                    cp.finish(state, timeout)
                except Exception as e:  # noqa: BLE001 - the first failure is the step's error
                    self.rendezvous.abort(e)
                    errs.append(e)
            if errs:
                root = self.rendezvous.error
                raise root if root is not None else errs[0]
        finally:
            self.session._active_steps.discard(self.step)
