"""``tw.contrib.rnn``: the recurrent cells and RNN functions under the names TF1 programs
import them by (``tf.contrib.rnn.BasicLSTMCell``, ``tf.contrib.rnn.static_rnn``, ...): the
very classes of ``tw.nn.rnn_cell`` and functions of ``tw.nn``. A name tensorweave does not
provide raises an ``AttributeError`` that says so."""

from tensorweave.ops.rnn import bidirectional_dynamic_rnn, dynamic_rnn, static_bidirectional_rnn, static_rnn
from tensorweave.ops.rnn_cell import (
    BasicLSTMCell,
    BasicRNNCell,
    DeviceWrapper,
    DropoutWrapper,
    GRUCell,
    LSTMCell,
    LSTMStateTuple,
    MultiRNNCell,
    ResidualWrapper,
    RNNCell,
)

__all__ = ["BasicLSTMCell", "BasicRNNCell", "DeviceWrapper", "DropoutWrapper", "GRUCell", "LSTMCell",
           "LSTMStateTuple", "MultiRNNCell", "ResidualWrapper", "RNNCell", "bidirectional_dynamic_rnn",
           "dynamic_rnn", "static_bidirectional_rnn", "static_rnn"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.rnn.{name} is not provided by tensorweave (tw.contrib.rnn has: "
                         f"{', '.join(__all__)})")
