"""The conversions of lossy transfer compression (whitepaper 5.5): float32 <-> the upper 16
bits of each value (bfloat16 by truncation), sent as ``uint16``. The pass that inserts them
on cross-device edges is ``passes/compression.py``; device plugins provide the kernels."""

from __future__ import annotations

COMPRESS = "_CompressF32ToBF16"
DECOMPRESS = "_DecompressBF16ToF32"


def _same_shape(op):
    return [op.inputs[0].shape]


def register_ops(reg) -> None:
    reg.op(COMPRESS, inputs=["input: float32"], outputs=["output: uint16"], shape_fn=_same_shape,
           doc="The upper 16 bits of each float32 (bfloat16 by truncation), as uint16; NaN stays NaN.")
    reg.op(DECOMPRESS, inputs=["input: uint16"], outputs=["output: float32"], shape_fn=_same_shape,
           doc="float32 from the truncated 16-bit form made by _CompressF32ToBF16 (lower bits zero).")
