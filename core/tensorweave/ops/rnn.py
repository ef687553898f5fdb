"""``tw.nn.static_rnn``, ``tw.nn.dynamic_rnn`` and their bidirectional forms (TF1's
``python/ops/rnn.py``).

``static_rnn`` unrolls the cell over a Python list of inputs; ``dynamic_rnn`` runs it in a
``tw.while_loop`` over the time dimension: the inputs are unstacked into TensorArrays
before the loop, each iteration reads its step and writes its output, and the outputs are
stacked after it. With ``sequence_length`` (one length per batch entry) the outputs past an
entry's length are zeros and its state is carried through unchanged, so the final state is
the state at each entry's last step. Both open the variable scope ``rnn`` (unless given
``scope``), so a cell's variables are ``rnn/<cell>/kernel`` as in TF1.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import constant_value, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops, control_flow_ops, indexing_ops, math_ops, nn_ops
from tensorweave.ops import variable_scope as vs
from tensorweave.ops.rnn_cell import RNNCell, _size_shape, describe, flatten, map_structure, pack_as, same_structure
from tensorweave.ops.tensor_array_ops import TensorArray

__all__ = ["static_rnn", "dynamic_rnn", "bidirectional_dynamic_rnn", "static_bidirectional_rnn"]

_E = errors.InvalidArgumentError


def _check_cell(cell, where):
    if not isinstance(cell, RNNCell):
        raise _E(f"{where}: cell must be an RNNCell (tw.nn.rnn_cell.*), got {cell!r}")


def _initial_state(cell, initial_state, batch_size, dtype, where):
    if initial_state is None:
        if dtype is None:
            raise _E(f"{where}: without initial_state a dtype is required (e.g. dtype=tw.float32)")
        return cell.zero_state(batch_size, dtypes.as_dtype(dtype))
    if not same_structure(cell.state_size, initial_state):
        raise _E(f"{where}: initial_state must have the structure of the cell's state_size "
                 f"{describe(cell.state_size)}, got {describe(initial_state)}")
    flat = [convert_to_tensor(s) for s in flatten(initial_state)]
    for s, size in zip(flat, flatten(cell.state_size)):
        want = _size_shape(size)
        if s.shape.ndims is not None and not s.shape[1:].is_compatible_with(want):
            raise _E(f"{where}: initial_state part '{s.name}' has shape {s.shape}, but the cell expects "
                     f"[batch, {', '.join(map(str, want.as_list()))}]")
    return pack_as(initial_state, flat)


def _sequence_length(sequence_length, where):
    if sequence_length is None:
        return None
    seq = convert_to_tensor(sequence_length)
    if not seq.dtype.is_integer:
        raise _E(f"{where}: sequence_length must be an integer vector, got dtype {seq.dtype.name}")
    if seq.shape.ndims not in (None, 1):
        raise _E(f"{where}: sequence_length must be a vector of size [batch_size], got shape {seq.shape}")
    if seq.dtype is not dtypes.int32:
        seq = math_ops.cast(seq, dtypes.int32)
    return array_ops.identity(seq, name="sequence_length")


def _check_lengths(seq, time_steps, where):
    """``time_steps`` after checking that no length exceeds it (at run time a CheckNumerics
    of an infinity fails with the message)."""
    c_seq, c_t = constant_value(seq), constant_value(time_steps)
    if c_seq is not None and c_t is not None and c_seq.size:
        if int(c_seq.max()) > int(c_t):
            raise _E(f"{where}: sequence_length has a value {int(c_seq.max())} larger than the number of time "
                     f"steps {int(c_t)}")
        return time_steps
    too_long = math_ops.cast(math_ops.greater(math_ops.reduce_max(seq), time_steps), dtypes.float32)
    check = nn_ops.check_numerics(
        1.0 / (1.0 - too_long),
        f"{where}: sequence_length has a value larger than the number of time steps of the inputs")
    with get_default_graph().control_dependencies([check]):
        return array_ops.identity(time_steps, name="time_steps")


def _mask(time, seq, new, old, zero=False):
    """``new`` for the batch entries with ``time < seq``, else ``old`` (zeros when ``zero``)."""
    keep = math_ops.cast(math_ops.less(time, seq), new.dtype)
    for _ in range((new.shape.ndims or 2) - 1):
        keep = array_ops.expand_dims(keep, -1)
    out = new * keep if zero else new * keep + old * (1.0 - keep)
    out.set_shape(new.shape)
    return out


# ----------------------------------------------------------------------------------------
def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """The cell unrolled over ``inputs``, a list of ``[batch, depth]`` tensors; returns
    ``(outputs, final_state)``."""
    where = "static_rnn"
    _check_cell(cell, where)
    if not isinstance(inputs, list | tuple):
        raise _E(f"{where}: inputs must be a list of [batch, depth] tensors, got {inputs!r}")
    if not inputs:
        raise _E(f"{where}: inputs must not be empty")
    with vs.variable_scope(scope or "rnn"):
        first = [convert_to_tensor(x) for x in flatten(inputs[0])]
        for x in first:
            if x.shape.ndims is not None and x.shape.ndims != 2:
                raise _E(f"{where}: each input must have rank 2 ([batch, depth]), got '{x.name}' of shape {x.shape}")
        batch = first[0].shape.as_list()[0] if first[0].shape.ndims else None
        batch_size = batch if batch is not None else array_ops.shape(first[0])[0]
        state = _initial_state(cell, initial_state, batch_size, dtype, where)
        seq = _sequence_length(sequence_length, where)
        if seq is not None:
            _check_lengths(seq, len(inputs), where)
        outputs = []
        for t, x in enumerate(inputs):
            out, new_state = cell(x, state)
            if seq is not None:
                out = map_structure(lambda o, t=t: _mask(t, seq, o, None, zero=True), out)
                new_state = map_structure(lambda n, o, t=t: _mask(t, seq, n, o), new_state, state)
            outputs.append(out)
            state = new_state
        return outputs, state


def _transpose_batch_time(x):
    nd = x.shape.ndims
    if nd is None:
        raise _E(f"dynamic_rnn: the rank of input '{x.name}' must be known")
    return array_ops.transpose(x, [1, 0, *range(2, nd)])


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None, parallel_iterations=None,
                swap_memory=False, time_major=False, scope=None):
    """The cell run over the time dimension of ``inputs`` (``[batch, time, depth]``, or
    ``[time, batch, depth]`` with ``time_major``) in a ``tw.while_loop``; returns
    ``(outputs, final_state)``. ``swap_memory`` is accepted (nothing is swapped)."""
    where = "dynamic_rnn"
    _check_cell(cell, where)
    flat_in = [convert_to_tensor(x) for x in flatten(inputs)]
    for x in flat_in:
        if x.shape.ndims is not None and x.shape.ndims < 3:
            layout = "[time, batch, depth]" if time_major else "[batch, time, depth]"
            raise _E(f"{where}: inputs must have rank >= 3 ({layout}), got '{x.name}' of shape {x.shape}")
    with vs.variable_scope(scope or "rnn"):
        if not time_major:
            flat_in = [_transpose_batch_time(x) for x in flat_in]
        x0 = flat_in[0]
        dims = x0.shape.as_list() if x0.shape.ndims is not None else [None, None]
        time_steps = dims[0] if dims[0] is not None else array_ops.shape(x0)[0]
        batch_size = dims[1] if dims[1] is not None else array_ops.shape(x0)[1]
        state = _initial_state(cell, initial_state, batch_size, dtype, where)
        seq = _sequence_length(sequence_length, where)
        time_steps_t = convert_to_tensor(time_steps, dtype=dtypes.int32)
        if seq is not None:
            time_steps_t = _check_lengths(seq, time_steps_t, where)
        out_dtype = flatten(state)[0].dtype

        with get_default_graph().name_scope("dynamic_rnn"):
            input_tas = [TensorArray(x.dtype, size=time_steps_t, element_shape=x.shape[1:],
                                     tensor_array_name=f"input_{i}").unstack(x)
                         for i, x in enumerate(flat_in)]
            out_sizes = flatten(cell.output_size)
            batch_dim = TensorShape([batch_size if isinstance(batch_size, int) else None])
            output_tas = [TensorArray(out_dtype, size=time_steps_t,
                                      element_shape=batch_dim.concatenate(_size_shape(s)),
                                      tensor_array_name=f"output_{i}")
                          for i, s in enumerate(out_sizes)]

            def body(time, out_tas, st):
                xs = [ta.read(time) for ta in input_tas]
                for r, x in zip(xs, flat_in):
                    r.set_shape(x.shape[1:])
                x_t = pack_as(inputs, xs) if isinstance(inputs, list | tuple) else xs[0]
                out, new_st = cell(x_t, st)
                if not same_structure(st, new_st):
                    raise _E(f"{where}: the cell returned a state {describe(new_st)} whose structure differs "
                             f"from its state_size {describe(cell.state_size)}")
                flat_out = flatten(out)
                if len(flat_out) != len(out_tas):
                    raise _E(f"{where}: the cell returned {len(flat_out)} outputs, its output_size has "
                             f"{len(out_tas)}")
                if seq is not None:
                    flat_out = [_mask(time, seq, o, None, zero=True) for o in flat_out]
                    new_st = map_structure(lambda n, o: _mask(time, seq, n, o), new_st, st)
                out_tas = [ta.write(time, o) for ta, o in zip(out_tas, flat_out)]
                return time + 1, out_tas, new_st

            time0 = array_ops.constant(0, dtypes.int32, name="time")
            _, out_tas, final_state = control_flow_ops.while_loop(
                lambda time, *_: math_ops.less(time, time_steps_t), body, [time0, output_tas, state],
                parallel_iterations=parallel_iterations or 32, swap_memory=swap_memory)
            outs = []
            for ta, s in zip(out_tas, out_sizes):
                o = ta.stack()
                o.set_shape(TensorShape([time_steps if isinstance(time_steps, int) else None])
                            .concatenate(batch_dim).concatenate(_size_shape(s)))
                outs.append(o if time_major else _transpose_batch_time(o))
        outputs = pack_as(cell.output_size, outs) if isinstance(cell.output_size, list | tuple) else outs[0]
        return outputs, final_state


# ----------------------------------------------------------------------------------------
def _reverse_time_major(x, seq):
    """``x`` ([time, batch, ...]) with each batch entry's first ``seq[b]`` steps reversed
    (all steps when ``seq`` is None)."""
    if seq is None:
        return indexing_ops.reverse(x, [0])
    t = array_ops.shape(x)[0]
    b = array_ops.shape(x)[1]
    times = array_ops.expand_dims(array_ops.range(0, t), 1)  # [T, 1]
    lens = array_ops.expand_dims(seq, 0)  # [1, B]
    src = array_ops.where(math_ops.less(times + 0 * lens, lens), lens - 1 - times, times + 0 * lens)
    batch_idx = array_ops.expand_dims(array_ops.range(0, b), 0) + 0 * times
    idx = array_ops.stack([src, batch_idx], axis=2)
    out = indexing_ops.gather_nd(x, idx)
    out.set_shape(x.shape)
    return out


def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None, initial_state_fw=None,
                              initial_state_bw=None, dtype=None, parallel_iterations=None, swap_memory=False,
                              time_major=False, scope=None):
    """A forward and a backward ``dynamic_rnn`` (under ``fw``/``bw``); the backward one sees
    each sequence reversed (within its length). Returns ``((output_fw, output_bw),
    (state_fw, state_bw))``, both outputs in input time order."""
    _check_cell(cell_fw, "bidirectional_dynamic_rnn")
    _check_cell(cell_bw, "bidirectional_dynamic_rnn")
    with vs.variable_scope(scope or "bidirectional_rnn"):
        with vs.variable_scope("fw") as fw_scope:
            out_fw, st_fw = dynamic_rnn(cell_fw, inputs, sequence_length, initial_state_fw, dtype,
                                        parallel_iterations, swap_memory, time_major, scope=fw_scope)
        with vs.variable_scope("bw") as bw_scope:
            seq = None if sequence_length is None else math_ops.cast(convert_to_tensor(sequence_length), dtypes.int32)

            def rev(x):
                x = convert_to_tensor(x)
                if x.shape.ndims is not None and x.shape.ndims < 3:
                    return x  # dynamic_rnn reports the rank
                if time_major:
                    return _reverse_time_major(x, seq)
                return _transpose_batch_time(_reverse_time_major(_transpose_batch_time(x), seq))

            rev_in = map_structure(rev, inputs) if isinstance(inputs, list | tuple) else rev(inputs)
            tmp, st_bw = dynamic_rnn(cell_bw, rev_in, sequence_length, initial_state_bw, dtype,
                                     parallel_iterations, swap_memory, time_major, scope=bw_scope)
            out_bw = map_structure(rev, tmp) if isinstance(tmp, list | tuple) else rev(tmp)
    return (out_fw, out_bw), (st_fw, st_bw)


def static_bidirectional_rnn(cell_fw, cell_bw, inputs, initial_state_fw=None, initial_state_bw=None, dtype=None,
                             sequence_length=None, scope=None):
    """A forward and a backward ``static_rnn``; returns ``(outputs, state_fw, state_bw)``
    where each output is the forward and backward outputs concatenated."""
    _check_cell(cell_fw, "static_bidirectional_rnn")
    _check_cell(cell_bw, "static_bidirectional_rnn")
    if not isinstance(inputs, list | tuple) or not inputs:
        raise _E(f"static_bidirectional_rnn: inputs must be a non-empty list of tensors, got {inputs!r}")
    with vs.variable_scope(scope or "bidirectional_rnn"):
        with vs.variable_scope("fw") as fw_scope:
            out_fw, st_fw = static_rnn(cell_fw, inputs, initial_state_fw, dtype, sequence_length, scope=fw_scope)
        with vs.variable_scope("bw") as bw_scope:
            if sequence_length is None:
                rev_in = list(reversed(inputs))
            else:
                seq = math_ops.cast(convert_to_tensor(sequence_length), dtypes.int32)
                stacked = _reverse_time_major(array_ops.stack([convert_to_tensor(x) for x in inputs]), seq)
                rev_in = array_ops.unstack(stacked, num=len(inputs))
            tmp, st_bw = static_rnn(cell_bw, rev_in, initial_state_bw, dtype, sequence_length, scope=bw_scope)
            if sequence_length is None:
                out_bw = list(reversed(tmp))
            else:
                out_bw = array_ops.unstack(_reverse_time_major(array_ops.stack(tmp), seq), num=len(inputs))
    outputs = [array_ops.concat([f, b], 1) for f, b in zip(out_fw, out_bw)]
    return outputs, st_fw, st_bw
