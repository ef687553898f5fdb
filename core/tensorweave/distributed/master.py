"""The master (whitepaper 3.2.2, Figure 3): one client's view of a cluster.

``tw.Session("grpc://host:port")`` (or ``ucx://``, or ``tw.Session(target=config)``) makes a
``DistributedSession``: the master runs in the client process. It asks the task at the
target for the cluster, connects to every task, and lists their devices. A plan is built
exactly like a local one — prune, plan-graph passes, placement over the devices of *all*
tasks, partitioning with Send/Recv pairs — and then each task's partitions are registered
with that task's worker once (``RegisterGraph``). Every step is one ``RunGraph`` per task,
issued concurrently; the workers exchange tensors among themselves and return only the
fetches.

Failures: a task that cannot be reached, a failed RunGraph, or a missed health check (a
background thread asks every task for ``Health`` every ``health_check_interval`` seconds)
aborts the step on every task (``AbortStep``), and the client gets the first real error
(``UnavailableError`` for a lost task). The plans registered on a task that restarts are
registered again on the next step.

Tracing: a step run with ``RunOptions(trace_level=FULL_TRACE)`` asks every task for its
stats (``"trace": true`` in RunGraph); each returns its partitions' ``StepStats`` on its own
wall clock, and the master merges them onto its clock. A task's offset is estimated the way
NTP does, from a request stamped by the master when sent (t0) and when answered (t3) and by
the task when taken up (t1) and replied to (t2): offset = ((t1 - t0) + (t2 - t3)) / 2, and
the true offset lies within (t3 - t0 - (t2 - t1)) / 2 of it (``ClockOffsets``). Samples
come from the traced RunGraph itself and from the periodic Health checks; the one with the
smallest bound, aged by a worst-case clock drift of 100 ppm, is used. Each task's estimate
and bound are in ``StepStats.clock_offsets``.
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures

import numpy as np

from tensorweave.client.plan import Plan
from tensorweave.client.session import Session, register_session_factory
from tensorweave.distributed import wire
from tensorweave.distributed.transport import Security, get_transport
from tensorweave.distributed.worker import RemoteDevice, task_of_device, task_prefix
from tensorweave.framework import errors
from tensorweave.runtime.config import StepStats

_step_seed = random.SystemRandom()


class WorkerClient:
    """The client stub of one task's worker service over a transport channel."""

    def __init__(self, job: str, task: int, address: str, channel, reconnect=None):
        self.job, self.task, self.address = job, task, address
        self.channel = channel
        self._reconnect = reconnect   # () -> a new channel to the same address
        self._old: list = []

    def call(self, method: str, header: dict, tensors=(), timeout=None):
        channel = self.channel
        try:
            data = channel.call(method, wire.encode_message(header, list(tensors)), timeout)
        except errors.OpError as e:
            if isinstance(e, errors.UnavailableError) and self._reconnect is not None and channel is self.channel:
                # The task is gone or restarting: later calls go through a fresh channel, not
                # one in its transport's reconnect back-off (which can last long after the
                # task is back). Calls still on the old one finish there; close() closes it.
                self._old.append(channel)
                self.channel = self._reconnect()
            raise type(e)(f"/job:{self.job}/task:{self.task} ({self.address}): {e.message}") from None
        return wire.decode_response(data)

    def close(self):
        for ch in [*self._old, self.channel]:
            ch.close()
        self._old.clear()


class _RemotePlan(Plan):
    """A plan whose partitions run on the workers of a cluster."""

    def _compile(self, parts, placement, reg, session):
        fed = set(self.feeds)
        by_task: dict = {}
        for dev, p in parts.items():
            by_task.setdefault(task_of_device(dev.name), []).append((dev, p))
        self.tasks = {}
        producer = {}
        for task, plist in by_task.items():
            partitions, feeds, fetches, constants = [], [], [], []
            for dev, p in plist:
                consumed = {t for op in p.nodes for t in op.inputs if t in fed}
                feeds += [t for t in self.feeds if t in consumed and t not in feeds]
                mine = [t for t in self.fetches if t not in fed and placement[t.op] is dev]
                fetches += [t for t in mine if t not in fetches]
                # The graphs' constants travel as the RegisterGraph message's tensors.
                gd = wire.encode_graph_def(p.to_graph_def(arrays=True), constants)
                partitions.append({"device": dev.name, "graph_def": gd,
                                   "loops": {f: [s.parent, s.parallel_iterations] for f, s in p.loops.items()}})
            for i, t in enumerate(fetches):
                producer[t] = (task, i)
            self.tasks[task] = {
                "register": {"partitions": partitions, "feeds": [t.name for t in feeds],
                             "fetches": [t.name for t in fetches],
                             "feed_types": {t.name: t.dtype.name for t in feeds}},
                "constants": constants,
                "feed_index": [self.feeds.index(t) for t in feeds],
                "handle": None, "incarnation": None,
            }
        self.fetch_sources = [("feed", self.feeds.index(t)) if t in fed else producer[t] for t in self.fetches]
        self.partition = None
        self.partitions = None
        self.dynamic = True


class DistributedSession(Session):
    """A Session whose devices are those of every task of a cluster (see module docstring)."""

    _plan_class = _RemotePlan

    def __init__(self, target=None, graph=None, config=None, cluster=None, transport=None, security=None):
        self._init_state(graph, config, "client")  # its containers stay empty: state lives on the tasks

        transport_name, address, cfg = (None, None, None) if cluster is not None else _parse_target(target)
        if cfg is not None:
            security = security or _security_from_config(cfg)
            transport_name = transport or _control_transport(cfg)
        self._security = security or Security(token=os.environ.get("TENSORWEAVE_TOKEN") or None)
        self._transport = get_transport(transport or transport_name)
        self._target = target if isinstance(target, str) else f"{self._transport.name}://cluster"
        self._clients: dict = {}
        self._rpc = ThreadPoolExecutor(32, thread_name_prefix=f"tw-master-{self._id}")
        cluster = cluster if cluster is not None else (_cluster_dict(cfg) if cfg is not None else None)
        if cluster is None:
            # Ask the task at the target which cluster it belongs to.
            ch = self._transport.channel(address, self._security)
            try:
                header, _ = wire.decode_response(ch.call("GetStatus", wire.encode_message({}), 30.0))
            finally:
                ch.close()
            cluster = header.get("cluster") or {header["job"]: {str(header["task"]): address}}
        self._cluster = _normalise_cluster(cluster)
        self._devices = []
        for job, task in sorted(self._cluster):
            client = self._client(job, task)
            header, _ = client.call("GetStatus", {}, timeout=30.0)
            for d in header.get("devices", []):
                self._devices.append(RemoteDevice(d["name"], d["device_type"], d.get("memory_limit"),
                                                  d.get("description", "")))
        if not self._devices:
            raise errors.UnavailableError(f"no devices in the cluster at {target!r}")
        self._incarnations: dict = {}
        self._clocks = ClockOffsets()
        self._health = _HealthChecker(self, _health_interval(cfg), _health_timeout(cfg))
        self._health.start()

    sess_str = property(lambda self: self._target)

    def _client(self, job, task) -> WorkerClient:
        c = self._clients.get((job, task))
        if c is None:
            addr = self._cluster[(job, task)]
            c = self._clients[(job, task)] = WorkerClient(
                job, task, addr, self._transport.channel(addr, self._security),
                reconnect=lambda: self._transport.channel(addr, self._security))
        return c

    # --- plans and steps --------------------------------------------------------------------
    def _register(self, plan, task, info, timeout):
        client = self._client(*task)
        header, _ = client.call("RegisterGraph", info["register"], info["constants"], timeout=timeout)
        info["handle"] = header["handle"]
        # The process that answered: a later restart of the task shows as a new incarnation.
        started = header.get("started", self._incarnations.get(task))
        info["incarnation"] = self._incarnations[task] = started

    def _execute(self, plan, feed_vals, options, run_metadata):
        timeout = None
        if options is not None and options.timeout_in_ms:
            timeout = options.timeout_in_ms / 1000.0
        elif self._config.operation_timeout_in_ms:
            timeout = self._config.operation_timeout_in_ms / 1000.0
        step_id = _step_seed.getrandbits(62)
        tasks = list(plan.tasks.items())
        for task, info in tasks:
            if info["handle"] is None or info["incarnation"] != self._incarnations.get(task):
                self._register(plan, task, info, timeout or 60.0)
        tracing = bool(options is not None and options.trace_level and run_metadata is not None)
        traced = {}  # task -> (response header, sent, answered) of a traced step
        step = _Step(step_id, [t for t, _ in tasks])
        self._active_steps.add(step)
        try:
            futures = {}
            for task, info in tasks:
                header = {"handle": info["handle"], "step_id": step_id, "timeout": timeout}
                values = [np.asarray(feed_vals[i]) for i in info["feed_index"]]
                call = self._client(*task).call
                rpc_timeout = None if timeout is None else timeout + 5.0
                if tracing:
                    header["trace"] = True
                    futures[task] = self._rpc.submit(_stamped, call, "RunGraph", header, values, rpc_timeout)
                else:
                    futures[task] = self._rpc.submit(call, "RunGraph", header, values, rpc_timeout)
            results, errs = {}, []
            pending = dict(futures)
            while pending:
                # Wake up now and then: the health checker may have failed the step while a
                # RunGraph to a hung task would otherwise keep us waiting.
                done, _ = wait_futures(list(pending.values()), timeout=0.05, return_when=FIRST_COMPLETED)
                for task in [t for t, f in pending.items() if f in done]:
                    try:
                        if tracing:
                            (hdr, results[task]), sent, answered = pending.pop(task).result()
                            traced[task] = (hdr, sent, answered)
                        else:
                            results[task] = pending.pop(task).result()[1]
                    except errors.OpError as e:
                        if isinstance(e, errors.NotFoundError) and _UNKNOWN_GRAPH in e.message:
                            # The task restarted since this plan was registered: every plan
                            # registers again there on its next step. The rest of this step may
                            # have run on other tasks, so it is not retried here.
                            self._incarnations[task] = object()
                            e = errors.AbortedError(
                                f"{e.message}; the task restarted and lost its registered graphs "
                                "(they are registered again on the next step)")
                        errs.append(e)
                        if step.error is None:
                            step.fail(e)
                            self._rpc.submit(self._abort, step, e)
                if step.error is not None and pending and (not errs or set(pending) <= step.lost):
                    # A lost task: do not wait for the others to notice, nor for its own
                    # RunGraph (a hung task may never answer it).
                    break
            if step.error is not None and not errs:
                errs.append(step.error)
            if errs:
                raise _root_cause(errs, step.error)
        finally:
            self._active_steps.discard(step)
            self._rpc.submit(self._cleanup, step)
        if run_metadata is not None:
            run_metadata.placement = dict(plan.placement)
            if tracing:
                self._merge_step_stats(run_metadata, traced)
        return [feed_vals[i] if src == "feed" else results[src][i] for src, i in plan.fetch_sources]

    def _merge_step_stats(self, run_metadata, traced) -> None:
        """Every task's stats on this process's clock, in ``run_metadata.step_stats``. The
        offsets are estimated now (from this step's stamps and the recent Health samples);
        the stats themselves are decoded when first read."""
        parts = []
        for task, (header, sent, answered) in traced.items():
            where = f"the step stats of /job:{task[0]}/task:{task[1]}"
            offset, error, source = self._clocks.estimate(task, sent, answered, header.get("clock"), where)
            parts.append((task, header.get("step_stats", {}), where, offset, error, source))

        def build():
            merged = StepStats()
            for task, encoded, where, offset, error, source in parts:
                merged.merge(wire.decode_step_stats(encoded, where), offset)
                merged.clock_offsets[task_prefix(*task)] = {"offset_nanos": offset, "error_nanos": error,
                                                            "source": source}
            return merged
        run_metadata.set_step_stats_builder(build)

    def _abort(self, step, error):
        # Every task at once: a hung task must not delay the abort on the others.
        def abort_one(task):
            try:
                self._client(*task).call("AbortStep", {"step_id": step.step_id, "message": str(error)}, timeout=5.0)
            except errors.OpError:
                pass  # that task is gone: nothing is waiting there
            except RuntimeError:
                pass  # the session closed meanwhile (its pool is shut down)
        for task in step.tasks[1:]:
            try:
                self._rpc.submit(abort_one, task)
            except RuntimeError:
                abort_one(task)
        if step.tasks:
            abort_one(step.tasks[0])

    def _cleanup(self, step):
        for task in step.tasks:
            try:
                self._client(*task).call("CleanupStep", {"step_id": step.step_id}, timeout=5.0)
            except errors.OpError:
                pass

    def task_lost(self, task, error):
        """The health checker's verdict: fail and abort every step that involves ``task``."""
        for step in list(self._active_steps):
            if task in step.tasks:
                err = errors.UnavailableError(f"/job:{task[0]}/task:{task[1]} failed its health check: {error}")
                step.lost.add(task)
                step.fail(err)
                self._rpc.submit(self._abort, step, err)

    def task_seen(self, task, incarnation):
        old = self._incarnations.get(task)
        self._incarnations[task] = incarnation
        return old is not None and old != incarnation

    # --- lifecycle --------------------------------------------------------------------------
    def reset_containers(self, containers=None):
        for task in self._cluster:
            self._client(*task).call("ResetContainers", {"containers": containers}, timeout=30.0)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._health.stop()
        for plan in self._plans.values():
            for task, info in getattr(plan, "tasks", {}).items():
                if info["handle"] is not None:
                    try:
                        self._client(*task).call("DeregisterGraph", {"handle": info["handle"]}, timeout=5.0)
                    except errors.OpError:
                        pass
        self._plans.clear()
        for c in self._clients.values():
            c.close()
        self._rpc.shutdown(wait=False)


class _Step:
    def __init__(self, step_id, tasks):
        self.step_id, self.tasks = step_id, tasks
        self.error = None
        self.lost: set = set()   # tasks the health checker gave up on during this step
        self.cancelled = False
        self.rendezvous = None

    def fail(self, e):
        if self.error is None:
            self.error = e

    def cancel(self):
        self.cancelled = True


class _HealthChecker:
    """Asks every task for ``Health`` every ``interval`` seconds; a task that does not
    answer within the interval fails the steps that use it (detected within two intervals)."""

    def __init__(self, session: DistributedSession, interval: float, timeout: float | None = None):
        self.session, self.interval = session, interval
        self.timeout = timeout or interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tw-health", daemon=True)

    def start(self):
        if self.interval > 0:
            self._thread.start()

    def stop(self):
        self._stop.set()

    def _run(self):
        # Every task is asked at once, so one hung task does not delay the verdict on the others:
        # a task that stops answering just after a check fails the next one, at most
        # interval + timeout (two intervals by default) later.
        pool = ThreadPoolExecutor(min(16, max(1, len(self.session._cluster))), thread_name_prefix="tw-health")
        try:
            while not self._stop.wait(self.interval):
                futures = {pool.submit(self._check, task): task for task in list(self.session._cluster)}
                _, late = wait_futures(list(futures), timeout=self.timeout + 1.0)
                for f in late:  # a transport that did not honour the timeout
                    if not self._stop.is_set():
                        self.session.task_lost(futures[f], errors.DeadlineExceededError(
                            f"no Health answer within {self.timeout:.3g}s"))
        finally:
            pool.shutdown(wait=False)

    def _check(self, task):
        try:
            sent = time.time_ns()
            header, _ = self.session._client(*task).call("Health", {}, timeout=self.timeout)
            answered = time.time_ns()
            self.session.task_seen(task, header.get("started"))
            clock = header.get("clock_ns")
            if isinstance(clock, int) and not isinstance(clock, bool):
                self.session._clocks.sample(task, sent, answered, clock, clock)
        except errors.OpError as e:
            if not self._stop.is_set():
                self.session.task_lost(task, e)




def _stamped(call, *args):
    """``call(*args)`` with the wall-clock times it was sent and answered (a traced step's
    RunGraph: the stamps of its clock-offset estimate)."""
    sent = time.time_ns()
    out = call(*args)
    return out, sent, time.time_ns()


# How fast two clocks may drift apart: 100 ppm, a crystal without NTP's discipline (NTP keeps
# them far closer). A stored sample's bound grows by this much per second of its age.
CLOCK_DRIFT = 1e-4


class ClockOffsets:
    """Per task, the best recent estimate of (the task's wall clock - this process's), NTP
    style (see the module docstring): each sample gives an offset and an error bound; a
    stored sample's bound grows with its age by ``CLOCK_DRIFT``."""

    def __init__(self):
        self._best: dict = {}   # task -> (offset ns, error ns, when taken on our clock, source)
        self._lock = threading.Lock()

    def sample(self, task, sent, answered, received, replied, source="Health") -> tuple[int, int, str]:
        """A request sent and answered at ``sent``/``answered`` (our clock), taken up and
        replied to at ``received``/``replied`` (the task's clock). Returns the best estimate
        now, this sample or the stored one (this one is stored when it is the better)."""
        offset = ((received - sent) + (replied - answered)) // 2
        error = (max(0, (answered - sent) - (replied - received)) + 1) // 2
        with self._lock:
            old = self._best.get(task)
            if old is not None:
                aged = old[1] + int(max(0, answered - old[2]) * CLOCK_DRIFT)
                if aged < error:
                    return old[0], aged, old[3]
            self._best[task] = (offset, error, answered, source)
        return offset, error, source

    def estimate(self, task, sent, answered, clock, where) -> tuple[int, int, str]:
        """(offset, error bound, source) for a traced RunGraph sent/answered at these times
        whose response carried ``clock`` ({"received_ns", "replied_ns"} on the task's clock)."""
        if not isinstance(clock, dict) or not all(
                isinstance(clock.get(k), int) and not isinstance(clock.get(k), bool) for k in ("received_ns", "replied_ns")):
            raise errors.InvalidArgumentError(f"{where}: 'clock' must hold integer received_ns and replied_ns")
        return self.sample(task, sent, answered, clock["received_ns"], clock["replied_ns"], "RunGraph")


def _root_cause(errs, step_error):
    """The error that started a failed step: not an Aborted/Cancelled echo of it."""
    for e in errs:
        if not isinstance(e, errors.AbortedError | errors.CancelledError):
            return e
    return step_error or errs[0]


def _parse_target(target):
    if isinstance(target, str):
        scheme, sep, rest = target.partition("://")
        if not sep or not rest:
            raise errors.InvalidArgumentError(f"session target {target!r}: expected 'grpc://host:port' or 'ucx://host:port'")
        return scheme, rest, None
    if target is None:
        raise errors.InvalidArgumentError("a distributed session needs a target")
    return None, None, target  # a cluster config (or a dict / ClusterSpec)


def _cluster_dict(cfg):
    spec = getattr(cfg, "spec", cfg)
    if hasattr(spec, "as_dict"):
        return spec.as_dict()
    if isinstance(spec, dict):
        return spec.get("cluster", spec)
    raise errors.InvalidArgumentError(f"cannot read a cluster from {cfg!r}")


def _normalise_cluster(cluster) -> dict:
    """{(job, task): address} from {job: [addr, ...]} or {job: {task: addr}}."""
    out = {}
    if not isinstance(cluster, dict):
        raise errors.InvalidArgumentError(f"a cluster must be a dict of jobs, got {cluster!r}")
    for job, tasks in cluster.items():
        items = enumerate(tasks) if isinstance(tasks, list) else ((int(k), v) for k, v in tasks.items())
        for i, addr in items:
            out[(str(job), int(i))] = str(addr)
    return out


def _control_transport(cfg) -> str:
    fn = getattr(cfg, "transport_for", None)
    if fn is None:
        return getattr(cfg, "transport", None) or "grpc"
    jobs = list(_cluster_dict(cfg))
    control = fn(jobs[0], jobs[0])
    return control[0] if isinstance(control, tuple | list) else control


def _security_from_config(cfg):
    fn = getattr(cfg, "security_for", None)
    if fn is None:
        return None
    try:
        return fn()
    except TypeError:
        jobs = list(_cluster_dict(cfg))
        return fn(jobs[0], jobs[0])


_UNKNOWN_GRAPH = "RunGraph: no graph "  # the worker's NotFoundError for a handle it does not know


def _health_timeout(cfg) -> float | None:
    v = getattr(cfg, "health_check_timeout", None)
    return float(v) if v is not None else None


def _health_interval(cfg) -> float:
    v = getattr(cfg, "health_check_interval", None)
    return float(v) if v is not None else 1.0


# tw.Session("grpc://host:port"), "ucx://...", or tw.Session(cluster_config): the master in the client.
register_session_factory("cluster (master in the client)",
                         lambda target, config: not getattr(config, "use_remote_master", False),
                         DistributedSession)
