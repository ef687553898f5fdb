"""MatMul and BatchMatMul (kernels/matmul.cl), built per (element type, transpose_a,
transpose_b): on GPUs and other accelerators the tiled kernel through local memory, on CPU
devices (PoCL) the register-blocked vector kernel, which is several times faster there
(``MatMul.variant`` overrides the choice). BatchMatMul runs the batch as the third
dimension of the launch; adj_x/adj_y transpose (the element types here are real)."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.ops.fusion_ops import FUSED_MATMUL
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, NUMERIC, OPENCL, launcher, num_elements

TS = 16     # tile size of matmul_tiled
RB = 4      # rows per work item of matmul_blocked (times 8 columns)
BLOCKED_LOCAL = (4, 4, 1)


def _round(n: int, m: int) -> int:
    return max(m, (n + m - 1) // m * m)


class MatMul:
    variant = None  # "tiled" or "blocked" to force a kernel (tests); None: by device kind

    def __init__(self, ctx, ta: bool, tb: bool, epilogue: tuple = ()):
        self.ctx = ctx
        self.device = ctx.device
        self.ta, self.tb = ta, tb
        dt = ctx.input_dtypes[0].np_dtype
        self.dtype = dt
        ct = program.ctype(dt)
        variant = self.variant or ("blocked" if ctx.device.runtime.is_cpu else "tiled")
        self.blocked = variant == "blocked"
        defines = {"T": ct, "V": f"{ct}8", "TS": TS, "RB": RB, "TA": int(ta), "TB": int(tb)}
        # epilogue: () or ("BiasAdd", [activation]) of a _FusedMatMul
        scalars = [BUF, BUF, BUF, I32, I32, I32, I32, I32]
        if epilogue:
            defines["BIAS"] = True
            defines.update({a.upper(): 1 for a in epilogue[1:]})
            scalars.append(BUF)
        self.launch = launcher(ctx, "matmul.cl", f"matmul_{variant}", scalars, defines)

    def dims(self, sa, sb):
        m, ka = (sa[-1], sa[-2]) if self.ta else (sa[-2], sa[-1])
        kb, n = (sb[-1], sb[-2]) if self.tb else (sb[-2], sb[-1])
        if ka != kb:
            raise self.ctx.error(errors.InvalidArgumentError,
                                 f"matrix dimensions are incompatible: shapes {sa} and {sb} "
                                 f"(transpose_a={self.ta}, transpose_b={self.tb})")
        return m, n, ka

    def run(self, a, b, batch_shape, stride_a, stride_b, *bias):
        m, n, k = self.dims(a.shape, b.shape)
        out = self.device.empty(tuple(batch_shape) + (m, n), self.dtype)
        batches = num_elements(batch_shape)
        if m * n * batches == 0:
            return out
        if k == 0 and not bias:
            return _zeros(self.ctx, out)
        if self.blocked:
            ls = BLOCKED_LOCAL
            size = (_round((n + 7) // 8, ls[0]), _round((m + RB - 1) // RB, ls[1]), batches)
        else:
            ls = (TS, TS, 1)
            size = (_round(n, TS), _round(m, TS), batches)
        self.launch(size, ls, out.block.buf, a.block.buf, b.block.buf, m, n, k, stride_a, stride_b,
                    *[x.block.buf for x in bias])
        return out



def _zeros(ctx, out):
    from tensorweave_opencl.kernels.array import fill_value

    return fill_value(ctx, out, 0)


def _matmul(ctx):
    mm = MatMul(ctx, ctx.attrs["transpose_a"], ctx.attrs["transpose_b"])

    def matmul(a, b):
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise ctx.error(errors.InvalidArgumentError, f"MatMul takes matrices, got shapes {a.shape} and {b.shape}")
        return mm.run(a, b, (), 0, 0)
    return matmul


def _fused_matmul(ctx):
    """_FusedMatMul (passes/matmul_fusion.py): the product's bias add and activation in the
    kernel's epilogue, one launch."""
    fused = tuple(ctx.attrs["fused_ops"])
    mm = MatMul(ctx, ctx.attrs["transpose_a"], ctx.attrs["transpose_b"], fused)

    def fused_matmul(a, b, bias):
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise ctx.error(errors.InvalidArgumentError, f"MatMul takes matrices, got shapes {a.shape} and {b.shape}")
        n = mm.dims(a.shape, b.shape)[1]
        if tuple(bias.shape) != (n,):
            raise ctx.error(errors.InvalidArgumentError,
                            f"bias of shape {tuple(bias.shape)} for a product with {n} columns")
        return mm.run(a, b, (), 0, 0, bias)
    return fused_matmul


def _batch_matmul(ctx):
    mm = MatMul(ctx, ctx.attrs["adj_x"], ctx.attrs["adj_y"])

    def bmm(x, y):
        if len(x.shape) < 2 or len(y.shape) < 2:
            raise ctx.error(errors.InvalidArgumentError,
                            f"inputs must have rank >= 2, got shapes {x.shape} and {y.shape}")
        bx, by = x.shape[:-2], y.shape[:-2]
        if bx != by and num_elements(bx) != 1 and num_elements(by) != 1:
            raise ctx.error(errors.InvalidArgumentError,
                            f"batch dimensions must match (or one side be a single matrix): {x.shape} and {y.shape}")
        batch = bx if num_elements(bx) >= num_elements(by) and len(bx) >= len(by) else by
        sa = 0 if num_elements(bx) == 1 else num_elements(x.shape[-2:])
        sb = 0 if num_elements(by) == 1 else num_elements(y.shape[-2:])
        return mm.run(x, y, batch, sa, sb)
    return bmm


def register(reg):
    reg.register("MatMul", OPENCL, factory=_matmul, constraints={"T": NUMERIC})
    reg.register("BatchMatMul", OPENCL, factory=_batch_matmul, constraints={"T": NUMERIC})
    reg.register(FUSED_MATMUL, OPENCL, factory=_fused_matmul, constraints={"T": FLOAT})
