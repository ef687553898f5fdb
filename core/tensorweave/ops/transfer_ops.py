"""The runtime's transfer ops ``_Send`` and ``_Recv`` (whitepaper 3.2.2): their op
definitions and the one encoding of their attrs.

Partitioning (``passes/partition.py``) writes a cross-device edge of a partition's GraphDef
as a ``_Send`` node on the producing side and a ``_Recv`` node on the consuming side, with
``encode_attrs``; a worker (``distributed/worker.py``) rebuilds the transfer from them with
``decode_attrs``; the wire format (``distributed/wire.py``) validates such nodes against
``RUNTIME_OPS``. Nothing else spells these attrs.

Why a private registry (``RUNTIME_OPS``) and not the built-in plugin: these ops have no
kernel on any device — the executor runs a partition's transfers itself, from ``Transfer``
objects, and a worker turns ``_Recv`` nodes into placeholders and ``_Send`` nodes into
transfers before compiling. Registered globally, ``apply_op``/``Graph.create_op`` and
``import_graph_def`` would accept them in user graphs, and such a graph would only fail at
placement ("no kernel for op _Recv ... no device has a kernel for it"); the conformance kit
would also expect example inputs and a CPU kernel for them as for every core op. Kept here,
a user graph cannot contain them, and only GraphDef validation, which knows it is reading a
partition, consults this registry (after the global one, so a plugin's op of the same name
takes precedence there).
"""

from __future__ import annotations

import dataclasses

from tensorweave.framework import dtypes, errors
from tensorweave.framework.op_def import OpRegistry
from tensorweave.framework.serialization import decode_attr, encode_attr

SEND = "_Send"
RECV = "_Recv"

RUNTIME_OPS = OpRegistry()
RUNTIME_OPS.source = "tensorweave (runtime transfer ops)"
# ``send_device_incarnation`` and ``client_terminated`` are TensorFlow's; declared so that
# such a GraphDef validates, never written.
_ATTRS = ["tensor_name: string", "send_device: string", "recv_device: string",
          "tensor_type: type = float32", "control: bool = false", "frame_name: string = ''",
          "iterations: {'all', 'first', 'later'} = 'all'", "loop_cond_of: string = ''",
          "send_device_incarnation: int = 0", "client_terminated: bool = false"]
RUNTIME_OPS.op(SEND, attrs=_ATTRS, doc="Sends its input (or, with only a control input, a token) to recv_device.")
RUNTIME_OPS.op(RECV, outputs=["tensor: tensor_type"], attrs=_ATTRS,
               doc="Receives tensor_name from send_device; control inputs are the local nodes it waits for.")
# The most data inputs each takes: a _Send has one, or none when it carries a control edge
# (its input is then "^node"); a _Recv's inputs are control inputs only.
MAX_DATA_INPUTS = {SEND: 1, RECV: 0}


@dataclasses.dataclass(frozen=True)
class TransferAttrs:
    """What a ``_Send``/``_Recv`` node says about its transfer (see ``passes/partition.Transfer``)."""

    tensor_name: str           # the rendezvous name both sides key the value by
    send_device: str
    recv_device: str
    tensor_type: dtypes.DType = dtypes.float32
    control: bool = False      # a control edge: a token, no value
    frame_name: str = ""       # the control-flow frame of the value ("" = root)
    iterations: str = "all"    # which iterations of the frame carry a value: all, first, later
    loop_cond_of: str = ""     # set when the value is the predicate of this loop frame


_FIELDS = [f.name for f in dataclasses.fields(TransferAttrs)]


def encode_attrs(t: TransferAttrs) -> dict:
    """The tagged GraphDef attrs of a ``_Send``/``_Recv`` node for ``t``."""
    return {name: encode_attr(getattr(t, name)) for name in _FIELDS}


def decode_attrs(attrs: dict, node: str) -> TransferAttrs:
    """The transfer a ``_Send``/``_Recv`` node's tagged ``attrs`` describe; attrs it lacks take
    their declared defaults. Expects attrs that GraphDef validation accepted (kinds, allowed
    values, required names); refuses empty device and tensor names, which the op definition
    cannot express."""
    defaults = RUNTIME_OPS.get(RECV).attrs
    values = {}
    for name in _FIELDS:
        v = attrs.get(name)
        values[name] = decode_attr(v, defaults[name].type) if v is not None else defaults[name].default
    for name in ("tensor_name", "send_device", "recv_device"):
        if not values[name]:
            raise errors.InvalidArgumentError(f"transfer node {node!r} needs a non-empty {name!r}")
    return TransferAttrs(**values)
