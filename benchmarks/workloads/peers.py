"""The peer frameworks a workload is compared with in the same run, when installed (the
``bench`` tox environment installs them; the test environment does not): TensorFlow's
``tf.compat.v1`` in graph mode (the same graph a TF1 user writes) and JAX's ``jax.jit``.
Each returns None when the framework is missing, so the workload skips that column."""

from __future__ import annotations

import os

TF_LABEL = "tensorflow (tf.compat.v1)"
JAX_LABEL = "jax (jit)"


def tf_v1():
    """``tf.compat.v1`` with eager execution off, or None."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # its start-up banners are not results
    try:
        import tensorflow as tf
    except ImportError:
        return None
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    return v1


def jax():
    """(jax, jax.numpy), or None."""
    try:
        import jax as jax_mod
        import jax.numpy as jnp
    except ImportError:
        return None
    return jax_mod, jnp


def tf_session(v1, build):
    """``build()`` in a fresh TF graph; returns (session, whatever build returned)."""
    g = v1.Graph()
    with g.as_default():
        out = build()
        init = v1.global_variables_initializer()
    sess = v1.Session(graph=g)
    sess.run(init)
    return sess, out
