"""Reading a ``tw.data`` pipeline to its end in tests: ``elements(dataset)``."""

from __future__ import annotations

import tensorweave as tw


def elements(dataset, sess=None, feed=None, limit=1000) -> list:
    """Every element of ``dataset``, read through an initializable iterator (in ``sess``, or
    a session of its own); AssertionError when there are more than ``limit``."""
    it = dataset.make_initializable_iterator()
    nxt = it.get_next()
    own = sess is None
    sess = sess or tw.Session()
    try:
        sess.run(it.initializer, feed)
        out = []
        for _ in range(limit):
            try:
                out.append(sess.run(nxt))
            except tw.errors.OutOfRangeError:
                return out
        raise AssertionError(f"more than {limit} elements")
    finally:
        if own:
            sess.close()
