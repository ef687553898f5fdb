"""``tw.layers``: dense, conv2d, pooling, flatten, dropout built from graph ops."""

from __future__ import annotations
