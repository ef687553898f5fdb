"""GPU benchmarks of the CUDA plugin, against PyTorch on the same GPU in the same process and run.

    python benchmarks/gpu.py                                   # /device:GPU:0, full sizes
    python benchmarks/gpu.py --only matmul,transfer            # some workloads
    python benchmarks/gpu.py --device /device:CUDAEMU:0 --small   # the CPU emulator (tests)
    python benchmarks/gpu.py --write                           # + docs/performance.md's GPU section
    python benchmarks/gpu.py --insert FILE                     # put a block saved with --block-out there

Workloads (``--small``: tiny sizes, for the emulator):

- **matmul**: 4 chained 4096x4096 float32 matmuls in one ``Session.run``, the 5 operands are
  variables on the GPU and the fetch is their ``reduce_sum`` (a scalar), against the same in
  PyTorch (``(a @ b @ c @ d @ e).sum().item()``). TFLOP/s count the matmuls only (4 * 2n^3).
  PyTorch runs true fp32 (TF32 off: ``torch.backends.cuda.matmul.allow_tf32 = False``), as
  cuBLAS's SGEMM does here by default.
- **mlp**: one SGD step of ``benchmarks/workloads/mlp.py``'s graph (64->128->10 ReLU MLP,
  softmax cross-entropy, batch 64, the batch fed from NumPy each step) with every node on
  the GPU: us per step, kernel launches per step (the driver's counter; a cuBLAS call counts
  as one), us per launch (step time / launches), against the same step in PyTorch (autograd,
  ``p -= lr * g``) with the batch copied from NumPy each step, and with it already on the GPU.
- **transfer**: 64 MiB float32 host<->device. Ours: ``CUDADevice.to_device`` of an ordinary
  NumPy array (staging ring) and of a page-locked one (``pinned_empty``), ``to_host`` (result
  in page-locked memory) and into ordinary memory (the staging ring's fallback). PyTorch: the
  baseline ``pinned.cuda()`` / ``pinned_dst.copy_(gpu)`` (page-locked to/from device), and
  for reference ``pageable.cuda()``, ``pageable.pin_memory().cuda()``, ``gpu.cpu()``. Each copy
  is timed to completion (a synchronize after it). Also the staging ``memmove`` thread sweep.
- **conv**: one SGD step of a conv net, batch 128 of 32x32x3 (fed each step): 2 x (conv 3x3,
  64 filters, same padding, ReLU, 2x2 max pool), dense 10, softmax cross-entropy; PyTorch the
  same (NCHW, cuDNN, TF32 off). Skipped, saying which, while an op of the step has no GPU kernel.

Timing: every variant is warmed up (kernel compilation, cuBLAS/cuDNN setup), then the variants
run in interleaved rounds and the best and the median round count. tensorweave sessions use
the ``pool`` allocator (PyTorch has its caching allocator); mlp also shows ``default``.
Ratios are PyTorch's time / ours (above 1: we are faster), from the medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BEGIN = "<!-- gpu-results:begin -->"
END = "<!-- gpu-results:end -->"
SECTION = "## GPU (CUDA plugin)"
WORKLOADS = ("matmul", "mlp", "transfer", "conv")
MIB = 1 << 20


class Skip(Exception):
    """A workload or variant that cannot run here (the message says why)."""


# ---------------------------------------------------------------------------------------
# timing
def time_rounds(variants: dict, rounds: int, per_round: int = 1, warmup: int = 2) -> dict:
    """{name: (best, median)} seconds per call of each variant's ``fn`` (each call complete:
    it synchronizes itself), ``per_round`` calls per round, rounds interleaved."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    times: dict = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
            times[k].append((time.perf_counter() - t0) / per_round)
    return {k: (min(v), statistics.median(v)) for k, v in times.items()}


def fmt_time(t: float) -> str:
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


# ---------------------------------------------------------------------------------------
# setup
class Bench:
    def __init__(self, device: str, small: bool, rounds: int | None):
        import tensorweave as tw
        from tensorweave import plugins
        from tensorweave.framework.device_spec import DeviceSpec

        spec = DeviceSpec.from_string(device)
        self.device_type = (spec.device_type or "GPU").upper()
        self.index = int(spec.device_index or 0)
        self.device = f"/device:{self.device_type}:{self.index}"
        self.small = small
        self.rounds = rounds or (2 if small else 7)
        self.tw = tw
        self.notes: list[str] = []
        self.rows: list[dict] = []
        if self.device_type == "CUDAEMU" and self.device_type not in plugins.registry().device_factories:
            from tensorweave_cuda.testing import emulator

            emulator.plugin(count=self.index + 1, capacity=1 << 30)
        try:
            factory = plugins.registry().device_factories.get(self.device_type)
        except Exception:  # noqa: BLE001 - a registry that raises for an unknown type
            factory = None
        if factory is None or factory.count() <= self.index:
            status = ""
            if self.device_type == "GPU":
                from tensorweave_cuda import plugin as cuda_plugin

                status = f" ({cuda_plugin.machine().reason})"
            raise SystemExit(f"gpu.py: no device {self.device}{status}")
        self.runtime = factory.runtime(self.index)
        self.driver = self.runtime.driver
        self.torch, why = self._torch()
        if self.torch is None:
            self.notes.append(f"No PyTorch comparison: {why}.")

    def _torch(self):
        if self.device_type != "GPU":
            return None, f"{self.device} is not a CUDA GPU"
        try:
            import torch
        except ImportError:
            return None, "PyTorch is not installed"
        if not torch.cuda.is_available():
            return None, "PyTorch sees no CUDA device"
        # true fp32 matmuls and convolutions, as our cuBLAS SGEMM calls do
        done = []
        for what, fn in (("torch.backends.cuda.matmul.allow_tf32=False",
                          lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", False)),
                         ("torch.backends.cudnn.allow_tf32=False",
                          lambda: setattr(torch.backends.cudnn, "allow_tf32", False)),
                         ("torch.set_float32_matmul_precision('highest')",
                          lambda: torch.set_float32_matmul_precision("highest"))):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn()
                done.append(what)
            except Exception as e:  # noqa: BLE001 - say so in the notes
                done.append(f"{what} failed ({type(e).__name__}: {e})")
        self.notes.append("PyTorch in true fp32 (TF32 off): " + ", ".join(done) + ".")
        self.tdev = torch.device(f"cuda:{self.index}")
        torch.cuda.set_device(self.tdev)
        return torch, None

    def session(self, graph, allocator: str = "pool"):
        cfg = self.tw.ConfigProto(allocator={self.device_type: allocator})
        return self.tw.Session(graph=graph, config=cfg)

    def gpu_device(self, sess):
        return next(d for d in sess.devices if d.name.endswith(f"device:{self.device_type}:{self.index}"))

    def tsync(self):
        self.torch.cuda.synchronize(self.tdev)

    def row(self, workload: str, impl: str, best: float, median: float, metric: str = "", vs_torch=None,
            **extra):
        r = {"workload": workload, "implementation": impl, "best_s": best, "median_s": median,
             "metric": metric, "vs_torch": vs_torch, **extra}
        self.rows.append(r)
        ratio = f"{vs_torch:.2f}x" if vs_torch is not None else ""
        print(f"[{workload}] {impl}: median {fmt_time(median)} (best {fmt_time(best)}) {metric} {ratio}",
              file=sys.stderr, flush=True)
        return r

    def info(self) -> str:
        parts = [getattr(self.driver, "describe", lambda: "?")()]
        try:
            import pycuda.driver as cuda

            v = cuda.get_driver_version()
            parts.append(f"CUDA driver {v // 1000}.{v % 1000 // 10}, PyCUDA {'.'.join(map(str, cuda.get_version()))}")
        except Exception:  # noqa: BLE001 - the emulator, or no PyCUDA: leave it out
            pass
        if self.torch is not None:
            parts.append(f"PyTorch {self.torch.__version__} (CUDA {self.torch.version.cuda})")
        try:
            cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                        if line.startswith("model name")), platform.processor() or "?")
        except OSError:
            cpu = platform.processor() or "?"
        parts.append(f"{cpu}, {os.cpu_count()} CPUs; Python {platform.python_version()}, NumPy {np.__version__}")
        return "; ".join(parts)


# ---------------------------------------------------------------------------------------
# (a) matmul
def bench_matmul(b: Bench):
    tw = b.tw
    n = 64 if b.small else 4096
    rng = np.random.default_rng(0)
    mats = [(rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(5)]
    g = tw.Graph()
    with g.as_default(), tw.device(b.device):
        vs = [tw.Variable(m, name=f"m{i}") for i, m in enumerate(mats)]
        y = vs[0]
        for v in vs[1:]:
            y = tw.matmul(y, v)
        total = tw.reduce_sum(y, name="total")
        init = tw.global_variables_initializer()
    sess = b.session(g)
    sess.run(init)
    flops = 4 * 2.0 * n ** 3
    variants = {"tensorweave": lambda: sess.run(total)}
    if b.torch is not None:
        torch = b.torch
        tm = [torch.from_numpy(m).to(b.tdev) for m in mats]

        def torch_step():
            y = tm[0]
            for m in tm[1:]:
                y = y @ m
            return y.sum().item()
        variants["pytorch"] = torch_step
    res = time_rounds(variants, b.rounds)
    got = float(sess.run(total))
    check = ""
    if b.torch is not None:
        want = variants["pytorch"]()
        check = "agree" if abs(got - want) <= 1e-3 * max(1.0, abs(want)) else f"DIFFER: {got} vs {want}"
    tt = res.get("pytorch", (None, None))[1]
    for k, (best, med) in res.items():
        b.row("matmul", k, best, med, f"{flops / med / 1e12:.2f} TFLOP/s",
              (tt / med) if tt else None, tflops=flops / med / 1e12, n=n, check=check)
    sess.close()


# ---------------------------------------------------------------------------------------
# (b) mlp
def _mlp_data():
    from workloads import mlp

    try:
        return mlp._data(), "scikit-learn's digits"
    except ImportError:
        rng = np.random.default_rng(0)
        return (rng.random((mlp.BATCH, 64), dtype=np.float32),
                rng.integers(0, 10, mlp.BATCH).astype(np.int32)), "random data (no scikit-learn)"


def bench_mlp(b: Bench):
    """The graph of benchmarks/workloads/mlp.py, every node on the device."""
    from workloads import mlp

    tw = b.tw
    (xb, yb), data = _mlp_data()
    rng = np.random.default_rng(0)
    w1_0 = (rng.standard_normal((64, mlp.HIDDEN)) * 0.1).astype(np.float32)
    w2_0 = (rng.standard_normal((mlp.HIDDEN, 10)) * 0.1).astype(np.float32)
    g = tw.Graph()
    with g.as_default(), tw.device(b.device):
        x = tw.placeholder(tw.float32, [mlp.BATCH, 64], name="x")
        y = tw.placeholder(tw.int32, [mlp.BATCH], name="y")
        w1 = tw.Variable(w1_0, name="w1")
        b1 = tw.Variable(np.zeros(mlp.HIDDEN, np.float32), name="b1")
        w2 = tw.Variable(w2_0, name="w2")
        b2 = tw.Variable(np.zeros(10, np.float32), name="b2")
        h = tw.nn.relu(tw.matmul(x, w1) + b1)
        logits = tw.matmul(h, w2) + b2
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tw.train.GradientDescentOptimizer(mlp.LR).minimize(loss)
        init = tw.global_variables_initializer()
    feed = {x: xb, y: yb}
    drv = b.driver
    steps = 1 if b.small else 50
    sessions, variants = {}, {}
    for alloc in ("pool", "default"):
        s = sessions[alloc] = b.session(g, alloc)
        s.run(init)

        def tw_steps(s=s):
            for _ in range(steps):
                s.run(train, feed)
            drv.synchronize()
        variants[f"tensorweave ({alloc} allocator)"] = tw_steps
    first_loss = sessions["pool"].run(loss, feed)
    # launches and copies per step
    s = sessions["pool"]
    s.run(train, feed)
    l0, c0 = drv.launches, dict(drv.copies)
    for _ in range(steps):
        s.run(train, feed)
    drv.synchronize()
    launches = (drv.launches - l0) / steps
    copies = {k: (v - c0.get(k, 0)) / steps for k, v in drv.copies.items() if v != c0.get(k, 0)}
    check = ""
    if b.torch is not None:
        torch = b.torch
        F = torch.nn.functional
        params = [torch.tensor(a, device=b.tdev, requires_grad=True) for a in
                  (w1_0, np.zeros(mlp.HIDDEN, np.float32), w2_0, np.zeros(10, np.float32))]
        xg, yg = torch.from_numpy(xb).to(b.tdev), torch.from_numpy(yb.astype(np.int64)).to(b.tdev)

        def torch_loss(xt, yt):
            w1t, b1t, w2t, b2t = params
            return F.cross_entropy(torch.relu(xt @ w1t + b1t) @ w2t + b2t, yt)

        def torch_step(xt, yt):
            grads = torch.autograd.grad(torch_loss(xt, yt), params)
            with torch.no_grad():
                for p, gr in zip(params, grads):
                    p.sub_(mlp.LR * gr)

        with torch.no_grad():
            tl = torch_loss(xg, yg).item()
        check = "agree" if abs(tl - float(first_loss)) < 1e-4 else f"DIFFER: loss {first_loss} vs {tl}"

        def torch_fed():
            for _ in range(steps):
                torch_step(torch.from_numpy(xb).to(b.tdev), torch.from_numpy(yb).to(b.tdev).long())
            b.tsync()

        def torch_resident():
            for _ in range(steps):
                torch_step(xg, yg)
            b.tsync()
        variants["pytorch (batch from NumPy each step)"] = torch_fed
        variants["pytorch (batch on the GPU)"] = torch_resident
    res = time_rounds(variants, b.rounds, warmup=1)
    tt = res.get("pytorch (batch from NumPy each step)", (None, None))[1]
    for k, (best, med) in res.items():
        best, med = best / steps, med / steps
        extra = {}
        metric = ""
        if k.startswith("tensorweave"):
            extra = {"launches_per_step": launches, "us_per_launch": med * 1e6 / launches if launches else None,
                     "copies_per_step": copies}
            metric = f"{launches:.0f} launches/step, {med * 1e6 / max(launches, 1):.1f} us/launch"
        b.row("mlp", k, best, med, metric, (tt / steps / med) if tt else None, data=data, check=check, **extra)
    for s in sessions.values():
        s.close()


# ---------------------------------------------------------------------------------------
# (c) transfers
def bench_transfer(b: Bench):
    tw = b.tw
    nbytes = (2 if b.small else 64) * MIB
    a = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    sess = b.session(tw.Graph())
    dev = b.gpu_device(sess)
    tr = dev.runtime.transfers
    pinned = dev.pinned_empty(a.shape, a.dtype)
    pinned[...] = a
    t = dev.to_device(a)
    reps = 2 if b.small else 10

    def up():
        dev.to_device(a)
        dev.sync()

    def up_pinned():
        dev.to_device(pinned)
        dev.sync()

    def down():
        dev.to_host(t)

    def down_ordinary():
        tr.download_staged(np.empty(a.shape, a.dtype), t.ptr)

    variants = {"tensorweave to_device (ordinary NumPy array)": up,
                "tensorweave to_device (page-locked array)": up_pinned,
                "tensorweave to_host (page-locked result)": down,
                "tensorweave to_host (into ordinary memory)": down_ordinary}
    base = {}
    if b.torch is not None:
        torch = b.torch
        cpu = torch.from_numpy(a)
        tpin = cpu.pin_memory()
        tgpu = cpu.to(b.tdev)
        tdst = torch.empty_like(cpu).pin_memory()

        def t_up_pinned():
            tpin.to(b.tdev, non_blocking=True)
            b.tsync()

        def t_up_pageable():
            cpu.to(b.tdev)
            b.tsync()

        def t_up_pin_then():
            cpu.pin_memory().to(b.tdev, non_blocking=True)
            b.tsync()

        def t_down_pinned():
            tdst.copy_(tgpu, non_blocking=True)
            b.tsync()

        def t_down_cpu():
            tgpu.cpu()
            b.tsync()
        variants.update({"pytorch pinned.cuda() [baseline]": t_up_pinned,
                         "pytorch pageable.cuda()": t_up_pageable,
                         "pytorch pageable.pin_memory().cuda()": t_up_pin_then,
                         "pytorch pinned_dst.copy_(gpu) [baseline]": t_down_pinned,
                         "pytorch gpu.cpu()": t_down_cpu})
        base = {"up": "pytorch pinned.cuda() [baseline]", "down": "pytorch pinned_dst.copy_(gpu) [baseline]"}
    res = time_rounds(variants, b.rounds, per_round=reps)
    np.testing.assert_array_equal(dev.to_host(dev.to_device(a)), a)
    for k, (best, med) in res.items():
        direction = "down" if ("to_host" in k or "copy_(gpu)" in k or ".cpu()" in k) else "up"
        ref = res.get(base.get(direction))
        gbs = nbytes / med / 1e9
        b.row("transfer", f"{'H2D' if direction == 'up' else 'D2H'} {k}", best, med,
              f"{gbs:.1f} GB/s (best {nbytes / best / 1e9:.1f})",
              (ref[1] / med) if ref else None, gbps=gbs, nbytes=nbytes)
    # the staging memmove's threads
    default = tr.threads
    sweep = {}
    for th in sorted({1, 2, 4, 8, 16, default}):
        if th > (os.cpu_count() or 1):
            continue
        tr.threads = th
        sweep[th] = time_rounds({"up": up}, max(2, b.rounds // 2), per_round=reps)["up"][1]
    tr.threads = default
    line = ", ".join(f"{th}: {nbytes / s / 1e9:.1f}" for th, s in sweep.items())
    b.notes.append(f"to_device of an ordinary {nbytes // MIB} MiB array by staging-memmove threads "
                   f"(GB/s, medians): {line}; default {default} (TENSORWEAVE_GPU_COPY_THREADS).")
    print(f"[transfer] staging threads sweep (GB/s): {line}", file=sys.stderr)
    b.rows.append({"workload": "transfer", "implementation": "staging threads sweep",
                   "gbps_by_threads": {th: nbytes / s / 1e9 for th, s in sweep.items()}, "default_threads": default})
    sess.close()


# ---------------------------------------------------------------------------------------
# (d) conv net
def _needed_ops(target):
    seen, stack, ops = set(), [target], []
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        ops.append(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return ops


def bench_conv(b: Bench):
    tw = b.tw
    from tensorweave import plugins

    batch, hw, filters = (2, 8, 4) if b.small else (128, 32, 64)
    rng = np.random.default_rng(0)
    xb = rng.random((batch, hw, hw, 3), dtype=np.float32)
    yb = rng.integers(0, 10, batch).astype(np.int32)
    k1 = (rng.standard_normal((3, 3, 3, filters)) * np.sqrt(2 / 27)).astype(np.float32)
    k2 = (rng.standard_normal((3, 3, filters, filters)) * np.sqrt(2 / (9 * filters))).astype(np.float32)
    flat = (hw // 4) ** 2 * filters
    wd = (rng.standard_normal((flat, 10)) * np.sqrt(1 / flat)).astype(np.float32)
    lr = 0.01
    g = tw.Graph()
    with g.as_default(), tw.device(b.device):
        x = tw.placeholder(tw.float32, xb.shape, name="x")
        y = tw.placeholder(tw.int32, [batch], name="y")
        h = tw.layers.conv2d(x, filters, 3, padding="same", activation=tw.nn.relu, name="conv1",
                             kernel_initializer=tw.constant_initializer(k1))
        h = tw.layers.max_pooling2d(h, 2, 2)
        h = tw.layers.conv2d(h, filters, 3, padding="same", activation=tw.nn.relu, name="conv2",
                             kernel_initializer=tw.constant_initializer(k2))
        h = tw.layers.max_pooling2d(h, 2, 2)
        logits = tw.layers.dense(tw.layers.flatten(h), 10, name="logits",
                                 kernel_initializer=tw.constant_initializer(wd))
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tw.train.GradientDescentOptimizer(lr).minimize(loss)
        init = tw.global_variables_initializer()
    kernels = plugins.registry().kernels
    missing = sorted({op.type for op in _needed_ops(train) + _needed_ops(loss.op) + _needed_ops(init)
                      if kernels.lookup(op.type, b.device_type, op._attrs) is None})
    if missing:
        raise Skip(f"no {b.device_type} kernel yet for {', '.join(missing)}")
    feed = {x: xb, y: yb}
    sess = b.session(g)
    sess.run(init)
    first_loss = float(sess.run(loss, feed))
    steps = 1 if b.small else 5

    def tw_steps():
        for _ in range(steps):
            sess.run(train, feed)
        b.driver.synchronize()
    variants = {"tensorweave": tw_steps}
    check = ""
    if b.torch is not None:
        torch = b.torch
        F = torch.nn.functional
        dv = b.tdev
        w1 = torch.tensor(k1.transpose(3, 2, 0, 1).copy(), device=dv, requires_grad=True)
        w2 = torch.tensor(k2.transpose(3, 2, 0, 1).copy(), device=dv, requires_grad=True)
        bias1 = torch.zeros(filters, device=dv, requires_grad=True)
        bias2 = torch.zeros(filters, device=dv, requires_grad=True)
        wdt = torch.tensor(wd, device=dv, requires_grad=True)
        bd = torch.zeros(10, device=dv, requires_grad=True)
        params = [w1, bias1, w2, bias2, wdt, bd]
        x_nchw = np.ascontiguousarray(xb.transpose(0, 3, 1, 2))

        def torch_loss(xt, yt):
            h = F.max_pool2d(torch.relu(F.conv2d(xt, w1, bias1, padding=1)), 2)
            h = F.max_pool2d(torch.relu(F.conv2d(h, w2, bias2, padding=1)), 2)
            h = h.permute(0, 2, 3, 1).reshape(h.shape[0], -1)   # NHWC order, as tw.layers.flatten
            return F.cross_entropy(h @ wdt + bd, yt)

        with torch.no_grad():
            tl = torch_loss(torch.from_numpy(x_nchw).to(dv), torch.from_numpy(yb).to(dv).long()).item()
        check = "agree" if abs(tl - first_loss) < 1e-3 * max(1.0, abs(tl)) else f"DIFFER: loss {first_loss} vs {tl}"

        def torch_steps():
            for _ in range(steps):
                xt = torch.from_numpy(x_nchw).to(dv)
                yt = torch.from_numpy(yb).to(dv).long()
                grads = torch.autograd.grad(torch_loss(xt, yt), params)
                with torch.no_grad():
                    for p, gr in zip(params, grads):
                        p.sub_(lr * gr)
            b.tsync()
        variants["pytorch"] = torch_steps
    res = time_rounds(variants, b.rounds, warmup=1)
    tt = res.get("pytorch", (None, None))[1]
    for k, (best, med) in res.items():
        b.row("conv", k, best / steps, med / steps, f"{batch / (med / steps):.0f} images/s",
              (tt / med) if tt else None, batch=batch, check=check)
    sess.close()


# ---------------------------------------------------------------------------------------
def table(b: Bench) -> str:
    lines = ["| workload | implementation | median (best) | throughput / detail | PyTorch's time / ours |",
             "| --- | --- | ---: | --- | ---: |"]
    for r in b.rows:
        if "median_s" not in r:
            continue
        ratio = f"{r['vs_torch']:.2f}" if r.get("vs_torch") is not None else ""
        detail = r.get("metric", "")
        if r.get("check"):
            detail += f"; check vs PyTorch: {r['check']}"
        lines.append(f"| {r['workload']} | {r['implementation']} | {fmt_time(r['median_s'])} "
                     f"({fmt_time(r['best_s'])}) | {detail} | {ratio} |")
    return "\n".join(lines)


def block(b: Bench) -> str:
    stamp = datetime.date.today().isoformat()
    notes = "\n".join(f"- {n}" for n in b.notes)
    return "\n".join([BEGIN, f"Measured {stamp} with `python benchmarks/gpu.py{' --small' if b.small else ''}` "
                      f"on {b.device}: {b.info()}", "", table(b), "", notes, END])


def write_block(text: str, path: Path | None = None) -> Path:
    path = path or HERE.parent / "docs" / "performance.md"
    doc = path.read_text() if path.exists() else "# Performance\n"
    if BEGIN not in doc:
        if SECTION not in doc:
            doc = doc.rstrip("\n") + f"\n\n{SECTION}\n"
        doc = doc.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, re.S)
    if not m:
        raise SystemExit(f"gpu.py: no {BEGIN} ... {END} block in the text given")
    path.write_text(head + m.group(0) + tail)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="/device:GPU:0", help="e.g. /device:GPU:0, or /device:CUDAEMU:0 (emulator)")
    ap.add_argument("--small", action="store_true", help="tiny sizes (the emulator, tests)")
    ap.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per variant (default 7; --small 2)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    ap.add_argument("--block-out", default=None, help="also write the docs block (markdown) to this file")
    ap.add_argument("--write", action="store_true", help="put the block into docs/performance.md")
    ap.add_argument("--insert", default=None, metavar="FILE",
                    help="put the block saved in FILE (--block-out) into docs/performance.md, and stop")
    args = ap.parse_args(argv)
    if args.insert:
        print(f"updated {write_block(Path(args.insert).read_text())}")
        return 0
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    bad = [w for w in only if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s) {bad}; choose from {WORKLOADS}")
    b = Bench(args.device, args.small, args.rounds)
    print(f"# {b.info()}", file=sys.stderr, flush=True)
    failed = 0
    for w in only:
        t0 = time.perf_counter()
        try:
            globals()[f"bench_{w}"](b)
        except Skip as e:
            b.notes.append(f"{w}: skipped: {e}.")
            print(f"[{w}] skipped: {e}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - report, go on with the next workload
            failed += 1
            b.notes.append(f"{w}: FAILED: {type(e).__name__}: {str(e)[:300]}")
            print(f"[{w}] FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            import traceback

            traceback.print_exc()
        print(f"[{w}] {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    text = block(b)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"info": b.info(), "device": b.device, "small": b.small,
                                               "rows": b.rows, "notes": b.notes}, indent=1, default=str))
    if args.block_out:
        Path(args.block_out).write_text(text + "\n")
    if args.write:
        print(f"updated {write_block(text)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
