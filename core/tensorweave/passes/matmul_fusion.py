"""Matmul fusion: ``MatMul -> bias add [-> Relu | Relu6]`` becomes one ``_FusedMatMul`` node,
``Conv2D -> bias add [-> Relu | Relu6]`` one ``_FusedConv2D`` (TensorFlow's remapper does the
same on its CPU), so the device writes the product once, already biased and rectified,
instead of launching one kernel for the product and another for what follows it.

Runs on the plan graph after placement (stage ``post_placement``, before element-wise fusion,
which would otherwise take the bias add and the activation into a group of their own), for
devices whose type has a kernel for the fused op. It is part of element-wise fusion's switch
(``GraphOptions.enable_elementwise_fusion``, ``TENSORWEAVE_ELEMENTWISE_FUSION``).

**Pattern.** A float MatMul, or a float NHWC Conv2D, whose result is read by exactly one node,
a bias add: BiasAdd (NHWC), or Add/AddV2 whose other operand is a vector of static length
equal to the result's static last dimension (columns, channels: the TF1 idioms
``tf.matmul(x, w) + b`` and ``tf.nn.conv2d(x, w, ...) + b`` broadcast exactly as a bias add);
then, when the sum is read by exactly one node, a Relu or Relu6 of it (when that
one node is another element-wise op, the pattern is left to element-wise fusion, which
computes the add and that op in one pass). Nothing
in the pattern but its last node may be fetched or have control inputs or dependents, and
all its nodes are on one device. The fused node takes the last node's name (errors, traces
and fetches name the user's node); gradients are unaffected (fusion runs on plans, after
autodiff).
"""

from __future__ import annotations

from tensorweave.ops.fusion_ops import EPILOGUE_ACTIVATIONS, FUSABLE, FUSED_CONV2D, FUSED_MATMUL
from tensorweave.passes import fusion, plan_graph

_ADDS = frozenset({"BiasAdd", "Add", "AddV2"})
# What each contraction becomes, its result's rank, and the attrs the fused node keeps.
_FUSED = {"MatMul": (FUSED_MATMUL, 2, ("transpose_a", "transpose_b")),
          "Conv2D": (FUSED_CONV2D, 4, ("strides", "padding", "data_format", "dilations", "use_cudnn_on_gpu"))}


def matmul_fusion_pass(plan) -> None:
    """Registered as ``matmul_fusion`` (stage ``post_placement``)."""
    if not fusion.enabled(plan.config):
        return
    readers = plan_graph.readers(plan.nodes)
    fetched = set(plan.fetches)
    has_kernel: dict = {}
    replacements, ops, removed = {}, {}, set()
    for mm in [op for op in plan.nodes if op._op_def.name in _FUSED]:
        fused_type, rank, kept = _FUSED[mm._op_def.name]
        if mm._attrs.get("data_format", "NHWC") != "NHWC" or not fusion.has_float_kernel(plan, mm, fused_type,
                                                                                          has_kernel):
            continue
        dtype = mm._attrs["T"]
        chain = _chain(mm, rank, readers, fetched, plan.device_of)
        if chain is None:
            continue
        add, bias, act = chain
        last = act or add
        attrs = {"T": dtype, "num_args": 1, **{k: mm._attrs[k] for k in kept if k in mm._attrs},
                 "fused_ops": ["BiasAdd"] + ([act._op_def.name] if act is not None else [])}
        node = plan_graph.add_node(plan, fused_type, [mm._inputs[0], mm._inputs[1], [bias]], attrs,
                                   name=f"{last.name}/fused", device=last._device, order=last._id)
        fusion.stand_in(plan, node, last)
        replacements[last._outputs[0]] = node._outputs[0]
        ops[last] = node
        removed.update(op for op in (mm, add, act) if op is not None)
    if replacements:
        fusion.put_in_place(plan, removed, replacements, ops)


def _inner(op, readers, fetched) -> bool:
    """Whether ``op``'s output may disappear into a fused node: not fetched, no control
    inputs, nothing waiting for it."""
    return not op._control_inputs and op._outputs[0] not in fetched and op not in readers


def _only_reader(t, readers, fetched):
    users = readers.get(t, ())
    return users[0] if len(users) == 1 and t not in fetched else None


def _chain(mm, rank, readers, fetched, device_of):
    """(add, bias, activation or None) when ``mm`` (its result of ``rank`` dimensions)
    starts the pattern, else None."""
    product = mm._outputs[0]
    if not _inner(mm, readers, fetched) or product._shape.ndims != rank:
        return None
    add = _only_reader(product, readers, fetched)
    if add is None or add._op_def.name not in _ADDS or add._control_inputs or device_of.get(add) != device_of.get(mm):
        return None
    if add._op_def.name == "BiasAdd":
        if add._inputs[0] is not product or add._attrs.get("data_format", "NHWC") != "NHWC":
            return None
        bias = add._inputs[1]
    else:
        a, b = add._inputs
        if a is b:
            return None
        bias = b if a is product else a
    cols = product._shape[rank - 1]
    if bias._shape.ndims != 1 or cols is None or bias._shape[0] != cols or bias.dtype is not product.dtype:
        return None
    act = _only_reader(add._outputs[0], readers, fetched)
    if (act is None or act._op_def.name not in EPILOGUE_ACTIVATIONS or act._control_inputs
            or not _inner(add, readers, fetched) or device_of.get(act) != device_of.get(mm)):
        if act is not None and act._op_def.name in FUSABLE:
            # Another element-wise op (a sigmoid, a tanh) alone reads the sum: element-wise
            # fusion computes the add and it in one pass, which an epilogue with the add
            # alone would split in two.
            return None
        act = None
    return add, bias, act
