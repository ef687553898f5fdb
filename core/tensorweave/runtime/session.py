"""``tw.Session``: runs (parts of) a graph many times (whitepaper 2, 4.2).

``run`` looks up a cached execution plan for (graph version, fetch structure, feed keys); on
a miss it builds one: passes (pruning first) -> placement -> per-device compiled partitions.
Per call, what is left is converting feeds, one pass over the compiled steps, and
re-packing the fetched values into the caller's structure.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework import graph as graph_mod
from tensorweave.framework.graph import Operation, Tensor
from tensorweave.passes.cost_model import CostModel
from tensorweave.passes.partition import partition
from tensorweave.runtime.config import ConfigProto, RunOptions
from tensorweave.runtime.containers import SessionResources, process_resources
from tensorweave.runtime.device import create_local_devices
from tensorweave.runtime.executor import CompiledPartition, StepContext
from tensorweave.runtime.rendezvous import LocalRendezvous

_session_ids = itertools.count(1)


# ----------------------------------------------------------------------------------------
# fetch structures
def _structure_key(f):
    """A hashable key for a fetch structure (Tensors/ops by identity, names by value)."""
    if isinstance(f, Tensor | Operation | str):
        return f
    if isinstance(f, list):
        return ("L",) + tuple(_structure_key(x) for x in f)
    if isinstance(f, tuple):
        return (type(f),) + tuple(_structure_key(x) for x in f)
    if isinstance(f, dict):
        return ("D", type(f)) + tuple((k, _structure_key(v)) for k, v in f.items())
    return f  # Variables and other graph-element-like objects hash by identity


class _FetchMapper:
    """Flattens a nested fetch structure into unique tensors/targets and rebuilds it."""

    def __init__(self, graph, fetches):
        self.tensors: list[Tensor] = []
        self.targets: list[Operation] = []
        self._tindex: dict = {}
        self._builder = self._compile(graph, fetches)

    def _compile(self, graph, f):
        if f is None:
            raise errors.InvalidArgumentError("fetch argument None is invalid: fetch a Tensor, Operation or name")
        if isinstance(f, list | tuple) and not hasattr(f, "_as_graph_element"):
            subs = [self._compile(graph, x) for x in f]
            if isinstance(f, list):
                return lambda vals: [b(vals) for b in subs]
            if hasattr(f, "_fields"):  # namedtuple
                cls = type(f)
                return lambda vals: cls(*[b(vals) for b in subs])
            return lambda vals: tuple(b(vals) for b in subs)
        if isinstance(f, dict):
            cls = type(f)
            subs = [(k, self._compile(graph, v)) for k, v in f.items()]
            return lambda vals: cls((k, b(vals)) for k, b in subs)
        try:
            el = graph.as_graph_element(f)
        except errors.NotFoundError:
            raise
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"cannot fetch {f!r}: {e.message}") from None
        if isinstance(el, Operation):
            if el not in self.targets:
                self.targets.append(el)
            return lambda vals: None
        i = self._tindex.get(el)
        if i is None:
            i = self._tindex[el] = len(self.tensors)
            self.tensors.append(el)

        def leaf(vals):
            v = vals[i]
            # TF1 fetch semantics: a 0-d result is a NumPy scalar (np.float32, np.int64,
            # np.bool_), a scalar string is bytes; arrays of rank >= 1 are returned as is.
            if type(v) is np.ndarray and not v.ndim:
                return v[()]
            return v

        return leaf

    def build(self, values):
        return self._builder(values)


# ----------------------------------------------------------------------------------------
def _feed_converter(t: Tensor):
    """A function that checks and converts one fed value for tensor ``t``."""
    dt = t.dtype
    np_dt = dt.np_dtype
    static = t.shape.as_tuple()
    full = t.shape.is_fully_defined()

    def bad_shape(arr):
        return errors.InvalidArgumentError(
            f"cannot feed value of shape {tuple(arr.shape)} for tensor '{t.name}', which has "
            f"shape {t.shape}")

    def convert(v):
        if type(v) is np.ndarray and v.dtype == np_dt:
            arr = v
        else:
            arr = _convert_feed_value(v, t)
        if static is not None:
            shp = arr.shape
            if full:
                if shp != static:
                    raise bad_shape(arr)
            elif len(shp) != len(static) or any(d is not None and d != s for d, s in zip(static, shp)):
                raise bad_shape(arr)
        return arr

    return convert


def _convert_feed_value(v, t: Tensor) -> np.ndarray:
    dt = t.dtype
    if isinstance(v, Tensor | Operation):
        raise errors.InvalidArgumentError(
            f"the value fed for '{t.name}' is a tw.Tensor ('{v.name}'); feed NumPy arrays or Python values "
            "(run the tensor first to get its value)")
    if dt.is_string:
        return dtypes.to_numpy(v, dt)
    try:
        raw = np.asarray(v)
    except (ValueError, TypeError) as e:
        raise errors.InvalidArgumentError(f"cannot feed {type(v).__name__} value for tensor '{t.name}': {e}") from None
    if raw.dtype.kind in "OSUV" or not (np.can_cast(raw.dtype, np_dt := dt.np_dtype, "same_kind")
                                          or (raw.dtype.kind == "b" and dt.is_bool)):
        # Python ints fed to float tensors are fine; floats to int tensors lose data.
        raise errors.InvalidArgumentError(
            f"cannot feed value of dtype {raw.dtype} for tensor '{t.name}' of dtype {dt.name}")
    return raw.astype(np_dt, copy=False)


class _Plan:
    """A compiled execution plan for one (fetches, feeds) signature of one graph version.

    Build: the "prune" passes choose the user's nodes the fetches need; those are copied
    into a private plan graph (passes/plan_graph.py) which the "pre_placement" passes
    rewrite (CSE, constant folding); then placement, the "post_placement" passes (lossy
    compression), partitioning, the "post_partition" passes (recv scheduling), and one
    compiled partition per device. ``feeds``/``fetches``/``targets``/``nodes`` are plan
    graph elements once the copy is made; ``origin`` maps plan nodes back to the user's.
    """

    def __init__(self, session, fetches, feed_keys):
        from tensorweave import plugins
        from tensorweave.passes import plan_graph

        graph = session._graph
        self.session = session
        self.config = session._config
        self.devices = session._devices
        self.cost_model = session._cost_model
        self.source_graph = graph
        self.mapper = _FetchMapper(graph, fetches)
        self.feeds: list[Tensor] = []
        for k in feed_keys:
            try:
                t = graph.as_graph_element(k, allow_operation=False)
            except errors.InvalidArgumentError as e:
                raise errors.InvalidArgumentError(f"cannot feed {k!r}: {e.message}") from None
            if t in self.feeds:
                raise errors.InvalidArgumentError(f"tensor '{t.name}' is fed twice")
            self.feeds.append(t)
        self.fetches = self.mapper.tensors
        self.targets = self.mapper.targets
        self.converters = [_feed_converter(t) for t in self.feeds]
        self.nodes = []
        self.aliases: dict[str, str] = {}  # user node name -> the plan node that replaced it
        reg = plugins.registry()
        self.kernels = reg.kernels
        for _name, fn in reg.passes.ordered("prune"):
            fn(self)
        plan_graph.build(self)  # from here on, plan-graph nodes (the user's graph is untouched)
        version = self.graph._version
        for _name, fn in reg.passes.ordered("pre_placement"):
            fn(self)
        if self.graph._version != version:
            plan_graph.reprune(self)
        placer = reg.placers.get(session._config.placer)
        self.device_of = placer.place(self.nodes, session._devices, reg.kernels, session._config,
                                      cost_model=session._cost_model, feeds=self.feeds)
        for _name, fn in reg.passes.ordered("post_placement"):
            fn(self)
        placement = self.device_of
        self.placement = {op.name: d.name for op, d in placement.items()}
        for old in self.aliases:  # merged or folded away: report where their value comes from
            new = old
            for _ in range(len(self.aliases)):
                if new not in self.aliases or new in self.placement:
                    break
                new = self.aliases[new]
            if new in self.placement and old not in self.placement:
                self.placement[old] = self.placement[new]
        if session._config.log_device_placement:
            for op, d in placement.items():
                print(f"{op.name}: ({op.type}): {d.name}", file=sys.stderr)
        parts = partition(self.nodes, placement, self.feeds)
        self.graph_parts = parts
        for _name, fn in reg.passes.ordered("post_partition"):
            fn(self)
        self._compile(parts, placement, reg, session)

    def _compile(self, parts, placement, reg, session):
        """One executor per device partition (the distributed master registers them with
        the workers instead: distributed/master.py)."""
        threads = session._config.inter_op_parallelism_threads
        if len(parts) <= 1:
            # One device: the whole plan is one partition (the fast, common case).
            device = next(iter(parts), session._devices[0])
            self.partition = CompiledPartition(
                self.nodes, self.feeds, self.fetches, device, reg.kernels, session._resources,
                session._kernel_cache, session)
            self.dynamic = self.partition.has_async or (threads != 1 and self.partition.parallelizable)
            self.partitions = None
            return
        # Several devices: one compiled partition each, joined by Send/Recv transfers.
        self.partition = None
        self.partitions = []
        fed = set(self.feeds)
        producer_part = {}
        for dev, p in parts.items():
            consumed = {t for op in p.nodes for t in op.inputs if t in fed}
            feeds = [t for t in self.feeds if t in consumed]
            fetches = [t for t in self.fetches if t not in fed and placement[t.op] is dev]
            cp = CompiledPartition(p.nodes, feeds, fetches, dev, reg.kernels, session._resources,
                                   session._kernel_cache, session, recvs=p.recvs, sends=p.sends,
                                   loops=p.loops)
            cp.feed_index = [self.feeds.index(t) for t in feeds]
            self.partitions.append(cp)
            for t in fetches:
                producer_part[t] = (cp, fetches.index(t))
        # Where each fetch comes from: (partition, index in its results) or ("feed", i).
        self.fetch_sources = [("feed", self.feeds.index(t)) if t in fed else producer_part[t]
                              for t in self.fetches]
        self.dynamic = True

    def partition_graphs(self) -> list[dict]:
        """Each device's part of the plan as a GraphDef (``RunOptions.output_partition_graphs``)."""
        return [p.to_graph_def() for p in self.graph_parts.values()]

    def user_error(self, e: errors.OpError) -> errors.OpError:
        """``e`` naming the user's node rather than its plan copy (TF1: ``error.op``)."""
        op = getattr(e, "op", None)
        origin = getattr(self, "origin", None)
        if origin and op in origin:
            e.op = origin[op]
        return e


def _user_error(e: errors.OpError, graph) -> errors.OpError:
    """A plan-build error naming the user's node (same name) instead of its plan copy."""
    op = getattr(e, "op", None)
    if isinstance(op, Operation) and op.graph is not graph:
        try:
            e.op = graph.get_operation_by_name(op.name)
        except errors.NotFoundError:
            pass
    return e


class Session:
    """A connection to a runtime that owns devices and state and runs graphs.

    ``target`` "" runs in this process. ``graph`` defaults to the default graph.
    """

    _plan_class = _Plan

    def __new__(cls, target="", *args, **kwargs):
        # A remote target ("grpc://host:port", "ucx://...", or a cluster config) makes the
        # master's session (distributed/master.py); "" runs in this process.
        if cls is Session and target not in ("", None, "local"):
            config = kwargs.get("config", args[1] if len(args) > 1 else None)
            if getattr(config, "use_remote_master", False):
                from tensorweave.distributed.master_service import RemoteMasterSession
                return super().__new__(RemoteMasterSession)
            from tensorweave.distributed.master import DistributedSession
            return super().__new__(DistributedSession)
        return super().__new__(cls)

    def __init__(self, target: str = "", graph=None, config: ConfigProto | None = None):
        self._graph = graph if graph is not None else graph_mod.get_default_graph()
        self._config = config or ConfigProto()
        self._id = next(_session_ids)
        self._devices = create_local_devices(self._config)
        for d in self._devices:
            alloc_name = (self._config.allocator or {}).get(d.device_type)
            if alloc_name:
                from tensorweave import plugins
                factories = plugins.registry().allocators.for_device(d.device_type)
                if alloc_name not in factories:
                    raise errors.NotFoundError(
                        f"no allocator {alloc_name!r} for device type {d.device_type} "
                        f"(available: {sorted(factories)})")
                d.allocator = factories[alloc_name](d)
        self._resources = SessionResources(f"session {self._id}")
        self._plans: dict = {}
        self._plan_version = -1
        self._kernel_cache: dict = {}
        self._cost_model = CostModel()
        self._closed = False
        self._step_ids = itertools.count(1)
        self._pool: ThreadPoolExecutor | None = None
        self._active_steps: set = set()
        self._lock = threading.Lock()
        self._default_ctx = None

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
        feed_keys = tuple(feed_dict) if feed_dict else ()
        plan = self._plan_for(fetches, feed_keys)
        feed_vals = [conv(feed_dict[k]) for conv, k in zip(plan.converters, feed_keys)] if feed_keys else ()
        try:
            out = self._execute(plan, feed_vals, options, run_metadata)
        except errors.OpError as e:
            plan.user_error(e)
            raise
        return plan.mapper.build(out)

    def _execute(self, plan: _Plan, feed_vals, options, run_metadata):
        timeout = None
        if options is not None and options.timeout_in_ms:
            timeout = options.timeout_in_ms / 1000.0
        elif self._config.operation_timeout_in_ms:
            timeout = self._config.operation_timeout_in_ms / 1000.0
        tracing = options is not None and options.trace_level and run_metadata is not None
        stats = run_metadata.step_stats if tracing else None
        if plan.partitions is not None:
            out = self._execute_partitions(plan, feed_vals, options, timeout, stats)
        else:
            part = plan.partition
            step = StepContext(next(self._step_ids), None, options, self, stats)
            if plan.dynamic:
                self._active_steps.add(step)  # only steps that can wait need cancelling on close
                try:
                    out = part.run_dynamic(feed_vals, step, self._thread_pool(), timeout)
                finally:
                    self._active_steps.discard(step)
            elif tracing:
                out = part.run_traced(feed_vals, step, run_metadata.step_stats)
            else:
                out = part.run_sequential(feed_vals, step)
        if run_metadata is not None:
            if tracing:
                self._cost_model.record(run_metadata.step_stats)
            run_metadata.placement = dict(plan.placement)
            if options is not None and getattr(options, "output_partition_graphs", False):
                run_metadata.partition_graphs = plan.partition_graphs()
            run_metadata.allocator_stats = {d.name: d.allocator.stats() for d in self._devices}
        return out

    def _execute_partitions(self, plan: _Plan, feed_vals, options, timeout, stats=None):
        """Run every partition of a multi-device plan at once; they meet in one rendezvous.

        A failure anywhere aborts the rendezvous, which fails every pending Recv, so all
        partitions finish and the step raises the error that started it (never hangs).
        """
        rendezvous = LocalRendezvous()
        step = StepContext(next(self._step_ids), rendezvous, options, self, stats)
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
            key = (_structure_key(fetches), feed_keys)
            plan = self._plans.get(key)
        except TypeError:  # something unhashable inside: build without caching
            key, plan = None, None
        if plan is None:
            with self._lock:
                try:
                    plan = self._plan_class(self, fetches, feed_keys)
                except errors.OpError as e:
                    _user_error(e, g)
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
_local = threading.local()


def _session_stack() -> list:
    st = getattr(_local, "stack", None)
    if st is None:
        st = _local.stack = []
    return st


class _DefaultSessionContext:
    def __init__(self, session, with_graph=False):
        self.session = session
        self.graph_ctx = session.graph.as_default() if with_graph else None

    def __enter__(self):
        _session_stack().append(self.session)
        if self.graph_ctx is not None:
            self.graph_ctx.__enter__()
        return self.session

    def __exit__(self, *exc):
        if self.graph_ctx is not None:
            self.graph_ctx.__exit__(*exc)
        st = _session_stack()
        if st and st[-1] is self.session:
            st.pop()
        elif self.session in st:
            st.remove(self.session)
        return False


def get_default_session():
    st = _session_stack()
    return st[-1] if st else None


def _session_for(session, graph, what: str) -> Session:
    s = session or get_default_session()
    if s is None:
        raise errors.InvalidArgumentError(
            f"cannot evaluate with {what}: no default session is registered. Use `with sess.as_default():` "
            "or pass session=sess")
    if s.graph is not graph:
        raise errors.InvalidArgumentError(
            f"cannot evaluate with {what}: the tensor's graph is different from the session's graph")
    return s
