"""``tw.TensorArray``: an array of tensors that lives for one step, written and read by ops
(TF1's ``tensor_array_ops``, on the V3 ops).

The array itself is a per-step resource (``kernels/tensor_arrays.py``); the graph sees its
``handle`` (a string scalar) and a *flow* (a float32 scalar that carries no data). Every op
that changes the array takes the current flow and returns a new one, and every op that reads
takes the flow too, so data dependencies order the writes before the reads, gradients
follow the flow backwards, and in a ``tw.while_loop`` the array passes through the loop as
its flow (a loop variable). A ``TensorArray`` object is immutable: ``write`` returns a new
object with the new flow (the same handle).

With ``infer_shape=True`` (the default) the element shape is inferred from the writes as the
graph is built; a write of another shape fails then, naming the op. The kernels check at
run time too: a read of an index never written, a second write to one index, an index out
of range of an array that is not ``dynamic_size`` — each an ``InvalidArgumentError`` that
names the node and the array.

Gradients (``ops/tensor_array_grad.py``) use gradient arrays (``TensorArray.grad``,
TensorArrayGradV3): one per forward array and gradient source (the ``gradients`` name
scope), in which writes to one index add up.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, apply_op, constant_value, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops, math_ops

__all__ = ["TensorArray"]

_E = errors.InvalidArgumentError


def _scalar_input(op, i, what):
    s = op.inputs[i].shape
    if s.ndims not in (None, 0):
        raise _E(f"{op.type} node '{op.name}': {what} must be a scalar, got shape {s}")


def _vector_input(op, i, what):
    s = op.inputs[i].shape
    if s.ndims not in (None, 1):
        raise _E(f"{op.type} node '{op.name}': {what} must be a vector, got shape {s}")
    return s


def _ta_shape(op):
    _scalar_input(op, 0, "size")
    return [TensorShape([]), TensorShape([])]


def _flow_shape(op):
    return [TensorShape([])]


def _write_shape(op):
    _scalar_input(op, 1, "index")
    return [TensorShape([])]


def _read_shape(op):
    _scalar_input(op, 1, "index")
    return [TensorShape(None)]


def _gather_shape(op):
    idx = _vector_input(op, 1, "indices")
    n = idx.as_list()[0] if idx.ndims == 1 else None
    elem = as_shape(op.get_attr("element_shape"))
    return [TensorShape([n]).concatenate(elem) if elem.ndims is not None else TensorShape(None)]


def _scatter_shape(op):
    idx = _vector_input(op, 1, "indices")
    v = op.inputs[2].shape
    if v.ndims == 0:
        raise _E(f"{op.type} node '{op.name}': the value must have rank >= 1 (one row per index), got a scalar")
    if idx.ndims == 1 and v.ndims is not None and idx.as_list()[0] is not None and v.as_list()[0] is not None \
            and idx.as_list()[0] != v.as_list()[0]:
        raise _E(f"{op.type} node '{op.name}': {idx.as_list()[0]} indices but the value has "
                 f"{v.as_list()[0]} rows (shape {v}); they must agree")
    return [TensorShape([])]


def _concat_shape(op):
    rest = as_shape(op.get_attr("element_shape_except0"))
    value = TensorShape([None]).concatenate(rest) if rest.ndims is not None else TensorShape(None)
    return [value, TensorShape([None])]


def _split_shape(op):
    if op.inputs[1].shape.ndims == 0:
        raise _E(f"{op.type} node '{op.name}': the value must have rank >= 1, got a scalar")
    _vector_input(op, 2, "lengths")
    return [TensorShape([])]


def register_ops(reg):
    reg.op("TensorArrayV3", inputs=["size: int32"], outputs=["handle: string", "flow: float32"],
           attrs=["dtype: type", "element_shape: shape = unknown", "dynamic_size: bool = false",
                  "clear_after_read: bool = true", "identical_element_shapes: bool = false",
                  "tensor_array_name: string = ''"],
           stateful=True, shape_fn=_ta_shape,
           doc="An array of `size` tensors of `dtype` for this step; outputs its handle and a flow.")
    reg.op("TensorArrayGradV3", inputs=["handle: string", "flow_in: float32"],
           outputs=["grad_handle: string", "flow_out: float32"], attrs=["source: string"], stateful=True,
           shape_fn=lambda op: [TensorShape([]), TensorShape([])],
           doc="The gradient array of `handle` for gradient source `source` (created on first use, "
               "the forward array's size; writes to one index add up).")
    reg.op("TensorArrayWriteV3", inputs=["handle: string", "index: int32", "value: T", "flow_in: float32"],
           outputs=["flow_out: float32"], attrs=["T: type"], stateful=True, shape_fn=_write_shape,
           doc="Writes `value` at `index`.")
    reg.op("TensorArrayReadV3", inputs=["handle: string", "index: int32", "flow_in: float32"],
           outputs=["value: dtype"], attrs=["dtype: type"], stateful=True, shape_fn=_read_shape,
           doc="The element at `index`.")
    reg.op("TensorArrayGatherV3", inputs=["handle: string", "indices: int32", "flow_in: float32"],
           outputs=["value: dtype"], attrs=["dtype: type", "element_shape: shape = unknown"], stateful=True,
           shape_fn=_gather_shape, doc="The elements at `indices`, stacked along a new first dimension.")
    reg.op("TensorArrayScatterV3", inputs=["handle: string", "indices: int32", "value: T", "flow_in: float32"],
           outputs=["flow_out: float32"], attrs=["T: type"], stateful=True, shape_fn=_scatter_shape,
           doc="Writes row i of `value` at `indices[i]`.")
    reg.op("TensorArrayConcatV3", inputs=["handle: string", "flow_in: float32"],
           outputs=["value: dtype", "lengths: int64"],
           attrs=["dtype: type", "element_shape_except0: shape = unknown"], stateful=True,
           shape_fn=_concat_shape, doc="All elements concatenated along their first dimension, and their lengths.")
    reg.op("TensorArraySplitV3", inputs=["handle: string", "value: T", "lengths: int64", "flow_in: float32"],
           outputs=["flow_out: float32"], attrs=["T: type"], stateful=True, shape_fn=_split_shape,
           doc="Splits `value` along its first dimension into pieces of `lengths`, written at 0, 1, ...")
    reg.op("TensorArraySizeV3", inputs=["handle: string", "flow_in: float32"], outputs=["size: int32"],
           stateful=True, shape_fn=lambda op: [TensorShape([])], doc="The current size of the array.")
    reg.op("TensorArrayCloseV3", inputs=["handle: string"], stateful=True, doc="Deletes the array's elements.")


# ----------------------------------------------------------------------------------------
class TensorArray:
    """``tf.TensorArray``: a list of tensors of one dtype, for use in graphs and loops.

    Build a new array with ``size`` (a Python int or int32 scalar tensor), or wrap an existing
    one with ``handle`` and ``flow``. ``dynamic_size=True`` lets writes grow it;
    ``clear_after_read=False`` allows reading an element more than once;
    ``element_shape``/``infer_shape`` fix the elements' shape as in TF1.
    ``colocate_with_first_write_call`` is accepted: every op of an array is placed with the
    op that created it.
    """

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None, tensor_array_name=None,
                 handle=None, flow=None, infer_shape=True, element_shape=None,
                 colocate_with_first_write_call=True, name=None):
        self._dtype = dtypes.as_dtype(dtype)
        if handle is not None:
            if size is not None:
                raise _E("tw.TensorArray: pass either size (a new array) or handle (an existing one), not both")
            if flow is None:
                raise _E("tw.TensorArray: an existing array (handle=...) also needs its flow")
            if not isinstance(handle, Tensor) or handle.dtype is not dtypes.string:
                raise _E(f"tw.TensorArray: handle must be a string tensor, got {handle!r}")
            self._handle = handle
            self._flow = convert_to_tensor(flow, dtype=dtypes.float32)
            self._dynamic_size = bool(dynamic_size)
        else:
            if size is None:
                raise _E("tw.TensorArray: size is required when no handle is given")
            if flow is not None:
                raise _E("tw.TensorArray: flow may only be given with handle")
            graph = size.graph if isinstance(size, Tensor) else get_default_graph()
            with graph.as_default(), graph.name_scope(name or "TensorArray"):
                size = convert_to_tensor(size, dtype=dtypes.int32, name="size")
                es = as_shape(element_shape) if element_shape is not None else TensorShape(None)
                self._handle, self._flow = apply_op(
                    "TensorArrayV3", [size],
                    {"dtype": self._dtype, "element_shape": es,
                     "dynamic_size": bool(dynamic_size),
                     "clear_after_read": True if clear_after_read is None else bool(clear_after_read),
                     "identical_element_shapes": bool(infer_shape),
                     "tensor_array_name": tensor_array_name or ""},
                    name="TensorArray")
            self._dynamic_size = bool(dynamic_size)
        self._infer_shape = bool(infer_shape)
        # One list shared by every TensorArray object of this array (write returns a new one).
        self._element_shape = [as_shape(element_shape) if element_shape is not None else TensorShape(None)]
        self._colocate_with_first_write_call = colocate_with_first_write_call

    # -- properties ---------------------------------------------------------------------
    @property
    def dtype(self):
        return self._dtype

    @property
    def handle(self) -> Tensor:
        return self._handle

    @property
    def flow(self) -> Tensor:
        return self._flow

    @property
    def element_shape(self) -> TensorShape:
        return self._element_shape[0]

    @property
    def dynamic_size(self) -> bool:
        return self._dynamic_size

    def __repr__(self):
        return f"<tw.TensorArray '{self._handle.op.name}' dtype={self._dtype.name} element_shape={self.element_shape}>"

    # -- helpers ------------------------------------------------------------------------
    def _with_flow(self, flow) -> TensorArray:
        ta = TensorArray.__new__(TensorArray)
        ta._dtype = self._dtype
        ta._handle = self._handle
        ta._flow = flow
        ta._dynamic_size = self._dynamic_size
        ta._infer_shape = self._infer_shape
        ta._element_shape = self._element_shape
        ta._colocate_with_first_write_call = self._colocate_with_first_write_call
        return ta

    # tw.while_loop passes a TensorArray through the loop as its flow (ops/control_flow_ops.py)
    def _as_loop_flow(self) -> Tensor:
        return self._flow

    def _from_loop_flow(self, flow) -> TensorArray:
        return self._with_flow(flow)

    def _where(self) -> str:
        return f"TensorArray '{self._handle.op.name}'"

    def _merge_element_shape(self, shape, op_type):
        shape = as_shape(shape)
        if not self._infer_shape:
            return
        cur = self._element_shape[0]
        if not cur.is_compatible_with(shape):
            raise _E(f"{op_type} on {self._where()}: the element has shape {shape}, but the array's elements "
                     f"have shape {cur} (inferred from earlier writes or element_shape; pass "
                     "infer_shape=False to allow elements of different shapes)")
        self._element_shape[0] = cur.merge_with(shape)

    def _scope(self, name, default):
        graph = self._handle.graph
        return graph, _Scope(graph, self._handle.op, name or default)

    def _apply(self, op_type, inputs, attrs=None, name=None):
        """``apply_op`` placed with the op that created the array. Inputs from outside the
        current loop or cond are captured first, outside the colocation (in a backward loop
        that builds stack pushes and pops, which must stay free to go to the CPU)."""
        graph = self._handle.graph
        ctx = graph._get_control_flow_context()
        if ctx is not None:
            inputs = [ctx.add_value(t) if isinstance(t, Tensor) else t for t in inputs]
        op = self._handle.op
        while op.type in ("Enter", "Identity", "Switch", "RefIdentity") and op.inputs:
            op = op.inputs[0].op  # the handle as seen in a loop or cond
        if op.type in ("TensorArrayV3", "TensorArrayGradV3"):
            with graph.colocate_with(op):
                return apply_op(op_type, inputs, attrs, name=name)
        return apply_op(op_type, inputs, attrs, name=name)

    def _value(self, value, op_type, name="value"):
        try:
            return convert_to_tensor(value, dtype=self._dtype, name=name)
        except errors.InvalidArgumentError as e:
            raise _E(f"{op_type} on {self._where()} of dtype {self._dtype.name}: {e}") from None

    # -- the TF1 methods ----------------------------------------------------------------
    def identity(self) -> TensorArray:
        """The same array with a new flow (an Identity of this one)."""
        graph, scope = self._scope(None, "TensorArrayIdentity")
        with scope:
            return self._with_flow(array_ops.identity(self._flow))

    def grad(self, source, flow=None, name=None) -> TensorArray:
        """The gradient array for gradient source ``source`` (TensorArrayGradV3)."""
        if flow is None:
            flow = self._flow
        graph, scope = self._scope(name, "TensorArrayGrad")
        with scope:
            g_handle, g_flow = self._apply("TensorArrayGradV3", [self._handle, flow], {"source": str(source)},
                                        name="TensorArrayGrad")
        g = TensorArray(self._dtype, handle=g_handle, flow=g_flow, infer_shape=self._infer_shape)
        g._element_shape = self._element_shape
        return g

    def read(self, index, name=None) -> Tensor:
        """The element at ``index``."""
        graph, scope = self._scope(name, "TensorArrayReadV3")
        with scope:
            index = convert_to_tensor(index, dtype=dtypes.int32, name="index")
            value = self._apply("TensorArrayReadV3", [self._handle, index, self._flow], {"dtype": self._dtype},
                             name="TensorArrayReadV3")
        if self._infer_shape:
            value._shape = self._element_shape[0]
        return value

    def write(self, index, value, name=None) -> TensorArray:
        """A TensorArray (the same array, a new flow) with ``value`` written at ``index``."""
        graph, scope = self._scope(name, "TensorArrayWrite")
        with scope:
            value = self._value(value, "TensorArrayWriteV3")
            self._merge_element_shape(value.shape, "TensorArrayWriteV3")
            index = convert_to_tensor(index, dtype=dtypes.int32, name="index")
            flow = self._apply("TensorArrayWriteV3", [self._handle, index, value, self._flow],
                            name="TensorArrayWriteV3")
        return self._with_flow(flow)

    def stack(self, name=None) -> Tensor:
        """All elements, stacked along a new first dimension."""
        graph, scope = self._scope(name, "TensorArrayStack")
        with scope:
            return self.gather(array_ops.range(0, self.size()), name="TensorArrayGatherV3")

    def gather(self, indices, name=None) -> Tensor:
        """The elements at ``indices``, stacked along a new first dimension."""
        graph, scope = self._scope(name, "TensorArrayGather")
        with scope:
            indices = convert_to_tensor(indices, dtype=dtypes.int32, name="indices")
            es = self._element_shape[0] if self._infer_shape else TensorShape(None)
            return self._apply("TensorArrayGatherV3", [self._handle, indices, self._flow],
                            {"dtype": self._dtype, "element_shape": es}, name="TensorArrayGatherV3")

    def unstack(self, value, name=None) -> TensorArray:
        """Writes ``value[i]`` at index i for every row of ``value``."""
        graph, scope = self._scope(name, "TensorArrayUnstack")
        with scope:
            value = self._value(value, "TensorArrayScatterV3")
            n = array_ops.shape(value)[0]
            return self.scatter(array_ops.range(0, n), value, name="TensorArrayScatterV3")

    def scatter(self, indices, value, name=None) -> TensorArray:
        """Writes ``value[i]`` at ``indices[i]``."""
        graph, scope = self._scope(name, "TensorArrayScatter")
        with scope:
            value = self._value(value, "TensorArrayScatterV3")
            indices = convert_to_tensor(indices, dtype=dtypes.int32, name="indices")
            if value.shape.ndims is not None and value.shape.ndims >= 1:
                self._merge_element_shape(value.shape[1:], "TensorArrayScatterV3")
            flow = self._apply("TensorArrayScatterV3", [self._handle, indices, value, self._flow],
                            name="TensorArrayScatterV3")
        return self._with_flow(flow)

    def concat(self, name=None) -> Tensor:
        """All elements concatenated along their first dimension."""
        graph, scope = self._scope(name, "TensorArrayConcat")
        with scope:
            es = self._element_shape[0]
            rest = es[1:] if (self._infer_shape and es.ndims) else TensorShape(None)
            value, _ = self._apply("TensorArrayConcatV3", [self._handle, self._flow],
                                {"dtype": self._dtype, "element_shape_except0": rest}, name="TensorArrayConcatV3")
        return value

    def split(self, value, lengths, name=None) -> TensorArray:
        """Splits ``value`` along its first dimension into pieces of ``lengths`` (written at
        0, 1, ...)."""
        graph, scope = self._scope(name, "TensorArraySplit")
        with scope:
            value = self._value(value, "TensorArraySplitV3")
            lengths_t = lengths if isinstance(lengths, Tensor) else convert_to_tensor(lengths, dtype=dtypes.int64)
            if lengths_t.dtype is not dtypes.int64:
                lengths_t = math_ops.cast(lengths_t, dtypes.int64)
            flow = self._apply("TensorArraySplitV3", [self._handle, value, lengths_t, self._flow],
                            name="TensorArraySplitV3")
        if self._infer_shape and value.shape.ndims is not None:
            cl = constant_value(lengths_t)
            if cl is not None and len(cl) and int(cl.max()) == int(cl.min()):
                self._merge_element_shape(TensorShape([int(cl[0])]).concatenate(value.shape[1:]),
                                          "TensorArraySplitV3")
        return self._with_flow(flow)

    def size(self, name=None) -> Tensor:
        """The current size of the array (an int32 scalar)."""
        graph, scope = self._scope(name, "TensorArraySize")
        with scope:
            return self._apply("TensorArraySizeV3", [self._handle, self._flow], name="TensorArraySizeV3")

    def close(self, name=None):
        """An op that deletes the array's elements."""
        graph, scope = self._scope(name, "TensorArrayClose")
        with scope:
            return self._apply("TensorArrayCloseV3", [self._handle], name="TensorArrayCloseV3")


class _Scope:
    """The graph and a name scope for one method."""

    def __init__(self, graph, handle_op, name):
        self._graph, self._op, self._name = graph, handle_op, name
        self._stack = []

    def __enter__(self):
        cms = [self._graph.as_default(), self._graph.name_scope(self._name)]
        for cm in cms:
            cm.__enter__()
            self._stack.append(cm)
        return self

    def __exit__(self, *exc):
        while self._stack:
            self._stack.pop().__exit__(*exc)
        return False
