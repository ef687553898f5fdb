"""Lossy compression of cross-device float32 edges (whitepaper 5.5).

With ``GraphOptions(enable_bfloat16_sendrecv=True)`` (TensorFlow's name; off by default),
each float32 tensor that a node on another device consumes is converted, on its producer's
device, to a truncated 16-bit form — the upper 16 bits of each float32 (sign, the 8-bit
exponent and 7 mantissa bits: bfloat16 by truncation, as the whitepaper describes) — sent
as ``uint16``, and expanded back on the destination device by filling the lower 16 bits
with zeros. Half the bytes cross the link; the relative error of each value is below
2**-7. NaN stays NaN and infinities stay infinite.

The conversions are ordinary nodes, ``_CompressF32ToBF16`` on the source device and
``_DecompressBF16ToF32`` on each destination device (one per tensor and destination, so a
tensor with several consumers on a device is expanded once), placed directly: the pass
runs after placement (stage ``post_placement``), since it needs to know which edges cross
devices, and before partitioning, which then sends the ``uint16`` tensor. An edge whose
source or destination device type has no kernel for the conversion stays uncompressed, as
do fed tensors, non-float32 tensors, reference edges, and plans with control-flow frames.
Fetched values are never compressed (fetches leave from the producer's device).
"""

from __future__ import annotations

from tensorweave.framework import dtypes
from tensorweave.framework.op_def import flat_input_is_ref
from tensorweave.ops.compression_ops import COMPRESS, DECOMPRESS
from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS
from tensorweave.passes import plan_graph


def compress_edges(plan, kernels) -> int:
    """Insert conversion pairs on the plan's cross-device float32 edges; returns how many
    tensors are now sent compressed."""
    device_of = plan.device_of
    fed = set(plan.feeds)
    # (tensor, destination device) -> [(consumer, input index)]
    edges: dict = {}
    for op in plan.nodes:
        dst = device_of[op]
        for i, (t, ref) in enumerate(zip(op._inputs, flat_input_is_ref(op))):
            if ref or t in fed or t.dtype is not dtypes.float32:
                continue
            src = device_of.get(t.op)
            if src is None or src is dst:
                continue
            edges.setdefault((t, dst), []).append((op, i))
    if not edges:
        return 0
    ok: dict = {}

    def has(op_type, device):
        key = (op_type, device.device_type)
        if key not in ok:
            ok[key] = kernels.lookup(op_type, device.device_type, {}) is not None
        return ok[key]

    compressed: dict = {}  # tensor -> its _CompressF32ToBF16 output
    for (t, dst), uses in edges.items():
        src = device_of[t.op]
        if not (has(COMPRESS, src) and has(DECOMPRESS, dst)):
            continue
        suffix = f"_{t.value_index}" if t.value_index else ""
        c = compressed.get(t)
        if c is None:
            cop = plan_graph.add_node(plan, COMPRESS, [t], name=f"{t.op.name}/compress{suffix}",
                                      device=src.name, order=t.op._id + 0.25)
            device_of[cop] = src
            c = compressed[t] = cop._outputs[0]
        dop = plan_graph.add_node(plan, DECOMPRESS, [c], name=f"{t.op.name}/decompress{suffix}",
                                  device=dst.name, order=min(op._id for op, _i in uses) - 0.25)
        device_of[dop] = dst
        for op, i in uses:
            plan_graph.set_input(op, i, dop._outputs[0])
    return len(compressed)


def compression_pass(plan) -> None:
    """Registered as ``bfloat16_sendrecv`` (stage ``post_placement``)."""
    opts = getattr(plan.config, "graph_options", None)
    if opts is None or not getattr(opts, "enable_bfloat16_sendrecv", False):
        return
    if any(op.type in CONTROL_FLOW_OPS for op in plan.nodes):
        return  # conversion nodes would need their frame's Enter/Exit plumbing
    compress_edges(plan, plan.kernels)
