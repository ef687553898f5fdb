"""Session configuration and per-run options/metadata (TF1 ``ConfigProto``, ``RunOptions``,
``RunMetadata``), as plain Python objects."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class GraphOptions:
    """Graph optimisation switches (passes look at these; see docs/optimizations.md).

    ``enable_cse``: merge identical stateless nodes (whitepaper 5.1). ``enable_constant_folding``:
    replace stateless subgraphs of constants by their value. ``enable_recv_scheduling``: make
    big cross-device Recvs wait until shortly before their consumers need them (5.2).
    ``enable_bfloat16_sendrecv`` (TF's name): send float32 tensors between devices as
    truncated 16-bit floats, the whitepaper's lossy compression (5.5); off by default.
    """

    enable_cse: bool = True
    enable_constant_folding: bool = True
    enable_recv_scheduling: bool = True
    enable_bfloat16_sendrecv: bool = False


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


@dataclasses.dataclass
class RunMetadata:
    """Filled by ``Session.run(..., run_metadata=md)``: per-node timings when tracing, the
    placement of the plan that ran, allocator statistics per device, and with
    ``RunOptions(output_partition_graphs=True)`` each device's part of the optimised plan as
    a GraphDef (with its ``_Send``/``_Recv`` nodes)."""

    step_stats: list = dataclasses.field(default_factory=list)
    placement: dict = dataclasses.field(default_factory=dict)
    allocator_stats: dict = dataclasses.field(default_factory=dict)
    partition_graphs: list = dataclasses.field(default_factory=list)
