"""``tw.Session``: runs (parts of) a graph many times (whitepaper 2, 4.2).

``run`` looks up a cached execution plan (``client/plan.py``) for (graph version, fetch
structure, feed keys); on a miss it builds one. Per call, what is left is converting feeds,
one pass over the compiled steps, and re-packing the fetched values into the caller's
structure. A target other than this process ("grpc://host:port", a cluster config) makes the
session a registered factory provides (``register_session_factory``; the distributed runtime
registers its own), as TensorFlow's SessionFactory registry does.

Tracing: ``RunOptions(trace_level=FULL_TRACE)`` with a ``RunMetadata`` records the step into
``run_metadata.step_stats`` (``runtime/step.py``'s collector; a separate executor loop, so
untraced steps do no extra work). With ``TENSORWEAVE_TRACE_DIR`` set when a Session is made
(``tensorweave trace SCRIPT.py`` sets it), every run of that session is traced and written to
that directory as a Chrome trace (``client/timeline.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tensorweave import plugins
from tensorweave.client import timeline
from tensorweave.client.partial_run import PartialRun
from tensorweave.client.plan import Plan, expand_composite_feeds, structure_key, user_error
from tensorweave.framework import errors
from tensorweave.framework import graph as graph_mod
from tensorweave.passes.cost_model import CostModel
from tensorweave.runtime.config import ConfigProto, RunMetadata, RunOptions
from tensorweave.runtime.containers import SessionResources, process_resources
from tensorweave.runtime.device import create_local_devices
from tensorweave.runtime.rendezvous import LocalRendezvous
from tensorweave.runtime.step import StepContext, StepStatsCollector

_session_ids = itertools.count(1)

# (name, accepts(target, config) -> bool, Session subclass), tried in registration order.
_session_factories: list[tuple[str, Callable, type]] = []


TRACE_DIR_ENV = "TENSORWEAVE_TRACE_DIR"


def forced_trace(options, run_metadata):
    """``options`` with FULL_TRACE and a ``RunMetadata`` to fill (the caller's, or a new one):
    what a run of a session made under ``TENSORWEAVE_TRACE_DIR`` uses."""
    if options is None:
        options = RunOptions(trace_level=RunOptions.FULL_TRACE)
    elif not options.trace_level:
        options = dataclasses.replace(options, trace_level=RunOptions.FULL_TRACE)
    return options, run_metadata if run_metadata is not None else RunMetadata()


def register_session_factory(name: str, accepts: Callable, session_class: type) -> None:
    """``tw.Session(target, config=...)`` for a target other than this process makes a
    ``session_class`` when ``accepts(target, config)`` is true (TF's SessionFactory registry).
    Factories registered first are asked first."""
    _session_factories.append((name, accepts, session_class))


class Session:
    """A connection to a runtime that owns devices and state and runs graphs.

    ``target`` "" runs in this process. ``graph`` defaults to the default graph.
    """

    _plan_class = Plan

    def __new__(cls, target="", *args, **kwargs):
        # "" runs in this process; any other target is served by a registered factory.
        if cls is Session and target not in ("", None, "local"):
            config = kwargs.get("config", args[1] if len(args) > 1 else None)
            for _name, accepts, session_class in _session_factories:
                if accepts(target, config):
                    return super().__new__(session_class)
            known = ", ".join(name for name, _, _ in _session_factories) or "none"
            raise errors.InvalidArgumentError(
                f"no session factory accepts target {target!r} (registered: {known}); "
                "local sessions use target ''")
        return super().__new__(cls)

    def __init__(self, target: str = "", graph=None, config: ConfigProto | None = None):
        self._init_state(graph, config, "session")
        self._devices = create_local_devices(self._config)
        for d in self._devices:
            alloc_name = (self._config.allocator or {}).get(d.device_type)
            if alloc_name:
                factories = plugins.registry().allocators.for_device(d.device_type)
                if alloc_name not in factories:
                    raise errors.NotFoundError(
                        f"no allocator {alloc_name!r} for device type {d.device_type} "
                        f"(available: {sorted(factories)})")
                d.allocator = factories[alloc_name](d)

    def _init_state(self, graph, config, label: str) -> None:
        """What every kind of session keeps (the distributed ones too): its graph and config,
        plan cache, state containers, cost model, step bookkeeping."""
        self._graph = graph if graph is not None else graph_mod.get_default_graph()
        self._config = config or ConfigProto()
        self._id = next(_session_ids)
        self._resources = SessionResources(f"{label} {self._id}")
        self._plans: dict = {}
        self._plan_version = -1
        self._plan_builds = 0  # plans built, specialised ones included (tests count rebuilds)
        self._kernel_cache: dict = {}
        self._cost_model = CostModel()
        self._closed = False
        self._step_ids = itertools.count(1)
        self._pool: ThreadPoolExecutor | None = None
        self._active_steps: set = set()
        self._partial_runs: dict = {}  # handle -> PartialRun still open
        self._lock = threading.Lock()
        self._default_ctx = None
        # Read once here, never per run: every run of this session is traced and written there.
        self._trace_dir = os.environ.get(TRACE_DIR_ENV) or None

    graph = property(lambda self: self._graph)
    sess_str = property(lambda self: "")

    def list_devices(self):
        return list(self._devices)

    @property
    def devices(self):
        return list(self._devices)

    # ------------------------------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options: RunOptions | None = None, run_metadata=None):
        """Compute ``fetches`` (a Tensor, Operation, name, or nested list/tuple/dict of
        them), feeding ``feed_dict`` ({Tensor or "name:0": value}) in place of tensors."""
        if self._closed:
            raise errors.FailedPreconditionError("attempted to use a closed Session")
        if self._trace_dir is not None:
            options, run_metadata = forced_trace(options, run_metadata)
        if feed_dict:
            feed_dict = expand_composite_feeds(feed_dict)
        plan = self._plan_for(fetches, feed_dict or ())
        # in the plan's order of the feeds, whatever the order of this feed_dict
        feed_vals = [conv(feed_dict[k]) for conv, k in zip(plan.converters, plan.feed_keys)] if plan.feed_keys else ()
        if plan.specializable:
            plan = plan.specialized_for(feed_vals)
        try:
            out = self._execute(plan, feed_vals, options, run_metadata)
        except errors.OpError as e:
            plan.user_error(e)
            raise
        if self._trace_dir is not None:
            timeline.write_step_trace(self._trace_dir, run_metadata.step_stats, self._graph)
        return plan.mapper.build(out)

    def _execute(self, plan: Plan, feed_vals, options, run_metadata):
        timeout = None
        if options is not None and options.timeout_in_ms:
            timeout = options.timeout_in_ms / 1000.0
        elif self._config.operation_timeout_in_ms:
            timeout = self._config.operation_timeout_in_ms / 1000.0
        tracing = options is not None and options.trace_level and run_metadata is not None
        stats = StepStatsCollector() if tracing else None
        if plan.partitions is not None:
            out = self._execute_partitions(plan, feed_vals, options, timeout, stats)
        else:
            part = plan.partition
            step = StepContext(next(self._step_ids), None, options, self, stats)
            if plan.dynamic:
                self._active_steps.add(step)  # only steps that can wait need cancelling on close
                if self._closed:  # closed while this run was being planned: close() missed it
                    step.cancel()
                try:
                    out = part.run_dynamic(feed_vals, step, self._thread_pool(), timeout)
                finally:
                    self._active_steps.discard(step)
            elif tracing:
                out = part.run_traced(feed_vals, step, stats)
            else:
                out = part.run_sequential(feed_vals, step)
        if run_metadata is not None:
            if tracing:
                run_metadata.set_step_stats_builder(stats.step_stats)
                self._cost_model.record_later(stats.cost_records)
            run_metadata.placement = dict(plan.placement)
            if options is not None and getattr(options, "output_partition_graphs", False):
                run_metadata.partition_graphs = plan.partition_graphs()
            run_metadata.allocator_stats = {d.name: d.allocator.stats() for d in self._devices}
        return out

    def _execute_partitions(self, plan: Plan, feed_vals, options, timeout, stats=None):
        """Run every partition of a multi-device plan at once; they meet in one rendezvous.

        A failure anywhere aborts the rendezvous, which fails every pending Recv, so all
        partitions finish and the step raises the error that started it (never hangs).
        """
        step_id = next(self._step_ids)
        rendezvous = LocalRendezvous(step_id)
        step = StepContext(step_id, rendezvous, options, self, stats)
        pool = self._thread_pool()
        self._active_steps.add(step)
        try:
            return self._run_partitions(plan, feed_vals, timeout, rendezvous, step, pool)
        finally:
            self._active_steps.discard(step)

    def _run_partitions(self, plan, feed_vals, timeout, rendezvous, step, pool):
        states, errs = [], []
        for cp in plan.partitions:
            try:
                states.append((cp, cp.start([feed_vals[i] for i in cp.feed_index], step, pool, timeout)))
            except Exception as e:  # noqa: BLE001 - e.g. a feed the device refuses
                rendezvous.abort(e)
                errs.append(e)
        results = {}
        for cp, state in states:
            try:
                results[cp] = cp.finish(state, timeout)
            except Exception as e:  # noqa: BLE001 - collected; the root cause is raised below
                rendezvous.abort(e)
                errs.append(e)
        if errs:
            root = rendezvous.error
            raise root if root is not None else errs[0]
        return [feed_vals[i] if cp == "feed" else results[cp][i] for cp, i in plan.fetch_sources]

    def partial_run_setup(self, fetches, feeds=None) -> str:
        """Start a step whose ``feeds`` and ``fetches`` (every one a later ``partial_run``
        call will name) are supplied over several ``partial_run`` calls; returns its handle.
        Each node runs once in the step, whichever call first needs it (client/partial_run.py)."""
        if self._closed:
            raise errors.FailedPreconditionError("attempted to use a closed Session")
        if type(self)._plan_class is not Plan:
            raise errors.UnimplementedError(
                f"partial_run is not supported by {type(self).__name__} (only local sessions have it)")
        if not isinstance(fetches, list | tuple):
            fetches = [fetches]
        try:
            run = PartialRun(self, fetches, feeds)
        except errors.OpError as e:
            user_error(e, self._graph)
            raise
        self._partial_runs[run.handle] = run
        return run.handle

    def partial_run(self, handle, fetches, feed_dict=None):
        """Feed ``feed_dict`` into the partial run ``handle`` and return ``fetches`` (both
        among those given to ``partial_run_setup``; each fed once and fetched once)."""
        if self._closed:
            raise errors.FailedPreconditionError("attempted to use a closed Session")
        run = self._partial_runs.get(handle)
        if run is None:
            raise errors.InvalidArgumentError(
                f"partial_run: no open partial run with handle {handle!r} (every fetch already fetched, "
                "it failed, or it came from another session)")
        timeout = self._config.operation_timeout_in_ms / 1000.0 if self._config.operation_timeout_in_ms else None
        try:
            return run.run(fetches, feed_dict, timeout)
        except errors.OpError as e:
            run.plan.user_error(e)
            raise

    def _thread_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            n = self._config.inter_op_parallelism_threads or (os.cpu_count() or 2)
            self._pool = ThreadPoolExecutor(max(n, 2), thread_name_prefix=f"tw-interop-{self._id}")
        return self._pool

    def placement(self, fetches, feed_dict=None) -> dict:
        """{node name: device name} for the plan that ``run(fetches, feed_dict)`` would use,
        without running it (feed values are not needed, only the keys)."""
        return dict(self._plan_for(fetches, tuple(feed_dict or ())).placement)

    def _plan_for(self, fetches, feed_keys):
        g = self._graph
        if self._plan_version != g._version:
            self._plans.clear()
            self._plan_version = g._version
        try:
            # the same feeds in another order are the same plan
            key = (structure_key(fetches), frozenset(feed_keys))
            plan = self._plans.get(key)
        except TypeError:  # something unhashable inside: build without caching
            key, plan = None, None
        if plan is None:
            with self._lock:
                try:
                    plan = self._plan_class(self, fetches, tuple(feed_keys))
                    self._plan_builds += 1
                except errors.OpError as e:
                    user_error(e, g)
                    raise
                if key is not None:
                    self._plans[key] = plan
        return plan

    def make_callable(self, fetches, feed_list=None):
        """A function ``f(*feed_values)`` that runs ``fetches`` with the plan looked up once."""
        feed_list = tuple(feed_list or ())

        def call(*values):
            if len(values) != len(feed_list):
                raise errors.InvalidArgumentError(f"expected {len(feed_list)} feed values, got {len(values)}")
            return self.run(fetches, dict(zip(feed_list, values)))
        return call

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Steps still running in other threads (a dequeue waiting on an empty queue) end now
        # with CancelledError instead of waiting forever on a session that is gone.
        for step in list(self._active_steps):
            step.cancel()
            if step.rendezvous is not None:
                step.rendezvous.abort(errors.CancelledError("the session was closed during the step"))
        self._partial_runs.clear()
        self._plans.clear()
        self._kernel_cache.clear()
        self._resources.local.reset()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ------------------------------------------------------------------------------------
    def as_default(self):
        return _DefaultSessionContext(self)

    def __enter__(self):
        self._default_ctx = _DefaultSessionContext(self, with_graph=True)
        self._default_ctx.__enter__()
        return self

    def __exit__(self, *exc):
        ctx, self._default_ctx = self._default_ctx, None
        if ctx is not None:
            ctx.__exit__(*exc)
        self.close()
        return False

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)

    @staticmethod
    def reset(target: str = "", containers=None, config=None) -> None:
        """Clear named containers (all named ones when ``containers`` is None) of the
        process: variables in them become uninitialised for every Session."""
        if target not in ("", None, "local"):
            sess = Session(target, config=config)
            try:
                sess.reset_containers(containers)
            finally:
                sess.close()
            return
        process_resources().reset(containers)


class InteractiveSession(Session):
    """A Session that installs itself as the default on construction (for shells)."""

    def __init__(self, target="", graph=None, config=None):
        super().__init__(target, graph, config)
        self._interactive_ctx = _DefaultSessionContext(self, with_graph=True)
        self._interactive_ctx.__enter__()

    def close(self):
        ctx = getattr(self, "_interactive_ctx", None)
        if ctx is not None:
            self._interactive_ctx = None
            try:
                ctx.__exit__(None, None, None)
            except (IndexError, ValueError):
                pass
        super().close()


# ----------------------------------------------------------------------------------------
class _DefaultSessionContext:
    """``with sess.as_default():`` (and ``with Session() as sess:``, which also makes its graph
    the default graph)."""

    def __init__(self, session, with_graph=False):
        self.session = session
        self.graph_ctx = session.graph.as_default() if with_graph else None
        self.session_ctx = graph_mod.default_session(session)

    def __enter__(self):
        self.session_ctx.__enter__()
        if self.graph_ctx is not None:
            self.graph_ctx.__enter__()
        return self.session

    def __exit__(self, *exc):
        if self.graph_ctx is not None:
            self.graph_ctx.__exit__(*exc)
        self.session_ctx.__exit__(*exc)
        return False
