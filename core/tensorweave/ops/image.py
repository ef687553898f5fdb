"""The ``tw.image`` namespace (TF1 ``tf.image``): resizing (ops/image_ops.py)."""

from tensorweave.ops.image_ops import (  # noqa: F401
    ResizeMethod,
    resize_bilinear,
    resize_images,
    resize_nearest_neighbor,
)
