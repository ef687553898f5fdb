"""Image resizing: ``ResizeBilinear``, ``ResizeNearestNeighbor`` and their gradient ops
(op definitions, shape functions), the ``tw.image`` wrappers (``resize_bilinear``,
``resize_nearest_neighbor``, ``resize_images``, ``ResizeMethod``), and the sampling tables
every device's kernels use.

Sampling follows TensorFlow's kernels exactly, in float32 arithmetic. Along an axis of
``in_size`` pixels resized to ``out_size``, the scale is ``(in - 1) / (out - 1)`` with
``align_corners`` (and ``out > 1``), else ``in / out``. Output pixel ``i`` samples the input
at ``i * scale`` (legacy), or ``(i + 0.5) * scale - 0.5`` with ``half_pixel_centers``
(bilinear; nearest uses ``(i + 0.5) * scale``). Bilinear blends the two neighbours
``floor`` (at least 0) and ``ceil`` (at most ``in - 1``) with weight ``frac``: first along
the width, then the height. Nearest takes ``floor`` (``round`` with ``align_corners``),
clamped into the image. ``ResizeBilinear`` always outputs float32, as in TensorFlow.

The tables (``bilinear_axis``, ``nearest_axis`` and the gradients' gather form
``*_grad_axis``: for each input pixel, the output pixels that read it, with weights) are
computed here, on the host, once per shape, and handed to kernels: every device samples the
same positions.
"""

from __future__ import annotations

import enum

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import apply_op, constant_value, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops

__all__: list[str] = []

_E = errors.InvalidArgumentError
_ANY_T = "T: {int8, uint8, int16, uint16, int32, int64, float16, float32, float64}"
_FLOAT = "T: {float16, float32, float64}"
_RESIZE_ATTRS = ["align_corners: bool = false", "half_pixel_centers: bool = false"]


# ---------------------------------------------------------------------------------------
# sampling tables (shared by every device)
def resize_scale(in_size, out_size, align_corners):
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def bilinear_axis(in_size, out_size, align_corners, half_pixel_centers):
    """(lower int32[out], upper int32[out], lerp float32[out]) along one axis."""
    scale = resize_scale(in_size, out_size, align_corners)
    i = np.arange(out_size, dtype=np.float32)
    half = np.float32(0.5)
    pos = (i + half) * scale - half if half_pixel_centers else i * scale
    pos = pos.astype(np.float32)
    f = np.floor(pos)
    lower = np.maximum(f, 0).astype(np.int32)
    upper = np.minimum(np.ceil(pos), in_size - 1).astype(np.int32)
    return lower, upper, (pos - f).astype(np.float32)


def nearest_axis(in_size, out_size, align_corners, half_pixel_centers):
    """int32[out]: the input pixel each output pixel copies."""
    scale = resize_scale(in_size, out_size, align_corners)
    i = np.arange(out_size, dtype=np.float32)
    pos = ((i + np.float32(0.5)) * scale if half_pixel_centers else i * scale).astype(np.float32)
    idx = np.floor(pos.astype(np.float64) + 0.5) if align_corners else np.floor(pos)
    idx = np.minimum(idx, in_size - 1)
    if half_pixel_centers:
        idx = np.maximum(idx, 0)
    return idx.astype(np.int32)


def _gather_form(in_size, out_index, weights):
    """For each input pixel, the (output pixel, weight) pairs that read it, as CSR:
    (offsets int32[in + 1], outputs int32[nnz], weights float32[nnz]), outputs ascending."""
    order = np.lexsort((out_index[1], out_index[0]))
    src, dst, w = out_index[0][order], out_index[1][order], weights[order]
    offsets = np.zeros(in_size + 1, np.int32)
    np.cumsum(np.bincount(src, minlength=in_size), out=offsets[1:])
    return offsets, dst.astype(np.int32), w.astype(np.float32)


def bilinear_grad_axis(in_size, out_size, align_corners, half_pixel_centers):
    lower, upper, lerp = bilinear_axis(in_size, out_size, align_corners, half_pixel_centers)
    o = np.arange(out_size, dtype=np.int32)
    src = np.concatenate([lower, upper])
    dst = np.concatenate([o, o])
    w = np.concatenate([np.float32(1) - lerp, lerp])
    return _gather_form(in_size, (src, dst), w)


def nearest_grad_axis(in_size, out_size, align_corners, half_pixel_centers):
    idx = nearest_axis(in_size, out_size, align_corners, half_pixel_centers)
    offsets, dst, _ = _gather_form(in_size, (idx, np.arange(out_size, dtype=np.int32)),
                                   np.ones(out_size, np.float32))
    return offsets, dst


def _bits(v):
    return np.asarray(v, np.float32).view(np.int32)


def resize_table(kind, h, w, oh, ow, align_corners, half_pixel_centers):
    """The sampling tables of one resize as a single int32 array (float32 weights as their
    bit patterns), the layout device kernels read (``(h, w)`` the input's size, ``(oh, ow)``
    the output's):

    - ``"bilinear"``: lower_y[oh], upper_y[oh], lerp_y[oh], lower_x[ow], upper_x[ow], lerp_x[ow]
    - ``"nearest"``: index_y[oh], index_x[ow]
    - ``"bilinear_grad"``: nnz_y, nnz_x, offsets_y[h + 1], out_y[nnz_y], weight_y[nnz_y],
      offsets_x[w + 1], out_x[nnz_x], weight_x[nnz_x]
    - ``"nearest_grad"``: nnz_y, nnz_x, offsets_y[h + 1], out_y[nnz_y], offsets_x[w + 1], out_x[nnz_x]
    """
    ac, hp = align_corners, half_pixel_centers
    if kind == "bilinear":
        ly, uy, fy = bilinear_axis(h, oh, ac, hp)
        lx, ux, fx = bilinear_axis(w, ow, ac, hp)
        parts = [ly, uy, _bits(fy), lx, ux, _bits(fx)]
    elif kind == "nearest":
        parts = [nearest_axis(h, oh, ac, hp), nearest_axis(w, ow, ac, hp)]
    elif kind == "bilinear_grad":
        oy, dy, wy = bilinear_grad_axis(h, oh, ac, hp)
        ox, dx, wx = bilinear_grad_axis(w, ow, ac, hp)
        parts = [np.array([dy.size, dx.size]), oy, dy, _bits(wy), ox, dx, _bits(wx)]
    elif kind == "nearest_grad":
        oy, dy = nearest_grad_axis(h, oh, ac, hp)
        ox, dx = nearest_grad_axis(w, ow, ac, hp)
        parts = [np.array([dy.size, dx.size]), oy, dy, ox, dx]
    else:
        raise ValueError(f"unknown resize table {kind!r}")
    return np.concatenate([np.asarray(p, np.int32) for p in parts])


def check_resize_attrs(align_corners, half_pixel_centers):
    if align_corners and half_pixel_centers:
        raise _E("half_pixel_centers and align_corners cannot both be true")


def check_size(size, what="size"):
    """The (height, width) of a run-time ``size`` value: two positive ints."""
    v = np.asarray(size)
    if v.shape != (2,) or (v <= 0).any():
        raise _E(f"{what} must be 2 positive ints (new_height, new_width), got {v.tolist()}")
    return int(v[0]), int(v[1])


def check_images(shape, what="images"):
    if len(shape) != 4:
        raise _E(f"{what} must be 4-dimensional [batch, height, width, channels], got shape {tuple(shape)}")
    if shape[1] <= 0 or shape[2] <= 0:
        raise _E(f"{what} must have a positive height and width, got shape {tuple(shape)}")


# ---------------------------------------------------------------------------------------
# shape functions
def _images4(s, what):
    if s.ndims is not None and s.ndims != 4:
        raise _E(f"{what} must be 4-dimensional [batch, height, width, channels], got shape {s}")
    return s if s.ndims is not None else TensorShape([None] * 4)


def _size_dims(t, what="size"):
    s = t.shape
    if s.ndims is not None and (s.ndims != 1 or s[0] not in (None, 2)):
        raise _E(f"{what} must be a 2-element vector (new_height, new_width), got shape {s}")
    v = constant_value(t)
    if v is None:
        return None, None
    return check_size(v, what)


def _resize_shape(op):
    check_resize_attrs(op.get_attr("align_corners"), op.get_attr("half_pixel_centers"))
    x = _images4(op.inputs[0].shape, "images")
    h, w = _size_dims(op.inputs[1])
    return [TensorShape([x[0], h, w, x[3]])]


def _resize_bilinear_grad_shape(op):
    check_resize_attrs(op.get_attr("align_corners"), op.get_attr("half_pixel_centers"))
    g = _images4(op.inputs[0].shape, "grads")
    x = _images4(op.inputs[1].shape, "original_image")
    for i, what in ((0, "batch"), (3, "channels")):
        if g[i] is not None and x[i] is not None and g[i] != x[i]:
            raise _E(f"grads {g} and original_image {x} must have the same {what} dimension")
    return [x]


def _resize_nn_grad_shape(op):
    check_resize_attrs(op.get_attr("align_corners"), op.get_attr("half_pixel_centers"))
    g = _images4(op.inputs[0].shape, "grads")
    h, w = _size_dims(op.inputs[1])
    return [TensorShape([g[0], h, w, g[3]])]


def register_ops(reg):
    reg.op("ResizeBilinear", inputs=["images: T", "size: int32"], outputs=["resized_images: float32"],
           attrs=[_ANY_T] + _RESIZE_ATTRS, shape_fn=_resize_shape,
           doc="Bilinear resize of NHWC images to size (new_height, new_width); the output is float32.")
    reg.op("ResizeBilinearGrad", inputs=["grads: float32", "original_image: T"], outputs=["output: T"],
           attrs=[_FLOAT] + _RESIZE_ATTRS, shape_fn=_resize_bilinear_grad_shape,
           doc="Gradient of ResizeBilinear with respect to its images.")
    reg.op("ResizeNearestNeighbor", inputs=["images: T", "size: int32"], outputs=["resized_images: T"],
           attrs=[_ANY_T] + _RESIZE_ATTRS, shape_fn=_resize_shape,
           doc="Nearest-neighbour resize of NHWC images to size (new_height, new_width).")
    reg.op("ResizeNearestNeighborGrad", inputs=["grads: T", "size: int32"], outputs=["output: T"],
           attrs=["T: {int8, uint8, int32, float16, float32, float64}"] + _RESIZE_ATTRS,
           shape_fn=_resize_nn_grad_shape,
           doc="Gradient of ResizeNearestNeighbor: sums grads into the input pixels of size (height, width).")


# ---------------------------------------------------------------------------------------
# wrappers
class ResizeMethod(enum.IntEnum):
    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


def _size_tensor(size, fn):
    if isinstance(size, TensorShape):
        size = size.as_list()
    if isinstance(size, list | tuple):
        if len(size) != 2:
            raise _E(f"{fn}: size must have 2 elements (new_height, new_width), got {size!r}")
        if all(isinstance(v, int | np.integer) for v in size):
            if min(size) <= 0:
                raise _E(f"{fn}: size must be positive, got {list(size)}")
            return array_ops.constant(np.asarray(size, np.int32), name="size")
    return convert_to_tensor(size, dtype=dtypes.int32, name="size")


def _resize(op_type, images, size, align_corners, half_pixel_centers, name, fn):
    if bool(align_corners) and bool(half_pixel_centers):
        raise _E(f"{fn}: half_pixel_centers and align_corners cannot both be true")
    with get_default_graph().name_scope(name or op_type) as scope:
        return apply_op(op_type, [images, _size_tensor(size, fn)],
                        {"align_corners": bool(align_corners), "half_pixel_centers": bool(half_pixel_centers)},
                        _exact_name=scope.rstrip("/"))


def resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """Bilinear resize of NHWC ``images`` to ``size = (new_height, new_width)``; float32 out."""
    return _resize("ResizeBilinear", images, size, align_corners, half_pixel_centers, name, "resize_bilinear")


def resize_nearest_neighbor(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """Nearest-neighbour resize of NHWC ``images`` to ``size = (new_height, new_width)``."""
    return _resize("ResizeNearestNeighbor", images, size, align_corners, half_pixel_centers, name,
                   "resize_nearest_neighbor")


def resize_bilinear_grad(grads, original_image, align_corners=False, half_pixel_centers=False, name=None):
    return apply_op("ResizeBilinearGrad", [grads, original_image],
                    {"align_corners": bool(align_corners), "half_pixel_centers": bool(half_pixel_centers)}, name=name)


def resize_nearest_neighbor_grad(grads, size, align_corners=False, half_pixel_centers=False, name=None):
    return apply_op("ResizeNearestNeighborGrad", [grads, _size_tensor(size, "resize_nearest_neighbor_grad")],
                    {"align_corners": bool(align_corners), "half_pixel_centers": bool(half_pixel_centers)}, name=name)


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False, preserve_aspect_ratio=False,
                  name=None):
    """``tf.image.resize_images``: ``images`` (4-D NHWC or one 3-D HWC image) resized to
    ``size`` with ``method`` (BILINEAR: float32 out; NEAREST_NEIGHBOR: the input dtype).
    BICUBIC, AREA and ``preserve_aspect_ratio`` are not implemented."""
    fn = "resize_images"
    if preserve_aspect_ratio:
        raise errors.UnimplementedError(f"{fn}: preserve_aspect_ratio is not supported")
    try:
        method = ResizeMethod(int(method))
    except (TypeError, ValueError):
        raise _E(f"{fn}: method must be a tw.image.ResizeMethod, got {method!r}") from None
    if method not in (ResizeMethod.BILINEAR, ResizeMethod.NEAREST_NEIGHBOR):
        raise errors.UnimplementedError(f"{fn}: method {method.name} is not implemented (BILINEAR and "
                                        "NEAREST_NEIGHBOR are)")
    with get_default_graph().name_scope(name or "resize_images"):
        x = convert_to_tensor(images, name="images")
        rank = x.shape.ndims
        if rank not in (3, 4):
            raise _E(f"{fn}: images must be 3-D [height, width, channels] or 4-D [batch, height, width, channels], "
                     f"got shape {x.shape}")
        x4 = array_ops.expand_dims(x, 0) if rank == 3 else x
        size_t = _size_tensor(size, fn)
        sv = constant_value(size_t)
        if sv is not None:
            check_size(sv, f"{fn}: size")
            if x4.shape[1:3].as_list() == [int(v) for v in sv]:
                return x  # as TensorFlow: no resize, whatever the method and dtype
        op = resize_bilinear if method == ResizeMethod.BILINEAR else resize_nearest_neighbor
        y = op(x4, size_t, align_corners=align_corners)
        return array_ops.squeeze(y, [0]) if rank == 3 else y
