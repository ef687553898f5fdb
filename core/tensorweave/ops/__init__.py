"""Op definitions, their Python wrappers and (later) gradient functions, by family.

Each family module has ``register_ops(registry)``, called by the core's built-in plugin
through the ``tensorweave_register_ops`` hook, and the public wrapper functions. Gradient
functions live beside them in ``*_grad.py`` modules, as in TensorFlow.
"""

FAMILIES = ("array_ops", "math_ops", "random_ops", "state_ops", "control_ops", "control_flow_ops", "nn_ops",
            "training_ops", "data_flow_ops", "checkpoint_ops", "io_ops", "accumulator_ops")

# Gradient modules: ``register_ops`` (helper ops that gradients need) and ``register_gradients``.
GRADIENTS = ("math_grad", "array_grad", "nn_grad", "control_flow_grad")
