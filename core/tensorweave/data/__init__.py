"""``tw.data`` (TF 1.4+): input pipelines as graph ops.

``Dataset`` sources (``from_tensors``, ``from_tensor_slices``, ``from_generator``, ``range``,
``zip``, ``list_files``, ``TextLineDataset``, ``TFRecordDataset``,
``FixedLengthRecordDataset``) and transformations (``map``, ``filter``, ``flat_map``,
``interleave``, ``batch``, ``padded_batch``, ``shuffle``, ``repeat``, ``prefetch``, ``take``,
``skip``, ``cache``, ``concatenate``, ``apply``) add ops to the graph; an ``Iterator`` runs
them in the session (``docs/data.md``). Layers below: the ops in ``ops/dataset_ops.py``, the
kernels in ``kernels/datasets.py``, the running pipeline in ``runtime/datasets.py``, graph
functions in ``framework/function.py`` and ``runtime/functions.py``.
"""

from tensorweave.data.dataset import Dataset
from tensorweave.data.iterator import (
    Iterator,
    get_output_classes,
    get_output_shapes,
    get_output_types,
    make_initializable_iterator,
    make_one_shot_iterator,
)
from tensorweave.data.readers import FixedLengthRecordDataset, TextLineDataset, TFRecordDataset

__all__ = ["Dataset", "Iterator", "TextLineDataset", "TFRecordDataset", "FixedLengthRecordDataset",
           "make_one_shot_iterator", "make_initializable_iterator", "get_output_types", "get_output_shapes",
           "get_output_classes"]
