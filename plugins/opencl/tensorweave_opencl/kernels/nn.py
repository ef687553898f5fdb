"""Neural-net kernels (kernels/nn.cl): Softmax, LogSoftmax, SoftmaxCrossEntropyWithLogits,
SparseSoftmaxCrossEntropyWithLogits (outputs loss and backprop), BiasAdd (a broadcasting
add). Activations and their gradients are element-wise (elementwise.py); BiasAddGrad and
L2Loss are reductions (reduce.py)."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_opencl import program
from tensorweave_opencl.kernels.common import BUF, FLOAT, I32, INDEX, NUMERIC, OPENCL, launcher, num_elements
from tensorweave_opencl.kernels.elementwise import Binary

_E = errors.InvalidArgumentError


def _softmax(log):
    def factory(ctx):
        dt = ctx.input_dtypes[0].np_dtype
        launch = launcher(ctx, "nn.cl", "softmax", [BUF, BUF, I32, I32], {"T": program.ctype(dt), "LOG": int(log)})
        device = ctx.device

        def softmax(x):
            if x.ndim < 1:
                raise ctx.error(_E, f"logits must have rank at least 1, got shape {x.shape}")
            cols = x.shape[-1]
            rows = num_elements(x.shape[:-1])
            out = device.empty(x.shape, dt)
            if rows and cols:
                launch.run(rows, out.block.buf, x.block.buf, rows, cols)
            return out
        return softmax
    return factory


def _xent(ctx):
    dt = ctx.input_dtypes[0].np_dtype
    launch = launcher(ctx, "nn.cl", "xent", [BUF, BUF, BUF, BUF, I32, I32], {"T": program.ctype(dt)})
    device = ctx.device

    def xent(features, labels):
        if features.ndim != 2 or features.shape != labels.shape:
            raise ctx.error(_E, f"logits and labels must be 2-D and of one shape, got logits {features.shape} and "
                                f"labels {labels.shape}")
        rows, cols = features.shape
        loss = device.empty((rows,), dt)
        backprop = device.empty(features.shape, dt)
        if rows:
            launch.run(rows, loss.block.buf, backprop.block.buf, features.block.buf, labels.block.buf, rows, cols)
        return loss, backprop
    return xent


def _sparse_xent(ctx):
    dt = ctx.input_dtypes[0].np_dtype
    tl = ctx.input_dtypes[1].np_dtype
    launch = launcher(ctx, "nn.cl", "sparse_xent", [BUF, BUF, BUF, BUF, I32, I32],
                      {"T": program.ctype(dt), "TL": program.ctype(tl)})
    device = ctx.device

    def sparse_xent(features, labels):
        if features.ndim != 2 or labels.ndim != 1 or labels.shape[0] != features.shape[0]:
            raise ctx.error(_E, f"logits must be 2-D and labels 1-D with the same first dimension, got logits "
                                f"{features.shape} and labels {labels.shape}")
        rows, cols = features.shape
        loss = device.empty((rows,), dt)
        backprop = device.empty(features.shape, dt)
        if rows:
            launch.run(rows, loss.block.buf, backprop.block.buf, features.block.buf, labels.block.buf, rows, cols)
        return loss, backprop
    return sparse_xent


def _bias_add(ctx):
    nchw = ctx.attrs["data_format"] == "NCHW"
    dt = ctx.input_dtypes[0].np_dtype
    add = Binary(ctx, "(a + b)", dt, dt)

    def bias_add(v, b):
        axis = 1 if nchw else v.ndim - 1
        if b.ndim != 1 or v.ndim < 2 or v.shape[axis] != b.shape[0]:
            raise ctx.error(_E, f"bias of shape {b.shape} must be 1-D with one element per channel of value "
                                f"{v.shape} (dimension {axis})")
        return add(v, b.reshape(b.shape + (1,) * (v.ndim - 2)) if nchw else b)
    return bias_add


def _in_top_k(ctx):
    k = ctx.attrs["k"]
    tl = ctx.input_dtypes[1].np_dtype
    launch = launcher(ctx, "nn.cl", "in_top_k", [BUF, BUF, BUF, I32, I32, I32], {"T": "float", "TL": program.ctype(tl)})
    device = ctx.device

    def in_top_k(predictions, targets):
        if predictions.ndim != 2 or targets.shape != predictions.shape[:1]:
            raise ctx.error(_E, f"predictions must be 2-D and targets 1-D with the same first dimension, got "
                                f"{predictions.shape} and {targets.shape}")
        rows, cols = predictions.shape
        out = device.empty((rows,), np.bool_)
        if rows:
            launch.run(rows, out.block.buf, predictions.block.buf, targets.block.buf, rows, cols, k)
        return out
    return in_top_k


def _check_numerics(ctx):
    # Raising needs the values on the host: this op waits for the device (it is a debugging aid).
    message = ctx.attrs["message"]
    device = ctx.device

    def check_numerics(x):
        v = device.to_host(x)
        if np.isfinite(v).all():
            return x
        nan, inf = bool(np.isnan(v).any()), bool(np.isinf(v).any())
        kind = "Inf and NaN" if nan and inf else ("NaN" if nan else "Inf")
        raise ctx.error(_E, f"{message} : Tensor had {kind} values")
    return check_numerics


def register(reg):
    reg.register("Softmax", OPENCL, factory=_softmax(False), constraints={"T": FLOAT})
    reg.register("LogSoftmax", OPENCL, factory=_softmax(True), constraints={"T": FLOAT})
    reg.register("SoftmaxCrossEntropyWithLogits", OPENCL, factory=_xent, constraints={"T": FLOAT})
    reg.register("SparseSoftmaxCrossEntropyWithLogits", OPENCL, factory=_sparse_xent,
                 constraints={"T": FLOAT, "Tlabels": INDEX})
    reg.register("BiasAdd", OPENCL, factory=_bias_add, constraints={"T": NUMERIC})
    reg.register("InTopK", OPENCL, factory=_in_top_k, constraints={"T": INDEX})
    reg.register("CheckNumerics", OPENCL, factory=_check_numerics, constraints={"T": FLOAT})
