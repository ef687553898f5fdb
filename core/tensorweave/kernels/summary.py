"""Summary kernels (ScalarSummary, HistogramSummary, ImageSummary, AudioSummaryV2,
TensorSummaryV2, MergeSummary): host logic, registered by the core for the CPU device of
every task, so summaries run wherever a step runs (locally, on workers, in loop bodies).

Each returns a 0-d string array holding a serialized ``Summary`` built with the tensorboard
package's own protos (``summary_pb2``), never hand-encoded protobuf. The protos are imported
when a kernel is built (plan time), so a missing ``tensorboard`` fails the plan with a
FailedPreconditionError naming the node. This module also owns the encodings the summaries
carry: TF1's default histogram buckets, PNG (``encode_png``: zlib + struct, the format needs
nothing more), WAV (the stdlib ``wave`` module), and ndarray -> ``TensorProto``
(``tensor_proto``, also used by ``tw.summary``'s graph conversion).
"""

from __future__ import annotations

import io
import struct
import sys
import wave
import zlib

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.ops.summary_ops import check_audio_shape, check_image_shape, tensorboard_protos

CPU = "CPU"


def _protos(ctx):
    try:
        return tensorboard_protos()
    except errors.FailedPreconditionError as e:
        raise ctx.error(errors.FailedPreconditionError, e.message) from None


def _text(value) -> str:
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _bytes(value) -> bytes:
    if isinstance(value, bytes | np.bytes_):
        return bytes(value)
    return str(value).encode("utf-8")


def _out(summary) -> np.ndarray:
    return np.array(summary.SerializeToString(), dtype=object)


def _scalar_string(ctx, value, what) -> str:
    arr = np.asarray(value)
    if arr.shape != ():
        raise ctx.error(errors.InvalidArgumentError, f"{what} must be a scalar, got shape {list(arr.shape)}")
    return _text(arr.item())


# --- protos for tensors ---------------------------------------------------------------------
_DT_NAMES = {
    "float16": "DT_HALF", "float32": "DT_FLOAT", "float64": "DT_DOUBLE", "int8": "DT_INT8", "int16": "DT_INT16",
    "int32": "DT_INT32", "int64": "DT_INT64", "uint8": "DT_UINT8", "uint16": "DT_UINT16", "uint32": "DT_UINT32",
    "uint64": "DT_UINT64", "complex64": "DT_COMPLEX64", "complex128": "DT_COMPLEX128", "bool": "DT_BOOL",
    "string": "DT_STRING",
}


def datatype_enum(dtype, pb) -> int:
    """TensorFlow's ``DataType`` enum value of a tensorweave dtype."""
    return getattr(pb.types_pb2, _DT_NAMES[dtypes.as_dtype(dtype).name])


def shape_proto(dims, pb):
    """A ``TensorShapeProto`` from dims (ints, None for unknown) or None (unknown rank)."""
    if dims is None:
        return pb.tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return pb.tensor_shape_pb2.TensorShapeProto(
        dim=[pb.tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else int(d)) for d in dims])


def tensor_proto(value, pb):
    """A ``TensorProto`` of an ndarray: strings in ``string_val``, anything else as
    little-endian ``tensor_content`` (what TensorFlow and TensorBoard read back)."""
    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind in "SU":
        t = pb.tensor_pb2.TensorProto(dtype=pb.types_pb2.DT_STRING, tensor_shape=shape_proto(arr.shape, pb))
        t.string_val.extend(_bytes(x) for x in arr.flat)
        return t
    dt = dtypes.as_dtype(arr.dtype)
    t = pb.tensor_pb2.TensorProto(dtype=datatype_enum(dt, pb), tensor_shape=shape_proto(arr.shape, pb))
    t.tensor_content = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return t


# --- scalars ---------------------------------------------------------------------------------
def _scalar(ctx):
    pb = _protos(ctx)

    def scalar_summary(tags, values):
        tags, values = np.asarray(tags), np.asarray(values)
        if tags.shape != values.shape:
            hint = " (tw.summary.scalar takes one value: reduce it first)" if tags.shape == () else ""
            raise ctx.error(errors.InvalidArgumentError,
                            f"tags and values must have the same shape, got tags {list(tags.shape)} and values "
                            f"{list(values.shape)}{hint}")
        s = pb.summary_pb2.Summary()
        for tag, v in zip(tags.flat, values.flat):
            s.value.add(tag=_text(tag), simple_value=float(v))
        return _out(s)
    return scalar_summary


# --- histograms --------------------------------------------------------------------------------
def _default_bucket_limits() -> np.ndarray:
    # TF1's default buckets: limits growing by 10% from 1e-12 to 1e20 on each side of 0,
    # closed by +-DBL_MAX (computed by repeated multiplication, so the limits are TF's
    # doubles exactly).
    pos = []
    v = 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos.append(sys.float_info.max)
    return np.array([-x for x in reversed(pos)] + [0.0] + pos)


BUCKET_LIMITS = _default_bucket_limits()


def histogram_proto(values, pb):
    """A ``HistogramProto`` of finite ``values`` with TF's default buckets. Bucket i counts
    values in [limit[i-1], limit[i]); runs of empty buckets are written as one empty
    bucket ending where the run ends (TF's ``EncodeToProto(preserve_zero_buckets=False)``)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    idx = np.minimum(np.searchsorted(BUCKET_LIMITS, v, side="right"), BUCKET_LIMITS.size - 1)
    counts = np.bincount(idx, minlength=BUCKET_LIMITS.size).astype(np.float64)
    filled = counts != 0
    keep = filled | np.append(filled[1:], True)  # the last empty bucket of each run stays
    h = pb.summary_pb2.HistogramProto(
        min=float(v.min()) if v.size else float(BUCKET_LIMITS[-1]),
        max=float(v.max()) if v.size else float(BUCKET_LIMITS[0]),
        num=float(v.size), sum=float(v.sum()), sum_squares=float(np.dot(v, v)))
    h.bucket_limit.extend(BUCKET_LIMITS[keep].tolist())
    h.bucket.extend(counts[keep].tolist())
    return h


def _histogram(ctx):
    pb = _protos(ctx)

    def histogram_summary(tag, values):
        tag = _scalar_string(ctx, tag, "tag")
        values = np.asarray(values)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            what = "NaN" if np.isnan(values).any() else "Infinity"
            raise ctx.error(errors.InvalidArgumentError, f"{what} in summary histogram for: {tag}")
        s = pb.summary_pb2.Summary()
        s.value.add(tag=tag, histo=histogram_proto(values, pb))
        return _out(s)
    return histogram_summary


# --- images -------------------------------------------------------------------------------------
_PNG_COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}  # grey, grey+alpha, RGB, RGBA


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(image, level: int = 6) -> bytes:
    """PNG bytes of a ``[height, width, channels]`` uint8 array (1-4 channels), 8 bits per
    sample, no interlacing, filter type 0 on every row."""
    img = np.ascontiguousarray(image, dtype=np.uint8)
    h, w, c = img.shape
    rows = np.zeros((h, 1 + w * c), np.uint8)  # each scanline starts with its filter byte (0: none)
    rows[:, 1:] = img.reshape(h, w * c)
    header = struct.pack(">IIBBBBB", w, h, 8, _PNG_COLOR_TYPE[c], 0, 0, 0)
    return b"".join((b"\x89PNG\r\n\x1a\n", _png_chunk(b"IHDR", header),
                     _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), level)), _png_chunk(b"IEND", b"")))


def to_uint8_image(img, bad_color) -> np.ndarray:
    """TF1's ImageSummary normalisation of one float image ``[h, w, c]``: non-negative
    images are scaled so the largest finite value is 255, others so 0 goes to 128 and the
    largest magnitude spans 127; pixels with a non-finite channel get ``bad_color``."""
    x = np.asarray(img, dtype=np.float64)
    finite = np.isfinite(x)
    lo, hi = (float(x[finite].min()), float(x[finite].max())) if finite.any() else (0.0, 0.0)
    if lo < 0:
        m = max(abs(lo), abs(hi))
        scale, offset = (0.0 if m < 1e-6 else 127.0 / m), 128.0
    else:
        scale, offset = (0.0 if hi < 1e-6 else 255.0 / hi), 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.clip(np.where(finite, x, 0.0) * scale + offset, 0, 255).astype(np.uint8)
    bad = ~finite.all(axis=-1)
    if bad.any():
        out[bad] = np.asarray(bad_color[:x.shape[-1]], np.uint8)
    return out


def _image(ctx):
    pb = _protos(ctx)
    max_images = ctx.attrs["max_images"]
    bad_color = list(ctx.attrs["bad_color"])

    def image_summary(tag, tensor):
        tag = _scalar_string(ctx, tag, "tag")
        tensor = np.asarray(tensor)
        why = check_image_shape(tensor.shape)
        if why:
            raise ctx.error(errors.InvalidArgumentError, why)
        n, h, w, c = tensor.shape
        if n and (h == 0 or w == 0):
            raise ctx.error(errors.InvalidArgumentError, f"images must have at least one pixel, got shape "
                                                         f"{list(tensor.shape)}")
        s = pb.summary_pb2.Summary()
        for i in range(min(n, max_images)):
            img = tensor[i] if tensor.dtype == np.uint8 else to_uint8_image(tensor[i], bad_color)
            # The tag depends on the number of images asked for, not produced (TF1).
            s.value.add(tag=f"{tag}/image/{i}" if max_images > 1 else f"{tag}/image",
                        image=pb.summary_pb2.Summary.Image(height=h, width=w, colorspace=c,
                                                           encoded_image_string=encode_png(img)))
        return _out(s)
    return image_summary


# --- audio ----------------------------------------------------------------------------------------
def encode_wav(clip, sample_rate: float) -> bytes:
    """16-bit PCM WAV bytes of a ``[frames, channels]`` float array in [-1, 1] (clipped)."""
    clip = np.asarray(clip, dtype=np.float64)
    pcm = np.clip(np.rint(np.nan_to_num(clip) * 32768.0), -32768, 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(clip.shape[1])
        w.setsampwidth(2)
        w.setframerate(int(round(sample_rate)))
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def _audio(ctx):
    pb = _protos(ctx)
    max_outputs = ctx.attrs["max_outputs"]

    def audio_summary(tag, tensor, sample_rate):
        tag = _scalar_string(ctx, tag, "tag")
        tensor = np.asarray(tensor)
        why = check_audio_shape(tensor.shape)
        if why:
            raise ctx.error(errors.InvalidArgumentError, why)
        rate = np.asarray(sample_rate)
        if rate.shape != () or not float(rate) > 0:
            raise ctx.error(errors.InvalidArgumentError,
                            f"sample_rate must be a positive scalar, got {rate.tolist()!r}")
        rate = float(rate)
        if tensor.ndim == 2:
            tensor = tensor[:, :, None]
        n, frames, channels = tensor.shape
        if n and channels == 0:
            raise ctx.error(errors.InvalidArgumentError, f"audio must have at least one channel, got shape "
                                                         f"{list(tensor.shape)}")
        s = pb.summary_pb2.Summary()
        for i in range(min(n, max_outputs)):
            s.value.add(tag=f"{tag}/audio/{i}" if max_outputs > 1 else f"{tag}/audio",
                        audio=pb.summary_pb2.Summary.Audio(
                            sample_rate=rate, num_channels=channels, length_frames=frames,
                            encoded_audio_string=encode_wav(tensor[i], rate), content_type="audio/wav"))
        return _out(s)
    return audio_summary


# --- tensors and merging ----------------------------------------------------------------------------
def _tensor(ctx):
    pb = _protos(ctx)

    def tensor_summary(tag, tensor, serialized_metadata):
        tag = _scalar_string(ctx, tag, "tag")
        meta = np.asarray(serialized_metadata)
        if meta.shape != ():
            raise ctx.error(errors.InvalidArgumentError,
                            f"serialized_summary_metadata must be a scalar, got shape {list(meta.shape)}")
        try:
            metadata = pb.summary_pb2.SummaryMetadata.FromString(_bytes(meta.item()))
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, reported as this node's
            raise ctx.error(errors.InvalidArgumentError, f"serialized_summary_metadata is not a "
                                                         f"SummaryMetadata proto: {e}") from None
        s = pb.summary_pb2.Summary()
        s.value.add(tag=tag, metadata=metadata, tensor=tensor_proto(tensor, pb))
        return _out(s)
    return tensor_summary


def _merge(ctx):
    pb = _protos(ctx)
    Summary = pb.summary_pb2.Summary

    def merge_summary(*inputs):
        out = Summary()
        seen = set()
        for i, x in enumerate(inputs):
            for serialized in np.asarray(x, dtype=object).flat:
                try:
                    s = Summary.FromString(_bytes(serialized))
                except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
                    raise ctx.error(errors.InvalidArgumentError,
                                    f"input {i} ('{ctx.op.inputs[i].name}') is not a serialized Summary: {e}") from None
                for v in s.value:
                    if v.tag and v.tag in seen:
                        raise ctx.error(errors.InvalidArgumentError,
                                        f"duplicate tag {v.tag!r} in the summaries merged (input {i}, "
                                        f"'{ctx.op.inputs[i].name}'): give the summaries different names")
                    seen.add(v.tag)
                out.MergeFrom(s)  # repeated fields concatenate
        return _out(out)
    return merge_summary


def register_kernels(reg):
    reg.register("ScalarSummary", CPU, factory=_scalar)
    reg.register("HistogramSummary", CPU, factory=_histogram)
    reg.register("ImageSummary", CPU, factory=_image)
    reg.register("AudioSummaryV2", CPU, factory=_audio)
    reg.register("TensorSummaryV2", CPU, factory=_tensor)
    reg.register("MergeSummary", CPU, factory=_merge)
