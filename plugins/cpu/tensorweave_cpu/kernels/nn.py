"""Neural-net kernels: activations, softmax and cross-entropies, Conv2D and its backprops,
pooling, bias, L2 loss, InTopK and CheckNumerics.

Convolution is im2col plus one BLAS matrix product: the windows of the (padded) input are
a strided view, copied once into a ``[batch * out_h * out_w, kh * kw * in]`` matrix (in
chunks of images). The input gradient goes back the other way (col2im) as one strided add
per filter position, ``kh * kw`` vectorised steps; pooling loops over window positions the
same way. With numba (the plugin's ``fusion`` extra) the input gradient's col2im and max
pooling's gradient are single compiled passes instead (jit.py). No kernel loops over pixels
or examples in Python. NCHW inputs are transposed to NHWC views around the same code.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops.nn_ops import conv_output_size, spatial_axes
from tensorweave_cpu import blas, jit, onednn, rowwise

CPU = "CPU"
_E = errors.InvalidArgumentError


def _zero(x):
    return np.zeros((), x.dtype)


# ---------------------------------------------------------------------------------------
# activations
def _relu(x):
    return np.maximum(x, _zero(x))


def _relu6(x):
    return np.clip(x, _zero(x), np.asarray(6, x.dtype))


# Masks are applied by multiplying (as TF's kernels do) or with min/max rather than
# np.where: selecting on a data-dependent mask is several times slower.
def _elu(x):
    zero = _zero(x)
    return np.expm1(np.minimum(x, zero)) + np.maximum(x, zero)


def _softplus(x):
    return np.logaddexp(x, _zero(x)).astype(x.dtype, copy=False)


def _relu_grad(g, f, out=None):
    return np.multiply(g, f > 0, out=out)


def _relu_grad_elements(g, f, out):
    # g times 1 where f > 0, else times 0: np.multiply(g, f > 0)'s values (inf * 0 is NaN;
    # both products are exact, so computing them in float64 changes no bit). C-contiguous
    # arrays of any rank, flattened here (a reshape outside costs more than the loop's call).
    g1, f1, out1 = g.reshape(g.size), f.reshape(f.size), out.reshape(out.size)
    for i in range(g1.size):
        out1[i] = g1[i] * (1.0 if f1[i] > 0 else 0.0)


_relu_grad_loop = jit.Loop(_relu_grad_elements)


def _small_relu_grad(g, f):
    """Below a million elements with numba: one compiled pass (the mlp's [64, 128]: 1.6 us
    against NumPy's 4.0 for a comparison, a fresh mask and a product)."""
    if (type(g) is not np.ndarray or type(f) is not np.ndarray or g.dtype != f.dtype or g.shape != f.shape
            or g.dtype.char not in "fd" or not g.flags.c_contiguous or not f.flags.c_contiguous or not jit.enabled()):
        return _relu_grad(g, f)
    out = np.empty(g.shape, g.dtype)
    _relu_grad_loop(g, f, out)
    return out


def _relu_grad_factory(ctx):
    """ReLU's gradient; from a million elements (a convolution's activations) one block of
    rows per core (``rowwise.split_ufunc``), each block computed as the whole is."""
    out = ctx.op.outputs[0]
    if not out.shape.is_fully_defined() or out.shape.num_elements() < rowwise.PARALLEL_MIN:
        return _small_relu_grad
    return rowwise.split_ufunc(_relu_grad, ctx.output_dtypes[0].np_dtype)


def _relu6_grad(g, f):
    return g * ((f > 0) & (f < 6))


def _elu_grad(g, y):
    # d elu/dx is y + 1 where y < 0, else 1
    return g * (np.minimum(y, _zero(y)) + np.ones((), y.dtype))


def _softplus_grad(g, f):
    half = np.asarray(0.5, f.dtype)
    return g * (half * (np.tanh(half * f) + 1))


# ---------------------------------------------------------------------------------------
# softmax and cross-entropies (max-shifted, so no exp overflows)
def _upcast(x):
    """float16 is computed in float32 and rounded once at the end."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _shifted(x):
    return x - np.max(x, axis=-1, keepdims=True, initial=-np.inf)


def _softmax(x):
    e = np.exp(_shifted(_upcast(x)))
    e /= np.sum(e, axis=-1, keepdims=True)
    return e.astype(x.dtype, copy=False)


def _log_softmax(x):
    s = _shifted(_upcast(x))
    s -= np.log(np.sum(np.exp(s), axis=-1, keepdims=True))
    return s.astype(x.dtype, copy=False)


def _xent(ctx):
    def xent(features, labels):
        if features.ndim != 2 or features.shape != labels.shape:
            raise ctx.error(_E, f"logits and labels must be 2-D and of one shape, got logits {features.shape} and "
                                f"labels {labels.shape}")
        dt = features.dtype
        s = _shifted(_upcast(features))
        e = np.exp(s)
        sum_e = np.sum(e, axis=1, keepdims=True)
        lab = _upcast(labels)
        loss = np.sum(lab * (np.log(sum_e) - s), axis=1)
        np.divide(e, sum_e, out=e)  # in place (see sparse_xent)
        e -= lab
        return loss.astype(dt, copy=False), e.astype(dt, copy=False)
    return xent


def _sparse_xent(ctx):
    def sparse_xent(features, labels):
        if features.ndim != 2 or labels.ndim != 1 or labels.shape[0] != features.shape[0]:
            raise ctx.error(_E, f"logits must be 2-D and labels 1-D with the same first dimension, got logits "
                                f"{features.shape} and labels {labels.shape}")
        n, c = features.shape
        dt = features.dtype
        x = np.ascontiguousarray(_upcast(features))  # rowwise.py: one pass per row, in cache
        try:
            loss, back = rowwise.sparse_xent(x, np.ascontiguousarray(labels))
        except rowwise.LabelOutOfRange as e:
            shown = " ".join(str(v) for v in labels[:20]) + (" ..." if n > 20 else "")
            raise ctx.error(_E, f"Received a label value of {labels[e.row]} which is outside the valid range of "
                                f"[0, {c}). Label values: {shown}") from None
        if dt != x.dtype:  # float16, computed in float32
            return loss.astype(dt), back.astype(dt)
        return loss, back
    return sparse_xent


# ---------------------------------------------------------------------------------------
# spatial helpers (everything below works on NHWC arrays)
def _to_nhwc(x, fmt):
    return x if fmt == "NHWC" else x.transpose(0, 2, 3, 1)


def _from_nhwc(y, fmt):
    return y if fmt == "NHWC" else y.transpose(0, 3, 1, 2)


def _spatial_attr(ctx, name):
    h, w, _ = spatial_axes(ctx.attrs["data_format"])
    v = ctx.attrs[name]
    return v[h], v[w]


def _geometry(ctx, h, w, kh, kw, sh, sw, dh=1, dw=1):
    """(out_h, out_w, (pad_top, pad_bottom, pad_left, pad_right))."""
    padding = ctx.attrs["padding"]
    try:
        oh, pt, pb = conv_output_size(h, kh, sh, dh, padding)
        ow, pl, pr = conv_output_size(w, kw, sw, dw, padding)
    except _E as e:
        raise ctx.error(_E, f"input {h}x{w}, window {kh}x{kw}: {e.message}") from None
    return oh, ow, (pt, pb, pl, pr)


def _pad(x, pads, fill=0):
    pt, pb, pl, pr = pads
    if not (pt or pb or pl or pr):
        return x
    n, h, w, c = x.shape
    out = np.full((n, h + pt + pb, w + pl + pr, c), fill, x.dtype)
    out[:, pt:pt + h, pl:pl + w, :] = x
    return out


def _tap(xp, i, j, oh, ow, sh, sw):
    """The input elements under window position (i, j) for every output: [n, oh, ow, c]."""
    hi = i + sh * (oh - 1) + 1 if oh else i  # an empty output must not slice up to -1
    wj = j + sw * (ow - 1) + 1 if ow else j
    return xp[:, i:hi:sh, j:wj:sw, :]


# With few channels the strided copies below move a handful of elements per inner loop;
# gathering through a cached index (np.take) is then faster: ~3x with fewer than 4
# channels when each tap is copied alone (dilated widths), ~1.7x for one channel when a
# window row's kw x c elements are copied together (3 channels: 0.6x, so not then).
_GATHER_MAX_CHANNELS = 4
_GATHER_MAX_CHANNELS_ROWS = 2
_GATHER_MAX_INDEX = 1 << 22


def _window_index(hp, wp, c, kh, kw, sh, sw, dh, dw, oh, ow):
    """Offsets into one flattened padded image [hp, wp, c] of the im2col matrix's elements:
    [oh * ow, kh * kw * c]."""
    pixel = (np.arange(oh)[:, None] * (sh * wp) + np.arange(ow) * sw) * c
    tap = (np.arange(kh)[:, None] * (dh * wp) + np.arange(kw) * dw) * c
    index = pixel.reshape(-1, 1, 1) + tap.reshape(1, -1, 1) + np.arange(c)
    return index.reshape(oh * ow, kh * kw * c)


def _im2col(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache, out=None):
    """The [n * oh * ow, kh * kw * c] matrix of input windows (written into ``out`` when
    given: a C-contiguous array of that many elements or more). ``cache`` (one per node)
    keeps gather indices by input geometry."""
    n, h, w, c = x.shape
    if kh == kw == sh == sw == 1 and not any(pads):
        return x.reshape(n * h * w, c)
    if out is not None:
        out = out.reshape(-1)[:n * oh * ow * kh * kw * c]
    xp = _pad(x, pads)
    few = _GATHER_MAX_CHANNELS_ROWS if dw == 1 else _GATHER_MAX_CHANNELS
    if c < few and oh * ow * kh * kw * c <= _GATHER_MAX_INDEX:
        key = (xp.shape[1], xp.shape[2], c, kh, kw, oh, ow)
        index = cache.get(key)
        if index is None:
            if len(cache) > 8:
                cache.clear()
            index = cache[key] = _window_index(xp.shape[1], xp.shape[2], c, kh, kw, sh, sw, dh, dw, oh, ow)
        flat = xp.reshape(n, xp.shape[1] * xp.shape[2] * c)
        taken = None if out is None else out.reshape(n, oh * ow, kh * kw * c)
        # (indices are in range by construction: "clip" spares the buffered copy "raise" makes)
        return np.take(flat, index, axis=1, out=taken, mode="clip").reshape(n * oh * ow, kh * kw * c)
    if dw == 1:
        # Without width dilation, a window row's kw x c elements are one contiguous run of the
        # padded image: the matrix is a 5-D strided view whose copy moves runs of kw * c
        # elements (the second convnet layer's 5 x 32: 2.5-3x faster than a copy per tap,
        # which moves runs of c).
        xp = np.ascontiguousarray(xp)
        sn, sy, sx, _ = xp.strides
        windows = np.lib.stride_tricks.as_strided(xp, (n, oh, ow, kh, kw * c), (sn, sy * sh, sx * sw, sy * dh, xp.itemsize),
                                                  writeable=False)
        if out is None:
            return windows.reshape(n * oh * ow, kh * kw * c)  # reshape copies: the view is not flat
        out.reshape(n, oh, ow, kh, kw * c)[...] = windows
        return out.reshape(n * oh * ow, kh * kw * c)
    # Dilated along the width: one strided copy per window tap into the matrix's columns
    # (about 1.5x faster than a 6-D as_strided view, whose copy loops over runs of c).
    cols = np.empty((n, oh, ow, kh, kw, c), x.dtype) if out is None else out.reshape(n, oh, ow, kh, kw, c)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, :, i, j, :] = _tap(xp, i * dh, j * dw, oh, ow, sh, sw)
    return cols.reshape(n * oh * ow, kh * kw * c)


# The im2col matrix of a whole batch is large (the convnet benchmark's second layer: 80 MB,
# its input gradient's 160 MB), and a fresh array that size costs more in page faults than
# the copy itself. Batches are done in chunks of images whose windows fill about this many
# bytes, one buffer reused for every chunk.
_CHUNK_BYTES = 8 << 20


def _chunks(n, rows, k, itemsize):
    """Images per chunk for an im2col of ``rows`` x ``k`` elements per image."""
    return max(1, min(n, _CHUNK_BYTES // max(1, rows * k * itemsize)))


def _window_chunks(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache):
    """(first image, end image, their im2col matrix) over the batch, in chunks of about
    ``_CHUNK_BYTES`` sharing one buffer (use each matrix before taking the next)."""
    n, c = x.shape[0], x.shape[3]
    k = kh * kw * c
    step = _chunks(n, oh * ow, k, x.dtype.itemsize)
    if step >= n:
        yield 0, n, _im2col(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache)
        return
    buf = np.empty(step * oh * ow * k, x.dtype)
    for s in range(0, n, step):
        e = min(n, s + step)
        yield s, e, _im2col(x[s:e], kh, kw, sh, sw, dh, dw, oh, ow, pads, cache, out=buf)


def _cols_matmul(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache, w2d):
    """``im2col(x) @ w2d`` ([n * oh * ow, w2d.shape[1]]), the batch in chunks."""
    n, rows = x.shape[0], oh * ow
    y = None
    for s, e, cols in _window_chunks(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache):
        if e - s == n:
            return blas.matmul(cols, w2d)
        if y is None:
            y = np.empty((n * rows, w2d.shape[1]), np.result_type(x.dtype, w2d.dtype))
        blas.matmul(cols, w2d, out=y[s * rows:e * rows])
    return y


def _cols_t_matmul(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache, dy2d):
    """``im2col(x).T @ dy2d`` ([kh * kw * c, dy2d.shape[1]]), summed over chunks of the batch."""
    rows, total = oh * ow, None
    for s, e, cols in _window_chunks(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache):
        part = blas.matmul(cols.T, dy2d[s * rows:e * rows])
        if total is None:
            total = part
        else:
            total += part
    return total


def _conv_setup(ctx):
    fmt = ctx.attrs["data_format"]
    sh, sw = _spatial_attr(ctx, "strides")
    dh, dw = _spatial_attr(ctx, "dilations")
    return fmt, sh, sw, dh, dw


def _onednn(convs, arrays, n, c, h, w, co, kh, kw, oh, ow, pads):
    """The node's oneDNN convolution for this geometry (onednn.py), or None: not installed
    or switched off, not float32, or a geometry oneDNN has no implementation for."""
    if not onednn.enabled() or any(a.dtype != np.float32 for a in arrays):
        return None
    return convs.get(n, c, h, w, co, kh, kw, oh, ow, pads)


def _check_dy(ctx, dy, expected):
    if dy.shape != tuple(expected):
        raise ctx.error(_E, f"out_backprop has shape {dy.shape} (NHWC) but the convolution gives {tuple(expected)}")


def _sizes(ctx, v, what):
    v = np.asarray(v)
    if v.shape != (4,) or (v < 0).any():
        raise ctx.error(_E, f"{what} must be 4 non-negative ints, got {v.tolist()}")
    return [int(d) for d in v]


def _conv2d_with(ctx):
    """``run(x, f, bias=None, relu=False) -> (y, rectified)``: Conv2D, with a bias added as
    _FusedConv2D needs, and with ``relu`` rectified by oneDNN as it writes where it runs
    (``rectified`` says whether it did)."""
    fmt, sh, sw, dh, dw = _conv_setup(ctx)
    cache, convs = {}, onednn.Convolutions(fmt, (sh, sw), (dh, dw))

    def run(x, f, bias=None, relu=False):
        if x.ndim != 4 or f.ndim != 4:
            raise ctx.error(_E, f"input and filter must be 4-D, got shapes {x.shape} and {f.shape}")
        xn = _to_nhwc(x, fmt)
        n, h, w, c = xn.shape
        kh, kw, ci, co = f.shape
        if c != ci:
            raise ctx.error(_E, f"input depth {c} does not match the filter's in_channels {ci}")
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, sh, sw, dh, dw)
        conv = _onednn(convs, (x, f) if bias is None else (x, f, bias), n, c, h, w, co, kh, kw, oh, ow, pads)
        if conv is not None:
            # oneDNN's ReLU gives 0 for NaN: asked for only where no output can be NaN, and
            # where checking that (reading x) costs less than rectifying the output after
            relu = relu and 2 * x.size <= n * oh * ow * co and _finite_outputs(x, f, bias)
            return conv.forward(x, f, bias, relu), relu
        y = _cols_matmul(xn, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache, f.reshape(kh * kw * c, co))
        y = y.reshape(n, oh, ow, co)
        if bias is not None:
            y += bias  # (NHWC here) a fresh product: in place, the values of a separate add
        return _from_nhwc(y, fmt), False
    return run


# Outputs of a float32 convolution stay finite when no sum of |x| * |f| over a window can
# reach float32's largest value (3.4e38), with a margin for the sums' rounding.
_FINITE_BOUND = 1e38


def _finite_outputs(x, f, bias) -> bool:
    """Whether every output of a convolution of ``x`` with ``f``, plus ``bias``, is finite
    (so not NaN): every input finite, and no window's sum large enough to overflow. The
    bounds add |max| and |min| so that a NaN anywhere makes them NaN, never smaller."""
    with np.errstate(all="ignore"):
        ax = abs(float(x.max())) + abs(float(x.min()))
        af = abs(float(f.max())) + abs(float(f.min()))
        ab = abs(float(bias.max())) + abs(float(bias.min()))
        bound = ax * af * (f.shape[0] * f.shape[1] * f.shape[2]) + ab
    return bound < _FINITE_BOUND


def _conv2d(ctx):
    run = _conv2d_with(ctx)
    return lambda x, f: run(x, f)[0]


def _fused_conv2d(ctx):
    """_FusedConv2D (passes/matmul_fusion.py): the convolution with its bias added (by oneDNN
    in the convolution's own pass where it runs) and, for Relu, rectified there too where no
    output can be NaN; else the activation in place after it, one block of images per core
    from a million elements: the values of Conv2D, the bias add and Relu/Relu6, bit for bit."""
    run = _conv2d_with(ctx)
    act = list(ctx.attrs["fused_ops"])[1:]

    def rectify(y, r0, r1):
        if act == ["Relu"]:
            np.maximum(y[r0:r1], 0, out=y[r0:r1])
        else:
            np.clip(y[r0:r1], 0, 6, out=y[r0:r1])

    def fused_conv2d(x, f, bias):
        if bias.ndim != 1 or f.ndim != 4 or bias.shape[0] != f.shape[3]:
            raise ctx.error(_E, f"bias of shape {bias.shape} for a filter of shape {f.shape} "
                                f"(one value per output channel)")
        y, rectified = run(x, f, bias, act == ["Relu"])
        if act and not rectified:
            rowwise.over_rows(lambda r0, r1: rectify(y, r0, r1), y.shape[0], y.size)
        return y
    return fused_conv2d


def _col2im_images(dcols, dxp, sh, sw, dh, dw):
    """``dxp[b, oy*sh + i*dh, ox*sw + j*dw, :] += dcols[b, oy, ox, i, j, :]`` for every image
    and window position (compiled by numba): the input gradient's overlapping adds in one
    pass along the channels, where NumPy needs a strided add per window position."""
    n, oh, ow, kh, kw, c = dcols.shape
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for i in range(kh):
                    r = oy * sh + i * dh
                    for j in range(kw):
                        q = ox * sw + j * dw
                        for ch in range(c):
                            dxp[b, r, q, ch] += dcols[b, oy, ox, i, j, ch]


_col2im_loop = jit.Loop(_col2im_images)


def _compiled_backprop_input(dy, f, n, h, w, c, oh, ow, pads, sh, sw, dh, dw):
    """The input gradient as ``dy @ f.T`` (a GEMM of ``kh * kw * c`` columns) per chunk of
    images into one reused buffer, each chunk's window gradients added back by the compiled
    col2im: the convnet's second layer 40 -> 22 ms against the correlation below, whose GEMM
    has only ``c`` (32) columns."""
    kh, kw, _, co = f.shape
    pt, pb, pl, pr = pads
    k = kh * kw * c
    dxp = np.zeros((n, h + pt + pb, w + pl + pr, c), dy.dtype)
    dy2d = dy.reshape(n * oh * ow, co)
    wt = f.reshape(k, co).T
    step = _chunks(n, oh * ow, k, dy.itemsize)
    buf = np.empty(step * oh * ow * k, dy.dtype)
    for s in range(0, n, step):
        e = min(n, s + step)
        dcols = blas.matmul(dy2d[s * oh * ow:e * oh * ow], wt, out=buf[:(e - s) * oh * ow * k].reshape(-1, k))
        _col2im_loop(dcols.reshape(e - s, oh, ow, kh, kw, c), dxp[s:e], sh, sw, dh, dw)
    return dxp[:, pt:pt + h, pl:pl + w, :]


def _conv2d_backprop_input(ctx):
    fmt, sh, sw, dh, dw = _conv_setup(ctx)
    cache, convs = {}, onednn.Convolutions(fmt, (sh, sw), (dh, dw))

    def backprop_input(sizes, f, dy):
        sizes = _sizes(ctx, sizes, "input_sizes")
        n, h, w, c = sizes if fmt == "NHWC" else (sizes[0], sizes[2], sizes[3], sizes[1])
        kh, kw, ci, co = f.shape
        if c != ci:
            raise ctx.error(_E, f"input depth {c} does not match the filter's in_channels {ci}")
        dy_in, dy = dy, _to_nhwc(dy, fmt)
        oh, ow, (pt, pb, pl, pr) = _geometry(ctx, h, w, kh, kw, sh, sw, dh, dw)
        _check_dy(ctx, dy, (n, oh, ow, co))
        # (One input channel, a first layer's: the compiled col2im below is faster, 12 vs 14 ms
        # for the convnet benchmark's, and a first layer rarely needs its input's gradient.)
        conv = _onednn(convs, (f, dy), n, c, h, w, co, kh, kw, oh, ow, (pt, pb, pl, pr)) if c > 1 else None
        if conv is not None:
            return conv.backward_data(dy_in, f)
        if kh * kw > 1 and dy.dtype == f.dtype and dy.dtype.name in ("float32", "float64") and jit.enabled():
            dx = _compiled_backprop_input(dy, f, n, h, w, c, oh, ow, (pt, pb, pl, pr), sh, sw, dh, dw)
            return _from_nhwc(dx, fmt)
        if sh == sw == 1 and kh * kw > 1 and co <= 2 * c:
            # Unit strides: the input gradient is the VALID correlation of dy, padded by the
            # dilated window size less the forward padding, with the flipped, transposed
            # filter: one im2col of dy + matmul, no scattered adds. (With many more output
            # than input channels, dy's im2col is the bigger copy: col2im below wins.)
            eh, ew = (kh - 1) * dh, (kw - 1) * dw
            flipped = np.ascontiguousarray(f[::-1, ::-1].transpose(0, 1, 3, 2)).reshape(kh * kw * co, c)
            dx = _cols_matmul(dy, kh, kw, 1, 1, dh, dw, h, w, (eh - pt, eh - pb, ew - pl, ew - pr), cache, flipped)
            return _from_nhwc(dx.reshape(n, h, w, c), fmt)
        dcols = blas.matmul(dy.reshape(n * oh * ow, co), f.reshape(kh * kw * c, co).T).reshape(n, oh, ow, kh, kw, c)
        if kh == kw == sh == sw == 1 and not (pt or pb or pl or pr):
            return _from_nhwc(dcols.reshape(n, h, w, c), fmt)
        dxp = np.zeros((n, h + pt + pb, w + pl + pr, c), dy.dtype)
        for i in range(kh):
            for j in range(kw):
                _tap(dxp, i * dh, j * dw, oh, ow, sh, sw)[...] += dcols[:, :, :, i, j, :]
        return _from_nhwc(dxp[:, pt:pt + h, pl:pl + w, :], fmt)
    return backprop_input


def _conv2d_backprop_filter(ctx):
    fmt, sh, sw, dh, dw = _conv_setup(ctx)
    cache, convs = {}, onednn.Convolutions(fmt, (sh, sw), (dh, dw))

    def backprop_filter(x, sizes, dy):
        kh, kw, ci, co = _sizes(ctx, sizes, "filter_sizes")
        x_in, dy_in = x, dy
        x, dy = _to_nhwc(x, fmt), _to_nhwc(dy, fmt)
        n, h, w, c = x.shape
        if c != ci:
            raise ctx.error(_E, f"input depth {c} does not match the filter's in_channels {ci}")
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, sh, sw, dh, dw)
        _check_dy(ctx, dy, (n, oh, ow, co))
        conv = _onednn(convs, (x, dy), n, c, h, w, co, kh, kw, oh, ow, pads)
        if conv is not None:
            return conv.backward_weights(x_in, dy_in)
        dy2d = dy.reshape(n * oh * ow, co)
        return _cols_t_matmul(x, kh, kw, sh, sw, dh, dw, oh, ow, pads, cache, dy2d).reshape(kh, kw, c, co)
    return backprop_filter


# ---------------------------------------------------------------------------------------
# pooling
def _pool_setup(ctx):
    return ctx.attrs["data_format"], _spatial_attr(ctx, "ksize"), _spatial_attr(ctx, "strides")


def _pool_1d(x, axis, k, stride, out, combine):
    """Combine (np.maximum or np.add) the k window positions along one spatial axis.
    Max and sum pooling are separable: two 1-D passes cost k_h + k_w steps, not k_h * k_w."""
    def window(i):
        sl = [slice(None)] * 4
        sl[axis] = slice(i, i + stride * (out - 1) + 1 if out else i, stride)
        return x[tuple(sl)]

    acc = window(0).copy()
    for i in range(1, k):
        combine(acc, window(i), out=acc)
    return acc


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_images(x, y, kh, kw, sh, sw, pt, pl, n0, n1):
    """Images [n0, n1) of max pooling (compiled by numba): each window's maximum, padding
    skipped, NaN winning as in ``np.maximum``; the innermost loops run along the channels."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    for b in range(n0, n1):
        for oy in range(oh):
            r0, r1 = max(0, oy * sh - pt), min(h, oy * sh - pt + kh)
            for ox in range(ow):
                q0, q1 = max(0, ox * sw - pl), min(w, ox * sw - pl + kw)
                for ch in range(c):
                    y[b, oy, ox, ch] = x[b, r0, q0, ch]
                for r in range(r0, r1):
                    for q in range(q0, q1):
                        for ch in range(c):
                            v, m = x[b, r, q, ch], y[b, oy, ox, ch]
                            y[b, oy, ox, ch] = v if (v > m or v != v) else m


_max_pool_loop = jit.Loop(_max_pool_images)


_NONE = 255  # no input equals the window's maximum (fusion_ops.NO_ARGMAX)
_NO_ARG = np.empty((0, 0, 0, 0), np.uint8)  # (MaxPool's: no argmax written)


def _inside_2x2(kh, kw, sh, sw, pads, h, w, oh, ow):
    """Whether the windows are 2 x 2 at strides 2, none reaching into padding."""
    return (kh, kw, sh, sw) == (2, 2, 2, 2) and pads[0] == pads[2] == 0 and 2 * oh <= h and 2 * ow <= w


def _max_pool_2x2_images(x, y, arg, with_arg, relu, n0, n1):
    """``_max_pool_images`` for 2 x 2 windows at strides 2 wholly inside the image (TF1's
    usual pool), the window written out in loops over the channels that vectorise (the
    general loop stores each partial maximum back). Each row of windows is read one image
    row at a time: the top row's two positions first (their maximum into ``y``), then the
    bottom row's, with the top row again, now in cache, for the argmax. Reading the two
    rows side by side, one stream interleaved with another 3.5 KB on, ran at half the
    memory's speed: the convnet's first pool, [128, 28, 28, 32] from memory, 1.3-1.5 ->
    0.7 ms on one core. The same maximum: the window's positions in the same order, NaN
    winning. ``with_arg``: also where the first maximum is (``_MaxPoolArgmax``, as
    ``_window_argmax_images`` finds it) in ``arg``. ``relu``: each value rectified first,
    as Relu computes it (positive and NaN values kept, the rest +0: NumPy's maximum with
    0), so that a pool of a ReLU reads the unrectified input once (``_MaxPoolArgmax``'s
    ``relu``)."""
    c = x.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    zero = x.dtype.type(0)
    for b in range(n0, n1):
        for oy in range(oh):
            r = 2 * oy
            for ox in range(ow):
                q = 2 * ox
                for ch in range(c):
                    v0, v1 = x[b, r, q, ch], x[b, r, q + 1, ch]
                    if relu:
                        v0 = v0 if (v0 > zero or v0 != v0) else zero
                        v1 = v1 if (v1 > zero or v1 != v1) else zero
                    y[b, oy, ox, ch] = v1 if (v1 > v0 or v1 != v1) else v0
            for ox in range(ow):
                q = 2 * ox
                for ch in range(c):
                    v0, v1, v2, v3 = x[b, r, q, ch], x[b, r, q + 1, ch], x[b, r + 1, q, ch], x[b, r + 1, q + 1, ch]
                    if relu:
                        v0 = v0 if (v0 > zero or v0 != v0) else zero
                        v1 = v1 if (v1 > zero or v1 != v1) else zero
                        v2 = v2 if (v2 > zero or v2 != v2) else zero
                        v3 = v3 if (v3 > zero or v3 != v3) else zero
                    m = y[b, oy, ox, ch]
                    m = v2 if (v2 > m or v2 != v2) else m
                    m = v3 if (v3 > m or v3 != v3) else m
                    y[b, oy, ox, ch] = m
                    if with_arg:
                        k = np.uint8(3) if v3 == m else np.uint8(_NONE)
                        k = np.uint8(2) if v2 == m else k
                        k = np.uint8(1) if v1 == m else k
                        arg[b, oy, ox, ch] = np.uint8(0) if v0 == m else k


_max_pool_2x2_loop = jit.Loop(_max_pool_2x2_images)


def _max_pool(ctx):
    fmt, (kh, kw), (sh, sw) = _pool_setup(ctx)

    def max_pool(x):
        if x.ndim != 4:
            raise ctx.error(_E, f"input must be 4-D, got shape {x.shape}")
        x = _to_nhwc(x, fmt)
        oh, ow, pads = _geometry(ctx, x.shape[1], x.shape[2], kh, kw, sh, sw)
        n = x.shape[0]
        if x.dtype.name in ("float32", "float64") and jit.enabled() and n and oh and ow and x.shape[3]:
            # One compiled pass, the images spread over the cores from a million elements
            # (the two NumPy passes below copy and compare through two temporaries: the
            # convnet's first pool, [128, 28, 28, 32], 3.9 ms in its step).
            xs, y = np.ascontiguousarray(x), np.empty((n, oh, ow, x.shape[3]), x.dtype)
            pt, _, pl, _ = pads
            if _inside_2x2(kh, kw, sh, sw, pads, x.shape[1], x.shape[2], oh, ow):
                rowwise.over_rows(lambda n0, n1: _max_pool_2x2_loop(xs, y, _NO_ARG, False, False, n0, n1), n, x.size)
            else:
                rowwise.over_rows(lambda n0, n1: _max_pool_loop(xs, y, kh, kw, sh, sw, pt, pl, n0, n1), n, x.size)
            return _from_nhwc(y, fmt)
        xp = _pad(x, pads, _lowest(x.dtype))
        rows = _pool_1d(xp, 1, kh, sh, oh, np.maximum)
        return _from_nhwc(_pool_1d(rows, 2, kw, sw, ow, np.maximum), fmt)
    return max_pool


def _max_pool_grad_images(x, y, g, dx, kh, kw, sh, sw, pt, pl, n0, n1):
    """Images [n0, n1) of max pooling's gradient (compiled by numba): each output's gradient
    goes to the first input in its window (row-major, padding skipped) equal to its max.
    The innermost loops run along the channels, contiguous in memory."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    open_ = np.empty(c, np.bool_)  # channels whose first maximum is still to be found
    zero = g.dtype.type(0)
    for b in range(n0, n1):
        for oy in range(oh):
            for ox in range(ow):
                open_[:] = True
                for r in range(max(0, oy * sh - pt), min(h, oy * sh - pt + kh)):
                    for q in range(max(0, ox * sw - pl), min(w, ox * sw - pl + kw)):
                        for ch in range(c):  # branch-free, so that it vectorises
                            hit = open_[ch] & (x[b, r, q, ch] == y[b, oy, ox, ch])
                            dx[b, r, q, ch] += g[b, oy, ox, ch] if hit else zero  # (not g * hit: inf * 0)
                            open_[ch] &= not hit


_max_pool_grad_loop = jit.Loop(_max_pool_grad_images)


def _max_pool_grad_tiles(x, y, g, dx, kh, kw, pt, pl, relu, n0, n1):
    """``_max_pool_grad_images`` for windows that tile the image (strides equal to the window:
    each input element lies in one window at most), writing every element of ``dx`` once
    (``np.empty``, no ``+=``): the gradient or zero in a window, zero outside all of them.
    With ``relu``, each element then times 1 where ``x`` > 0, else 0: ReluGrad's values on
    ``x`` as features (``_MaxPoolGradReluGrad``)."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    r_lo, r_hi = max(0, -pt), min(h, oh * kh - pt)  # the rows and columns some window covers
    q_lo, q_hi = max(0, -pl), min(w, ow * kw - pl)
    open_ = np.empty(c, np.bool_)
    zero, one = g.dtype.type(0), g.dtype.type(1)
    for b in range(n0, n1):
        for r in range(h):
            for q in range(w):
                if r < r_lo or r >= r_hi or q < q_lo or q >= q_hi:
                    for ch in range(c):
                        dx[b, r, q, ch] = zero
        for oy in range(oh):
            for ox in range(ow):
                open_[:] = True
                for r in range(max(0, oy * kh - pt), min(h, oy * kh - pt + kh)):
                    for q in range(max(0, ox * kw - pl), min(w, ox * kw - pl + kw)):
                        for ch in range(c):
                            v = x[b, r, q, ch]
                            hit = open_[ch] & (v == y[b, oy, ox, ch])
                            d = g[b, oy, ox, ch] if hit else zero
                            if relu:  # (g * 0 where v <= 0, as ReluGrad multiplies: inf * 0 is NaN)
                                d = d * (one if v > 0 else zero)
                            dx[b, r, q, ch] = d
                            open_[ch] &= not hit


_max_pool_grad_tiles_loop = jit.Loop(_max_pool_grad_tiles)


def _max_pool_grad_2x2_images(x, y, g, dx, relu, n0, n1):
    """``_max_pool_grad_tiles`` for the windows of ``_max_pool_2x2_images``: each of a
    window's four positions in its own loop over the channels, which stores to one place and
    so vectorises (a position takes the gradient where it equals the maximum and no position
    before it does); the caller zeroes the last row and column where no window covers them
    (``_zero_uncovered``). The same values, ``relu``'s mask included: the convnet's first
    pool gradient 2.1-2.4 -> 2.0 ms on one core, its second 0.6 -> 0.45 ms. A row of windows'
    top positions are written first, then its bottom ones (as ``_max_pool_2x2_images``
    reads)."""
    c = x.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    zero, one = g.dtype.type(0), g.dtype.type(1)
    for b in range(n0, n1):
        for oy in range(oh):
            r = 2 * oy
            for ox in range(ow):
                q = 2 * ox
                for ch in range(c):
                    v = x[b, r, q, ch]
                    d = g[b, oy, ox, ch] if v == y[b, oy, ox, ch] else zero
                    if relu:  # (as in _max_pool_grad_tiles)
                        d = d * (one if v > 0 else zero)
                    dx[b, r, q, ch] = d
                for ch in range(c):
                    m, v = y[b, oy, ox, ch], x[b, r, q + 1, ch]
                    d = g[b, oy, ox, ch] if (v == m) & (x[b, r, q, ch] != m) else zero
                    if relu:
                        d = d * (one if v > 0 else zero)
                    dx[b, r, q + 1, ch] = d
            for ox in range(ow):  # (the bottom row after the top one: see _max_pool_2x2_images)
                q = 2 * ox
                for ch in range(c):
                    m, v = y[b, oy, ox, ch], x[b, r + 1, q, ch]
                    d = g[b, oy, ox, ch] if (v == m) & (x[b, r, q, ch] != m) & (x[b, r, q + 1, ch] != m) else zero
                    if relu:
                        d = d * (one if v > 0 else zero)
                    dx[b, r + 1, q, ch] = d
                for ch in range(c):
                    m, v = y[b, oy, ox, ch], x[b, r + 1, q + 1, ch]
                    first = (x[b, r, q, ch] != m) & (x[b, r, q + 1, ch] != m) & (x[b, r + 1, q, ch] != m)
                    d = g[b, oy, ox, ch] if (v == m) & first else zero
                    if relu:
                        d = d * (one if v > 0 else zero)
                    dx[b, r + 1, q + 1, ch] = d


_max_pool_grad_2x2_loop = jit.Loop(_max_pool_grad_2x2_images)


def _zero_uncovered(dx, oh, ow):
    """Zero the last row and column of ``dx`` (NHWC) that 2 x 2 windows of an ``oh`` x ``ow``
    output leave uncovered (VALID pooling of odd sizes), which the 2 x 2 loops do not write."""
    dx[:, 2 * oh:] = 0
    dx[:, :2 * oh, 2 * ow:] = 0


def _max_pool_grad(ctx, relu=False):
    """MaxPoolGrad; with ``relu``, _MaxPoolGradReluGrad (passes/pool_grad_fusion.py): the
    result then masked as ReluGrad does with ``x`` as features, in the same pass where the
    compiled tiled loop runs."""
    fmt, (kh, kw), (sh, sw) = _pool_setup(ctx)

    def grad(x, y, g):
        """(the input gradient, whether ReluGrad's mask is applied to it already)."""
        x, y, g = _to_nhwc(x, fmt), _to_nhwc(y, fmt), _to_nhwc(g, fmt)
        n, h, w, c = x.shape
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, sh, sw)
        if y.shape != (n, oh, ow, c) or g.shape != y.shape:
            raise ctx.error(_E, f"orig_output {y.shape} and grad {g.shape} must have the pooled shape "
                                f"{(n, oh, ow, c)} (NHWC)")
        if x.dtype == y.dtype == g.dtype and x.dtype.name in ("float32", "float64") and jit.enabled():
            # One compiled pass (the NumPy path below makes five passes per window position),
            # the images spread over the cores: the convnet's first pool, [128, 28, 28, 32],
            # 15-17 ms -> 1.4 ms alone (2.7 ms on one core).
            xs, ys, gs = (np.ascontiguousarray(a) for a in (x, y, g))
            pt, _, pl, _ = pads
            if _inside_2x2(kh, kw, sh, sw, pads, h, w, oh, ow):
                dx = np.empty(x.shape, g.dtype)
                rowwise.over_rows(lambda n0, n1: _max_pool_grad_2x2_loop(xs, ys, gs, dx, relu, n0, n1), n, x.size)
                _zero_uncovered(dx, oh, ow)
                return _from_nhwc(dx, fmt), relu
            if (kh, kw) == (sh, sw):  # windows that tile: each element written once
                dx = np.empty(x.shape, g.dtype)
                rowwise.over_rows(
                    lambda n0, n1: _max_pool_grad_tiles_loop(xs, ys, gs, dx, kh, kw, pt, pl, relu, n0, n1), n, x.size)
                return _from_nhwc(dx, fmt), relu
            dx = np.zeros(x.shape, g.dtype)
            rowwise.over_rows(lambda n0, n1: _max_pool_grad_loop(xs, ys, gs, dx, kh, kw, sh, sw, pt, pl, n0, n1),
                              n, x.size)
            return _from_nhwc(dx, fmt), False
        xp = _pad(x, pads, _lowest(x.dtype))
        dxp = np.zeros(xp.shape, g.dtype)
        taken = np.zeros(y.shape, bool)
        # Each output's gradient goes to the first maximum of its window, as TF's kernel does.
        for i in range(kh):
            for j in range(kw):
                hit = _tap(xp, i, j, oh, ow, sh, sw) == y
                hit &= ~taken
                taken |= hit
                tap = _tap(dxp, i, j, oh, ow, sh, sw)
                np.add(tap, g, out=tap, where=hit)  # (not g * hit: an infinite g would give inf * 0)
        pt, _, pl, _ = pads
        return _from_nhwc(dxp[:, pt:pt + h, pl:pl + w, :], fmt), False

    if not relu:
        return lambda x, y, g: grad(x, y, g)[0]

    def max_pool_relu_grad(x, y, g):
        dx, masked = grad(x, y, g)
        return dx if masked else _relu_grad(dx, x)
    return max_pool_relu_grad


# The argmax form of a tiling max pool and its gradient (ops/fusion_ops.py,
# passes/pool_grad_fusion.py): the pool also writes where each window's first maximum is, and
# the gradient routes each output's gradient there, reading a byte per output instead of
# comparing the pooled tensor with the output again.


def _window_argmax_images(x, y, arg, kh, kw, pt, pl, n0, n1):
    """Images [n0, n1) of a tiling max pool's argmax (compiled by numba), given its output
    ``y`` (``_max_pool_images``): the first position of each window (``i * kw + j``) equal to
    its maximum, 255 for none."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    for b in range(n0, n1):
        for oy in range(oh):
            r0, r1 = max(0, oy * kh - pt), min(h, oy * kh - pt + kh)
            for ox in range(ow):
                q0, q1 = max(0, ox * kw - pl), min(w, ox * kw - pl + kw)
                for ch in range(c):
                    arg[b, oy, ox, ch] = _NONE
                for r in range(r1 - 1, r0 - 1, -1):  # backwards: the first equal position is written last
                    for q in range(q1 - 1, q0 - 1, -1):
                        p = (r - (oy * kh - pt)) * kw + (q - (ox * kw - pl))
                        for ch in range(c):
                            if x[b, r, q, ch] == y[b, oy, ox, ch]:
                                arg[b, oy, ox, ch] = p


_window_argmax_loop = jit.Loop(_window_argmax_images)


def _max_pool_argmax(ctx):
    fmt, (kh, kw), _ = _pool_setup(ctx)
    relu = bool(ctx.attrs.get("relu", False))

    def max_pool_argmax(x):
        if x.ndim != 4:
            raise ctx.error(_E, f"input must be 4-D, got shape {x.shape}")
        x = _to_nhwc(x, fmt)
        n, h, w, c = x.shape
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, kh, kw)
        y, arg = np.empty((n, oh, ow, c), x.dtype), np.empty((n, oh, ow, c), np.uint8)
        inside_2x2 = _inside_2x2(kh, kw, kh, kw, pads, h, w, oh, ow)
        if relu and not (inside_2x2 and jit.enabled()):
            x = _relu(x)  # (the 2 x 2 loop rectifies as it reads; elsewhere a rectified copy first)
        if jit.enabled() and y.size:
            xs = np.ascontiguousarray(x)
            if inside_2x2:
                rowwise.over_rows(lambda n0, n1: _max_pool_2x2_loop(xs, y, arg, True, relu, n0, n1), n, x.size)
            else:
                def images(n0, n1):  # the maximum, then where it is (windows other than 2 x 2: rare)
                    _max_pool_loop(xs, y, kh, kw, kh, kw, pads[0], pads[2], n0, n1)
                    _window_argmax_loop(xs, y, arg, kh, kw, pads[0], pads[2], n0, n1)
                rowwise.over_rows(images, n, x.size)
            return _from_nhwc(y, fmt), _from_nhwc(arg, fmt)
        xp = _pad(x, pads, _lowest(x.dtype))
        y[...] = _pool_1d(_pool_1d(xp, 1, kh, kh, oh, np.maximum), 2, kw, kw, ow, np.maximum)
        arg.fill(_NONE)
        rows, cols = _inside(h, kh, oh, pads[0]), _inside(w, kw, ow, pads[2])
        for i in range(kh - 1, -1, -1):  # backwards: the first equal position is written last
            for j in range(kw - 1, -1, -1):
                hit = _tap(xp, i, j, oh, ow, kh, kw) == y
                hit &= rows[i][None, :, None, None] & cols[j][None, None, :, None]  # (padding is never chosen)
                arg[hit] = i * kw + j
        return _from_nhwc(y, fmt), _from_nhwc(arg, fmt)
    return max_pool_argmax


def _inside(size, k, out, before):
    """[k, out] bool: whether window offset ``i`` of output ``o`` is inside ``size``."""
    pos = np.arange(out)[None, :] * k - before + np.arange(k)[:, None]
    return (pos >= 0) & (pos < size)


def _max_pool_grad_argmax_2x2_images(y, arg, g, dx, relu, n0, n1):
    """Images [n0, n1) of ``_MaxPoolGradArgmax`` for ``_max_pool_2x2_images``'s windows:
    each position in its own loop over the channels (one place stored: it vectorises), the
    gradient written one image row at a time (the top positions of a row of windows, then
    the bottom ones: as ``_max_pool_2x2_images`` reads); the caller zeroes what no window
    covers. With ``relu``, the gradient times 1 where the output is positive, else 0 (as
    ``_max_pool_grad_tiles``). Returns False where some argmax is neither a position (0-3)
    nor 255 (the caller raises), else True, as the general loop."""
    c = dx.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    zero, one = g.dtype.type(0), g.dtype.type(1)
    bad = False
    for b in range(n0, n1):
        for oy in range(oh):
            for ox in range(ow):
                for ch in range(c):
                    k = arg[b, oy, ox, ch]
                    bad |= (k > 3) & (k != _NONE)
            for i in range(2):
                r = 2 * oy + i
                for ox in range(ow):
                    for j in range(2):
                        p, q = 2 * i + j, 2 * ox + j
                        for ch in range(c):
                            d = g[b, oy, ox, ch]
                            if relu:
                                d = d * (one if y[b, oy, ox, ch] > 0 else zero)
                            dx[b, r, q, ch] = d if arg[b, oy, ox, ch] == p else zero
    return not bad


_max_pool_grad_argmax_2x2_loop = jit.Loop(_max_pool_grad_argmax_2x2_images)


def _max_pool_grad_argmax_images(y, arg, g, dx, kh, kw, pt, pl, relu, n0, n1):
    """Images [n0, n1) of ``_MaxPoolGradArgmax`` for any tiling windows (``dx`` zeroed by the
    caller): each output's gradient written at its argmax. An argmax that is not a position
    of its window inside the input (nor 255) stops the loop before anything is written there
    (no index is trusted: it came from a graph): returns False then, else True."""
    h, w, c = dx.shape[1], dx.shape[2], dx.shape[3]
    oh, ow = y.shape[1], y.shape[2]
    zero, one = g.dtype.type(0), g.dtype.type(1)
    for b in range(n0, n1):
        for oy in range(oh):
            for ox in range(ow):
                for ch in range(c):
                    p = arg[b, oy, ox, ch]
                    if p != _NONE:
                        r, q = oy * kh - pt + p // kw, ox * kw - pl + p % kw
                        if p >= kh * kw or r < 0 or r >= h or q < 0 or q >= w:
                            return False
                        d = g[b, oy, ox, ch]
                        if relu:
                            d = d * (one if y[b, oy, ox, ch] > 0 else zero)
                        dx[b, r, q, ch] = d
    return True


_max_pool_grad_argmax_loop = jit.Loop(_max_pool_grad_argmax_images)


def _bad_argmax(arg, kh, kw, pt, pl, h, w):
    """The index (NHWC) of the first argmax that is neither 255 nor a position of its window
    inside the ``h`` x ``w`` input, or None."""
    p = arg.astype(np.int64)
    oy = np.arange(arg.shape[1])[None, :, None, None]
    ox = np.arange(arg.shape[2])[None, None, :, None]
    r, q = oy * kh - pt + p // kw, ox * kw - pl + p % kw
    ok = (p == _NONE) | ((p < kh * kw) & (r >= 0) & (r < h) & (q >= 0) & (q < w))
    if ok.all():
        return None
    return tuple(int(i) for i in np.argwhere(~ok)[0])


def _max_pool_grad_argmax(ctx):
    fmt, (kh, kw), _ = _pool_setup(ctx)
    h, w = ctx.attrs["input_size"]
    relu = ctx.attrs["relu"]

    def check(arg, pads, ok=False):
        """Raise for an argmax that is not a position of its window inside the input."""
        where = None if ok else _bad_argmax(arg, kh, kw, pads[0], pads[2], h, w)
        if where is not None:
            raise ctx.error(_E, f"argmax {arg[where]} at {list(where)} (NHWC) is neither 255 nor a position of its "
                                f"{kh}x{kw} window inside the {h}x{w} input")

    def max_pool_grad_argmax(y, arg, g):
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, kh, kw)
        if y.ndim == arg.ndim == g.ndim == 4:
            y, arg, g = _to_nhwc(y, fmt), _to_nhwc(arg, fmt), _to_nhwc(g, fmt)
        if y.ndim != 4 or y.shape[1:3] != (oh, ow) or arg.shape != y.shape or g.shape != y.shape:
            raise ctx.error(_E, f"orig_output {y.shape}, argmax {arg.shape} and grad {g.shape} must have the shape "
                                f"of pooling a {h}x{w} input, [n, {oh}, {ow}, c] (NHWC)")
        n, c = y.shape[0], y.shape[3]
        if jit.enabled() and y.size:
            ys, args, gs = (np.ascontiguousarray(a) for a in (y, arg, g))
            if _inside_2x2(kh, kw, kh, kw, pads, h, w, oh, ow):
                dx = np.empty((n, h, w, c), g.dtype)
                ok = []
                rowwise.over_rows(
                    lambda n0, n1: ok.append(_max_pool_grad_argmax_2x2_loop(ys, args, gs, dx, relu, n0, n1)), n, dx.size)
                _zero_uncovered(dx, oh, ow)
            else:
                dx = np.zeros((n, h, w, c), g.dtype)
                ok = []
                rowwise.over_rows(lambda n0, n1: ok.append(_max_pool_grad_argmax_loop(
                    ys, args, gs, dx, kh, kw, pads[0], pads[2], relu, n0, n1)), n, dx.size)
            check(args, pads, all(ok))
            return _from_nhwc(dx, fmt)
        check(arg, pads)
        d = _relu_grad(g, y) if relu else g
        pt, pb, pl, pr = pads
        dxp = np.zeros((n, h + pt + pb, w + pl + pr, c), g.dtype)
        zero = _zero(dxp)
        for i in range(kh):
            for j in range(kw):  # (the windows tile: each element is in one tap at most)
                np.copyto(_tap(dxp, i, j, oh, ow, kh, kw), np.where(arg == i * kw + j, d, zero))
        return _from_nhwc(dxp[:, pt:pt + h, pl:pl + w, :], fmt)
    return max_pool_grad_argmax


def _window_counts(h, w, kh, kw, sh, sw, oh, ow, pads, dtype):
    """How many input (non-padding) elements each window covers: [1, oh, ow, 1]."""
    pt, _, pl, _ = pads

    def per_dim(size, k, s, out, before):
        start = np.arange(out) * s - before
        return np.minimum(start + k, size) - np.maximum(start, 0)

    counts = np.outer(per_dim(h, kh, sh, oh, pt), per_dim(w, kw, sw, ow, pl))
    return counts.astype(dtype)[None, :, :, None]


def _avg_pool(ctx):
    fmt, (kh, kw), (sh, sw) = _pool_setup(ctx)

    def avg_pool(x):
        if x.ndim != 4:
            raise ctx.error(_E, f"input must be 4-D, got shape {x.shape}")
        x = _to_nhwc(x, fmt)
        n, h, w, c = x.shape
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, sh, sw)
        xp = _pad(_upcast(x), pads)
        out = _pool_1d(_pool_1d(xp, 1, kh, sh, oh, np.add), 2, kw, sw, ow, np.add)
        out /= _window_counts(h, w, kh, kw, sh, sw, oh, ow, pads, out.dtype)
        return _from_nhwc(out.astype(x.dtype, copy=False), fmt)
    return avg_pool


def _avg_pool_grad(ctx):
    fmt, (kh, kw), (sh, sw) = _pool_setup(ctx)

    def avg_pool_grad(sizes, g):
        sizes = _sizes(ctx, sizes, "orig_input_shape")
        n, h, w, c = sizes if fmt == "NHWC" else (sizes[0], sizes[2], sizes[3], sizes[1])
        g = _to_nhwc(g, fmt)
        oh, ow, pads = _geometry(ctx, h, w, kh, kw, sh, sw)
        if g.shape != (n, oh, ow, c):
            raise ctx.error(_E, f"grad has shape {g.shape} but pooling an input of shape {(n, h, w, c)} gives "
                                f"{(n, oh, ow, c)} (NHWC)")
        share = g / _window_counts(h, w, kh, kw, sh, sw, oh, ow, pads, g.dtype)
        pt, pb, pl, pr = pads
        dxp = np.zeros((n, h + pt + pb, w + pl + pr, c), g.dtype)
        for i in range(kh):
            for j in range(kw):
                _tap(dxp, i, j, oh, ow, sh, sw)[...] += share
        return _from_nhwc(dxp[:, pt:pt + h, pl:pl + w, :], fmt)
    return avg_pool_grad


# ---------------------------------------------------------------------------------------
# bias, losses, metrics, checks
def _bias_add(ctx):
    nchw = ctx.attrs["data_format"] == "NCHW"

    def bias_add(v, b):
        axis = 1 if nchw else v.ndim - 1
        if b.ndim != 1 or v.ndim < 2 or v.shape[axis] != b.shape[0]:
            raise ctx.error(_E, f"bias of shape {b.shape} must be 1-D with one element per channel of value "
                                f"{v.shape} (dimension {axis})")
        return v + (b.reshape((-1,) + (1,) * (v.ndim - 2)) if nchw else b)
    return bias_add


def _bias_add_grad(ctx):
    nchw = ctx.attrs["data_format"] == "NCHW"

    def bias_add_grad(g):
        if g.ndim < 2:
            raise ctx.error(_E, f"out_backprop must have rank at least 2, got shape {g.shape}")
        keep = 1 if nchw else g.ndim - 1
        if not nchw:
            r = rowwise.sum_leading(g, g.ndim - 1)
            if r is not None:
                return r
        return np.sum(g, axis=tuple(a for a in range(g.ndim) if a != keep), dtype=g.dtype)
    return bias_add_grad


def _l2_loss(t):
    flat = _upcast(t).reshape(-1)
    return np.asarray(np.dot(flat, flat) * 0.5, dtype=t.dtype)


def _in_top_k(ctx):
    k = ctx.attrs["k"]

    def in_top_k(predictions, targets):
        if predictions.ndim != 2 or targets.shape != predictions.shape[:1]:
            raise ctx.error(_E, f"predictions must be 2-D and targets 1-D with the same first dimension, got "
                                f"{predictions.shape} and {targets.shape}")
        n, c = predictions.shape
        valid = (targets >= 0) & (targets < c)
        if c == 0:
            return np.zeros(n, bool)
        target_pred = predictions[np.arange(n), np.where(valid, targets, 0)]
        larger = np.count_nonzero(predictions > target_pred[:, None], axis=1)
        return valid & np.isfinite(target_pred) & (larger < k)
    return in_top_k


def _check_numerics(ctx):
    message = ctx.attrs["message"]

    def check_numerics(x):
        if np.isfinite(x).all():
            return x
        nan, inf = bool(np.isnan(x).any()), bool(np.isinf(x).any())
        kind = "Inf and NaN" if nan and inf else ("NaN" if nan else "Inf")
        raise ctx.error(_E, f"{message} : Tensor had {kind} values")
    return check_numerics


def register(reg):
    reg.register("Relu", CPU, _relu)
    reg.register("Relu6", CPU, _relu6)
    reg.register("Elu", CPU, _elu)
    reg.register("Softplus", CPU, _softplus)
    reg.register("ReluGrad", CPU, factory=_relu_grad_factory)
    reg.register("Relu6Grad", CPU, _relu6_grad)
    reg.register("EluGrad", CPU, _elu_grad)
    reg.register("SoftplusGrad", CPU, _softplus_grad)
    reg.register("Softmax", CPU, _softmax)
    reg.register("LogSoftmax", CPU, _log_softmax)
    reg.register("SoftmaxCrossEntropyWithLogits", CPU, factory=_xent)
    reg.register("SparseSoftmaxCrossEntropyWithLogits", CPU, factory=_sparse_xent)
    reg.register("Conv2D", CPU, factory=_conv2d)
    reg.register("_FusedConv2D", CPU, factory=_fused_conv2d)
    reg.register("_MaxPoolGradReluGrad", CPU, factory=lambda ctx: _max_pool_grad(ctx, relu=True))
    reg.register("Conv2DBackpropInput", CPU, factory=_conv2d_backprop_input)
    reg.register("Conv2DBackpropFilter", CPU, factory=_conv2d_backprop_filter)
    reg.register("MaxPool", CPU, factory=_max_pool)
    reg.register("_MaxPoolArgmax", CPU, factory=_max_pool_argmax)
    reg.register("_MaxPoolGradArgmax", CPU, factory=_max_pool_grad_argmax)
    reg.register("MaxPoolGrad", CPU, factory=_max_pool_grad)
    reg.register("AvgPool", CPU, factory=_avg_pool)
    reg.register("AvgPoolGrad", CPU, factory=_avg_pool_grad)
    reg.register("BiasAdd", CPU, factory=_bias_add)
    reg.register("BiasAddGrad", CPU, factory=_bias_add_grad)
    reg.register("L2Loss", CPU, _l2_loss)
    reg.register("InTopK", CPU, factory=_in_top_k)
    reg.register("CheckNumerics", CPU, factory=_check_numerics)
