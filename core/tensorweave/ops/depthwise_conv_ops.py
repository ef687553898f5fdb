"""Depthwise convolution: ``DepthwiseConv2dNative`` and its two backprops (op definitions,
shape functions), and the ``tw.nn`` wrappers ``depthwise_conv2d``,
``depthwise_conv2d_native``, ``separable_conv2d`` and the backprop wrappers.

A depthwise convolution convolves each input channel with its own ``channel_multiplier``
filters (``filter`` is ``[height, width, in_channels, channel_multiplier]``) and stacks the
results: output channel ``k * channel_multiplier + q`` is input channel ``k`` through filter
``[:, :, k, q]``. Windows, strides, dilations and SAME/VALID padding are Conv2D's
(``nn_ops.conv_output_size``). ``separable_conv2d`` is a depthwise convolution followed by a
1x1 ("pointwise") Conv2D.
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op, convert_to_tensor, get_default_graph
from tensorweave.ops import nn_ops

__all__: list[str] = []

_E = errors.InvalidArgumentError
_FLOAT = "T: {float16, float32, float64}"


def depthwise_output_shape(in_shape, filter_shape, op, what="input"):
    """Output shape of DepthwiseConv2dNative for ``in_shape`` (the op's data_format) and a
    ``[kh, kw, in_channels, multiplier]`` filter (TensorShapes, possibly partial)."""
    fmt, sh, sw, dh, dw, padding = nn_ops._conv_attrs(op)
    n, h, w, c = nn_ops._nhwc_dims(nn_ops._rank4(in_shape, what, fmt), fmt)
    f = filter_shape
    if f.ndims is not None and f.ndims != 4:
        raise _E(f"filter must be 4-dimensional [height, width, in_channels, channel_multiplier], got shape {f}")
    kh, kw, ci, m = f.dims if f.ndims is not None else [None] * 4
    if c is not None and ci is not None and c != ci:
        raise _E(f"input depth {c} does not match the filter's in_channels {ci} "
                 f"(input shape {in_shape}, filter shape {f})")
    oh = nn_ops.conv_output_size(h, kh, sh, dh, padding)[0]
    ow = nn_ops.conv_output_size(w, kw, sw, dw, padding)[0]
    c = c if c is not None else ci
    co = c * m if c is not None and m is not None else None
    return nn_ops._make_shape(n, oh, ow, co, fmt)


def _check_backprop(op, in_shape, filter_shape, dy_shape):
    expected = depthwise_output_shape(in_shape, filter_shape, op)
    if not expected.is_compatible_with(dy_shape):
        raise _E(f"out_backprop has shape {dy_shape} but the depthwise convolution of an input of shape {in_shape} "
                 f"with a filter of shape {filter_shape} gives {expected}")


def _depthwise_shape(op):
    return [depthwise_output_shape(op.inputs[0].shape, op.inputs[1].shape, op)]


def _backprop_input_shape(op):
    sizes, f, dy = op.inputs
    in_shape = nn_ops._sizes_input(sizes, "input_sizes")
    _check_backprop(op, in_shape, f.shape, dy.shape)
    return [in_shape]


def _backprop_filter_shape(op):
    x, sizes, dy = op.inputs
    f_shape = nn_ops._sizes_input(sizes, "filter_sizes")
    _check_backprop(op, x.shape, f_shape, dy.shape)
    return [f_shape]


def register_ops(reg):
    attrs = [_FLOAT, "strides: list(int)", "padding: {'SAME', 'VALID'}", "data_format: {'NHWC', 'NCHW'} = 'NHWC'",
             "dilations: list(int) = [1, 1, 1, 1]"]
    reg.op("DepthwiseConv2dNative", inputs=["input: T", "filter: T"], outputs=["output: T"], attrs=attrs,
           shape_fn=_depthwise_shape,
           doc="Each input channel convolved with its own channel_multiplier filters ([kh, kw, in, multiplier]).")
    reg.op("DepthwiseConv2dNativeBackpropInput", inputs=["input_sizes: int32", "filter: T", "out_backprop: T"],
           outputs=["output: T"], attrs=attrs, shape_fn=_backprop_input_shape,
           doc="Gradient of DepthwiseConv2dNative with respect to its input.")
    reg.op("DepthwiseConv2dNativeBackpropFilter", inputs=["input: T", "filter_sizes: int32", "out_backprop: T"],
           outputs=["output: T"], attrs=attrs, shape_fn=_backprop_filter_shape,
           doc="Gradient of DepthwiseConv2dNative with respect to its filter.")


# ---------------------------------------------------------------------------------------
# wrappers
def _attrs(strides, padding, data_format, dilations, fn):
    a = nn_ops._conv_kwargs(strides, padding, data_format or "NHWC", dilations, None, fn)
    del a["use_cudnn_on_gpu"]
    return a


def depthwise_conv2d_native(input, filter, strides, padding, data_format="NHWC", dilations=None,  # noqa: A002
                            name=None):
    """Depthwise 2-D convolution (``tf.nn.depthwise_conv2d_native``): ``filter`` is
    ``[height, width, in_channels, channel_multiplier]``; the output has
    ``in_channels * channel_multiplier`` channels."""
    return apply_op("DepthwiseConv2dNative", [input, filter],
                    _attrs(strides, padding, data_format, dilations, "depthwise_conv2d_native"), name=name)


def _rate_dilations(rate, data_format, fn):
    if rate is None:
        return None
    r = nn_ops._int_list(rate, "rate", fn)
    if len(r) == 1:
        r = r * 2
    if len(r) != 2 or min(r) < 1:
        raise _E(f"{fn}: rate must be a positive int or a pair of them, got {rate!r}")
    return [1, r[0], r[1], 1] if (data_format or "NHWC") == "NHWC" else [1, 1, r[0], r[1]]


def depthwise_conv2d(input, filter, strides, padding, rate=None, name=None, data_format=None,  # noqa: A002
                     dilations=None):
    """``tf.nn.depthwise_conv2d``: ``depthwise_conv2d_native`` with ``rate`` (a pair of
    dilation rates; strides must then be 1, as in TensorFlow)."""
    fn = "depthwise_conv2d"
    dil = _rate_dilations(rate if rate is not None else dilations, data_format, fn)
    if dil is not None and max(dil) > 1 and max(nn_ops._int_list(strides, "strides", fn)) > 1:
        raise _E(f"{fn}: strides > 1 with rate > 1 is not supported (TensorFlow requires one of them to be 1), got "
                 f"strides {strides} and rate {rate if rate is not None else dilations}")
    with get_default_graph().name_scope(name or "depthwise") as scope:
        return apply_op("DepthwiseConv2dNative", [convert_to_tensor(input, name="input"), filter],
                        _attrs(strides, padding, data_format, dil, fn), _exact_name=scope.rstrip("/"))


def depthwise_conv2d_native_backprop_input(input_sizes, filter, out_backprop, strides, padding,  # noqa: A002
                                           data_format="NHWC", dilations=None, name=None):
    fn = "depthwise_conv2d_native_backprop_input"
    return apply_op("DepthwiseConv2dNativeBackpropInput",
                    [nn_ops._sizes_tensor(input_sizes, "input_sizes"), filter, out_backprop],
                    _attrs(strides, padding, data_format, dilations, fn), name=name)


def depthwise_conv2d_native_backprop_filter(input, filter_sizes, out_backprop, strides, padding,  # noqa: A002
                                            data_format="NHWC", dilations=None, name=None):
    fn = "depthwise_conv2d_native_backprop_filter"
    return apply_op("DepthwiseConv2dNativeBackpropFilter",
                    [input, nn_ops._sizes_tensor(filter_sizes, "filter_sizes"), out_backprop],
                    _attrs(strides, padding, data_format, dilations, fn), name=name)


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, rate=None, name=None,  # noqa: A002
                     data_format=None, dilations=None):
    """``tf.nn.separable_conv2d``: a depthwise convolution with ``depthwise_filter``
    (``[kh, kw, in, multiplier]``), then a 1x1 convolution with ``pointwise_filter``
    (``[1, 1, in * multiplier, out]``)."""
    fn = "separable_conv2d"
    with get_default_graph().name_scope(name or "separable_conv2d") as scope:
        x = convert_to_tensor(input, name="input")
        dw = convert_to_tensor(depthwise_filter, name="depthwise_filter")
        pw = convert_to_tensor(pointwise_filter, name="pointwise_filter")
        for what, f in (("depthwise_filter", dw), ("pointwise_filter", pw)):
            if f.shape.ndims is not None and f.shape.ndims != 4:
                raise _E(f"{fn}: {what} must be 4-dimensional, got shape {f.shape}")
        ps = pw.shape
        if ps.ndims == 4 and (ps[0] not in (1, None) or ps[1] not in (1, None)):
            raise _E(f"{fn}: pointwise_filter must be [1, 1, in_channels * channel_multiplier, out_channels], got "
                     f"shape {ps}")
        ds = dw.shape
        if ds.ndims == 4 and ps.ndims == 4 and None not in (ds[2], ds[3], ps[2]) and ds[2] * ds[3] != ps[2]:
            raise _E(f"{fn}: pointwise_filter has {ps[2]} input channels but the depthwise convolution gives "
                     f"{ds[2]} * {ds[3]} = {ds[2] * ds[3]} (depthwise_filter {ds}, pointwise_filter {ps})")
        depthwise = depthwise_conv2d(x, dw, strides, padding, rate=rate, data_format=data_format,
                                     dilations=dilations, name="depthwise")
        return apply_op("Conv2D", [depthwise, pw], {"strides": [1, 1, 1, 1], "padding": "VALID",
                                                    "data_format": data_format or "NHWC"},
                        _exact_name=scope.rstrip("/"))
