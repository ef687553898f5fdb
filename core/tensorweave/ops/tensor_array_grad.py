"""Gradients of the TensorArray ops, after TF1's ``tensor_array_grad``.

The gradient of an array is another array, its *gradient array* (TensorArrayGradV3), one per
forward array and gradient source: the ``gradients`` name scope the gradient is built in, so
two ``tw.gradients`` calls never share one. Its flow is the gradient of the forward flow:

- Read (Gather) at i: the gradient *writes* (scatters) the incoming gradient at i into the
  gradient array and returns the new flow as the gradient of the read's flow;
- Write (Scatter) at i: the gradient of its flow output is the gradient array's flow; the
  gradient of the written value is a *read* (gather) of the gradient array at i;
- Concat and Split are each other's gradients.

Several reads of one element write several gradients to one index of the gradient array:
there they add up (``multiple_writes_aggregate``); an element no gradient reached reads as
zeros. In a ``tw.while_loop`` the gradient ops run in the backward loop: the forward
``index`` of each iteration comes from the loop gradient's stacks and the handle enters the
backward loop as an invariant (``ops/control_flow_grad.py``), so nothing here is specific
to loops.
"""

from __future__ import annotations

from tensorweave.framework.op_def import NO_GRADIENT
from tensorweave.ops import array_ops
from tensorweave.ops.tensor_array_ops import TensorArray


def register_ops(reg):  # the ops are defined in tensor_array_ops
    pass


def register_gradients(reg):
    reg.gradient("TensorArrayReadV3", _read_grad)
    reg.gradient("TensorArrayWriteV3", _write_grad)
    reg.gradient("TensorArrayGatherV3", _gather_grad)
    reg.gradient("TensorArrayScatterV3", _scatter_grad)
    reg.gradient("TensorArrayConcatV3", _concat_grad)
    reg.gradient("TensorArraySplitV3", _split_grad)
    for op in ("TensorArrayV3", "TensorArrayGradV3", "TensorArraySizeV3", "TensorArrayCloseV3"):
        reg.gradient(op, NO_GRADIENT)


def grad_source(graph) -> str:
    """The gradient source of ops built now: the name scope up to its last ``gradients*``
    component (TF's ``_GetGradSource``); "gradients" outside any."""
    tokens = graph.get_name_scope().split("/")
    pos = [i for i, t in enumerate(tokens) if t.startswith("gradients")]
    return "/".join(tokens[:pos[-1] + 1]) if pos else "gradients"


def _grad_array(op, dtype, flow):
    fwd = TensorArray(dtype, handle=op.inputs[0], flow=flow, infer_shape=False)
    return fwd.grad(source=grad_source(op.graph), flow=flow)


def _barrier(op, flow):
    """``flow`` after the forward op has run (its gradient array is sized by then)."""
    flow_out = array_ops.identity(op.outputs[0], name="flow_out")
    with op.graph.control_dependencies([flow_out]):
        return array_ops.identity(flow, name="write_barrier")


def _read_grad(op, grad):
    _, index, flow = op.inputs
    g = _grad_array(op, op.get_attr("dtype"), flow)
    return [None, None, g.write(index, grad).flow]


def _write_grad(op, flow):
    index = op.inputs[1]
    flow = _barrier(op, flow)
    g = _grad_array(op, op.get_attr("T"), flow)
    value = g.read(index)
    value._shape = op.inputs[2].shape
    return [None, None, value, flow]


def _gather_grad(op, grad):
    _, indices, flow = op.inputs
    g = _grad_array(op, op.get_attr("dtype"), flow)
    return [None, None, g.scatter(indices, grad).flow]


def _scatter_grad(op, flow):
    indices = op.inputs[1]
    flow = _barrier(op, flow)
    g = _grad_array(op, op.get_attr("T"), flow)
    value = g.gather(indices)
    value._shape = op.inputs[2].shape
    return [None, None, value, flow]


def _concat_grad(op, grad, _lengths_grad):
    flow = op.inputs[1]
    lengths = op.outputs[1]
    g = _grad_array(op, op.get_attr("dtype"), flow)
    return [None, g.split(grad, lengths).flow]


def _split_grad(op, flow):
    flow = _barrier(op, flow)
    g = _grad_array(op, op.get_attr("T"), flow)
    value = g.concat()
    value._shape = op.inputs[1].shape
    return [None, value, None, flow]
