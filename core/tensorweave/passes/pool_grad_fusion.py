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
"""

from __future__ import annotations

from tensorweave.ops.fusion_ops import MAX_POOL_RELU_GRAD
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
