"""Traced steps as Chrome trace-event JSON (TF1's ``tensorflow.python.client.timeline``).

``Timeline(step_stats).generate_chrome_trace_format()`` turns a ``RunMetadata.step_stats``
into the JSON that Perfetto's UI (https://ui.perfetto.dev) and ``chrome://tracing`` open:

* one **process** per device, named with its full name (so one per task and device),
* one **thread** per executor thread that ran nodes on it, named after the Python thread
  and its native id; nodes whose times overlap without nesting (async nodes such as a Recv,
  which waits while its thread runs other nodes) go to an extra row of that thread, since a
  row of complete events must nest,
* one complete (``"X"``) event per node: name the op type, ``args`` the node name, outputs
  and bytes, the transfer of a Send/Recv,
* with ``show_dataflow``, a flow arrow (``"s"`` -> ``"f"``, same ``id``) from each Send to
  the Recv of the same rendezvous key, across devices and tasks,
* with ``show_memory``, a counter (``"C"``) per device of the allocator's bytes in use after
  each node.

Times are microseconds from the step's first node (``otherData.step_start_micros`` is that
moment on the wall clock). The implementation lives in the client layer, beside the Session
that writes traces for ``TENSORWEAVE_TRACE_DIR`` (and below ``train``, whose hooks write
timelines too); ``tensorweave.tools.timeline`` is its public name.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile

from tensorweave.framework import errors
from tensorweave.runtime.config import StepStats

# Rows added for overlapping events get thread ids from here up: above any native thread id
# (Linux's pid_max is at most 2**22).
_EXTRA_ROW_TIDS = 1 << 30


class Timeline:
    """``Timeline(step_stats, graph=None)``: ``step_stats`` is a ``StepStats`` (or its
    ``to_dict()`` form); with ``graph``, each node's event also lists its inputs."""

    def __init__(self, step_stats, graph=None):
        if isinstance(step_stats, dict):
            step_stats = StepStats.from_dict(step_stats)
        if not isinstance(step_stats, StepStats):
            raise TypeError(f"Timeline needs a StepStats (RunMetadata.step_stats), got {type(step_stats).__name__}")
        self._step_stats = step_stats
        self._graph = graph

    def generate_chrome_trace_format(self, show_dataflow: bool = True, show_memory: bool = False) -> str:
        """The trace as a JSON string (``{"traceEvents": [...], ...}``)."""
        return json.dumps(self.trace(show_dataflow, show_memory), separators=(",", ":"))

    def trace(self, show_dataflow: bool = True, show_memory: bool = False) -> dict:
        """The trace as a dict (what ``generate_chrome_trace_format`` serialises)."""
        devices = sorted(self._step_stats.dev_stats, key=lambda ds: ds.device)
        starts = [n.all_start_nanos for ds in devices for n in ds.node_stats]
        base = min(starts) if starts else 0
        meta, events, counters = [], [], []
        sends, recvs = {}, {}   # rendezvous key -> (pid, tid, start ns, end ns)
        extra_tids = itertools.count(_EXTRA_ROW_TIDS)
        for pid, ds in enumerate(devices, start=1):
            meta.append(_meta("process_name", pid, None, {"name": ds.device}))
            meta.append(_meta("process_sort_index", pid, None, {"sort_index": pid}))
            rows = _rows(ds.node_stats, extra_tids)
            named = set()
            for n in ds.node_stats:
                row_tid, lane = rows[id(n)]
                if row_tid not in named:
                    named.add(row_tid)
                    thread = ds.thread_names.get(n.thread_id) or "thread"
                    label = f"{thread} (tid {n.thread_id})" + (f" +{lane}" if lane else "")
                    meta.append(_meta("thread_name", pid, row_tid, {"name": label}))
                    meta.append(_meta("thread_sort_index", pid, row_tid, {"sort_index": n.thread_id * 64 + lane}))
                start, end = n.all_start_nanos, n.all_end_nanos
                ts, dur = _us(start - base), _us(max(end - start, 0))
                events.append({"ph": "X", "cat": "Op", "name": n.op, "pid": pid, "tid": row_tid,
                               "ts": ts, "dur": dur, "args": self._args(n)})
                if n.transfer is not None:
                    (sends if n.op == "_Send" else recvs)[n.transfer.key] = (pid, row_tid, ts, dur)
                if show_memory:
                    for m in n.memory:
                        counters.append({"ph": "C", "name": f"Memory ({m.allocator_name})", "pid": pid,
                                         "ts": _us(end - base), "args": {"bytes_in_use": m.allocator_bytes_in_use}})
        if show_dataflow:
            for flow_id, key in enumerate(sorted(k for k in sends if k in recvs), start=1):
                spid, stid, sts, _ = sends[key]
                rpid, rtid, rts, rdur = recvs[key]
                events.append({"ph": "s", "cat": "DataFlow", "name": "transfer", "id": flow_id,
                               "pid": spid, "tid": stid, "ts": sts})
                # Bound to the Recv's slice ("e": enclosing), just inside its end: when the value arrived.
                events.append({"ph": "f", "bp": "e", "cat": "DataFlow", "name": "transfer", "id": flow_id,
                               "pid": rpid, "tid": rtid, "ts": round(rts + max(rdur - 0.001, 0.0), 3)})
        events.sort(key=lambda e: e["ts"])
        counters.sort(key=lambda e: (e["pid"], e["ts"]))
        return {"traceEvents": meta + events + counters, "displayTimeUnit": "ms",
                "otherData": {"step_start_micros": base // 1000,
                              "clock_offsets": {k: dict(v) for k, v in self._step_stats.clock_offsets.items()}}}

    def _args(self, n) -> dict:
        args = {"name": n.node_name, "op": n.op,
                "op_start_rel_us": _us(n.op_start_rel_nanos), "op_end_rel_us": _us(n.op_end_rel_nanos)}
        if n.output:
            args["output_bytes"] = n.output_bytes
            args["outputs"] = [f"{o.slot}: {o.dtype}{o.shape if o.shape is not None else ''} {o.bytes} B"
                               for o in n.output]
        if n.frame:
            args["frame"], args["iteration"] = n.frame, n.iteration
        tr = n.transfer
        if tr is not None:
            args.update(tensor=tr.tensor, bytes=tr.bytes, src_device=tr.src_device, dst_device=tr.dst_device,
                        transport=tr.transport, key=tr.key)
        if self._graph is not None:
            try:
                op = self._graph.get_operation_by_name(n.node_name)
            except (KeyError, ValueError, errors.OpError):  # a Send/Recv the plan added, or another graph's node
                op = None
            if op is not None:
                args["inputs"] = [t.name for t in op.inputs] + [f"^{c.name}" for c in op.control_inputs]
        return args


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _meta(name, pid, tid, args) -> dict:
    e = {"ph": "M", "name": name, "pid": pid, "args": args}
    if tid is not None:
        e["tid"] = tid
    return e


def _rows(node_stats, extra_tids) -> dict:
    """id(node) -> (trace tid of its row, lane). Lane 0 is the thread's own row; a node that
    overlaps another on its row without nesting in it goes to the first lane where it nests
    (each lane a stack of the end times of the events still open there)."""
    by_thread: dict = {}
    for n in node_stats:
        by_thread.setdefault(n.thread_id, []).append(n)
    placed = {}
    for tid, nodes in by_thread.items():
        lanes: list[list[int]] = []
        lane_tids: list[int] = []
        for n in sorted(nodes, key=lambda n: (n.all_start_nanos, -n.all_end_nanos)):
            k = _lane(lanes, n.all_start_nanos, max(n.all_end_nanos, n.all_start_nanos))
            if k == len(lane_tids):
                lane_tids.append(tid if k == 0 else next(extra_tids))
            placed[id(n)] = (lane_tids[k], k)
    return placed


def _lane(lanes: list, start: int, end: int) -> int:
    """The first lane where [start, end] nests (pushed there), a new one if none."""
    for k, stack in enumerate(lanes):
        while stack and stack[-1] <= start:
            stack.pop()
        if not stack or end <= stack[-1]:
            stack.append(end)
            return k
    lanes.append([end])
    return len(lanes) - 1


_trace_numbers = itertools.count()


def write_step_trace(directory: str, step_stats, graph=None) -> str:
    """Write one traced step to ``directory/step_<n>.json``, ``n`` the next number no file
    there has yet (other sessions and processes may write to the same directory: none
    overwrites another's); returns the path. The file appears whole or not at all."""
    os.makedirs(directory, exist_ok=True)
    data = Timeline(step_stats, graph).generate_chrome_trace_format(show_dataflow=True, show_memory=True)
    fd, tmp = tempfile.mkstemp(prefix=".step_", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
        while True:
            path = os.path.join(directory, f"step_{next(_trace_numbers)}.json")
            try:
                os.link(tmp, path)  # fails where the name is taken, unlike a rename
                break
            except FileExistsError:
                continue
    finally:
        os.unlink(tmp)
    return path
