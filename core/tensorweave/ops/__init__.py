"""Op definitions, their Python wrappers and gradient functions, by family.

Each family module has ``register_ops(registry)`` (called by the core's built-in plugin,
``tensorweave/builtin/ops.py``, through the ``tensorweave_register_ops`` hook) and the public
TF1-style wrappers. Gradient functions live beside them in ``*_grad.py`` modules, as in
TensorFlow. Nothing here runs a kernel: ops are definitions; kernels are registered by device
plugins and ``tensorweave.kernels``.
"""
