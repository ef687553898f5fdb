"""Summary ops and their TF1 wrappers (``tw.summary.scalar``, ``histogram``, ``image``,
``audio``, ``text``, ``tensor_summary``, ``merge``, ``merge_all``).

Each op outputs a 0-d string tensor holding a serialized ``Summary`` protocol buffer
(TensorBoard's ``summary_pb2.Summary``), exactly as TensorFlow 1.x's do, so a summary is an
ordinary graph value: it can be fetched, merged, computed on a worker or inside a loop body.
The ops are TensorFlow's: ``ScalarSummary``, ``HistogramSummary``, ``ImageSummary``,
``AudioSummaryV2``, ``TensorSummaryV2`` and ``MergeSummary``; their kernels (host logic, CPU
only) are in ``tensorweave/kernels/summary.py``. The wrappers pin each summary op to the CPU
of the task the surrounding device scope names (``/device:CPU:0`` merged into it), so a
summary of a value computed on an accelerator gets its input through an ordinary transfer.

This module also owns tag cleaning (``clean_tag``, TF's rule: characters outside
``[-/\\w.]`` become ``_``, leading slashes go, with a warning), ``summary_scope`` (tags and
op names from ``name`` and ``family``) and ``tensorboard_protos()``, the one place that
imports the optional ``tensorboard`` package's compiled protocol buffers.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import re
import types

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, Tensor, apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape

__all__ = ["scalar", "histogram", "image", "audio", "text", "tensor_summary", "merge", "merge_all"]

log = logging.getLogger("tensorweave.summary")

INSTALL_HINT = "pip install 'tensorweave[tensorboard]'"
_PROTO_MODULES = ("summary_pb2", "event_pb2", "graph_pb2", "node_def_pb2", "attr_value_pb2", "tensor_pb2",
                  "tensor_shape_pb2", "types_pb2", "step_stats_pb2", "config_pb2", "versions_pb2",
                  "allocation_description_pb2", "tensor_description_pb2")


@functools.lru_cache(maxsize=1)
def _import_protos():
    # Imported inside a function because tensorboard is an optional dependency (the extra
    # `tensorweave[tensorboard]`): the core imports and runs without it.
    mods = {name: importlib.import_module(f"tensorboard.compat.proto.{name}") for name in _PROTO_MODULES}
    return types.SimpleNamespace(**mods)


def tensorboard_protos(what: str = "summaries"):
    """TensorBoard's compiled protos (``summary_pb2``, ``event_pb2``, ``graph_pb2``, ...) as
    attributes of one namespace; FailedPreconditionError saying how to install them if the
    ``tensorboard`` package is missing. ``what`` names the feature that needs them."""
    try:
        return _import_protos()
    except ImportError as e:
        raise errors.FailedPreconditionError(
            f"{what}: the tensorboard package's protocol buffers cannot be imported ({e}); install them "
            f"with {INSTALL_HINT}") from None


# --- op definitions ------------------------------------------------------------------------
def _scalar_input(op, index, what):
    s = op.inputs[index].shape
    if s.ndims is not None and s.ndims != 0:
        raise errors.InvalidArgumentError(f"{what} must be a scalar, got shape {s}")


def _scalar_summary_shape(op):
    tags, values = op.inputs[0].shape, op.inputs[1].shape
    if not tags.is_compatible_with(values):
        hint = (" (tw.summary.scalar takes one value: reduce it first, e.g. tw.reduce_mean)"
                if tags.ndims == 0 else "")
        raise errors.InvalidArgumentError(
            f"tags and values must have the same shape, got tags {tags} and values {values}{hint}")
    return [TensorShape([])]


def _histogram_shape(op):
    _scalar_input(op, 0, "tag")
    return [TensorShape([])]


def check_image_shape(shape, what="tensor") -> str | None:
    """Why an image batch of ``shape`` (a tuple or TensorShape) is not ``[batch, height,
    width, channels]`` with 1, 3 or 4 channels, or None. Unknown dims pass."""
    dims = list(shape) if not isinstance(shape, TensorShape) else shape.dims
    if dims is None:
        return None
    if len(dims) != 4:
        return f"{what} must be 4-D [batch_size, height, width, channels], got shape {list(dims)}"
    if dims[3] is not None and dims[3] not in (1, 3, 4):
        return (f"{what} must have 1 (grayscale), 3 (RGB) or 4 (RGBA) channels, got {dims[3]} "
                f"(shape {list(dims)})")
    return None


def _image_shape(op):
    _scalar_input(op, 0, "tag")
    why = check_image_shape(op.inputs[1].shape)
    if why:
        raise errors.InvalidArgumentError(why)
    bad = op.get_attr("bad_color")
    if len(bad) < 4 or any(not 0 <= c <= 255 for c in bad):
        raise errors.InvalidArgumentError(f"bad_color must be 4 values in [0, 255] (RGBA), got {bad}")
    return [TensorShape([])]


def check_audio_shape(shape, what="tensor") -> str | None:
    dims = list(shape) if not isinstance(shape, TensorShape) else shape.dims
    if dims is None or len(dims) in (2, 3):
        return None
    return f"{what} must be 2-D [batch_size, frames] or 3-D [batch_size, frames, channels], got shape {list(dims)}"


def _audio_shape(op):
    _scalar_input(op, 0, "tag")
    _scalar_input(op, 2, "sample_rate")
    why = check_audio_shape(op.inputs[1].shape)
    if why:
        raise errors.InvalidArgumentError(why)
    return [TensorShape([])]


def _tensor_summary_shape(op):
    _scalar_input(op, 0, "tag")
    _scalar_input(op, 2, "serialized_summary_metadata")
    return [TensorShape([])]


def register_ops(registry):
    registry.op("ScalarSummary", inputs=["tags: string", "values: T"], outputs=["summary: string"],
                attrs=["T: realnumbertype"], shape_fn=_scalar_summary_shape,
                doc="A Summary with one simple_value per (tag, value) pair; tags and values have one shape.")
    registry.op("HistogramSummary", inputs=["tag: string", "values: T"], outputs=["summary: string"],
                attrs=["T: realnumbertype = float32"], shape_fn=_histogram_shape,
                doc="A Summary with a histogram of values (TF's default exponential buckets).")
    # bad_color is a list(int) here (TF: a uint8 tensor attr): the colour of non-finite pixels.
    registry.op("ImageSummary", inputs=["tag: string", "tensor: T"], outputs=["summary: string"],
                attrs=["max_images: int >= 1 = 3", "T: {uint8, float32, float16, float64} = float32",
                       "bad_color: list(int) = [255, 0, 0, 255]"], shape_fn=_image_shape,
                doc="A Summary with up to max_images PNG images from a [batch, height, width, channels] tensor.")
    registry.op("AudioSummaryV2", inputs=["tag: string", "tensor: float32", "sample_rate: float32"],
                outputs=["summary: string"], attrs=["max_outputs: int >= 1 = 3"], shape_fn=_audio_shape,
                doc="A Summary with up to max_outputs WAV clips from a [batch, frames(, channels)] tensor in [-1, 1].")
    registry.op("TensorSummaryV2", inputs=["tag: string", "tensor: T", "serialized_summary_metadata: string"],
                outputs=["summary: string"], attrs=["T: type"], shape_fn=_tensor_summary_shape,
                doc="A Summary holding the tensor itself (as a TensorProto) and the given SummaryMetadata.")
    registry.op("MergeSummary", inputs=["inputs: N * string"], outputs=["summary: string"],
                attrs=["N: int >= 1"], shape_fn=lambda op: [TensorShape([])],
                doc="The union of serialized Summary protos; a tag present twice is an error.")
    registry.no_gradient("ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummaryV2",
                         "TensorSummaryV2", "MergeSummary")


# --- tags and scopes -----------------------------------------------------------------------
# TF1's rule (summary_op_util): TensorBoard tags are made of these characters. ASCII only,
# so the tag is also a valid name scope here.
_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w.]", re.ASCII)


def clean_tag(name: str | None) -> str | None:
    """``name`` with characters TensorBoard rejects replaced by ``_`` and leading slashes
    removed; logs a warning when it had to change anything (TF1 does the same)."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise errors.InvalidArgumentError(f"a summary name must be a string, got {name!r}")
    new = _INVALID_TAG_CHARACTERS.sub("_", name).lstrip("/")
    if new != name:
        log.warning("summary name %r is not a valid TensorBoard tag; using %r instead", name, new)
    if not new:
        raise errors.InvalidArgumentError(f"summary name {name!r} is empty once cleaned; give a name like 'loss'")
    return new


@contextlib.contextmanager
def summary_scope(name, family=None, default_name=None, graph=None):
    """Yields ``(tag, scope)`` for a summary op: the op is named after the (unique) scope and
    its tag is the scope without the trailing slash, prefixed by ``family`` when given (so
    TensorBoard shows it in the family's section)."""
    g = graph or get_default_graph()
    if name is None and default_name is None:
        raise errors.InvalidArgumentError("a summary needs a name (its TensorBoard tag), got None")
    name = clean_tag(name if name is not None else default_name)
    family = clean_tag(family)
    base = name if family is None else f"{family}/{name}"
    with g.name_scope(base) as scope:
        tag = scope.rstrip("/") if family is None else f"{family}/{scope.rstrip('/')}"
        yield tag, scope


def _graph_of(*values):
    for v in values:
        if isinstance(v, Tensor):
            return v.graph
    return get_default_graph()


def _summary_op(op_type, name, family, inputs, attrs=None, collections=None, values=()):
    g = _graph_of(*values)
    with g.as_default(), summary_scope(name, family, graph=g) as (tag, scope):
        # Summaries are host logic: the CPU of whatever task the enclosing scopes name.
        with g.device("/device:CPU:0"):
            out = apply_op(op_type, [tag, *inputs], attrs, _exact_name=scope.rstrip("/"), graph=g)
    _collect(g, out, collections, [GraphKeys.SUMMARIES])
    return out


def _collect(g, value, collections, default):
    for key in (default if collections is None else collections):
        g.add_to_collection(key, value)


# --- TF1 wrappers --------------------------------------------------------------------------
def scalar(name, tensor, collections=None, family=None):
    """A summary of one real number (``tf.summary.scalar``): ``tensor`` must be a scalar."""
    tensor = convert_to_tensor(tensor)
    if tensor.dtype not in dtypes.REAL_NUMBER:
        raise errors.InvalidArgumentError(
            f"tw.summary.scalar {name!r}: tensor '{tensor.name}' must be real numeric, got {tensor.dtype.name}")
    return _summary_op("ScalarSummary", name, family, [tensor], collections=collections, values=[tensor])


def histogram(name, values, collections=None, family=None):
    """A histogram of ``values`` (any shape; ``tf.summary.histogram``). NaN or Inf in the
    values fails the step, as in TF."""
    values = convert_to_tensor(values)
    return _summary_op("HistogramSummary", name, family, [values], collections=collections, values=[values])


def image(name, tensor, max_outputs=3, collections=None, family=None):
    """Up to ``max_outputs`` images of a ``[batch, height, width, channels]`` tensor
    (``tf.summary.image``), channels 1, 3 or 4, tagged ``name/image/i`` (``name/image`` when
    ``max_outputs`` is 1). uint8 values are used as they are; float images are scaled per
    image as TF1 does: non-negative ones so their maximum becomes 255 (an image in [0, 1]
    is multiplied by 255), others so 0 is at 128 and the largest magnitude spans 127."""
    tensor = convert_to_tensor(tensor)
    return _summary_op("ImageSummary", name, family, [tensor], {"max_images": max_outputs},
                       collections, values=[tensor])


def audio(name, tensor, sample_rate, max_outputs=3, collections=None, family=None):
    """Up to ``max_outputs`` WAV clips (16-bit PCM) of a float32 ``[batch, frames]`` or
    ``[batch, frames, channels]`` tensor with values in [-1, 1] (``tf.summary.audio``)."""
    tensor = convert_to_tensor(tensor, dtype=dtypes.float32)
    g = _graph_of(tensor)
    with g.as_default():
        sample_rate = convert_to_tensor(sample_rate, dtype=dtypes.float32, name="sample_rate")
    return _summary_op("AudioSummaryV2", name, family, [tensor, sample_rate], {"max_outputs": max_outputs},
                       collections, values=[tensor])


def tensor_summary(name, tensor, summary_description=None, collections=None, summary_metadata=None,
                   family=None, display_name=None):
    """A summary holding ``tensor`` itself (``tf.summary.tensor_summary``), with
    ``summary_metadata`` (a ``SummaryMetadata`` proto; its plugin data says which
    TensorBoard plugin shows it)."""
    pb = tensorboard_protos("tw.summary.tensor_summary")
    meta = pb.summary_pb2.SummaryMetadata()
    if summary_metadata is not None:
        meta.CopyFrom(summary_metadata)
    if summary_description is not None:
        meta.summary_description = summary_description
    if display_name is not None:
        meta.display_name = display_name
    tensor = convert_to_tensor(tensor)
    serialized = np.array(meta.SerializeToString(), dtype=object)
    return _summary_op("TensorSummaryV2", name, family, [tensor, serialized], collections=collections,
                       values=[tensor])


def text(name, tensor, collections=None):
    """A string tensor (any shape) shown by TensorBoard's text dashboard, as Markdown
    (``tf.summary.text``)."""
    tensor = convert_to_tensor(tensor)
    if tensor.dtype is not dtypes.string:
        raise errors.InvalidArgumentError(
            f"tw.summary.text {name!r}: tensor '{tensor.name}' must be a string tensor, got {tensor.dtype.name}")
    pb = tensorboard_protos("tw.summary.text")
    meta = pb.summary_pb2.SummaryMetadata(
        plugin_data=pb.summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    return tensor_summary(name, tensor, summary_metadata=meta, collections=collections)


def merge(inputs, collections=None, name=None):
    """One summary holding every value of ``inputs`` (serialized Summary strings;
    ``tf.summary.merge``). A tag present in two inputs fails the step."""
    inputs = list(inputs)
    if not inputs:
        raise errors.InvalidArgumentError("tw.summary.merge: inputs is empty; pass at least one summary")
    g = _graph_of(*inputs)
    with g.as_default(), g.device("/device:CPU:0"):
        out = apply_op("MergeSummary", [inputs], name=name or "Merge/MergeSummary", graph=g)
    _collect(g, out, collections, [])
    return out


def merge_all(key=GraphKeys.SUMMARIES, scope=None, name=None):
    """``merge`` of every summary in collection ``key`` (optionally only those under name
    ``scope``), or None when there are none (``tf.summary.merge_all``)."""
    ops = get_default_graph().get_collection(key, scope)
    if not ops:
        return None
    return merge(ops, name=name)
