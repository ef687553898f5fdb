"""Session configuration and per-run options/metadata (TF1 ``ConfigProto``, ``RunOptions``,
``RunMetadata``), as plain Python objects; and the structure of a traced step (TF's
``StepStats``: per device, per node, when and on which thread it ran, what it produced and
what it moved), with its one dict form (``to_dict``/``from_dict``, checked: it also arrives
from other tasks and from files)."""

from __future__ import annotations

import dataclasses

from tensorweave.framework import errors


@dataclasses.dataclass
class GraphOptions:
    """Graph optimisation switches (passes look at these; see docs/optimizations.md).

    ``enable_cse``: merge identical stateless nodes (whitepaper 5.1). ``enable_constant_folding``:
    replace stateless subgraphs of constants by their value. ``enable_recv_scheduling``: make
    big cross-device Recvs wait until shortly before their consumers need them (5.2).
    ``enable_bfloat16_sendrecv`` (TF's name): send float32 tensors between devices as
    truncated 16-bit floats, the whitepaper's lossy compression (5.5); off by default.
    ``enable_elementwise_fusion``: compute each group of connected element-wise ops on a
    device as one compiled kernel, on devices whose plugin provides a fuser (the CPU's needs
    numba: ``pip install tensorweave-cpu[fusion]``); the environment variable
    ``TENSORWEAVE_ELEMENTWISE_FUSION=0``/``1`` overrides it. ``enable_loop_compilation``:
    run each while loop whose frame sits on one device as one node with a flat
    per-iteration schedule (runtime/loops.py) instead of routing every activation through
    frames; ``TENSORWEAVE_LOOP_COMPILATION=0``/``1`` overrides it. ``enable_update_grouping``:
    apply the gradient-descent updates of distinct variables on a device in one kernel
    (passes/update_grouping.py); ``TENSORWEAVE_UPDATE_GROUPING=0``/``1`` overrides it.
    """

    enable_cse: bool = True
    enable_constant_folding: bool = True
    enable_recv_scheduling: bool = True
    enable_bfloat16_sendrecv: bool = False
    enable_elementwise_fusion: bool = True
    enable_loop_compilation: bool = True
    enable_update_grouping: bool = True


@dataclasses.dataclass
class GPUOptions:
    """Accelerator memory options (TF1 names); device plugins read what applies to them."""

    per_process_gpu_memory_fraction: float = 0.0
    allow_growth: bool = False
    visible_device_list: str = ""


@dataclasses.dataclass
class ConfigProto:
    """Session configuration.

    ``inter_op_parallelism_threads``: 0 = choose automatically (a thread pool of one thread
    per core, used only for plans with independent expensive nodes); 1 = always run
    sequentially; N > 1 = a pool of N threads. ``device_count`` limits devices per type
    (``{"CPU": 1, "OPENCL": 0}``). ``allocator``: name of a registered allocator per device
    type (``{"CPU": "pool"}``). ``placer``: name of a registered placer.
    """

    inter_op_parallelism_threads: int = 0
    intra_op_parallelism_threads: int = 0
    device_count: dict = dataclasses.field(default_factory=dict)
    log_device_placement: bool = False
    allow_soft_placement: bool = False
    allocator: dict = dataclasses.field(default_factory=dict)
    placer: str = "default"
    graph_options: GraphOptions = dataclasses.field(default_factory=GraphOptions)
    gpu_options: GPUOptions = dataclasses.field(default_factory=GPUOptions)
    operation_timeout_in_ms: int = 0
    # Distributed sessions: run the master in a server's master service instead of in the
    # client (docs/distributed.md).
    use_remote_master: bool = False


@dataclasses.dataclass
class RunOptions:
    NO_TRACE = 0
    SOFTWARE_TRACE = 1
    HARDWARE_TRACE = 2
    FULL_TRACE = 3

    trace_level: int = 0
    timeout_in_ms: int = 0
    output_partition_graphs: bool = False  # fill RunMetadata.partition_graphs


# ----------------------------------------------------------------------------------------
# A traced step (RunOptions(trace_level=FULL_TRACE)): TF's step_stats.proto as dataclasses.
# Times are integer nanoseconds: ``all_start_nanos`` on the wall clock (since the epoch, of
# the process that asked for the step: other tasks' times are shifted by their estimated
# clock offsets), the others relative to it; the ``*_micros`` properties are TF's fields.


@dataclasses.dataclass
class NodeOutput:
    """One output of a node: its index, size, dtype and shape (TF's tensor_description)."""

    slot: int
    bytes: int
    dtype: str = ""
    shape: list | None = None


@dataclasses.dataclass
class AllocatorMemoryUsed:
    """The device allocator's bytes in use (and peak) just after the node ran."""

    allocator_name: str
    allocator_bytes_in_use: int
    peak_bytes: int = 0


@dataclasses.dataclass
class TransferStats:
    """What a ``_Send`` or ``_Recv`` node moved. ``key`` is the rendezvous key (source
    device; destination device; tensor; frame:iteration): the Send and the Recv of one value
    carry the same key. ``transport``: ``"local"`` when both ends are in one process; on the
    Recv of a value pulled from another task, the transport that carried the RecvTensor
    (``"grpc"``, ``"ucx"``, ``"inproc"``); on a Send whose consumer is on another task,
    ``"remote"`` (that task's Recv names the transport)."""

    key: str
    tensor: str
    bytes: int
    src_device: str
    dst_device: str
    transport: str = "local"


def _micros(ns: int) -> int:
    return ns // 1000


@dataclasses.dataclass
class NodeExecStats:
    """One execution of one node (TF's NodeExecStats).

    ``all_start``: the executor began the node (its variable reads included); ``op_start`` /
    ``op_end``: the kernel call (for an async kernel such as a Recv: from the request to the
    value's arrival); ``all_end``: its outputs stored. ``thread_id`` is the native id of the
    executor thread that ran it (``threading.get_native_id()``; for an async node the thread
    that completed it). Also readable by the keys earlier versions returned (``s["node"]``,
    ``"op"``, ``"device"``, ``"start"``/``"end"`` in seconds, ``"output_bytes"``).
    """

    node_name: str
    op: str
    device: str
    all_start_nanos: int
    op_start_rel_nanos: int = 0
    op_end_rel_nanos: int = 0
    all_end_rel_nanos: int = 0
    thread_id: int = 0
    output: list = dataclasses.field(default_factory=list)       # [NodeOutput]
    memory: list = dataclasses.field(default_factory=list)       # [AllocatorMemoryUsed]
    transfer: TransferStats | None = None
    frame: str = ""       # the while-loop frame ("" outside loops) ...
    iteration: int = 0    # ... and its iteration

    all_start_micros = property(lambda self: _micros(self.all_start_nanos))
    op_start_rel_micros = property(lambda self: _micros(self.op_start_rel_nanos))
    op_end_rel_micros = property(lambda self: _micros(self.op_end_rel_nanos))
    all_end_rel_micros = property(lambda self: _micros(self.all_end_rel_nanos))

    @property
    def all_end_nanos(self) -> int:
        return self.all_start_nanos + self.all_end_rel_nanos

    @property
    def output_bytes(self) -> int:
        return sum(o.bytes for o in self.output)

    @property
    def timeline_label(self) -> str:
        return f"{self.node_name} = {self.op}()"

    # The mapping earlier versions put in step_stats (the cost model still reads it).
    def __getitem__(self, key):
        if key == "start":
            return self.all_start_nanos / 1e9
        if key == "end":
            return self.all_end_nanos / 1e9
        attr = _LEGACY_KEYS.get(key)
        if attr is None:
            raise KeyError(key)
        return getattr(self, attr)

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def to_dict(self) -> dict:
        d = {"node_name": self.node_name, "op": self.op, "all_start_nanos": self.all_start_nanos,
             "op_start_rel_nanos": self.op_start_rel_nanos, "op_end_rel_nanos": self.op_end_rel_nanos,
             "all_end_rel_nanos": self.all_end_rel_nanos, "thread_id": self.thread_id,
             "output": [{"slot": int(o.slot), "bytes": int(o.bytes), "dtype": o.dtype,
                         "shape": None if o.shape is None else [int(d) for d in o.shape]} for o in self.output],
             "memory": [dataclasses.asdict(m) for m in self.memory]}
        if self.transfer is not None:
            d["transfer"] = dataclasses.asdict(self.transfer)
        if self.frame:
            d["frame"], d["iteration"] = self.frame, self.iteration
        return d


_LEGACY_KEYS = {"node": "node_name", "op": "op", "device": "device", "output_bytes": "output_bytes",
                "frame": "frame", "iter": "iteration"}


@dataclasses.dataclass
class DeviceStepStats:
    """The nodes one device ran in the step, in the order they finished, and the names of
    the threads that ran them (native id -> name)."""

    device: str
    node_stats: list = dataclasses.field(default_factory=list)   # [NodeExecStats]
    thread_names: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StepStats:
    """A traced step: ``dev_stats``, one ``DeviceStepStats`` per device that ran something,
    named in full (``/job:worker/replica:0/task:1/device:CPU:0``). ``clock_offsets``: for each
    other task whose times were merged in, how its clock was taken to differ from this
    process's (``{"offset_nanos", "error_nanos", "source"}``; see docs/tools.md): the times
    here are already shifted onto this process's clock, each within ``error_nanos``.

    Iterating yields every ``NodeExecStats`` of every device (as a flat list did before)."""

    dev_stats: list = dataclasses.field(default_factory=list)     # [DeviceStepStats]
    clock_offsets: dict = dataclasses.field(default_factory=dict)

    def __iter__(self):
        for ds in self.dev_stats:
            yield from ds.node_stats

    def __len__(self) -> int:
        return sum(len(ds.node_stats) for ds in self.dev_stats)

    def device(self, name: str) -> DeviceStepStats:
        """The stats of device ``name``, added (empty) if it has none yet."""
        for ds in self.dev_stats:
            if ds.device == name:
                return ds
        ds = DeviceStepStats(name)
        self.dev_stats.append(ds)
        return ds

    def merge(self, other: StepStats, offset_nanos: int = 0) -> None:
        """Add ``other``'s devices, their times moved by ``-offset_nanos`` (the other clock
        runs ``offset_nanos`` ahead of this one); ``other`` is left as it was."""
        for ods in other.dev_stats:
            ds = self.device(ods.device)
            for ns in ods.node_stats:
                ds.node_stats.append(dataclasses.replace(ns, all_start_nanos=ns.all_start_nanos - offset_nanos)
                                     if offset_nanos else ns)
            ds.thread_names.update(ods.thread_names)
        self.clock_offsets.update(other.clock_offsets)

    def to_dict(self) -> dict:
        """A JSON-safe dict (``from_dict`` reads it back)."""
        return {"dev_stats": [{"device": ds.device, "node_stats": [n.to_dict() for n in ds.node_stats],
                               "thread_names": {str(k): v for k, v in ds.thread_names.items()}}
                              for ds in self.dev_stats],
                "clock_offsets": {k: dict(v) for k, v in self.clock_offsets.items()}}

    @classmethod
    def from_dict(cls, d, where: str = "step_stats") -> StepStats:
        """The inverse of ``to_dict``; anything malformed is an InvalidArgumentError naming
        ``where`` and the field (it may come from another process or a file)."""
        r = _Checker(where)
        dev_stats = []
        for i, ds in enumerate(r.list(r.dict(d, "").get("dev_stats", []), "dev_stats")):
            at = f"dev_stats[{i}]"
            ds = r.dict(ds, at)
            names = r.dict(ds.get("thread_names", {}), f"{at}.thread_names")
            out = DeviceStepStats(r.str(ds.get("device"), f"{at}.device"),
                                  thread_names={r.int(k, f"{at}.thread_names", parse=True): r.str(v, f"{at}.thread_names")
                                                for k, v in names.items()})
            for j, n in enumerate(r.list(ds.get("node_stats", []), f"{at}.node_stats")):
                out.node_stats.append(r.node(n, out.device, f"{at}.node_stats[{j}]"))
            dev_stats.append(out)
        offsets = {}
        for task, v in r.dict(d.get("clock_offsets", {}), "clock_offsets").items():
            v = r.dict(v, f"clock_offsets[{task!r}]")
            offsets[task] = {"offset_nanos": r.int(v.get("offset_nanos"), f"clock_offsets[{task!r}].offset_nanos"),
                             "error_nanos": r.int(v.get("error_nanos"), f"clock_offsets[{task!r}].error_nanos"),
                             "source": r.str(v.get("source", ""), f"clock_offsets[{task!r}].source")}
        return cls(dev_stats, offsets)


class _Checker:
    """Type checks for ``StepStats.from_dict``, each error naming where it was."""

    def __init__(self, where):
        self.where = where

    def fail(self, at, what):
        raise errors.InvalidArgumentError(f"{self.where}: {at or 'the value'} must be {what}")

    def dict(self, v, at):
        return v if isinstance(v, dict) else self.fail(at, "a dict")

    def list(self, v, at):
        return v if isinstance(v, list) else self.fail(at, "a list")

    def str(self, v, at):
        return v if isinstance(v, str) else self.fail(at, "a string")

    def int(self, v, at, parse=False):
        if parse and isinstance(v, str):
            try:
                return int(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(at, "an integer")
        return v

    def node(self, n, device, at) -> NodeExecStats:
        n = self.dict(n, at)
        i = self.int
        outs = []
        for k, o in enumerate(self.list(n.get("output", []), f"{at}.output")):
            o = self.dict(o, f"{at}.output[{k}]")
            shape = o.get("shape")
            if shape is not None and not (isinstance(shape, list) and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in shape)):
                self.fail(f"{at}.output[{k}].shape", "a list of integers or null")
            outs.append(NodeOutput(i(o.get("slot"), f"{at}.output[{k}].slot"), i(o.get("bytes"), f"{at}.output[{k}].bytes"),
                                   self.str(o.get("dtype", ""), f"{at}.output[{k}].dtype"), shape))
        mem = []
        for k, m in enumerate(self.list(n.get("memory", []), f"{at}.memory")):
            m = self.dict(m, f"{at}.memory[{k}]")
            mem.append(AllocatorMemoryUsed(self.str(m.get("allocator_name"), f"{at}.memory[{k}].allocator_name"),
                                           i(m.get("allocator_bytes_in_use"), f"{at}.memory[{k}].allocator_bytes_in_use"),
                                           i(m.get("peak_bytes", 0), f"{at}.memory[{k}].peak_bytes")))
        tr = n.get("transfer")
        if tr is not None:
            t = self.dict(tr, f"{at}.transfer")
            s = self.str
            tr = TransferStats(s(t.get("key"), f"{at}.transfer.key"), s(t.get("tensor"), f"{at}.transfer.tensor"),
                               i(t.get("bytes"), f"{at}.transfer.bytes"), s(t.get("src_device"), f"{at}.transfer.src_device"),
                               s(t.get("dst_device"), f"{at}.transfer.dst_device"),
                               s(t.get("transport", "local"), f"{at}.transfer.transport"))
        return NodeExecStats(
            self.str(n.get("node_name"), f"{at}.node_name"), self.str(n.get("op"), f"{at}.op"), device,
            i(n.get("all_start_nanos"), f"{at}.all_start_nanos"), i(n.get("op_start_rel_nanos", 0), f"{at}.op_start_rel_nanos"),
            i(n.get("op_end_rel_nanos", 0), f"{at}.op_end_rel_nanos"), i(n.get("all_end_rel_nanos", 0), f"{at}.all_end_rel_nanos"),
            i(n.get("thread_id", 0), f"{at}.thread_id"), outs, mem, tr,
            self.str(n.get("frame", ""), f"{at}.frame"), i(n.get("iteration", 0), f"{at}.iteration"))


class RunMetadata:
    """Filled by ``Session.run(..., run_metadata=md)``: with ``RunOptions(trace_level=
    FULL_TRACE)`` the step's ``StepStats`` (every device of every task; replaced by each
    traced run), the placement of the plan that ran, allocator statistics per device, and
    with ``RunOptions(output_partition_graphs=True)`` each device's part of the optimised
    plan as a GraphDef (with its ``_Send``/``_Recv`` nodes).

    A traced run hands over its raw readings (``set_step_stats_builder``); ``step_stats`` is
    built from them when first read, so a step whose stats nobody reads does not pay for
    building them."""

    def __init__(self, step_stats: StepStats | None = None, placement: dict | None = None,
                 allocator_stats: dict | None = None, partition_graphs: list | None = None):
        self._step_stats = step_stats if step_stats is not None else StepStats()
        self._build = None
        self.placement = placement if placement is not None else {}
        self.allocator_stats = allocator_stats if allocator_stats is not None else {}
        self.partition_graphs = partition_graphs if partition_graphs is not None else []

    @property
    def step_stats(self) -> StepStats:
        build = self._build
        if build is not None:
            # Two first readers at once may both build: the same result, from the same readings.
            self._step_stats = build()
            self._build = None
        return self._step_stats

    @step_stats.setter
    def step_stats(self, value: StepStats) -> None:
        self._build = None
        self._step_stats = value

    def set_step_stats_builder(self, build) -> None:
        """``step_stats`` becomes ``build()`` (a ``StepStats``), called when first read."""
        self._build = build

    def __repr__(self) -> str:
        return (f"RunMetadata(step_stats=<{len(self.step_stats)} node stats>, placement=<{len(self.placement)} "
                f"nodes>, allocator_stats={self.allocator_stats!r}, partition_graphs=<{len(self.partition_graphs)}>)")

    def __eq__(self, other) -> bool:
        if not isinstance(other, RunMetadata):
            return NotImplemented
        return (self.step_stats, self.placement, self.allocator_stats, self.partition_graphs) == (
            other.step_stats, other.placement, other.allocator_stats, other.partition_graphs)

    __hash__ = None
