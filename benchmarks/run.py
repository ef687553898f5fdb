"""Benchmark runner: times tensorweave against plain NumPy (and PyTorch when installed) for
each workload, in one process, and prints ratios. ``--write`` replaces the results table in
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
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workloads import WORKLOADS  # noqa: E402

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
    """Best seconds per step for each variant, rounds interleaved."""
    for fn in variants.values():
        fn()  # warm-up: plan building, caches, BLAS threads
    counts = {k: _calibrate(fn, target_s) for k, fn in variants.items()}
    best = {k: float("inf") for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            n = counts[k]
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
    args = ap.parse_args(argv)

    rows = []
    for name in args.workloads:
        if name not in WORKLOADS:
            ap.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
        mod = importlib.import_module(f"workloads.{name}")
        w = mod.build()
        try:
            if w.check:
                w.check()
            variants = {"tensorweave": w.tensorweave, "numpy": w.numpy, **w.others}
            print(f"[{name}] timing {len(variants)} variants x {args.rounds} rounds ...", file=sys.stderr, flush=True)
            best = time_variants(variants, args.rounds, args.seconds)
        finally:
            if w.close:
                w.close()
        base = best["numpy"]
        for k, t in best.items():
            rows.append((name, k, t, t / base))
        print(f"[{name}] tensorweave {best['tensorweave'] * 1e6:.1f} us/step, numpy {base * 1e6:.1f} us/step, "
              f"ratio {best['tensorweave'] / base:.2f}", file=sys.stderr, flush=True)

    table = ["| workload | implementation | time per step | ratio to NumPy |", "| --- | --- | ---: | ---: |"]
    for name, k, t, r in rows:
        table.append(f"| {name} | {k} | {_fmt(t)} | {r:.2f}x |")
    stamp = datetime.date.today().isoformat()
    block = "\n".join([BEGIN, f"Measured {stamp} on: {machine_info()}", "", *table, END])
    print(block)
    if args.write:
        _write(block)
    return 0


def _fmt(t: float) -> str:
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


def _write(block: str) -> None:
    path = HERE.parent / "docs" / "performance.md"
    text = path.read_text() if path.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + block + tail)
    print(f"updated {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
