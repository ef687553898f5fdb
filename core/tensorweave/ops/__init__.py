"""Op definitions, their Python wrappers and (later) gradient functions, by family.

Each family module has ``register_ops(registry)``, called by the core's built-in plugin
through the ``tensorweave_register_ops`` hook, and the public wrapper functions.
"""

FAMILIES = ("array_ops", "math_ops", "random_ops", "state_ops", "control_ops", "nn_ops")
