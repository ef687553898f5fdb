"""The cost model (whitepaper 3.2.1): estimated output sizes and compute times per node and
device, and the time to move bytes between devices.

Three sources, best first:

1. **measured** times from earlier traced runs (``RunOptions(trace_level=FULL_TRACE)``), fed
   back with ``record(step_stats)`` or ``record_later`` (folded when next read): a running
   average per (node, device). A node measured on some devices but not on the one asked
   about gets its static estimate scaled by how far off the estimate was where it was
   measured (the *calibration* ratio), so a measured device does not look slow merely
   because its numbers include real overheads; ratios from devices of the same type are
   preferred.
2. a **kernel-supplied** estimate: ``KernelDef.cost(ctx)`` -> seconds, where ``ctx`` is a
   ``KernelContext`` for the node on that device (no resources).
3. **static heuristics**: work in flops (MatMul/BatchMatMul/Conv2D and its backprops,
   matrix inverse/determinant) or elements touched (element-wise ops, reductions, pooling),
   nothing for metadata ops (Reshape, Identity, Shape, ...), divided by the device's
   throughput, plus a per-node overhead.

A device describes itself through optional attributes: ``flops_per_second`` (else the
type's default times ``speed``, 1.0 when absent), ``node_overhead_seconds``,
``transfer_bytes_per_second``. Unknown dimensions count as ``unknown_dim`` (32).
"""

from __future__ import annotations

import collections
import math
import threading

from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.kernel_registry import KernelContext

# Throughput (flops/s) by device type for a device that does not state its own; a type not
# listed counts as a CPU (so a FAKE device of speed 1.0 is as fast as the CPU). OpenCL may
# well be PoCL on the same CPU, so it gets no head start; a plugin that knows better sets
# ``flops_per_second`` on its devices.
DEFAULT_FLOPS_PER_SECOND = {"CPU": 2e10, "GPU": 5e12, "CUDA": 5e12, "OPENCL": 2e10}
FALLBACK_FLOPS_PER_SECOND = 2e10

# Fixed cost of running one node (Python dispatch, kernel launch).
DEFAULT_NODE_OVERHEAD = {"CPU": 2e-6, "GPU": 1e-5, "CUDA": 1e-5, "OPENCL": 2e-5}
FALLBACK_NODE_OVERHEAD = 2e-6

# Transfers: within one task (PCIe-class copies) and between tasks (the network). The
# latency is mostly this runtime's cost of one Send/Recv pair (rendezvous bookkeeping in
# Python), not the wire's, which keeps microsecond-sized nodes off other devices.
LOCAL_BYTES_PER_SECOND = 1e10
LOCAL_LATENCY = 5e-5
REMOTE_BYTES_PER_SECOND = 1.25e9
REMOTE_LATENCY = 1e-4

# Ops that only describe or relabel their input: no work beyond the node overhead.
METADATA_OPS = frozenset({
    "Identity", "StopGradient", "Reshape", "Shape", "Size", "Rank", "ExpandDims", "Squeeze",
    "NoOp", "Const", "Placeholder", "PlaceholderWithDefault", "Variable", "VariableV2",
    "IsVariableInitialized", "BroadcastGradientArgs", "ReducedShape",
})
# Of those, the ones whose output shares its input's buffer (no new memory).
ALIASING_OPS = frozenset({"Identity", "StopGradient", "Reshape", "ExpandDims", "Squeeze"})
# Ops that live for the whole session (their buffer is not freed after its consumers run).
PERSISTENT_OPS = frozenset({"Variable", "VariableV2", "Const"})

# Element-wise ops that cost several flop-equivalents per element (transcendentals).
_ELEMENT_FACTOR = {
    op: 4.0 for op in (
        "Exp", "Expm1", "Log", "Log1p", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Sin", "Cos",
        "Pow", "Sqrt", "Rsqrt", "Softplus", "SoftplusGrad", "Elu", "EluGrad",
        "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
    )
}
# Bytes assumed per element of a string tensor (its real size is data dependent).
STRING_ELEMENT_BYTES = 32


class CostModel:
    """Per-session cost model. ``record(step_stats)`` feeds measured node times back."""

    def __init__(self, unknown_dim: int = 32, flops_per_second: dict | None = None,
                 node_overhead: dict | None = None, bytes_per_second: float = LOCAL_BYTES_PER_SECOND,
                 transfer_latency: float = LOCAL_LATENCY, remote_bytes_per_second: float = REMOTE_BYTES_PER_SECOND,
                 remote_latency: float = REMOTE_LATENCY, element_cost: float = 4.0, window: int = 16):
        self.unknown_dim = unknown_dim
        self.flops_per_second = dict(DEFAULT_FLOPS_PER_SECOND, **(flops_per_second or {}))
        self.node_overhead = dict(DEFAULT_NODE_OVERHEAD, **(node_overhead or {}))
        self.bytes_per_second = bytes_per_second
        self.transfer_latency = transfer_latency
        self.remote_bytes_per_second = remote_bytes_per_second
        self.remote_latency = remote_latency
        # Element-wise work per element touched, in flop-equivalents: such ops are bound by
        # memory traffic, not arithmetic.
        self.element_cost = element_cost
        self.window = window
        # node name -> {device name: [op type, mean seconds, count]}
        self._measured: dict[str, dict[str, list]] = {}
        # node name -> [op type, mean total output bytes, count]
        self._measured_bytes: dict[str, list] = {}
        # Traced steps not folded in yet (``record_later``): folding costs about as much as
        # recording the step did, and only placement reads the result, so a traced step just
        # queues its records and the next reader folds them. Older ones beyond ``window``
        # are dropped: after ``window`` newer samples their weight in the average is small.
        self._pending: collections.deque = collections.deque(maxlen=window)
        self._devices: dict = {}  # device name -> Device seen in estimates (for calibration)
        self._lock = threading.Lock()

    # -- measurements ----------------------------------------------------------------------
    def record_later(self, records) -> None:
        """Queue a traced step's records: ``records()`` returns what ``record`` takes; it is
        called when the measurements are next read (deque appends are thread-safe)."""
        self._pending.append(records)

    def _settle(self) -> None:
        while self._pending:
            try:
                records = self._pending.popleft()
            except IndexError:  # another reader took the last one
                return
            self.record(records())

    @property
    def measured(self) -> dict:
        self._settle()
        return self._measured

    @property
    def measured_bytes(self) -> dict:
        self._settle()
        return self._measured_bytes

    def record(self, step_stats) -> None:
        """Fold traced node stats ({"node", "op", "device", "start", "end", "output_bytes"})
        into running averages (a mean over the first ``window`` samples, then an
        exponential average with weight 1/window)."""
        with self._lock:
            for s in step_stats:
                try:
                    name, op_type, dev = s["node"], s.get("op"), s["device"]
                    secs = float(s["end"]) - float(s["start"])
                except (KeyError, TypeError, ValueError):
                    continue
                if secs >= 0 and math.isfinite(secs):
                    per_dev = self._measured.setdefault(name, {})
                    self._fold(per_dev, dev, op_type, secs)
                nbytes = s.get("output_bytes")
                # 0 also means "the device's tensors do not report nbytes": keep the estimate.
                if nbytes:
                    self._fold(self._measured_bytes, name, op_type, float(nbytes), single=True)

    def _fold(self, table, key, op_type, x, single=False):
        entry = table.get(key)
        if entry is None or entry[0] != op_type:
            table[key] = [op_type, x, 1]
            return
        entry[2] += 1
        entry[1] += (x - entry[1]) / min(entry[2], self.window)

    def measured_time(self, op, device) -> float | None:
        """The running average of ``op``'s measured time on ``device``, if any."""
        per_dev = self.measured.get(op.name)
        if not per_dev:
            return None
        entry = per_dev.get(device.name)
        if entry is None or entry[0] != op.type:
            return None
        return entry[1]

    # -- sizes -----------------------------------------------------------------------------
    def _dims(self, shape) -> list[int]:
        if shape.ndims is None:
            return [self.unknown_dim]
        return [self.unknown_dim if d is None else int(d) for d in shape.as_list()]

    def num_elements(self, t) -> int:
        return math.prod(self._dims(t.shape))

    def static_tensor_bytes(self, t) -> int:
        size = t.dtype.size or STRING_ELEMENT_BYTES
        return self.num_elements(t) * size

    def tensor_bytes(self, t) -> int:
        """Estimated bytes of tensor ``t`` (measured when its node was traced)."""
        static = self.static_tensor_bytes(t)
        m = self.measured_bytes.get(t.op.name)
        if m is None or m[0] != t.op.type:
            return static
        outs = t.op.outputs
        if len(outs) == 1:
            return int(m[1])
        total = sum(self.static_tensor_bytes(o) for o in outs)
        return int(m[1] * static / total) if total else int(m[1] / len(outs))

    def output_bytes(self, op) -> int:
        return sum(self.tensor_bytes(t) for t in op.outputs)

    def memory_bytes(self, op) -> int:
        """New device memory ``op``'s outputs take: none for views and for ops that update
        a variable in place (their output is the variable's buffer)."""
        if op.type in ALIASING_OPS or _has_ref_input(op):
            return 0
        return self.output_bytes(op)

    def is_persistent(self, op) -> bool:
        return op.type in PERSISTENT_OPS

    # -- compute ---------------------------------------------------------------------------
    def flops(self, op) -> float:
        """Static work estimate of ``op`` in flops (flop-equivalents for memory-bound ops)."""
        typ = op.type
        if typ in METADATA_OPS:
            return 0.0
        ins = op.inputs
        out_elems = sum(self.num_elements(t) for t in op.outputs)
        if typ == "MatMul":
            a = self._dims(ins[0].shape)
            k = a[0 if op._attrs.get("transpose_a") else -1] if len(a) >= 2 else a[-1]
            return 2.0 * out_elems * k
        if typ == "BatchMatMul":
            x = self._dims(ins[0].shape)
            k = x[-2 if op._attrs.get("adj_x") else -1] if len(x) >= 2 else x[-1]
            return 2.0 * out_elems * k
        if typ in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
            # Each element of the forward output is kh * kw * in_channels multiply-adds; both
            # backprops do the same amount of work.
            if typ == "Conv2D":
                filt, fwd_out = self._dims(ins[1].shape), out_elems
            elif typ == "Conv2DBackpropInput":
                filt, fwd_out = self._dims(ins[1].shape), self.num_elements(ins[2])
            else:
                filt, fwd_out = self._dims(op.outputs[0].shape), self.num_elements(ins[2])
            k = math.prod(filt[:3]) if len(filt) == 4 else self.unknown_dim
            return 2.0 * fwd_out * k
        if typ in ("MatrixInverse", "MatrixDeterminant"):
            d = self._dims(ins[0].shape)
            n = d[-1]
            batch = math.prod(d[:-2]) if len(d) > 2 else 1
            return float(batch * n ** 3)
        touched = out_elems + sum(self.num_elements(t) for t in ins)
        if typ in ("MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad"):
            ksize = op._attrs.get("ksize") or [1, 1, 1, 1]
            touched += out_elems * max(math.prod(ksize), 1)
        return self.element_cost * _ELEMENT_FACTOR.get(typ, 1.0) * touched

    def throughput(self, device) -> float:
        fps = getattr(device, "flops_per_second", None)
        if fps:
            return float(fps)
        base = self.flops_per_second.get(device.device_type, FALLBACK_FLOPS_PER_SECOND)
        return base * float(getattr(device, "speed", 1.0) or 1.0)

    def overhead(self, device) -> float:
        v = getattr(device, "node_overhead_seconds", None)
        if v is not None:
            return float(v)
        return self.node_overhead.get(device.device_type, FALLBACK_NODE_OVERHEAD)

    def estimated_time(self, op, device, kernels=None) -> float:
        """Seconds for ``op`` on ``device`` before measurements: the kernel's own estimate
        when it supplies one, else overhead + flops / throughput."""
        if kernels is not None:
            kd = kernels.lookup(op.type, device.device_type, op._attrs)
            if kd is not None and kd.cost is not None:
                try:
                    v = kd.cost(KernelContext(op, device, None))
                except Exception:  # noqa: BLE001 - a broken estimate must not break placement
                    v = None
                if v is not None and math.isfinite(v) and v >= 0:
                    return float(v)
        return self.overhead(device) + self.flops(op) / self.throughput(device)

    def compute_time(self, op, device, kernels=None) -> float:
        """Seconds ``op`` takes on ``device``: measured there, else the estimate calibrated by
        measurements on other devices, else the estimate."""
        self._devices.setdefault(device.name, device)
        m = self.measured_time(op, device)
        if m is not None:
            return m
        est = self.estimated_time(op, device, kernels)
        per_dev = self.measured.get(op.name)
        if per_dev:
            ratios, same_type = [], []
            for dev_name, (op_type, secs, _n) in list(per_dev.items()):
                if op_type != op.type:
                    continue
                other = self._devices.get(dev_name) or _NamedDevice(dev_name)
                other_est = self.estimated_time(op, other, kernels)
                if other_est > 0:
                    r = secs / other_est
                    ratios.append(r)
                    if other.device_type == device.device_type:
                        same_type.append(r)
            use = same_type or ratios
            if use:
                return est * (sum(use) / len(use))
        return est

    # -- transfers -------------------------------------------------------------------------
    def transfer_time(self, nbytes: float, src, dst) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to ``dst`` (0 on one device)."""
        if src is None or dst is None or src is dst or src.name == dst.name:
            return 0.0
        a, b = src.spec, dst.spec
        remote = (a.job, a.replica, a.task) != (b.job, b.replica, b.task)
        rates = [r for r in (getattr(src, "transfer_bytes_per_second", None),
                             getattr(dst, "transfer_bytes_per_second", None)) if r]
        bw = min(rates) if rates else (self.remote_bytes_per_second if remote else self.bytes_per_second)
        latency = self.remote_latency if remote else self.transfer_latency
        return latency + nbytes / bw


class _NamedDevice:
    """Stands in for a device known only by name (measured before this process saw it)."""

    def __init__(self, name):
        self.name = name
        self.spec = DeviceSpec.from_string(name)
        self.device_type = self.spec.device_type or "CPU"


def _has_ref_input(op) -> bool:
    return any(arg.is_ref for arg in op.op_def.inputs)
