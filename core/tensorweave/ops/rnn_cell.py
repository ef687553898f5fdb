"""``tw.nn.rnn_cell`` (and ``tw.contrib.rnn``): recurrent cells with TF1's names and math.

A cell maps ``(inputs, state)`` to ``(output, new_state)``. It creates its variables the first
time it is called, in a variable scope named after it (``basic_lstm_cell``, made unique as
TF1's layers are: ``basic_lstm_cell_1`` for a second cell) under the caller's scope, and
reuses them on every later call, so ``static_rnn`` and ``dynamic_rnn`` with one cell share its
weights, and the names match TF1 checkpoints: ``rnn/basic_lstm_cell/kernel``,
``rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias``, ``rnn/gru_cell/gates/kernel``, ...
Variables are created outside any ``tw.while_loop``/``tw.cond`` context even when the cell is
first called in a loop body (TF1 does it with ``init_scope``), so ``dynamic_rnn`` can build
them; a custom cell should create its variables with ``self.add_variable`` for the same
reason. Wrappers (``DropoutWrapper``, ``ResidualWrapper``, ``DeviceWrapper``) add no scope.
"""

from __future__ import annotations

import collections
import numbers

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops, clip_ops, control_flow_ops, init_ops, math_ops, nn_ops
from tensorweave.ops import variable_scope as vs

__all__ = ["RNNCell", "BasicRNNCell", "BasicLSTMCell", "LSTMCell", "GRUCell", "MultiRNNCell", "DropoutWrapper",
           "ResidualWrapper", "DeviceWrapper", "LSTMStateTuple"]

_E = errors.InvalidArgumentError


class LSTMStateTuple(collections.namedtuple("LSTMStateTuple", ("c", "h"))):
    """The state of an LSTM cell: ``c`` (memory) and ``h`` (output)."""

    __slots__ = ()

    @property
    def dtype(self):
        c, h = self
        if c.dtype != h.dtype:
            raise TypeError(f"inconsistent internal state: {c.dtype} vs {h.dtype}")
        return c.dtype


# ----------------------------------------------------------------------------------------
# nested structures (tuples, namedtuples, lists of tensors or sizes)
def _is_seq(x) -> bool:
    return isinstance(x, list | tuple)


def flatten(x) -> list:
    if _is_seq(x):
        return [leaf for v in x for leaf in flatten(v)]
    return [x]


def pack_as(structure, flat):
    it = iter(flat)

    def pack(s):
        if isinstance(s, tuple) and hasattr(s, "_fields"):
            return type(s)(*[pack(v) for v in s])
        if _is_seq(s):
            return type(s)(pack(v) for v in s)
        return next(it)
    out = pack(structure)
    return out


def map_structure(fn, *structures):
    flats = [flatten(s) for s in structures]
    return pack_as(structures[0], [fn(*xs) for xs in zip(*flats)])


def same_structure(a, b) -> bool:
    if _is_seq(a) != _is_seq(b):
        return False
    if not _is_seq(a):
        return True
    return len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b))


def describe(s) -> str:
    if isinstance(s, tuple) and hasattr(s, "_fields"):
        return f"{type(s).__name__}(" + ", ".join(describe(v) for v in s) + ")"
    if isinstance(s, list):
        return "[" + ", ".join(describe(v) for v in s) + "]"
    if isinstance(s, tuple):
        return "(" + ", ".join(describe(v) for v in s) + ("," if len(s) == 1 else "") + ")"
    return "Tensor" if isinstance(s, Tensor) else repr(s)


def _size_shape(size) -> TensorShape:
    if isinstance(size, numbers.Integral):
        return TensorShape([int(size)])
    return as_shape(size)


# ----------------------------------------------------------------------------------------
class RNNCell:
    """The base of every cell (``tf.nn.rnn_cell.RNNCell``): subclasses define
    ``state_size``, ``output_size`` and ``call(inputs, state) -> (output, new_state)``; they
    create variables with ``add_variable`` (once: ``self.built`` tells)."""

    _default_name = "rnn_cell"

    def __init__(self, reuse=None, name=None, dtype=None):
        self._reuse = reuse
        self._name = name
        self._dtype = dtypes.as_dtype(dtype) if dtype is not None else None
        self._scope = None
        self.built = False

    @property
    def state_size(self):
        raise NotImplementedError

    @property
    def output_size(self):
        raise NotImplementedError

    @property
    def name(self):
        return self._scope.name if self._scope is not None else (self._name or self._default_name)

    def call(self, inputs, state):
        raise NotImplementedError

    def build(self, inputs_shape):
        pass

    def __call__(self, inputs, state, scope=None):
        if scope is not None:
            with vs.variable_scope(scope, reuse=True if self.built else self._reuse) as sc:
                if self._scope is None:
                    self._scope = sc
                return self._call_in_scope(inputs, state)
        if self._scope is None:
            # A reusing cell opens its scope by name (TF1's layers do): a default_name would
            # make a fresh, uniquified scope, which cannot be reused.
            name = self._name if self._name is not None or not self._reuse else self._default_name
            with vs.variable_scope(name, default_name=self._default_name if name is None else None,
                                   reuse=self._reuse) as sc:
                self._scope = sc
                return self._call_in_scope(inputs, state)
        with vs.variable_scope(self._scope, reuse=True):
            return self._call_in_scope(inputs, state)

    def _call_in_scope(self, inputs, state):
        if not self.built:
            first = flatten(inputs)[0]
            self._input_dtype = first.dtype if isinstance(first, Tensor) else dtypes.float32
            self.build(TensorShape(None) if not isinstance(first, Tensor) else first.shape)
            self.built = True
        return self.call(inputs, state)

    def add_variable(self, name, shape, dtype=None, initializer=None):
        """``tw.get_variable`` in this cell's scope, built outside any loop or cond."""
        dtype = dtype or self._dtype or getattr(self, "_input_dtype", None) or dtypes.float32
        with control_flow_ops.init_scope(get_default_graph()):
            return vs.get_variable(name, shape, dtype=dtype, initializer=initializer)

    add_weight = add_variable

    def zero_state(self, batch_size, dtype):
        """Zeros of ``[batch_size, size]`` for every part of ``state_size``."""
        with get_default_graph().name_scope(type(self).__name__ + "ZeroState"):
            return map_structure(lambda s: array_ops.zeros(
                array_ops.stack([batch_size, *_size_shape(s).as_list()]) if isinstance(batch_size, Tensor)
                else [batch_size, *_size_shape(s).as_list()], dtype), self.state_size)

    def _input_depth(self, inputs_shape, what):
        if inputs_shape.ndims is not None and inputs_shape.ndims != 2:
            raise _E(f"{type(self).__name__}: inputs must have rank 2 ([batch, depth]), got shape {inputs_shape}")
        depth = inputs_shape[-1] if inputs_shape.ndims else None
        depth = depth if not hasattr(depth, "value") else depth.value
        if depth is None:
            raise _E(f"{type(self).__name__}: the last dimension of the inputs must be known to create {what}, "
                     f"got shape {inputs_shape}")
        return int(depth)


def _linear(args, kernel, bias):
    x = args[0] if len(args) == 1 else array_ops.concat(args, 1)
    return nn_ops.bias_add(math_ops.matmul(x, kernel), bias)


def _check_state(cell, state, n):
    if not _is_seq(state) or len(state) != n:
        raise _E(f"{type(cell).__name__}: state must be a tuple of {n} tensors (state_is_tuple=True), got "
                 f"{describe(state)}")


class BasicRNNCell(RNNCell):
    """``output = new_state = activation(W [inputs, state] + b)``."""

    _default_name = "basic_rnn_cell"

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None):
        super().__init__(reuse, name, dtype)
        self._num_units = num_units
        self._activation = activation or math_ops.tanh

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def build(self, inputs_shape):
        depth = self._input_depth(inputs_shape, "its kernel")
        self._kernel = self.add_variable("kernel", [depth + self._num_units, self._num_units])
        self._bias = self.add_variable("bias", [self._num_units], initializer=init_ops.zeros_initializer())

    def call(self, inputs, state):
        out = self._activation(_linear([inputs, state], self._kernel, self._bias))
        return out, out


class BasicLSTMCell(RNNCell):
    """The LSTM of Zaremba et al. 2014 (no peepholes, no projection): gates i, j, f, o
    from one matrix product; ``forget_bias`` is added to f."""

    _default_name = "basic_lstm_cell"

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None, name=None,
                 dtype=None):
        super().__init__(reuse, name, dtype)
        self._num_units = num_units
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation or math_ops.tanh

    @property
    def state_size(self):
        n = self._num_units
        return LSTMStateTuple(n, n) if self._state_is_tuple else 2 * n

    @property
    def output_size(self):
        return self._num_units

    def build(self, inputs_shape):
        depth = self._input_depth(inputs_shape, "its kernel")
        self._kernel = self.add_variable("kernel", [depth + self._num_units, 4 * self._num_units])
        self._bias = self.add_variable("bias", [4 * self._num_units], initializer=init_ops.zeros_initializer())

    def call(self, inputs, state):
        if self._state_is_tuple:
            _check_state(self, state, 2)
            c, h = state
        else:
            c, h = array_ops.split(state, 2, axis=1)
        i, j, f, o = array_ops.split(_linear([inputs, h], self._kernel, self._bias), 4, axis=1)
        fb = convert_to_tensor(self._forget_bias, dtype=f.dtype)
        new_c = c * math_ops.sigmoid(f + fb) + math_ops.sigmoid(i) * self._activation(j)
        new_h = self._activation(new_c) * math_ops.sigmoid(o)
        new_state = LSTMStateTuple(new_c, new_h) if self._state_is_tuple else array_ops.concat([new_c, new_h], 1)
        return new_h, new_state


class LSTMCell(RNNCell):
    """The LSTM with optional peepholes (``use_peepholes``), cell clipping (``cell_clip``) and a
    projection of the output (``num_proj``, clipped to ``proj_clip``)."""

    _default_name = "lstm_cell"

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None, num_proj=None,
                 proj_clip=None, num_unit_shards=None, num_proj_shards=None, forget_bias=1.0, state_is_tuple=True,
                 activation=None, reuse=None, name=None, dtype=None):
        super().__init__(reuse, name, dtype)
        if num_unit_shards is not None or num_proj_shards is not None:
            raise errors.UnimplementedError("LSTMCell: num_unit_shards/num_proj_shards (deprecated in TF1) are "
                                            "not supported; use a partitioner in the variable scope")
        self._num_units = num_units
        self._use_peepholes = use_peepholes
        self._cell_clip = cell_clip
        self._initializer = initializer
        self._num_proj = num_proj
        self._proj_clip = proj_clip
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation or math_ops.tanh

    @property
    def state_size(self):
        out = self._num_proj or self._num_units
        return LSTMStateTuple(self._num_units, out) if self._state_is_tuple else self._num_units + out

    @property
    def output_size(self):
        return self._num_proj or self._num_units

    def build(self, inputs_shape):
        depth = self._input_depth(inputs_shape, "its kernel")
        h_depth = self._num_proj or self._num_units
        n = self._num_units
        self._kernel = self.add_variable("kernel", [depth + h_depth, 4 * n], initializer=self._initializer)
        self._bias = self.add_variable("bias", [4 * n], initializer=init_ops.zeros_initializer())
        if self._use_peepholes:
            self._w_f_diag = self.add_variable("w_f_diag", [n], initializer=self._initializer)
            self._w_i_diag = self.add_variable("w_i_diag", [n], initializer=self._initializer)
            self._w_o_diag = self.add_variable("w_o_diag", [n], initializer=self._initializer)
        if self._num_proj is not None:
            self._proj_kernel = self.add_variable("projection/kernel", [n, self._num_proj],
                                                  initializer=self._initializer)

    def call(self, inputs, state):
        n = self._num_units
        if self._state_is_tuple:
            _check_state(self, state, 2)
            c_prev, m_prev = state
        else:
            c_prev = array_ops.slice(state, [0, 0], [-1, n])
            m_prev = array_ops.slice(state, [0, n], [-1, self._num_proj or n])
        i, j, f, o = array_ops.split(_linear([inputs, m_prev], self._kernel, self._bias), 4, axis=1)
        fb = convert_to_tensor(self._forget_bias, dtype=f.dtype)
        sig, act = math_ops.sigmoid, self._activation
        if self._use_peepholes:
            c = sig(f + fb + self._w_f_diag * c_prev) * c_prev + sig(i + self._w_i_diag * c_prev) * act(j)
        else:
            c = sig(f + fb) * c_prev + sig(i) * act(j)
        if self._cell_clip is not None:
            c = clip_ops.clip_by_value(c, -self._cell_clip, self._cell_clip)
        if self._use_peepholes:
            m = sig(o + self._w_o_diag * c) * act(c)
        else:
            m = sig(o) * act(c)
        if self._num_proj is not None:
            m = math_ops.matmul(m, self._proj_kernel)
            if self._proj_clip is not None:
                m = clip_ops.clip_by_value(m, -self._proj_clip, self._proj_clip)
        new_state = LSTMStateTuple(c, m) if self._state_is_tuple else array_ops.concat([c, m], 1)
        return m, new_state


class GRUCell(RNNCell):
    """The gated recurrent unit (Cho et al. 2014): gates r, u (``gates/``), candidate
    (``candidate/``); ``new_h = u * h + (1 - u) * c``."""

    _default_name = "gru_cell"

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None, bias_initializer=None,
                 name=None, dtype=None):
        super().__init__(reuse, name, dtype)
        self._num_units = num_units
        self._activation = activation or math_ops.tanh
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def build(self, inputs_shape):
        depth = self._input_depth(inputs_shape, "its kernels")
        n = self._num_units
        ki = self._kernel_initializer
        self._gate_kernel = self.add_variable("gates/kernel", [depth + n, 2 * n], initializer=ki)
        self._gate_bias = self.add_variable("gates/bias", [2 * n], initializer=self._bias_initializer
                                            or init_ops.constant_initializer(1.0))
        self._candidate_kernel = self.add_variable("candidate/kernel", [depth + n, n], initializer=ki)
        self._candidate_bias = self.add_variable("candidate/bias", [n], initializer=self._bias_initializer
                                                 or init_ops.zeros_initializer())

    def call(self, inputs, state):
        value = math_ops.sigmoid(_linear([inputs, state], self._gate_kernel, self._gate_bias))
        r, u = array_ops.split(value, 2, axis=1)
        c = self._activation(_linear([inputs, r * state], self._candidate_kernel, self._candidate_bias))
        new_h = u * state + (1.0 - u) * c
        return new_h, new_h


class MultiRNNCell(RNNCell):
    """Cells stacked: the output of cell i is the input of cell i+1; the state is a tuple of
    the cells' states (variables under ``multi_rnn_cell/cell_<i>/``)."""

    _default_name = "multi_rnn_cell"

    def __init__(self, cells, state_is_tuple=True):
        super().__init__()
        cells = list(cells)
        if not cells:
            raise _E("MultiRNNCell: must be given at least one cell")
        for i, c in enumerate(cells):
            if not isinstance(c, RNNCell):
                raise _E(f"MultiRNNCell: cells[{i}] is not an RNNCell: {c!r}")
        if not state_is_tuple and any(_is_seq(c.state_size) for c in cells):
            raise _E("MultiRNNCell: state_is_tuple=False needs cells whose state_size is not a tuple")
        self._cells = cells
        self._state_is_tuple = state_is_tuple

    @property
    def state_size(self):
        if self._state_is_tuple:
            return tuple(c.state_size for c in self._cells)
        return sum(c.state_size for c in self._cells)

    @property
    def output_size(self):
        return self._cells[-1].output_size

    def zero_state(self, batch_size, dtype):
        if self._state_is_tuple:
            return tuple(c.zero_state(batch_size, dtype) for c in self._cells)
        return super().zero_state(batch_size, dtype)

    def call(self, inputs, state):
        cur = inputs
        new_states = []
        offset = 0
        if self._state_is_tuple:
            _check_state(self, state, len(self._cells))
        for i, cell in enumerate(self._cells):
            with vs.variable_scope(f"cell_{i}"):
                if self._state_is_tuple:
                    cur_state = state[i]
                else:
                    cur_state = array_ops.slice(state, [0, offset], [-1, cell.state_size])
                    offset += cell.state_size
                cur, new_state = cell(cur, cur_state)
                new_states.append(new_state)
        new = tuple(new_states) if self._state_is_tuple else array_ops.concat(new_states, 1)
        return cur, new


class _Wrapper(RNNCell):
    """A cell around another one; adds no variable scope of its own."""

    def __init__(self, cell):
        super().__init__()
        if not isinstance(cell, RNNCell):
            raise _E(f"{type(self).__name__}: cell must be an RNNCell, got {cell!r}")
        self._cell = cell

    @property
    def state_size(self):
        return self._cell.state_size

    @property
    def output_size(self):
        return self._cell.output_size

    def zero_state(self, batch_size, dtype):
        return self._cell.zero_state(batch_size, dtype)

    def __call__(self, inputs, state, scope=None):
        return self._wrapped(inputs, state, scope)


def _constant_one(p) -> bool:
    return isinstance(p, numbers.Real) and float(p) == 1.0


class DropoutWrapper(_Wrapper):
    """Dropout on the cell's inputs, outputs and state (``*_keep_prob``; 1 means none, and
    then no op is added). ``state_keep_prob`` drops the state's parts except an LSTM's
    memory ``c``."""

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None,
                 dropout_state_filter_visitor=None):
        super().__init__(cell)
        if variational_recurrent:
            raise errors.UnimplementedError("DropoutWrapper: variational_recurrent=True is not supported")
        for what, p in (("input_keep_prob", input_keep_prob), ("output_keep_prob", output_keep_prob),
                        ("state_keep_prob", state_keep_prob)):
            if isinstance(p, numbers.Real) and not 0.0 < float(p) <= 1.0:
                raise _E(f"DropoutWrapper: {what} must be in (0, 1], got {p}")
        self._input_keep_prob = input_keep_prob
        self._output_keep_prob = output_keep_prob
        self._state_keep_prob = state_keep_prob
        self._seed = seed
        self._filter = dropout_state_filter_visitor

    def _drop(self, values, keep_prob, salt, keep_filter=None):
        if _constant_one(keep_prob):
            return values
        flat = flatten(values)
        keep = flatten(keep_filter) if keep_filter is not None else [True] * len(flat)
        seed = None if self._seed is None else self._seed + salt
        out = [nn_ops.dropout(v, keep_prob, seed=seed) if k else v for v, k in zip(flat, keep)]
        return pack_as(values, out) if _is_seq(values) else out[0]

    def _state_filter(self, state):
        if self._filter is not None:
            return map_structure(lambda s: bool(self._filter(s)), state)

        def visit(s):
            if isinstance(s, LSTMStateTuple):
                return LSTMStateTuple(False, True)
            if _is_seq(s):
                return type(s)(visit(v) for v in s) if not hasattr(s, "_fields") else type(s)(*[visit(v) for v in s])
            return True
        return visit(state)

    def _wrapped(self, inputs, state, scope):
        inputs = self._drop(inputs, self._input_keep_prob, 0)
        output, new_state = self._cell(inputs, state, scope=scope)
        new_state = self._drop(new_state, self._state_keep_prob, 1, self._state_filter(new_state))
        output = self._drop(output, self._output_keep_prob, 2)
        return output, new_state


class ResidualWrapper(_Wrapper):
    """``output = inputs + cell output`` (or ``residual_fn(inputs, output)``)."""

    def __init__(self, cell, residual_fn=None):
        super().__init__(cell)
        self._residual_fn = residual_fn

    def _wrapped(self, inputs, state, scope):
        output, new_state = self._cell(inputs, state, scope=scope)
        if self._residual_fn is not None:
            return self._residual_fn(inputs, output), new_state
        if not same_structure(inputs, output):
            raise _E(f"ResidualWrapper: inputs {describe(inputs)} and outputs {describe(output)} must have the "
                     "same structure")
        for a, b in zip(flatten(inputs), flatten(output)):
            if not a.shape.is_compatible_with(b.shape):
                raise _E(f"ResidualWrapper: the inputs have shape {a.shape} but the cell's output has shape "
                         f"{b.shape}; they must match to be added")
        return map_structure(lambda a, b: a + b, inputs, output), new_state


class DeviceWrapper(_Wrapper):
    """Runs the cell (and builds its zero state) on ``device``."""

    def __init__(self, cell, device):
        super().__init__(cell)
        self._device = device

    def zero_state(self, batch_size, dtype):
        with get_default_graph().device(self._device):
            return self._cell.zero_state(batch_size, dtype)

    def _wrapped(self, inputs, state, scope):
        with get_default_graph().device(self._device):
            return self._cell(inputs, state, scope=scope)
