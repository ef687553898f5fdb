"""Which CUDA function serves which op and dtype, and how it is called (no driver needed).

Every kernel the plugin launches is named here as a ``KernelRef``: the ``.cu`` file, the
preprocessor defines it is compiled with (one module per file and defines), the function name
and its *signature*, the launch contract between Python and CUDA C. Signature codes::

    P  a device pointer          q  int64 (long long)   i  int32    d  double
    f  float                     B  uint8 (bool)         v  one value of the kernel's dtype
    X  struct TwStrided (ndim, shape[MAX_DIMS], xs[MAX_DIMS]), by value
    Y  struct TwBcast   (ndim, shape[MAX_DIMS], xs[MAX_DIMS], ys[MAX_DIMS]), by value

Structs are all int64 fields, so they are passed flattened as int64 values: PyCUDA packs the
argument buffer with native alignment, which lays them out exactly as the C struct. The tests
compile every variant to PTX and check each signature against the PTX parameter list.
"""

from __future__ import annotations

import dataclasses

import numpy as np

# Dimensions a broadcast/strided kernel handles after adjacent dimensions are merged.
MAX_DIMS = 6
STRUCT_FIELDS = {"X": 1 + 2 * MAX_DIMS, "Y": 1 + 3 * MAX_DIMS}


@dataclasses.dataclass(frozen=True)
class DType:
    name: str       # tensorweave / NumPy name
    suffix: str     # in kernel names: tw_add_flat_f32
    ctype: str      # the C type (one token: common.cuh typedefs the multi-word ones)
    code: str       # signature/struct code of one value
    kind: str       # "float" | "int" | "bool"

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.name)


DTYPES = {d.name: d for d in (
    DType("float32", "f32", "float", "f", "float"),
    DType("float64", "f64", "double", "d", "float"),
    DType("int32", "i32", "int", "i", "int"),
    DType("int64", "i64", "tw_i64", "q", "int"),
    DType("bool", "b8", "tw_b8", "B", "bool"),
    # Held, but computed on only by the compression kernels: the bfloat16 form of float32
    # transfers (whitepaper 5.5) arrives and leaves as uint16. Not in ALL: no other op has a
    # uint16 kernel here, and no signature takes a uint16 value (its code "H" is the struct
    # module's, unused).
    DType("uint16", "u16", "tw_u16", "H", "int"),
)}
FLOAT = ("float32", "float64")
INT = ("int32", "int64")
NUMERIC = FLOAT + INT
ALL = NUMERIC + ("bool",)


@dataclasses.dataclass(frozen=True)
class KernelRef:
    file: str                               # e.g. "elementwise.cu"
    defines: tuple[tuple[str, str], ...]    # compile-time -D flags, sorted
    name: str                               # the extern "C" function
    sig: str                                # the launch contract (codes above)

    @property
    def module_key(self) -> tuple:
        return (self.file, self.defines)

    def options(self) -> list[str]:
        return [f"-D{k}={v}" for k, v in self.defines]


def dtype(name) -> DType:
    """The kernel dtype for a tensorweave/NumPy dtype (or its name); KeyError if unsupported."""
    key = getattr(name, "name", None) or np.dtype(name).name
    return DTYPES[key]


def supported(name) -> bool:
    try:
        dtype(name)
    except (KeyError, TypeError):
        return False
    return True


def expand_sig(sig: str, dt: DType | None = None) -> str:
    """The PyCUDA argument format of a signature (structs flattened, ``v`` resolved)."""
    out = []
    for c in sig:
        if c in STRUCT_FIELDS:
            out.append("q" * STRUCT_FIELDS[c])
        elif c == "v":
            if dt is None:
                raise ValueError(f"signature {sig!r} has a value argument but no dtype")
            out.append(dt.code)
        else:
            out.append(c)
    return "".join(out)


# ---------------------------------------------------------------------------------------
# elementwise.cu: one module per dtype
UNARY = {  # op -> (kernel, dtypes)
    "Neg": ("neg", NUMERIC), "Abs": ("abs", NUMERIC), "Square": ("square", NUMERIC),
    "Sign": ("sign", NUMERIC), "Relu": ("relu", NUMERIC), "Relu6": ("relu6", NUMERIC),
    "Sqrt": ("sqrt", FLOAT), "Rsqrt": ("rsqrt", FLOAT), "Exp": ("exp", FLOAT), "Log": ("log", FLOAT),
    "Log1p": ("log1p", FLOAT), "Expm1": ("expm1", FLOAT), "Tanh": ("tanh", FLOAT),
    "Sigmoid": ("sigmoid", FLOAT), "Elu": ("elu", FLOAT), "Softplus": ("softplus", FLOAT),
    "Reciprocal": ("reciprocal", FLOAT), "Floor": ("floor", FLOAT), "Ceil": ("ceil", FLOAT),
    "Round": ("round", FLOAT), "Sin": ("sin", FLOAT), "Cos": ("cos", FLOAT),
    "LogicalNot": ("logical_not", ("bool",)),
}
BINARY = {  # op -> (kernel, dtypes); the output has the input dtype
    "Add": ("add", NUMERIC), "Sub": ("sub", NUMERIC), "Mul": ("mul", NUMERIC),
    "Maximum": ("maximum", NUMERIC), "Minimum": ("minimum", NUMERIC),
    "SquaredDifference": ("squared_difference", NUMERIC),
    "Div": ("div", NUMERIC), "RealDiv": ("div", NUMERIC),
    "FloorDiv": ("floordiv", NUMERIC), "FloorMod": ("floormod", NUMERIC),
    "ReluGrad": ("relu_grad", NUMERIC), "Relu6Grad": ("relu6_grad", NUMERIC),
    "Pow": ("pow", FLOAT), "EluGrad": ("elu_grad", FLOAT), "SoftplusGrad": ("softplus_grad", FLOAT),
    "LogicalAnd": ("logical_and", ("bool",)), "LogicalOr": ("logical_or", ("bool",)),
}
COMPARE = {  # op -> kernel; the output is bool
    "Equal": "equal", "NotEqual": "not_equal", "Less": "less", "LessEqual": "less_equal",
    "Greater": "greater", "GreaterEqual": "greater_equal",
}
COMPARE_DTYPES = ALL

SIG_UNARY = "PPq"          # x, y, n
SIG_BINARY = "PPPq"        # x, y, z, n (same shapes)
SIG_BINARY_BCAST = "PPPqY"  # x, y, z, n, broadcast strides
SIG_COPY_STRIDED = "PPqX"  # x, y, n, strides of x per output dimension
SIG_FILL = "Pqv"           # y, n, value
SIG_FILL_FROM = "PPq"      # y, device scalar, n
SIG_BIAS_ADD = "PPPqqq"    # x, bias, y, n, channels, inner


def elementwise_defines(dt: DType) -> tuple:
    return tuple(sorted({"TW_T": dt.ctype, "TW_SUFFIX": dt.suffix,
                         "TW_KIND": {"float": "1", "int": "2", "bool": "3"}[dt.kind]}.items()))


def _ew(dt: DType, base: str, sig: str) -> KernelRef:
    return KernelRef("elementwise.cu", elementwise_defines(dt), f"tw_{base}_{dt.suffix}", sig)


def unary_kernel(op: str, dt: DType) -> KernelRef:
    base, allowed = UNARY[op]
    if dt.name not in allowed:
        raise KeyError(f"{op} has no CUDA kernel for {dt.name}")
    return _ew(dt, base + "_flat", SIG_UNARY)


def binary_kernel(op: str, dt: DType, broadcast: bool) -> KernelRef:
    if op in COMPARE:
        base, allowed = COMPARE[op], COMPARE_DTYPES
    else:
        base, allowed = BINARY[op]
    if dt.name not in allowed:
        raise KeyError(f"{op} has no CUDA kernel for {dt.name}")
    return _ew(dt, base + ("_bcast" if broadcast else "_flat"), SIG_BINARY_BCAST if broadcast else SIG_BINARY)


def copy_strided_kernel(dt: DType) -> KernelRef:
    return _ew(dt, "copy_strided", SIG_COPY_STRIDED)


def fill_kernel(dt: DType) -> KernelRef:
    return _ew(dt, "fill", SIG_FILL)


def fill_from_kernel(dt: DType) -> KernelRef:
    return _ew(dt, "fill_from", SIG_FILL_FROM)


def bias_add_kernel(dt: DType) -> KernelRef:
    if dt.name not in NUMERIC:
        raise KeyError(f"BiasAdd has no CUDA kernel for {dt.name}")
    return _ew(dt, "bias_add", SIG_BIAS_ADD)


def elementwise_kernels(dt: DType) -> list[KernelRef]:
    """Every function elementwise.cu defines for ``dt`` (what the PTX test expects)."""
    out = [unary_kernel(op, dt) for op, (_, allowed) in UNARY.items() if dt.name in allowed]
    seen = set()
    for op, (base, allowed) in list(BINARY.items()) + [(op, (k, COMPARE_DTYPES)) for op, k in COMPARE.items()]:
        if dt.name in allowed and base not in seen:
            seen.add(base)
            out += [binary_kernel(op, dt, False), binary_kernel(op, dt, True)]
    out += [copy_strided_kernel(dt), fill_kernel(dt), fill_from_kernel(dt)]
    if dt.name in NUMERIC:
        out.append(bias_add_kernel(dt))
    return out


# ---------------------------------------------------------------------------------------
# cast.cu: one module, every ordered pair of distinct dtypes
SIG_CAST = "PPq"


def cast_kernel(src: DType, dst: DType) -> KernelRef:
    if src.name == dst.name:
        raise KeyError("a cast to the same dtype needs no kernel")
    return KernelRef("cast.cu", (), f"tw_cast_{src.suffix}_{dst.suffix}", SIG_CAST)


def cast_kernels() -> list[KernelRef]:
    return [cast_kernel(DTYPES[a], DTYPES[b]) for a in ALL for b in ALL if a != b]


# ---------------------------------------------------------------------------------------
# reduce.cu: one module per dtype
REDUCE_OPS = {"Sum": "sum", "Mean": "sum", "Prod": "prod", "Max": "max", "Min": "min"}
REDUCE_DTYPES = NUMERIC
MEAN_DTYPES = FLOAT  # an integer Mean truncates (TF): left to the CPU
# rows: x as [outer, r]; block b reduces part b % parts of row b / parts:
#   x, out, outer, r, chunk, parts, scale
SIG_REDUCE_ROWS = "PPqqqqd"
# cols: x as [outer, r, inner]; one thread per (outer, inner) output: x, out, outer, r, inner, scale
SIG_REDUCE_COLS = "PPqqqd"


def reduce_defines(dt: DType) -> tuple:
    return tuple(sorted({"TW_T": dt.ctype, "TW_SUFFIX": dt.suffix,
                         "TW_KIND": {"float": "1", "int": "2"}[dt.kind]}.items()))


def reduce_kernel(kind: str, dt: DType, layout: str) -> KernelRef:
    """``kind`` is sum/prod/max/min, ``layout`` rows/cols."""
    if dt.name not in REDUCE_DTYPES:
        raise KeyError(f"no CUDA reduction for {dt.name}")
    sig = SIG_REDUCE_ROWS if layout == "rows" else SIG_REDUCE_COLS
    return KernelRef("reduce.cu", reduce_defines(dt), f"tw_reduce_{kind}_{layout}_{dt.suffix}", sig)


def reduce_kernels(dt: DType) -> list[KernelRef]:
    return [reduce_kernel(k, dt, lay) for k in ("sum", "prod", "max", "min") for lay in ("rows", "cols")]


# ---------------------------------------------------------------------------------------
# argmax.cu: one module; x as [outer, r, inner], one thread per output: x, out, outer, r, inner
SIG_ARG = "PPqqq"
ARG_DTYPES = NUMERIC


def arg_kernel(op: str, dt: DType, out: DType) -> KernelRef:
    kind = {"ArgMax": "argmax", "ArgMin": "argmin"}[op]
    if dt.name not in ARG_DTYPES or out.name not in INT:
        raise KeyError(f"{op} has no CUDA kernel for {dt.name} -> {out.name}")
    return KernelRef("argmax.cu", (), f"tw_{kind}_{dt.suffix}_{out.suffix}", SIG_ARG)


def arg_kernels() -> list[KernelRef]:
    return [arg_kernel(op, DTYPES[t], DTYPES[o]) for op in ("ArgMax", "ArgMin") for t in ARG_DTYPES for o in INT]


# ---------------------------------------------------------------------------------------
# softmax.cu: one module; a block per row of the last axis
SIG_SOFTMAX = "PPqq"          # x, y, rows, classes
SIG_XENT = "PPPPqq"           # features, labels, loss, backprop, rows, classes


def softmax_kernel(op: str, dt: DType) -> KernelRef:
    base = {"Softmax": "softmax", "LogSoftmax": "log_softmax"}[op]
    if dt.name not in FLOAT:
        raise KeyError(f"{op} has no CUDA kernel for {dt.name}")
    return KernelRef("softmax.cu", (), f"tw_{base}_rows_{dt.suffix}", SIG_SOFTMAX)


def xent_kernel(dt: DType, labels: DType | None = None) -> KernelRef:
    """Dense cross-entropy, or sparse with integer ``labels``."""
    if dt.name not in FLOAT or (labels is not None and labels.name not in INT):
        raise KeyError(f"no CUDA cross-entropy for {dt.name}")
    name = f"tw_xent_rows_{dt.suffix}" if labels is None else f"tw_sparse_xent_rows_{dt.suffix}_{labels.suffix}"
    return KernelRef("softmax.cu", (), name, SIG_XENT)


def softmax_kernels() -> list[KernelRef]:
    out = []
    for t in FLOAT:
        dt = DTYPES[t]
        out += [softmax_kernel("Softmax", dt), softmax_kernel("LogSoftmax", dt), xent_kernel(dt)]
        out += [xent_kernel(dt, DTYPES[i]) for i in INT]
    return out


# ---------------------------------------------------------------------------------------
# training.cu: one module; fused optimizer updates writing new buffers
TRAINING_SIGS = {
    "ApplyGradientDescent": ("apply_gradient_descent", "PPPPq"),   # var, alpha, delta, var_out, n
    # var, accum, lr, grad, momentum, var_out, accum_out, n, use_nesterov
    "ApplyMomentum": ("apply_momentum", "PPPPPPPqi"),
    # var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, var_out, m_out, v_out, n, nesterov
    "ApplyAdam": ("apply_adam", "PPPPPPPPPPPPPqi"),
    # The sparse forms write the rows in place. After the op's inputs (indices left out: the
    # host groups them): rows (the distinct rows), starts (their runs of positions, or null),
    # order (positions in index order, or null), n (rows * inner), inner (a row's elements).
    # var, accum, lr, grad, momentum, rows, starts, order, n, inner, use_nesterov
    "SparseApplyMomentum": ("sparse_apply_momentum", "PPPPPPPPqqi"),
    # var, accum, lr, grad, rows, starts, order, n, inner, update_slots
    "SparseApplyAdagrad": ("sparse_apply_adagrad", "PPPPPPPqqi"),
    # var, ms, mom, lr, rho, momentum, epsilon, grad, rows, starts, order, n, inner
    "SparseApplyRMSProp": ("sparse_apply_rms_prop", "PPPPPPPPPPPqq"),
    # var, accum, linear, grad, lr, l1, l2, lr_power, rows, starts, order, n, inner
    "SparseApplyFtrl": ("sparse_apply_ftrl", "PPPPPPPPPPPqq"),
}


def training_kernel(op: str, dt: DType) -> KernelRef:
    base, sig = TRAINING_SIGS[op]
    if dt.name not in FLOAT:
        raise KeyError(f"{op} has no CUDA kernel for {dt.name}")
    return KernelRef("training.cu", (), f"tw_{base}_{dt.suffix}", sig)


def training_kernels() -> list[KernelRef]:
    return [training_kernel(op, DTYPES[t]) for op in TRAINING_SIGS for t in FLOAT]


# ---------------------------------------------------------------------------------------
# indexing.cu: one module per dtype (elementwise.cu's defines). Functions that read indices on
# the device come in one variant per index dtype: tw_gather_i32_f32, tw_gather_i64_f32.
INDEX_DTYPES = INT
# kernel -> (signature, dtypes, takes device-side indices)
INDEXING = {
    "gather": ("PPPqqqq", ALL, True),                    # params, indices, out, n, n_idx, axis_dim, inner
    "gather_nd": ("PPPqqX", ALL, True),                  # params, indices, out, n, slice, K dims/strides of params
    "one_hot": ("PPPPqqq", ALL, True),                   # indices, on, off, out, n, depth, inner
    "unsorted_segment_sum": ("PPPqqq", NUMERIC, True),   # data, ids, out, n, inner, num_segments
    "unsorted_segment_max": ("PPPqqq", NUMERIC, True),
    "unsorted_segment_min": ("PPPqqq", NUMERIC, True),
    "scatter_nd_add": ("PPPqqX", NUMERIC, True),         # indices, updates, out, n, slice, K dims/strides of out
    "in_top_k": ("PPPqqq", FLOAT, True),                 # predictions, targets, out, rows, classes, k
    # a_indices, a_values, b, out, nnz * n, n, m, k (op(A) is m x k), adjoint_a, adjoint_b
    "sparse_dense_matmul": ("PPPPqqqqii", FLOAT, True),
    "select": ("PPPPqq", ALL, False),                    # condition, t, e, out, n, inner
    "pad": ("PPPqiY", ALL, False),                       # x, out, value, n, mode, (out dims, in dims, before)
    # target, rows, starts, order, updates, n, inner, scalar, kind (SCATTER_KINDS)
    "scatter_rows": ("PPPPPqqii", ALL, False),
    "segment_reduce": ("PPPPPqqi", NUMERIC, False),      # data, rows, starts, segs, out, n, inner, kind
    "top_k": ("PPPqqq", NUMERIC, False),                 # x, values, indices, rows, n, k
    "mirror_pad_grad": ("PPqiY", NUMERIC, False),        # g, out, n, mode, (out dims, g dims, before)
    "segment_grad": ("PPPPPPPqq", FLOAT, False),         # grad, segs, div, rows, starts, order, out, n, inner
}
SCATTER_KINDS = {"update": 0, "add": 1, "sub": 2, "mul": 3, "div": 4, "min": 5, "max": 6}
SEGMENT_KINDS = {"sum": 0, "mean": 1, "sqrtn": 2, "max": 3, "min": 4}
PAD_MODES = {"CONSTANT": 0, "REFLECT": 1, "SYMMETRIC": 2}


def indexing_kernel(base: str, dt: DType, index: DType | None = None) -> KernelRef:
    """``index``: the dtype of the device-side indices, for the kernels that take them."""
    sig, allowed, indexed = INDEXING[base]
    if dt.name not in allowed:
        raise KeyError(f"no CUDA {base} kernel for {dt.name}")
    if indexed:
        if index is None or index.name not in INDEX_DTYPES:
            raise KeyError(f"the CUDA {base} kernel takes int32 or int64 indices, not {index and index.name}")
        name = f"tw_{base}_{index.suffix}_{dt.suffix}"
    else:
        name = f"tw_{base}_{dt.suffix}"
    return KernelRef("indexing.cu", elementwise_defines(dt), name, sig)


def indexing_kernels(dt: DType) -> list[KernelRef]:
    out = []
    for base, (_, allowed, indexed) in INDEXING.items():
        if dt.name in allowed:
            out += ([indexing_kernel(base, dt, DTYPES[i]) for i in INDEX_DTYPES] if indexed
                    else [indexing_kernel(base, dt)])
    return out


# ---------------------------------------------------------------------------------------
# conv.cu: one module; im2col/col2im for Conv2D and its gradients (the products are cuBLAS's).
# Geometry parameters, in this order (the G of the signatures below): n, h, w, c (the image
# batch), kh, kw (window), sh, sw (strides), dh, dw (dilations), pt, pl (padding before),
# oh, ow (output), then nchw (int: the image tensor's layout).
CONV_GEOMETRY = "q" * 14 + "i"
SIG_IM2COL = "PP" + CONV_GEOMETRY          # image, cols [n * oh * ow, kh * kw * c]
SIG_COL2IM = "PP" + CONV_GEOMETRY          # cols, image gradient
SIG_ACCUMULATE = "PPq"                     # acc, part, n: acc += part


def conv_kernel(kind: str, dt: DType) -> KernelRef:
    """``kind`` is im2col, col2im or accumulate."""
    if dt.name not in FLOAT:
        raise KeyError(f"no CUDA convolution for {dt.name}")
    sig = {"im2col": SIG_IM2COL, "col2im": SIG_COL2IM, "accumulate": SIG_ACCUMULATE}[kind]
    return KernelRef("conv.cu", (), f"tw_{kind}_{dt.suffix}", sig)


def conv_kernels() -> list[KernelRef]:
    return [conv_kernel(k, DTYPES[t]) for k in ("im2col", "col2im", "accumulate") for t in FLOAT]


# ---------------------------------------------------------------------------------------
# pool.cu: one module; a thread per output (forward) or per input element (gradients).
# Geometry: n, h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, then nchw (int).
POOL_GEOMETRY = "q" * 12 + "i"
POOL_SIGS = {
    "MaxPool": ("max_pool", "PP" + POOL_GEOMETRY),             # x, y
    "AvgPool": ("avg_pool", "PP" + POOL_GEOMETRY),             # x, y
    "MaxPoolGrad": ("max_pool_grad", "PPPP" + POOL_GEOMETRY),  # x, y, grad, dx
    "AvgPoolGrad": ("avg_pool_grad", "PP" + POOL_GEOMETRY),    # grad, dx
}
MAX_POOL_DTYPES = NUMERIC


def pool_dtypes(op: str) -> tuple:
    return MAX_POOL_DTYPES if op == "MaxPool" else FLOAT


def pool_kernel(op: str, dt: DType) -> KernelRef:
    base, sig = POOL_SIGS[op]
    if dt.name not in pool_dtypes(op):
        raise KeyError(f"{op} has no CUDA kernel for {dt.name}")
    return KernelRef("pool.cu", (), f"tw_{base}_{dt.suffix}", sig)


def pool_kernels() -> list[KernelRef]:
    return [pool_kernel(op, DTYPES[t]) for op in POOL_SIGS for t in pool_dtypes(op)]


# ---------------------------------------------------------------------------------------
# random.cu: one module; Philox4x32-10 streams. Every kernel takes: out, n, key (64 bits),
# stream (64 bits: counter words 2-3), offset (64 bits: the first counter of words 0-1);
# RandomUniformInt adds minval and the range size.
# Truncated normals draw from at most this many blocks per 4 (2) values; random.py advances a
# node's offset by blocks * TRUNC_ROUNDS per run (compiled into random.cu as TW_TRUNC_ROUNDS).
TRUNC_ROUNDS = 16
RANDOM_DEFINES = (("TW_TRUNC_ROUNDS", str(TRUNC_ROUNDS)),)
SIG_RANDOM = "Pqqqq"
SIG_RANDOM_INT = "Pqqqqqq"
RANDOM_OPS = {"RandomUniform": "uniform", "RandomStandardNormal": "normal", "TruncatedNormal": "truncated_normal",
              "RandomUniformInt": "uniform_int"}


def random_kernel(op: str, dt: DType) -> KernelRef:
    base = RANDOM_OPS[op]
    allowed = INT if op == "RandomUniformInt" else FLOAT
    if dt.name not in allowed:
        raise KeyError(f"{op} has no CUDA kernel for {dt.name}")
    return KernelRef("random.cu", RANDOM_DEFINES, f"tw_random_{base}_{dt.suffix}",
                     SIG_RANDOM_INT if op == "RandomUniformInt" else SIG_RANDOM)


def random_kernels() -> list[KernelRef]:
    return [random_kernel(op, DTYPES[t]) for op in RANDOM_OPS
            for t in (INT if op == "RandomUniformInt" else FLOAT)]


# ---------------------------------------------------------------------------------------
# compression.cu: one module; lossy transfer compression (whitepaper 5.5, the core's
# passes/compression.py): float32 <-> the upper 16 bits of each value, as uint16
SIG_COMPRESSION = "PPq"    # x, y, n
COMPRESSION_OPS = {"_CompressF32ToBF16": "tw_compress_f32_bf16", "_DecompressBF16ToF32": "tw_decompress_bf16_f32"}


def compression_kernel(op: str) -> KernelRef:
    return KernelRef("compression.cu", (), COMPRESSION_OPS[op], SIG_COMPRESSION)


def compression_kernels() -> list[KernelRef]:
    return [compression_kernel(op) for op in COMPRESSION_OPS]


# ---------------------------------------------------------------------------------------
# normalization.cu, depthwise.cu, image.cu: batch norm and LRN, depthwise convolution,
# resizing (one module each). Depthwise geometry: n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl,
# oh, ow, m (channel multiplier), then nchw (int). Resize: the tensors, the sampling table
# (int32), then n (items), c, h, w (input), oh, ow (output). Normalization scalars (eps, ...)
# are doubles (d), cast to the kernel's type.
DEPTHWISE_GEOMETRY = "q" * 15 + "i"
CNN_SIGS = {  # kernel base -> (file, signature, dtypes)
    "bn_stats": ("normalization.cu", "PPPPPqqqid", FLOAT),       # x, mean, batch_var, r1, r2, c, rows, hw, nchw, bessel
    "bn_apply": ("normalization.cu", "PPPPPPdqqqi", FLOAT),      # x, scale, offset, mean, var, y, eps, n, c, hw, nchw
    "bn_grad_sums": ("normalization.cu", "PPPPPPPdqqqi", FLOAT),  # dy, x, mean, var, doffset, dscale, dy_xc, eps, ...
    "bn_grad_dx": ("normalization.cu", "PPPPPPPPdqqqiid", FLOAT),  # ..., dx, eps, n, c, hw, nchw, training, count
    "lrn": ("normalization.cu", "PPqqqddd", FLOAT),              # x, y, n, c, r, bias, alpha, beta
    "lrn_grad": ("normalization.cu", "PPPPqqqddd", FLOAT),       # g, x, y, dx, n, c, r, bias, alpha, beta
    "depthwise": ("depthwise.cu", "PPP" + DEPTHWISE_GEOMETRY, FLOAT),                  # x, f, y
    "depthwise_backprop_input": ("depthwise.cu", "PPP" + DEPTHWISE_GEOMETRY, FLOAT),   # f, dy, dx
    "depthwise_backprop_filter": ("depthwise.cu", "PPP" + DEPTHWISE_GEOMETRY, FLOAT),  # x, dy, df
    "resize_bilinear": ("image.cu", "PPP" + "q" * 6, NUMERIC),          # x, y (float32), table
    "resize_nearest": ("image.cu", "PPP" + "q" * 6, NUMERIC),           # x, y, table
    "resize_bilinear_grad": ("image.cu", "PPP" + "q" * 6, FLOAT),       # grads (float32), dx, table
    "resize_nearest_grad": ("image.cu", "PPP" + "q" * 6, ("float32", "float64", "int32")),  # grads, dx, table
}


def cnn_kernel(base: str, dt: DType) -> KernelRef:
    file, sig, allowed = CNN_SIGS[base]
    if dt.name not in allowed:
        raise KeyError(f"no CUDA {base} kernel for {dt.name}")
    return KernelRef(file, (), f"tw_{base}_{dt.suffix}", sig)


def cnn_kernels() -> list[KernelRef]:
    return [cnn_kernel(base, DTYPES[t]) for base, (_, _, allowed) in CNN_SIGS.items() for t in allowed]


# ---------------------------------------------------------------------------------------
def all_kernels() -> list[KernelRef]:
    """Every function of every module the plugin may load, grouped by nothing in particular."""
    out = []
    for name in ALL:
        out += elementwise_kernels(DTYPES[name])
    for name in REDUCE_DTYPES:
        out += reduce_kernels(DTYPES[name])
    for name in ALL:
        out += indexing_kernels(DTYPES[name])
    return (out + cast_kernels() + arg_kernels() + softmax_kernels() + training_kernels() + conv_kernels()
            + pool_kernels() + random_kernels() + compression_kernels() + cnn_kernels())


def modules() -> dict[tuple, list[KernelRef]]:
    """(file, defines) -> the functions that module must define."""
    out: dict[tuple, list[KernelRef]] = {}
    for k in all_kernels():
        out.setdefault(k.module_key, []).append(k)
    return out
