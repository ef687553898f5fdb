"""Our graphs and run metadata as TensorBoard's protos: ``graph_def_proto`` (a ``tw.Graph``
or our dict GraphDef -> ``graph_pb2.GraphDef``, what the graph dashboard renders) and
``run_metadata_proto`` (``tw.RunMetadata`` -> ``config_pb2.RunMetadata`` with ``StepStats``,
what it shows as compute time and memory per node).

Node names, op types and inputs carry over (``x:0`` is written ``x``, as TensorFlow does;
``^c`` control inputs stay), the device is the node's assigned device when a placement is
given (so "colour by device" shows where each node ran) and its requested device otherwise,
attrs become ``AttrValue``s (dtypes -> the ``DataType`` enum, shapes -> ``TensorShapeProto``,
tensors -> ``TensorProto``) and each node's static output shapes go in ``_output_shapes``.
"""

from __future__ import annotations

import time

import numpy as np

from tensorweave.framework import dtypes, errors, serialization
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.kernels.summary import datatype_enum, shape_proto, tensor_proto
from tensorweave.ops.summary_ops import tensorboard_protos

__all__ = ["graph_def_proto", "run_metadata_proto", "step_stats_proto"]


# --- graphs -------------------------------------------------------------------------------------
def _placement_dict(placement) -> dict:
    if placement is None:
        return {}
    if hasattr(placement, "placement"):  # a tw.RunMetadata
        placement = placement.placement
    if not isinstance(placement, dict):
        raise errors.InvalidArgumentError(
            f"placement must be a dict {{node name: device}} (Session.placement(...) or RunMetadata.placement), "
            f"got {type(placement).__name__}")
    return placement


def _input_name(name: str) -> str:
    return name[:-2] if name.endswith(":0") and not name.startswith("^") else name


def _attr_value(value, pb):
    """An ``AttrValue`` for a decoded attr value, or None for an unset one."""
    av = pb.attr_value_pb2.AttrValue()
    if value is None:
        return None
    if isinstance(value, dtypes.DType):
        av.type = datatype_enum(value, pb)
    elif isinstance(value, bool | np.bool_):
        av.b = bool(value)
    elif isinstance(value, int | np.integer):
        av.i = int(value)
    elif isinstance(value, float | np.floating):
        av.f = float(value)
    elif isinstance(value, str):
        av.s = value.encode("utf-8")
    elif isinstance(value, bytes):
        av.s = value
    elif isinstance(value, TensorShape):
        av.shape.CopyFrom(shape_proto(value.dims, pb))
    elif isinstance(value, np.ndarray):
        av.tensor.CopyFrom(tensor_proto(value, pb))
    elif isinstance(value, list | tuple):
        lv = av.list
        lv.SetInParent()  # an empty list is still a list value
        for x in value:
            if isinstance(x, dtypes.DType):
                lv.type.append(datatype_enum(x, pb))
            elif isinstance(x, bool | np.bool_):
                lv.b.append(bool(x))
            elif isinstance(x, int | np.integer):
                lv.i.append(int(x))
            elif isinstance(x, float | np.floating):
                lv.f.append(float(x))
            elif isinstance(x, str | bytes):
                lv.s.append(x.encode("utf-8") if isinstance(x, str) else x)
            elif isinstance(x, TensorShape):
                lv.shape.append(shape_proto(x.dims, pb))
            elif isinstance(x, np.ndarray):
                lv.tensor.append(tensor_proto(x, pb))
    else:  # nothing TensorBoard could show; keep the node and say what it was
        av.s = repr(value).encode("utf-8")
    return av


def _placed_match(requested: str, placed: list) -> str:
    """A node outside the placement (a fed placeholder, an op the fetches do not need) keeps
    its requested device, spelled as the one placed device it matches when there is exactly
    one: the dashboard colours by the device string, so "/device:CPU:0" and
    "/job:localhost/replica:0/task:0/device:CPU:0" would be two colours for one device."""
    if not requested or not placed:
        return requested
    try:
        spec = DeviceSpec.from_string(requested)
    except (errors.InvalidArgumentError, ValueError):
        return requested
    found = [p for p in placed if spec.matches(p)]
    return found[0] if len(found) == 1 else requested


def graph_def_proto(graph, placement=None):
    """``graph`` (a ``tw.Graph``, our dict GraphDef, or a ``graph_pb2.GraphDef`` returned as
    it is) as a ``graph_pb2.GraphDef``; ``placement`` ({node name: device}, or a
    ``tw.RunMetadata``) overrides each node's device with the one it was assigned."""
    pb = tensorboard_protos("writing a graph for TensorBoard")
    if isinstance(graph, pb.graph_pb2.GraphDef):
        return graph
    if hasattr(graph, "get_operations"):  # a tw.Graph
        gdef = serialization.graph_to_dict(graph, add_shapes=True, arrays=True)
    elif isinstance(graph, dict) and isinstance(graph.get("node"), list):
        gdef = graph
    else:
        raise errors.InvalidArgumentError(
            f"add_graph takes a tw.Graph, a GraphDef dict or a graph_pb2.GraphDef, got {type(graph).__name__}")
    devices = _placement_dict(placement)
    placed = sorted(set(devices.values()))
    out = pb.graph_pb2.GraphDef()
    out.versions.producer = int(gdef.get("versions", {}).get("producer", serialization.GRAPH_DEF_VERSION))
    for d in gdef["node"]:
        device = devices.get(d["name"]) or _placed_match(d.get("device") or "", placed)
        node = out.node.add(name=d["name"], op=d["op"], device=device)
        node.input.extend(_input_name(i) for i in d.get("input", ()))
        for key, tagged in sorted(d.get("attr", {}).items()):
            try:
                value = serialization.decode_attr(tagged)
            except errors.InvalidArgumentError as e:
                raise errors.InvalidArgumentError(f"node {d['name']!r} attr {key!r}: {e.message}") from None
            av = _attr_value(value, pb)
            if av is not None:
                node.attr[key].CopyFrom(av)
        shapes = d.get("output_shapes")
        if shapes is not None and "_output_shapes" not in node.attr:
            node.attr["_output_shapes"].list.shape.extend(shape_proto(s, pb) for s in shapes)
    return out


# --- run metadata -------------------------------------------------------------------------------
def _get(record, *names, default=None):
    for n in names:
        if isinstance(record, dict):
            if n in record:
                return record[n]
        elif hasattr(record, n):
            return getattr(record, n)
    return default


# perf_counter() counts from boot (or process start); wall clocks count from 1970, so any
# time this large is an epoch time already.
_EPOCH_SECONDS = 1e9


def _records(step_stats):
    """(device, thread names, record) from the shapes ``RunMetadata.step_stats`` takes: an
    object with ``dev_stats`` (each with ``device``, ``node_stats``, ``thread_names``), or a
    flat list of per-node records (dicts or objects naming their ``device``)."""
    dev_stats = _get(step_stats, "dev_stats")
    if dev_stats is not None:
        for ds in dev_stats:
            device = _get(ds, "device", default="") or ""
            names = _get(ds, "thread_names", default=None) or {}
            for rec in _get(ds, "node_stats", default=()) or ():
                yield device, names, rec
        return
    for rec in step_stats or ():
        yield _get(rec, "device", default="") or "", {}, rec


def _times_nanos(rec, offset):
    """(all_start on the epoch, op_start_rel, op_end_rel, all_end_rel) in nanoseconds, or
    None when the record has no start time."""
    start = _get(rec, "all_start_nanos")
    if start is not None:
        rel = [int(_get(rec, f"{k}_rel_nanos", default=0) or 0) for k in ("op_start", "op_end", "all_end")]
        return int(start), *rel
    start = _get(rec, "all_start_micros")
    if start is not None:
        rel = [1000 * int(_get(rec, f"{k}_rel_micros", default=0) or 0) for k in ("op_start", "op_end", "all_end")]
        return 1000 * int(start), *rel
    start, end = _get(rec, "start"), _get(rec, "end")
    if start is None:
        return None
    start = float(start)
    end = float(end) if end is not None else start
    base = 0.0 if start >= _EPOCH_SECONDS else offset
    dur = max(0, int(round((end - start) * 1e9)))
    return int(round((start + base) * 1e9)), 0, dur, dur


def step_stats_proto(step_stats, pb=None):
    """``step_stats_pb2.StepStats`` from our step stats (``tw.RunMetadata.step_stats``: a
    ``StepStats`` of devices and ``NodeExecStats``, or the flat list of per-node dicts
    earlier versions returned, with ``start``/``end`` in seconds of ``time.perf_counter``).

    Per node: its times (micros and nanos), thread, label, each output (slot, dtype, shape,
    bytes) and memory. TensorBoard's graph dashboard shows ``memory.total_bytes`` as the
    node's memory: we write the bytes of the node's outputs there, and the allocator's bytes
    in use and peak after the node in ``allocator_bytes_in_use``/``peak_bytes``."""
    pb = pb or tensorboard_protos("writing run metadata for TensorBoard")
    if isinstance(step_stats, pb.step_stats_pb2.StepStats):
        return step_stats
    # perf_counter -> epoch for the flat form: one offset measured now (both clocks advance together).
    offset = time.time() - time.perf_counter()
    out = pb.step_stats_pb2.StepStats()
    by_device = {}
    for device, thread_names, rec in _records(step_stats):
        ds = by_device.get(device)
        if ds is None:
            ds = by_device[device] = out.dev_stats.add(device=device)
            for tid, tname in thread_names.items():
                ds.thread_names[int(tid) & 0xFFFFFFFF] = str(tname)
        times = _times_nanos(rec, offset)
        if times is None:
            continue
        start, op_start, op_end, all_end = times
        name = _get(rec, "node_name", "node", default="") or ""
        ns = ds.node_stats.add(
            node_name=name, all_start_micros=start // 1000, op_start_rel_micros=op_start // 1000,
            op_end_rel_micros=op_end // 1000, all_end_rel_micros=all_end // 1000, all_start_nanos=start,
            op_start_rel_nanos=op_start, op_end_rel_nanos=op_end, all_end_rel_nanos=all_end)
        op = _get(rec, "op", "op_type")
        label = _get(rec, "timeline_label")
        ns.timeline_label = label if label is not None else (f"{name} = {op}()" if op else name)
        thread = _get(rec, "thread_id", "thread", "tid")
        if isinstance(thread, int | np.integer):
            ns.thread_id = int(thread) & 0xFFFFFFFF
        outputs = _get(rec, "output", default=None)
        if outputs is None or isinstance(outputs, int | np.integer):
            nbytes = _get(rec, "output_bytes")
            outputs = [] if nbytes is None else [{"slot": 0, "bytes": nbytes}]
        total = 0
        for o in outputs:
            nbytes = int(_get(o, "bytes", default=0) or 0)
            total += nbytes
            desc = ns.output.add(slot=int(_get(o, "slot", default=0) or 0)).tensor_description
            dt = _get(o, "dtype", default="")
            if dt:
                try:
                    desc.dtype = datatype_enum(dt, pb)
                except (KeyError, errors.InvalidArgumentError):
                    pass
            # The dashboard reads every output's shape: an unknown one is written empty.
            desc.shape.SetInParent()
            shape = _get(o, "shape", default=None)
            if shape is not None:
                desc.shape.CopyFrom(shape_proto(shape, pb))
            desc.allocation_description.requested_bytes = nbytes
            desc.allocation_description.allocated_bytes = nbytes
            desc.allocation_description.allocator_name = device
        memory = list(_get(rec, "memory", default=()) or ())
        if memory:
            for m in memory:
                ns.memory.add(allocator_name=str(_get(m, "allocator_name", default=device) or device),
                              total_bytes=total, peak_bytes=int(_get(m, "peak_bytes", default=0) or 0),
                              allocator_bytes_in_use=int(_get(m, "allocator_bytes_in_use", default=0) or 0))
                total = 0  # the node's bytes counted once
        elif outputs:
            ns.memory.add(allocator_name=device, total_bytes=total)
    return out


def run_metadata_proto(run_metadata):
    """``config_pb2.RunMetadata`` of a ``tw.RunMetadata`` (a ``config_pb2.RunMetadata`` is
    returned as it is): step stats and partition graphs."""
    pb = tensorboard_protos("writing run metadata for TensorBoard")
    if isinstance(run_metadata, pb.config_pb2.RunMetadata):
        return run_metadata
    out = pb.config_pb2.RunMetadata()
    stats = _get(run_metadata, "step_stats")
    if stats is not None:
        out.step_stats.CopyFrom(step_stats_proto(stats, pb))
    for g in _get(run_metadata, "partition_graphs", default=()) or ():
        out.partition_graphs.append(graph_def_proto(g))
    return out
