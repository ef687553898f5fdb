"""The kernels of lossy transfer compression (whitepaper 5.5; the pass is the core's
``passes/compression.py``): ``_CompressF32ToBF16`` (float32 -> the upper 16 bits of each
value, as uint16) and ``_DecompressBF16ToF32`` (back, low 16 bits zero), from
``compression.cu``. With them an edge into or out of a GPU carries half the bytes when
``GraphOptions(enable_bfloat16_sendrecv=True)``; results equal the CPU kernels' bit for bit
(NaN -> 0x7FC0, infinities, signed zeros and subnormals by truncation)."""

from __future__ import annotations

import numpy as np

from tensorweave.ops.compression_ops import COMPRESS, DECOMPRESS
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import launch
from tensorweave_cuda.kernels.util import register as reg_kernel


def _convert(op, out_dtype):
    out_dtype = np.dtype(out_dtype)

    def factory(ctx):
        dev = ctx.device
        ref = catalog.compression_kernel(op)

        def convert(x):
            y = dev.empty(x.shape, out_dtype)
            n = x.size
            launch(dev, ref, n, x.ptr, y.ptr, n)
            return y
        return convert
    return factory


def register(reg, device_type):
    reg_kernel(reg, COMPRESS, device_type, _convert(COMPRESS, np.uint16))
    reg_kernel(reg, DECOMPRESS, device_type, _convert(DECOMPRESS, np.float32))
