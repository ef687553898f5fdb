"""An execution plan: what ``Session.run`` builds once per (graph version, fetches, feeds)
and then runs many times (whitepaper 4.2, 3.2).

Build: the "prune" passes choose the user's nodes the fetches need; those are copied into a
private plan graph (``passes/plan_graph.py``) which the "pre_placement" passes rewrite (CSE,
constant folding); then placement, the "post_placement" passes (lossy compression),
partitioning, the "post_partition" passes (Recv scheduling), and one compiled partition per
device (``runtime/executor.py``). Also here: flattening nested fetch structures and checking
fed values, both shared with the distributed master.
"""

from __future__ import annotations

import logging

import numpy as np

from tensorweave import plugins
from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Operation, Tensor
from tensorweave.passes import plan_graph, specialize
from tensorweave.passes.partition import partition
from tensorweave.runtime.executor import CompiledPartition

placement_log = logging.getLogger("tensorweave.placement")

# Shape-specialised plans kept per generic plan (passes/specialize.py): enough for a train
# batch, a last smaller batch and an eval batch or two; beyond, the generic plan runs.
MAX_SPECIALIZED = 8

# ----------------------------------------------------------------------------------------
# fetch structures
def structure_key(f):
    """A hashable key for a fetch structure (Tensors/ops by identity, names by value)."""
    if isinstance(f, Tensor | Operation | str):
        return f
    if isinstance(f, list):
        return ("L",) + tuple(structure_key(x) for x in f)
    if isinstance(f, tuple):
        return (type(f),) + tuple(structure_key(x) for x in f)
    if isinstance(f, dict):
        return ("D", type(f)) + tuple((k, structure_key(v)) for k, v in f.items())
    return f  # Variables and other graph-element-like objects hash by identity


class FetchMapper:
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
        parts = getattr(type(f), "_fetch_parts", None)
        if parts is not None:  # a composite (SparseTensor): its component tensors, rebuilt into one value
            tensors, rebuild = parts(f)
            subs = [self._compile(graph, t) for t in tensors]
            return lambda vals: rebuild([b(vals) for b in subs])
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


_PLAIN_FEED_KEYS: set = set()  # key types without _feed_parts (Tensor, str): one set lookup per key


def expand_composite_feeds(feed_dict):
    """``feed_dict`` with each composite key (a SparseTensor: ``_feed_parts``) replaced by its
    component tensors and their values; the dict itself when it has none (the usual case)."""
    for k in feed_dict:
        kind = type(k)
        if kind in _PLAIN_FEED_KEYS:
            continue
        if getattr(kind, "_feed_parts", None) is not None:
            break
        _PLAIN_FEED_KEYS.add(kind)
    else:
        return feed_dict
    out = {}
    for k, v in feed_dict.items():
        parts = getattr(type(k), "_feed_parts", None)
        if parts is None:
            out[k] = v
        else:
            out.update(parts(k, v))
    return out


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

    # The known dimensions to check, (axis, size): a per-step check costs one comparison each.
    known = tuple((i, d) for i, d in enumerate(static) if d is not None) if static is not None else ()
    rank = len(static) if static is not None else -1

    def convert(v):
        if type(v) is np.ndarray and v.dtype == np_dt:
            arr = v
        else:
            arr = convert_feed_value(v, t)
        if rank >= 0:
            shp = arr.shape
            if full:
                if shp != static:
                    raise bad_shape(arr)
            else:
                if len(shp) != rank:
                    raise bad_shape(arr)
                for i, d in known:
                    if shp[i] != d:
                        raise bad_shape(arr)
        return arr

    return convert


def convert_feed_value(v, t: Tensor) -> np.ndarray:
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


class Plan:
    """A compiled execution plan for one (fetches, feeds) signature of one graph version.

    Build: the "prune" passes choose the user's nodes the fetches need; those are copied
    into a private plan graph (passes/plan_graph.py) which the "pre_placement" passes
    rewrite (CSE, constant folding); then placement, the "post_placement" passes (lossy
    compression), partitioning, the "post_partition" passes (recv scheduling), and one
    compiled partition per device. ``feeds``/``fetches``/``targets``/``nodes`` are plan
    graph elements once the copy is made; ``origin`` maps plan nodes back to the user's.
    """

    def __init__(self, session, fetches, feed_keys, feed_shapes=None):
        graph = session._graph
        self._fetches_arg = fetches
        self._specialized: dict = {}  # fed shapes -> a Plan specialised to them (specialized_for)
        self.session = session
        self.config = session._config
        self.devices = session._devices
        self.cost_model = session._cost_model
        self.source_graph = graph
        self.mapper = FetchMapper(graph, fetches)
        self.feed_keys = feed_keys  # the feed_dict keys, in the order self.converters expects
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
        # Only a local plan of this class specialises (the distributed master's plans are
        # compiled by the workers), and only when the shapes fed would tell it something.
        self.specializable = (type(self) is Plan and feed_shapes is None
                              and specialize.can_specialize(self.nodes, self.feeds))
        plan_graph.build(self)  # from here on, plan-graph nodes (the user's graph is untouched)
        if feed_shapes is not None:
            specialize.specialize_shapes(self, feed_shapes)
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
                placement_log.info("%s: (%s): %s", op.name, op.type, d.name)
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

    def specialized_for(self, feed_vals) -> Plan:
        """The plan for these fed values: one specialised to their shapes (built the first
        time; at most ``MAX_SPECIALIZED`` per plan), else this one. A feed whose shape keeps
        changing thus costs one dict lookup per step once the cache is full, never a build."""
        try:
            key = tuple(v.shape for v in feed_vals)
        except AttributeError:
            return self
        plan = self._specialized.get(key)
        if plan is not None:
            return plan
        if len(self._specialized) >= MAX_SPECIALIZED:
            return self
        session = self.session
        with session._lock:
            plan = self._specialized.get(key)
            if plan is None and len(self._specialized) < MAX_SPECIALIZED:
                plan = self._specialized[key] = Plan(session, self._fetches_arg, self.feed_keys, feed_shapes=key)
                session._plan_builds += 1
        return plan or self

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


def user_error(e: errors.OpError, graph) -> errors.OpError:
    """A plan-build error naming the user's node (same name) instead of its plan copy."""
    op = getattr(e, "op", None)
    if isinstance(op, Operation) and op.graph is not graph:
        try:
            e.op = graph.get_operation_by_name(op.name)
        except errors.NotFoundError:
            pass
    return e


