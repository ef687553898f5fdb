"""``tw.python_io``: writing and reading record files from Python (TF1's ``tf.python_io``).

The format and the code live in ``tensorweave.framework.record_io``; this module is the
public namespace.
"""

from tensorweave.framework.record_io import (
    TFRecordCompressionType,
    TFRecordOptions,
    TFRecordWriter,
    tf_record_iterator,
)

__all__ = ["TFRecordCompressionType", "TFRecordOptions", "TFRecordWriter", "tf_record_iterator"]
