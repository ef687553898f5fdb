"""Entry point of the example plugin: registers the ScaledSoftsign op (definition, shape
function, gradient) and its CPU kernel through tensorweave's hooks."""

from __future__ import annotations

import numpy as np

from tensorweave import errors
from tensorweave.ops import shape_fns
from tensorweave.plugins import hookimpl

OP = "ScaledSoftsign"


def _shape(op):
    # Runs when the node is built: bad attrs fail here, naming the node, not inside a kernel.
    if op.get_attr("scale") == 0:
        raise errors.InvalidArgumentError("scale must not be 0 (the op would be constant)")
    return shape_fns.unchanged(op)


def _gradient(op, grad):
    """d/dx [s x / (1 + |x|)] = s / (1 + |x|)^2, built from core ops so it runs on any device."""
    import tensorweave as tw

    x = op.inputs[0]
    scale = tw.constant(op.get_attr("scale"), dtype=x.dtype)
    return [grad * scale / tw.square(1 + tw.abs(x))]


@hookimpl
def tensorweave_register_ops(registry):
    registry.op(OP, inputs=["x: T"], outputs=["y: T"],
                attrs=["T: {float16, float32, float64}", "scale: float = 1.0"], shape_fn=_shape,
                doc="scale * x / (1 + |x|), element-wise.")
    registry.gradient(OP)(_gradient)


@hookimpl
def tensorweave_register_kernels(registry):
    @registry.kernel(OP, "CPU")
    def scaled_softsign(ctx):
        # Once per node, when a plan is built: read attrs, fix the dtype.
        dt = ctx.output_dtypes[0].np_dtype
        scale = dt.type(ctx.attrs["scale"])

        def compute(x):  # every step
            return np.asarray(scale * x / (1 + np.abs(x)), dtype=dt)
        return compute


@hookimpl
def tensorweave_plugin_status():
    return "example op ScaledSoftsign (CPU kernel, gradient)"
