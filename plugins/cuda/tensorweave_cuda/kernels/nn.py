"""Neural-net ops: Softmax, LogSoftmax, the softmax cross-entropies, BiasAdd and its gradient.
(Relu, Sigmoid, Tanh, Elu, Softplus and their gradients are element-wise: elementwise.py.)"""

from __future__ import annotations

from tensorweave_cuda import plan
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.reduction import run_reduction
from tensorweave_cuda.kernels.util import E, launch, launch_rows
from tensorweave_cuda.kernels.util import register as reg_kernel


def _softmax(op):
    def factory(ctx):
        dev = ctx.device
        ref = catalog.softmax_kernel(op, catalog.dtype(ctx.attrs["T"]))

        def softmax(x):
            if x.ndim < 1:
                raise ctx.error(E, f"logits must have rank >= 1, got shape {x.shape}")
            y = dev.empty(x.shape, x.dtype)
            c = x.shape[-1]
            rows = x.size // c if c else 0
            launch_rows(dev, ref, rows, c, x.ptr, y.ptr, rows, c)
            return y
        return softmax
    return factory


def _xent(sparse: bool):
    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.attrs["T"])
        ref = catalog.xent_kernel(dt, catalog.dtype(ctx.attrs["Tlabels"]) if sparse else None)

        def xent(features, labels):
            if sparse:
                ok = features.ndim == 2 and labels.ndim == 1 and labels.shape[0] == features.shape[0]
                want = "logits must be 2-D and labels 1-D with the same first dimension"
            else:
                ok = features.ndim == 2 and features.shape == labels.shape
                want = "logits and labels must be 2-D and of one shape"
            if not ok:
                raise ctx.error(E, f"{want}, got logits {features.shape} and labels {labels.shape}")
            rows, c = features.shape
            loss = dev.empty((rows,), dt.np)
            backprop = dev.empty((rows, c), dt.np)
            if c == 0 and rows:
                raise ctx.error(E, f"logits of shape {features.shape} have no classes")
            launch_rows(dev, ref, rows, c, features.ptr, labels.ptr, loss.ptr, backprop.ptr, rows, c)
            return loss, backprop
        return xent
    return factory


def _channel_layout(ctx, shape, nchw: bool):
    """(channels, inner) of BiasAdd's value: bias index = (i // inner) % channels."""
    if len(shape) < 2:
        raise ctx.error(E, f"value must have rank at least 2, got shape {shape}")
    if nchw:
        return shape[1], plan.num_elements(shape[2:])
    return shape[-1], 1


def _bias_add(ctx):
    dev = ctx.device
    nchw = ctx.attrs["data_format"] == "NCHW"
    ref = catalog.bias_add_kernel(catalog.dtype(ctx.attrs["T"]))

    def bias_add(v, b):
        c, inner = _channel_layout(ctx, v.shape, nchw)
        if b.ndim != 1 or b.shape[0] != c:
            axis = 1 if nchw else v.ndim - 1
            raise ctx.error(E, f"bias of shape {b.shape} must be 1-D with one element per channel of value "
                               f"{v.shape} (dimension {axis})")
        y = dev.empty(v.shape, v.dtype)
        launch(dev, ref, v.size, v.ptr, b.ptr, y.ptr, v.size, c, inner)
        return y
    return bias_add


def _bias_add_grad(ctx):
    dev = ctx.device
    nchw = ctx.attrs["data_format"] == "NCHW"
    dt = catalog.dtype(ctx.attrs["T"])

    def bias_add_grad(g):
        if g.ndim < 2:
            raise ctx.error(E, f"out_backprop must have rank at least 2, got shape {g.shape}")
        keep = 1 if nchw else g.ndim - 1
        p = plan.plan_reduction(g.shape, [a for a in range(g.ndim) if a != keep])
        return run_reduction(dev, p, "sum", dt, g)
    return bias_add_grad


def register(reg, device_type):
    for op in ("Softmax", "LogSoftmax"):
        reg_kernel(reg, op, device_type, _softmax(op), catalog.FLOAT)
    reg_kernel(reg, "SoftmaxCrossEntropyWithLogits", device_type, _xent(False), catalog.FLOAT)
    reg_kernel(reg, "SparseSoftmaxCrossEntropyWithLogits", device_type, _xent(True),
               constraints={"T": catalog.FLOAT, "Tlabels": catalog.INT})
    reg_kernel(reg, "BiasAdd", device_type, _bias_add, catalog.NUMERIC)
    reg_kernel(reg, "BiasAddGrad", device_type, _bias_add_grad, catalog.REDUCE_DTYPES)
