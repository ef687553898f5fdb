"""Benchmark runner: times tensorweave against plain NumPy (and TensorFlow's tf.compat.v1, JAX
and PyTorch when installed: ``tox -e bench`` installs TensorFlow and JAX) for each workload,
in one process, and prints ratios to NumPy and to TensorFlow. ``--write`` replaces the results table in
docs/performance.md.

    python benchmarks/run.py                 # all workloads
    python benchmarks/run.py chain --write   # one workload, update the docs

Timing: each variant is warmed up, then timed in several rounds of a fixed number of steps;
the best round counts (the least disturbed by the rest of the machine). Variants are
interleaved round by round so a burst of background load hits all of them alike.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workloads import WORKLOADS  # noqa: E402
from workloads.peers import TF_LABEL  # noqa: E402

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"


def _calibrate(fn, target_s: float) -> int:
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= target_s / 10 or n >= 1 << 20:
            return max(1, int(n * (target_s / 10) / max(dt, 1e-9)))
        n *= 4


def time_variants(variants: dict, rounds: int, target_s: float) -> dict:
    """Best seconds per step for each variant, rounds interleaved. Every other round runs
    the variants in reverse order, so that no variant always runs right after the same
    other one: a runtime's threads may stay busy for a while after its own round (JAX's
    take 7-10 ms of CPU in the 200 ms after a convnet step), slowing whatever comes next."""
    for fn in variants.values():
        fn()  # warm-up: plan building, caches, BLAS threads
    counts = {k: _calibrate(fn, target_s) for k, fn in variants.items()}
    best = {k: float("inf") for k in variants}
    order = list(variants)
    for r in range(rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            fn, n = variants[k], counts[k]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[k] = min(best[k], (time.perf_counter() - t0) / n)
    return best


def machine_info() -> str:
    import numpy as np

    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    except OSError:
        cpu = platform.processor() or "?"
    blas = "?"
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]["name"] + " " + str(cfg["Build Dependencies"]["blas"].get("version", ""))
    except Exception:  # noqa: BLE001 - older NumPy: leave it unknown
        pass
    core = os.environ.get("OPENBLAS_CORETYPE", "unset")
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, NumPy {np.__version__} "
            f"({blas.strip()}), OPENBLAS_CORETYPE={core}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0, help="approximate time per round per variant")
    ap.add_argument("--write", action="store_true", help="update the table in docs/performance.md")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one workload's rows, for the parent
    args = ap.parse_args(argv)
    for name in args.workloads:
        if name not in WORKLOADS:
            ap.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")

    if args.json:
        print(json.dumps(_measure(args.workloads[0], args)))
        return 0
    rows = []
    for name in args.workloads:
        # Each workload in its own process: TensorFlow's and JAX's LLVM, once loaded, break
        # PoCL's kernel builds, and one workload's threads and caches do not disturb the next.
        proc = subprocess.run([sys.executable, __file__, name, "--json", "--rounds", str(args.rounds),
                               "--seconds", str(args.seconds)], stdout=subprocess.PIPE, check=True, text=True)
        rows.extend(tuple(r) for r in json.loads(proc.stdout.strip().splitlines()[-1]))

    table = ["| workload | implementation | time per step | ratio to NumPy | ratio to TF |",
             "| --- | --- | ---: | ---: | ---: |"]
    for name, k, t, r, r_tf in rows:
        table.append(f"| {name} | {k} | {_fmt(t)} | {_ratio(r)} | {_ratio(r_tf)} |")
    stamp = datetime.date.today().isoformat()
    block = "\n".join([BEGIN, f"Measured {stamp} on: {machine_info()}", "", *table, END])
    print(block)
    if args.write:
        _write(table, f"Measured {stamp} on: {machine_info()}", set(args.workloads))
    return 0


def _measure(name, args) -> list:
    """One workload's rows: (workload, implementation, seconds, ratio to NumPy, ratio to TF)."""
    w = importlib.import_module(f"workloads.{name}").build()
    try:
        if w.check:
            w.check()
        variants = {"tensorweave": w.tensorweave, **({"numpy": w.numpy} if w.numpy else {}), **w.others}
        print(f"[{name}] timing {len(variants)} variants x {args.rounds} rounds ...", file=sys.stderr, flush=True)
        best = time_variants(variants, args.rounds, args.seconds)
    finally:
        if w.close:
            w.close()
    print(f"[{name}] " + ", ".join(f"{k} {_fmt(t)}" for k, t in best.items()), file=sys.stderr, flush=True)
    base, tf_base = best.get("numpy"), best.get(TF_LABEL)
    return [(name, k, t, base and t / base, tf_base and t / tf_base) for k, t in best.items()]


def _ratio(r) -> str:
    return "-" if r is None else f"{r:.2f}x"


def _fmt(t: float) -> str:
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def _write(table: list[str], measured: str, names: set[str]) -> None:
    """Put ``table``'s rows into docs/performance.md's results block: rows of the workloads
    in ``names`` replace theirs, the other workloads' rows stay (a run of some workloads
    updates those), and the block says which rows are from when."""
    path = HERE.parent / "docs" / "performance.md"
    text = path.read_text() if path.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    old_lines = old.strip().splitlines()
    old_rows = [ln for ln in old_lines if ln.startswith("| ") and not ln.startswith(("| workload", "| ---"))]
    old_header = [ln.removeprefix("Other rows: ") for ln in old_lines if ln.startswith(("Measured", "Other rows: "))]
    # (a header of rows this run replaces all of goes with them)
    old_header = [h for h in old_header
                  if "; the rows of " not in h or not set(h.split("; the rows of ", 1)[1].split(", ")) <= names]
    kept = [ln for ln in old_rows if ln.split("|")[1].strip() not in names]
    rows = table[2:]
    order = []  # workloads in the old table's order, new ones after
    for ln in old_rows + rows:
        name = ln.split("|")[1].strip()
        if name not in order:
            order.append(name)
    merged = [ln for name in order for ln in (rows if name in names else kept) if ln.split("|")[1].strip() == name]
    lines = [measured]
    if kept:  # which run measured which rows: this one, then the headers of the earlier ones
        lines = [f"{measured}; the rows of {', '.join(sorted(names))}"]
        lines += [f"Other rows: {h}" for h in dict.fromkeys(old_header)]
    block = "\n".join([BEGIN, *lines, "", *table[:2], *merged, END])
    path.write_text(head + block + tail)
    print(f"updated {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
