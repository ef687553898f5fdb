"""Built-in plugin: the core's graph passes (``tensorweave.passes``), by stage; and the kernel
of the nodes the element-wise fusion pass makes (``_FusedElementwise``, every device type: it
asks the device's fuser to compile them, ``passes/fusion.py``)."""

from __future__ import annotations

from tensorweave.passes.compression import compression_pass
from tensorweave.passes.constant_folding import constant_folding_pass
from tensorweave.passes.cse import cse_pass
from tensorweave.passes.fusion import FUSED, fused_kernel, fusion_pass
from tensorweave.passes.matmul_fusion import matmul_fusion_pass
from tensorweave.passes.pool_grad_fusion import pool_grad_fusion_pass
from tensorweave.passes.prune import prune_pass
from tensorweave.passes.recv_scheduling import recv_scheduling_pass
from tensorweave.passes.update_grouping import update_grouping_pass
from tensorweave.plugins import hookimpl


@hookimpl
def tensorweave_register_passes(registry):
    registry.register("prune", prune_pass, order=0, stage="prune")
    # CSE first, so constants merged by it fold once; folding may expose more duplicates,
    # but one round catches the common cases (gradient graphs repeat shapes and constants).
    registry.register("cse", cse_pass, order=10, stage="pre_placement")
    registry.register("constant_folding", constant_folding_pass, order=20, stage="pre_placement")
    registry.register("bfloat16_sendrecv", compression_pass, order=10, stage="post_placement")
    # Fusion last before partitioning: it sees each device's final nodes (the compression
    # pass's conversions included), and what it makes is never taken apart again.
    # MatMul + bias add (+ Relu) first: element-wise fusion would take the add and the Relu.
    registry.register("matmul_fusion", matmul_fusion_pass, order=45, stage="post_placement")
    # MaxPoolGrad -> ReluGrad before element-wise fusion too (it would take the ReluGrad).
    registry.register("pool_grad_fusion", pool_grad_fusion_pass, order=46, stage="post_placement")
    registry.register("elementwise_fusion", fusion_pass, order=50, stage="post_placement")
    registry.register("update_grouping", update_grouping_pass, order=60, stage="post_placement")
    registry.register("recv_scheduling", recv_scheduling_pass, order=10, stage="post_partition")


@hookimpl
def tensorweave_register_kernels(registry):
    registry.register(FUSED, "*", factory=fused_kernel)
