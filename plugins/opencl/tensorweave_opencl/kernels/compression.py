"""The kernels of lossy transfer compression (whitepaper 5.5; the pass is the core's
``passes/compression.py``): ``_CompressF32ToBF16`` (float32 -> the upper 16 bits of each
value, as uint16) and ``_DecompressBF16ToF32`` (back, low 16 bits zero), from
kernels/compression.cl. With them an edge into or out of an OPENCL device carries half the
bytes when ``GraphOptions(enable_bfloat16_sendrecv=True)``; results equal the CPU kernels'
bit for bit (NaN -> 0x7FC0, infinities, signed zeros and subnormals by truncation)."""

from __future__ import annotations

import numpy as np

from tensorweave.ops.compression_ops import COMPRESS, DECOMPRESS
from tensorweave_opencl.kernels.common import BUF, I32, OPENCL, launcher, num_elements


class Convert:
    """out[i] = KERNEL(x[i]) with a result of ``out_dtype`` and x's shape."""

    def __init__(self, ctx, kernel: str, out_dtype):
        self.device = ctx.device
        self.out_dtype = np.dtype(out_dtype)
        self.launch = launcher(ctx, "compression.cl", kernel, [BUF, BUF, I32])

    def __call__(self, x):
        out = self.device.empty(x.shape, self.out_dtype)
        n = num_elements(x.shape)
        if n:
            self.launch.run(n, out.block.buf, x.block.buf, n)
        return out


def register(reg):
    reg.register(COMPRESS, OPENCL, factory=lambda ctx: Convert(ctx, "compress_f32_bf16", np.uint16))
    reg.register(DECOMPRESS, OPENCL, factory=lambda ctx: Convert(ctx, "decompress_bf16_f32", np.float32))
