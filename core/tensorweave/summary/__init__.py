"""``tw.summary``: TF1's summary API. Summary ops (``scalar``, ``histogram``, ``image``,
``audio``, ``text``, ``tensor_summary``, ``merge``, ``merge_all``) are defined in
``tensorweave.ops.summary_ops``; ``FileWriter`` and ``FileWriterCache`` in ``writer.py``;
the graph and run-metadata conversion for TensorBoard in ``convert.py``.

The protocol buffers come from the optional ``tensorboard`` package
(``pip install 'tensorweave[tensorboard]'``); ``tw.summary.Summary``, ``SessionLog``,
``Event``, ``SummaryMetadata``, ``HistogramProto``, ``SummaryDescription`` and
``TaggedRunMetadata`` are its classes, looked up on first use.
"""

from __future__ import annotations

from tensorweave.ops.summary_ops import (
    audio,
    histogram,
    image,
    merge,
    merge_all,
    scalar,
    tensor_summary,
    tensorboard_protos,
    text,
)
from tensorweave.summary.convert import graph_def_proto, run_metadata_proto
from tensorweave.summary.writer import FileWriter, FileWriterCache

__all__ = ["scalar", "histogram", "image", "audio", "text", "tensor_summary", "merge", "merge_all",
           "FileWriter", "FileWriterCache", "scalar_value", "graph_def_proto", "run_metadata_proto",
           "Summary", "SessionLog", "Event", "SummaryMetadata", "HistogramProto", "SummaryDescription",
           "TaggedRunMetadata"]

_PROTO_CLASSES = {"Summary": "summary_pb2", "SummaryMetadata": "summary_pb2", "HistogramProto": "summary_pb2",
                  "SummaryDescription": "summary_pb2", "SessionLog": "event_pb2", "Event": "event_pb2",
                  "TaggedRunMetadata": "event_pb2"}


def __getattr__(name):
    # The proto classes resolve on first use, so `import tensorweave` works without tensorboard.
    module = _PROTO_CLASSES.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorweave.summary' has no attribute {name!r}")
    return getattr(getattr(tensorboard_protos(f"tw.summary.{name}"), module), name)


def scalar_value(tag, value):
    """A ``Summary`` proto with one scalar, made in Python (no graph op): for values
    computed outside the graph, such as steps per second."""
    pb = tensorboard_protos("tw.summary.scalar_value")
    return pb.summary_pb2.Summary(value=[pb.summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
