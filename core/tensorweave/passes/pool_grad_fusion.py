"""Pool-gradient fusion: ``MaxPoolGrad -> ReluGrad`` becomes one ``_MaxPoolGradReluGrad`` node
where the ReLU's output is the tensor that was pooled (``max_pool(relu(conv(...) + b))``, the
layer of most convolutional nets of TF1's era): the ReLU's gradient then reads, as its
features, MaxPoolGrad's own ``orig_input``. The device writes the input gradient once,
already masked by the ReLU, instead of writing it and reading it back with the features to
mask it (the convnet benchmark's step: two such pairs, the ReLU gradients 2.3 and 1.1 ms).

Runs on the plan graph after placement (stage ``post_placement``, before element-wise
fusion, which would otherwise take the ReluGrad into a group of its own), for devices whose
type has a ``_MaxPoolGradReluGrad`` kernel. It is part of element-wise fusion's switch
(``GraphOptions.enable_elementwise_fusion``, ``TENSORWEAVE_ELEMENTWISE_FUSION``).

**Pattern.** A float MaxPoolGrad whose output is read by exactly one node, a ReluGrad, as
its gradient operand, with the MaxPoolGrad's ``orig_input`` as the ReluGrad's features;
both on one device; the MaxPoolGrad's output not fetched, neither node with control inputs,
nothing waiting for the MaxPoolGrad. The fused node takes the ReluGrad's name; its values
are the two nodes', bit for bit.

**Where the first maximum is.** Then, where the windows tile the input (ksize equal to
strides, as in TF1's 2 x 2 pools), the MaxPool that made a MaxPoolGrad's (or the fused
node's) ``orig_output`` from the same ``orig_input`` becomes a ``_MaxPoolArgmax``, which
also writes where each window's first maximum is (a byte per output), and the gradient a
``_MaxPoolGradArgmax`` that reads those bytes instead of comparing the pooled tensor with
the output again: it no longer reads the pooled tensor (the convnet's first layer: 12.8 MB a
step) nor keeps it alive until the backward pass. Both on one device, whose type has both
kernels; the pool without control inputs; the pooled tensor's height and width known. Each
node takes the name of the one it replaces; the values are the same, bit for bit.

**The ReLU into the pool.** The argmax form's gradient no longer reads the pooled tensor, so
where a ``_MaxPoolArgmax`` pools a ``_FusedConv2D``'s ``BiasAdd, Relu`` that nothing else
reads (not fetched, no control edges either way, one device), the ReLU moves into the pool
(its ``relu`` attr): the convolution ends with its bias add, and the pool rectifies each
value as it reads it. The values are the same, bit for bit (the pool rectifies as Relu
does, NaN kept); what it saves is the convolution's own ReLU, which on the CPU oneDNN applies
only after reading the whole input to make sure no output is NaN (its ReLU gives 0 for NaN):
the convnet's second layer, 0.2-0.4 ms a step.
"""

from __future__ import annotations

from tensorweave.ops.fusion_ops import (
    FUSED_CONV2D,
    MAX_POOL_ARGMAX,
    MAX_POOL_GRAD_ARGMAX,
    MAX_POOL_RELU_GRAD,
    NO_ARGMAX,
)
from tensorweave.ops.nn_ops import spatial_axes
from tensorweave.passes import fusion, plan_graph

_POOL_ATTRS = ("T", "ksize", "strides", "padding", "data_format")


def pool_grad_fusion_pass(plan) -> None:
    """Registered as ``pool_grad_fusion`` (stage ``post_placement``)."""
    if not fusion.enabled(plan.config):
        return
    readers = plan_graph.readers(plan.nodes)
    fetched = set(plan.fetches)
    has_kernel: dict = {}
    replacements, ops, removed = {}, {}, set()
    for pg in [op for op in plan.nodes if op._op_def.name == "MaxPoolGrad"]:
        if not fusion.has_float_kernel(plan, pg, MAX_POOL_RELU_GRAD, has_kernel):
            continue
        rg = _relu_grad_of(pg, readers, fetched, plan.device_of)
        if rg is None:
            continue
        node = plan_graph.add_node(plan, MAX_POOL_RELU_GRAD, list(pg._inputs),
                                   {k: pg._attrs[k] for k in _POOL_ATTRS if k in pg._attrs},
                                   name=f"{rg.name}/fused", device=rg._device, order=rg._id)
        fusion.stand_in(plan, node, rg)
        replacements[rg._outputs[0]] = node._outputs[0]
        ops[rg] = node
        removed.update((pg, rg))
    if replacements:
        fusion.put_in_place(plan, removed, replacements, ops)
    _with_argmax(plan, has_kernel)
    _relu_into_pool(plan)


def _with_argmax(plan, has_kernel) -> None:
    """The MaxPool and MaxPoolGrad (or _MaxPoolGradReluGrad) pairs of tiling windows become
    _MaxPoolArgmax and _MaxPoolGradArgmax (see the module docstring)."""
    replacements, ops, removed = {}, {}, set()
    pools: dict = {}  # MaxPool -> its _MaxPoolArgmax (two gradients may read one pool)
    for grad in [op for op in plan.nodes if op._op_def.name in ("MaxPoolGrad", MAX_POOL_RELU_GRAD)]:
        pool = _pool_of(plan, grad, has_kernel)
        if pool is None:
            continue
        attrs = {k: grad._attrs[k] for k in _POOL_ATTRS if k in grad._attrs}
        new_pool = pools.get(pool)
        if new_pool is None:
            new_pool = pools[pool] = plan_graph.add_node(plan, MAX_POOL_ARGMAX, [pool._inputs[0]], attrs,
                                                         name=f"{pool.name}/argmax", device=pool._device,
                                                         order=pool._id)
            fusion.stand_in(plan, new_pool, pool)
            replacements[pool._outputs[0]] = new_pool._outputs[0]
            ops[pool] = new_pool
            removed.add(pool)
        x = grad._inputs[0]
        h, w, _ = spatial_axes(attrs.get("data_format", "NHWC"))
        attrs.update(input_size=[x.shape[h], x.shape[w]], relu=grad._op_def.name == MAX_POOL_RELU_GRAD)
        node = plan_graph.add_node(plan, MAX_POOL_GRAD_ARGMAX, [*new_pool._outputs, grad._inputs[2]], attrs,
                                   name=f"{grad.name}/argmax", device=grad._device, order=grad._id)
        fusion.stand_in(plan, node, grad)
        replacements[grad._outputs[0]] = node._outputs[0]
        ops[grad] = node
        removed.add(grad)
    if replacements:
        fusion.put_in_place(plan, removed, replacements, ops)


def _relu_into_pool(plan) -> None:
    """The ReLU of each _FusedConv2D that only a _MaxPoolArgmax reads moves into the pool
    (see the module docstring)."""
    readers = plan_graph.readers(plan.nodes)
    fetched = set(plan.fetches)
    replacements, ops, removed = {}, {}, set()
    for pool in [op for op in plan.nodes if op._op_def.name == MAX_POOL_ARGMAX and not op._attrs.get("relu")]:
        conv = pool._inputs[0].op
        out = conv._outputs[0]
        if conv._op_def.name != FUSED_CONV2D or list(conv._attrs["fused_ops"]) != ["BiasAdd", "Relu"] \
                or readers.get(out) != [pool] or out in fetched or conv in readers or conv._control_inputs \
                or plan.device_of.get(conv) != plan.device_of.get(pool):
            continue
        new_conv = plan_graph.add_node(plan, FUSED_CONV2D, [*conv._inputs[:2], list(conv._inputs[2:])],
                                       {**conv._attrs, "fused_ops": ["BiasAdd"]}, name=f"{conv.name}/bias",
                                       device=conv._device, order=conv._id)
        fusion.stand_in(plan, new_conv, conv)
        new_pool = plan_graph.add_node(plan, MAX_POOL_ARGMAX, [new_conv._outputs[0]], {**pool._attrs, "relu": True},
                                       name=f"{pool.name}/relu", device=pool._device, order=pool._id)
        fusion.stand_in(plan, new_pool, pool)
        replacements.update(zip(pool._outputs, new_pool._outputs))
        ops.update({conv: new_conv, pool: new_pool})
        removed.update((conv, pool))
    if replacements:
        fusion.put_in_place(plan, removed, replacements, ops)


def _pool_of(plan, grad, has_kernel):
    """The MaxPool that made ``grad``'s orig_output from its orig_input, where the pair can
    take the argmax form, or None."""
    x, y, _ = grad._inputs
    pool = y.op
    if pool._op_def.name != "MaxPool" or pool._inputs[0] is not x or pool._control_inputs or grad._control_inputs:
        return None
    if plan.device_of.get(pool) != plan.device_of.get(grad) or any(
            pool._attrs.get(k) != grad._attrs.get(k) for k in _POOL_ATTRS):
        return None
    if not (fusion.has_float_kernel(plan, grad, MAX_POOL_ARGMAX, has_kernel)
            and fusion.has_float_kernel(plan, grad, MAX_POOL_GRAD_ARGMAX, has_kernel)):
        return None
    fmt = grad._attrs.get("data_format", "NHWC")
    h, w, _ = spatial_axes(fmt)
    ksize, strides = grad._attrs["ksize"], grad._attrs["strides"]
    if list(ksize) != list(strides) or ksize[h] * ksize[w] >= NO_ARGMAX:
        return None
    if x.shape.ndims != 4 or x.shape[h] is None or x.shape[w] is None:
        return None
    return pool


def _relu_grad_of(pg, readers, fetched, device_of):
    """The ReluGrad that alone reads ``pg``'s output and masks it with ``pg``'s orig_input,
    or None."""
    out = pg._outputs[0]
    users = readers.get(out, ())
    if pg._control_inputs or pg in readers or out in fetched or len(users) != 1:
        return None
    rg = users[0]
    if rg._op_def.name != "ReluGrad" or rg._control_inputs or device_of.get(rg) != device_of.get(pg):
        return None
    gradients, features = rg._inputs
    if gradients is not out or features is not pg._inputs[0] or rg._attrs.get("T") != pg._attrs.get("T"):
        return None
    return rg
