"""``tensorweave.tools.timeline``: the public name of the timeline of traced steps, as TF1's
``tensorflow.python.client.timeline`` (and ``tf.profiler``-era code) is used::

    from tensorweave.tools.timeline import Timeline

    run_metadata = tw.RunMetadata()
    sess.run(train_op, options=tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE),
             run_metadata=run_metadata)
    with open("timeline.json", "w") as f:
        f.write(Timeline(run_metadata.step_stats).generate_chrome_trace_format())

The implementation lives in ``client/timeline.py`` (below the training hooks and the
Session, which use it too); see its docstring for what the trace contains. This module adds
``check_chrome_trace``: the trace-event format's rules, as the tests (and anyone changing
the timeline) check a trace against them.
"""

from __future__ import annotations

import json
import numbers

from tensorweave.client.timeline import Timeline, write_step_trace

__all__ = ["Timeline", "check_chrome_trace", "write_step_trace"]

_METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}


def check_chrome_trace(trace) -> dict:
    """Check a Chrome trace (its JSON string or the parsed dict) against the trace-event
    format as Perfetto and chrome://tracing read it; raise ``ValueError`` listing every
    violation, else return the parsed trace. The rules: a ``traceEvents`` list; every event
    has a ``ph`` and an integer ``pid``; every complete event (``X``) a ``name``, ``tid``,
    ``ts`` and ``dur >= 0``, and on one thread they nest (none overlaps another partly);
    every flow start (``s``) has exactly one finish (``f``, ``bp: "e"``) with its ``id`` and
    ``cat``, and each lies inside a complete event of its thread; every counter (``C``) has
    numeric ``args``; every pid and (pid, tid) used has a ``process_name`` / ``thread_name``."""
    if isinstance(trace, str | bytes):
        trace = json.loads(trace)
    problems = []
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ValueError("a Chrome trace is an object with a 'traceEvents' list")
    pnames, tnames, used_p, used_t = set(), set(), set(), set()
    slices: dict = {}
    flows: dict = {}

    def num(v):
        return isinstance(v, numbers.Real) and not isinstance(v, bool)

    for i, e in enumerate(events):
        where = f"event {i} ({e.get('ph') if isinstance(e, dict) else e!r})"
        if not isinstance(e, dict) or not isinstance(e.get("ph"), str):
            problems.append(f"{where}: not an object with a 'ph'")
            continue
        ph, pid, tid = e["ph"], e.get("pid"), e.get("tid")
        if not isinstance(pid, int):
            problems.append(f"{where}: no integer 'pid'")
            continue
        if ph == "M":
            if e.get("name") not in _METADATA:
                problems.append(f"{where}: unknown metadata {e.get('name')!r}")
            elif e["name"] == "process_name":
                pnames.add(pid)
            elif e["name"] == "thread_name":
                tnames.add((pid, tid))
            if e.get("name") in ("process_name", "thread_name") and not isinstance(
                    (e.get("args") or {}).get("name"), str):
                problems.append(f"{where}: {e['name']} without args.name")
            continue
        used_p.add(pid)
        if ph in ("X", "s", "f", "t"):
            if not isinstance(tid, int):
                problems.append(f"{where}: no integer 'tid'")
                continue
            used_t.add((pid, tid))
        if not num(e.get("ts")):
            problems.append(f"{where}: no numeric 'ts'")
            continue
        if ph == "X":
            if not isinstance(e.get("name"), str) or not num(e.get("dur")) or e["dur"] < 0:
                problems.append(f"{where}: a complete event needs a 'name' and a 'dur' >= 0")
                continue
            slices.setdefault((pid, tid), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif ph in ("s", "f"):
            if "id" not in e:
                problems.append(f"{where}: a flow event needs an 'id'")
                continue
            if ph == "f" and e.get("bp") != "e":
                problems.append(f"{where}: a flow finish should bind to its enclosing slice (bp 'e')")
            flows.setdefault((e.get("cat"), e["id"]), []).append((ph, pid, tid, e["ts"]))
        elif ph == "C":
            args = e.get("args")
            if not isinstance(e.get("name"), str) or not isinstance(args, dict) or not args or not all(
                    num(v) for v in args.values()):
                problems.append(f"{where}: a counter needs a 'name' and numeric 'args'")
        elif ph not in ("B", "E", "i", "I", "b", "e", "n", "t"):
            problems.append(f"{where}: unexpected phase {ph!r}")
    for pid in sorted(used_p - pnames):
        problems.append(f"pid {pid} has no process_name")
    for pid, tid in sorted(used_t - tnames):
        problems.append(f"pid {pid} tid {tid} has no thread_name")
    for (pid, tid), ss in slices.items():
        open_ends: list = []
        for start, end, name in sorted(ss, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                problems.append(f"pid {pid} tid {tid}: {name!r} at {start} overlaps an enclosing slice without nesting")
            open_ends.append(end)
    for (cat, fid), fs in flows.items():
        kinds = sorted(f[0] for f in fs)
        if kinds != ["f", "s"]:
            problems.append(f"flow {cat}/{fid}: {kinds.count('s')} starts and {kinds.count('f')} finishes (want one each)")
            continue
        for ph, pid, tid, ts in fs:
            if not any(start <= ts <= end for start, end, _ in slices.get((pid, tid), ())):
                problems.append(f"flow {cat}/{fid}: its {ph!r} at {ts} is inside no slice of pid {pid} tid {tid}")
    if problems:
        raise ValueError("not a valid Chrome trace:\n  " + "\n  ".join(problems[:50]))
    return trace
