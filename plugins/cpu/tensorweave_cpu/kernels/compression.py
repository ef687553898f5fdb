"""Kernels of the lossy transfer compression (whitepaper 5.5, core passes/compression.py):
float32 <-> the truncated 16-bit form (upper 16 bits of each float32, bfloat16 by
truncation), carried as uint16."""

from __future__ import annotations

import numpy as np

CPU = "CPU"
_QUIET_NAN = np.uint16(0x7FC0)


def compress_f32_to_bf16(x):
    x = np.asarray(x, dtype=np.float32)
    bits = np.ascontiguousarray(x).view(np.uint32).reshape(x.shape)
    out = np.asarray((bits >> 16).astype(np.uint16))  # 0-d arithmetic yields scalars
    # A NaN whose payload sits only in the low bits would truncate to infinity.
    nan = np.isnan(x)
    if nan.any():
        out[nan] = _QUIET_NAN
    return out


def decompress_bf16_to_f32(c):
    c = np.asarray(c, dtype=np.uint16)
    return np.asarray(c.astype(np.uint32) << 16).view(np.float32)


def register(registry):
    registry.register("_CompressF32ToBF16", CPU, compress_f32_to_bf16)
    registry.register("_DecompressBF16ToF32", CPU, decompress_bf16_to_f32)
