"""The master (whitepaper 3.2.2, Figure 3): one client's view of a cluster.

``tw.Session("grpc://host:port")`` (or ``ucx://``, or ``tw.Session(target=config)``) makes a
``DistributedSession``: the master runs in the client process. It asks the task at the
target for the cluster, connects to every task, and lists their devices. A plan is built
exactly like a local one — prune, plan-graph passes, placement over the devices of *all*
tasks, partitioning with Send/Recv pairs — and then each task's partitions are registered
with that task's worker once (``RegisterGraph``). Every step is one ``RunGraph`` per task,
issued concurrently; the workers exchange tensors among themselves and return only the
fetches.

Failures: a task that cannot be reached, a failed RunGraph, or a missed health check (every
task is asked for ``Health`` every ``health_check_interval`` seconds, by the process's one
``HealthMonitor``: one thread however many sessions, one call per task and interval for all
the sessions that watch it) aborts the step on every task (``AbortStep``), and the client
gets the first real error (``UnavailableError`` for a lost task). The plans registered on a
task that restarts are registered again on the next step.

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

import functools
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
from tensorweave.distributed.cluster import health_check_settings
from tensorweave.distributed.transport import Security, current_call, get_transport
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
        self._used = False            # whether self.channel made a call yet

    def renew(self) -> None:
        """The task was found unreachable (the health checks): later calls go through a fresh
        channel, unless the current one is fresh already (never used)."""
        channel = self.channel
        if self._reconnect is not None and self._used and channel is self.channel:
            self._old.append(channel)
            self._used = False
            self.channel = self._reconnect()

    def call(self, method: str, header: dict, tensors=(), timeout=None):
        channel = self.channel
        self._used = True
        try:
            data = channel.call(method, wire.encode_message(header, list(tensors)), timeout)
        except errors.OpError as e:
            if isinstance(e, errors.UnavailableError) and self._reconnect is not None and channel is self.channel:
                # The task is gone or restarting: later calls go through a fresh channel, not
                # one in its transport's reconnect back-off (which can last long after the
                # task is back). Calls still on the old one finish there; close() closes it.
                self._old.append(channel)
                self._used = False
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
        announced = None  # the cluster's health-check settings, as its tasks tell them
        self._rpc = ThreadPoolExecutor(32, thread_name_prefix=f"tw-master-{self._id}")
        self._cleanups: set = set()  # the CleanupSteps not sent yet
        cluster = cluster if cluster is not None else (_cluster_dict(cfg) if cfg is not None else None)
        if cluster is None:
            # Ask the task at the target which cluster it belongs to.
            ch = self._transport.channel(address, self._security)
            try:
                header, _ = wire.decode_response(ch.call("GetStatus", wire.encode_message({}), 30.0))
            finally:
                ch.close()
            cluster = header.get("cluster") or {header["job"]: {str(header["task"]): address}}
            announced = header.get("health_check")
        self._cluster = _normalise_cluster(cluster)
        self._devices = []
        for job, task in sorted(self._cluster):
            client = self._client(job, task)
            header, _ = client.call("GetStatus", {}, timeout=30.0)
            announced = announced if announced is not None else header.get("health_check")
            for d in header.get("devices", []):
                self._devices.append(RemoteDevice(d["name"], d["device_type"], d.get("memory_limit"),
                                                  d.get("description", "")))
        if not self._devices:
            raise errors.UnavailableError(f"no devices in the cluster at {target!r}")
        self._incarnations: dict = {}
        # Tasks the health checker holds lost until they answer again: closing the session
        # and ending steps do not wait on them (a hung task answers nothing, ever).
        self._lost: set = set()
        self._clocks = ClockOffsets()
        self._health = _HealthChecker(self, *health_check_settings(cfg, announced, "a task's GetStatus answer"))
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
        # In the master service (a thin client's RunStep), the client going away mid-step
        # aborts the step on every task: nobody waits for its result any more.
        caller = current_call()
        gone = functools.partial(self._caller_gone, step)
        if caller is not None and not caller.on_gone(gone):
            gone()
        ended_there = set()  # tasks where the step ends by itself, once it succeeded
        succeeded = False
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
                            hdr, results[task] = pending.pop(task).result()
                        if hdr.get("ends_here") is True:
                            ended_there.add(task)
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
            succeeded = True
        finally:
            if caller is not None:
                caller.forget(gone)
            self._active_steps.discard(step)
            # A step that succeeded ended by itself on the tasks that said so (worker._progress);
            # the others, and every task of a failed step, are told.
            if succeeded:
                step.tasks = [t for t in step.tasks if t not in ended_there]
            if step.tasks:
                cleanup = self._rpc.submit(self._cleanup, step)
                self._cleanups.add(cleanup)
                cleanup.add_done_callback(self._cleanups.discard)
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
            if task in self._lost:
                continue  # its step state goes with it (a restarted task starts empty)
            try:
                self._client(*task).call("CleanupStep", {"step_id": step.step_id}, timeout=5.0)
            except errors.OpError:
                pass

    def _caller_gone(self, step):
        """The client that asked for ``step`` (through the master service) went away."""
        err = errors.AbortedError(f"step {step.step_id} was aborted: its client went away")
        step.fail(err)
        try:
            self._rpc.submit(self._abort, step, err)
        except RuntimeError:
            pass  # the session closed meanwhile (its pool is shut down)

    def task_lost(self, task, error):
        """The health checker's verdict: fail and abort every step that involves ``task``."""
        self._lost.add(task)
        for step in list(self._active_steps):
            if task in step.tasks:
                err = errors.UnavailableError(f"/job:{task[0]}/task:{task[1]} failed its health check: {error}")
                step.lost.add(task)
                step.fail(err)
                self._rpc.submit(self._abort, step, err)

    def task_seen(self, task, incarnation):
        self._lost.discard(task)
        old = self._incarnations.get(task)
        self._incarnations[task] = incarnation
        return old is not None and old != incarnation

    # --- lifecycle --------------------------------------------------------------------------
    def reset_containers(self, containers=None):
        # Explicit either way: a worker resets nothing for a request that names neither.
        header = {"all": True} if containers is None else {"containers": [str(c) for c in containers]}
        for task in self._cluster:
            self._client(*task).call("ResetContainers", header, timeout=30.0)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._health.stop()
        # The CleanupSteps of the last steps go out before the channels close (a session
        # closed right after a step used to leave that step's state on the tasks).
        wait_futures(list(self._cleanups), timeout=10.0)
        for plan in self._plans.values():
            for task, info in getattr(plan, "tasks", {}).items():
                if info["handle"] is not None and task not in self._lost:
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
    """One session's health checks: every ``interval`` seconds each of its tasks is asked for
    ``Health``; a task that does not answer within ``timeout`` fails the steps that use it
    (detected within interval + timeout, two intervals by default). The checks themselves are
    made by the process's one ``HealthMonitor``, which asks each task once per interval for
    every session that watches it — no thread per session."""

    def __init__(self, session: DistributedSession, interval: float, timeout: float | None = None):
        self.session, self.interval = session, interval
        self.timeout = timeout or interval
        self._stopped = False

    def start(self):
        if self.interval > 0:
            HealthMonitor.get().watch(self)

    def stop(self):
        self._stopped = True
        HealthMonitor.get().unwatch(self)


def _security_key(security) -> tuple:
    return (security.tls_cert, security.tls_root, security.tls_server_name, security.token,
            security.max_message_bytes, security.tls_key)


# Health checks in a row that get no answer before their deadline for a task to be lost.
MISSES_BEFORE_LOST = 2


class _Target:
    """One (transport, address, credentials, interval, timeout) the monitor checks, and the
    sessions (with their task name for it) that want the answers."""

    def __init__(self, key, transport, address, security, interval, timeout, now):
        self.key, self.transport, self.address, self.security = key, transport, address, security
        self.interval, self.timeout = interval, timeout
        self.watchers: dict = {}          # _HealthChecker -> (job, task)
        self.channel = None
        self.due = now + interval
        self.in_flight = None             # when the check under way started
        self.late_reported = 0.0          # when a hung check was last reported
        self.misses = 0                   # checks in a row with no answer in time

    def check(self):
        """Runs on the monitor's pool: one Health call, its stamps, or the error."""
        if self.channel is None:
            self.channel = self.transport.channel(self.address, self.security)
        sent = time.time_ns()
        try:
            data = self.channel.call("Health", wire.encode_message({}), self.timeout)
            header, _ = wire.decode_response(data)
        except errors.OpError as e:
            if isinstance(e, errors.UnavailableError):
                # Our own channel: a fresh one next time, not one in its transport's back-off.
                self.channel.close()
                self.channel = None
            return None, e, sent, time.time_ns()
        return header, None, sent, time.time_ns()

    def close(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None


class HealthMonitor:
    """The process's health checker: one thread (and a small pool for the calls, so a hung
    task never delays the others), whatever the number of sessions. Sessions with the same
    transport, task address, credentials, interval and timeout share one check per interval.
    The thread runs only while some session watches a task."""

    _instance = None
    _instance_lock = threading.Lock()
    POOL_THREADS = 16

    @classmethod
    def get(cls) -> HealthMonitor:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._targets: dict = {}
        self._thread = None
        self._pool = None

    def watch(self, checker: _HealthChecker) -> None:
        s = checker.session
        now = time.monotonic()
        with self._lock:
            for task, address in s._cluster.items():
                key = (s._transport.name, address, _security_key(s._security), checker.interval, checker.timeout)
                t = self._targets.get(key)
                if t is None:
                    t = self._targets[key] = _Target(key, s._transport, address, s._security,
                                                     checker.interval, checker.timeout, now)
                t.watchers[checker] = task
            if self._thread is None:
                self._pool = ThreadPoolExecutor(self.POOL_THREADS, thread_name_prefix="tw-health")
                self._thread = threading.Thread(target=self._run, name="tw-health-monitor", daemon=True)
                self._thread.start()
            self._wake.notify()

    def unwatch(self, checker: _HealthChecker) -> None:
        closing = []
        with self._lock:
            for key, t in list(self._targets.items()):
                if t.watchers.pop(checker, None) is not None and not t.watchers:
                    del self._targets[key]
                    if t.in_flight is None:
                        closing.append(t)
            self._wake.notify()
        for t in closing:
            t.close()

    def _run(self):
        with self._lock:
            while True:
                if not self._targets:
                    # Nothing to watch: the thread and the pool go (the next watch starts them).
                    pool, self._pool, self._thread = self._pool, None, None
                    pool.shutdown(wait=False)
                    return
                now = time.monotonic()
                next_due = now + 60.0
                late = []
                for t in list(self._targets.values()):
                    if t.in_flight is None:
                        if now >= t.due:
                            t.in_flight = now
                            t.due = now + t.interval
                            self._pool.submit(self._check, t)
                        next_due = min(next_due, t.due)
                    else:
                        overdue = t.in_flight + t.timeout + 1.0
                        if now >= overdue and now - t.late_reported >= t.interval:
                            # A transport that did not honour the timeout: the task counts as lost
                            # (again each interval while the call hangs).
                            t.late_reported = now
                            late.append(t)
                        next_due = min(next_due, max(overdue, t.late_reported + t.interval))
                if late:
                    self._lock.release()
                    try:
                        for t in late:
                            self._report(t, None, errors.DeadlineExceededError(
                                f"no Health answer within {t.timeout:.3g}s"))
                    finally:
                        self._lock.acquire()
                    continue
                self._wake.wait(max(0.0, next_due - time.monotonic()))

    def _check(self, t: _Target) -> None:
        try:
            header, error, sent, answered = t.check()
        except Exception as e:  # noqa: BLE001 - a transport's own failure
            header, error, sent, answered = None, errors.UnavailableError(f"Health: {e}"), 0, 0
        with self._lock:
            t.in_flight = None
            t.late_reported = 0.0
            gone = self._targets.get(t.key) is not t
            self._wake.notify()
        if gone:
            t.close()
            return
        self._report(t, header, error, sent, answered)

    def _report(self, t: _Target, header, error, sent=0, answered=0) -> None:
        with self._lock:
            if isinstance(error, errors.DeadlineExceededError):
                # A task that answers late once is busy, not lost (a loaded machine can stall
                # a process past a 1 s deadline); silence for MISSES_BEFORE_LOST checks in a
                # row is a verdict. A refused or broken connection is one at once.
                t.misses += 1
                if t.misses < MISSES_BEFORE_LOST:
                    return
            elif error is None:
                t.misses = 0
            watchers = list(t.watchers.items())
        for checker, task in watchers:
            if checker._stopped:
                continue
            s = checker.session
            if error is not None:
                if isinstance(error, errors.UnavailableError):
                    s._client(*task).renew()  # its next call goes through a fresh channel
                try:
                    s.task_lost(task, error)
                except RuntimeError:
                    pass  # the session closed meanwhile (its pool is shut down)
                continue
            s.task_seen(task, header.get("started"))
            clock = header.get("clock_ns")
            if isinstance(clock, int) and not isinstance(clock, bool):
                s._clocks.sample(task, sent, answered, clock, clock)


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
    # Every task serves its address over the cluster's own control transport ([transport_pairs]
    # only choose how tasks of two jobs exchange tensors): that is what a master dials.
    t = getattr(cfg, "transport", None) or "grpc"
    return t[0] if isinstance(t, tuple | list) else t


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


# tw.Session("grpc://host:port"), "ucx://...", or tw.Session(cluster_config): the master in the client.
register_session_factory("cluster (master in the client)",
                         lambda target, config: not getattr(config, "use_remote_master", False),
                         DistributedSession)
