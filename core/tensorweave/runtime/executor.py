"""The executor: runs one device partition of an execution plan (whitepaper 3.1).

Everything that can be decided when a plan is built is decided here, once: which nodes run,
their kernels, the slot each input is read from, consumers, the schedule, where dead
intermediates are dropped. Per step, the work left is one pass over a flat list of steps.

Two ways to run a compiled partition:

* **sequential** — the pending-count / ready-queue schedule (ties broken by node creation
  order, the whitepaper 4.1 memory heuristic) is computed at plan time, so a step is a tight
  loop over ``(kernel, input slots, output slot)`` tuples. Used when every kernel is
  synchronous and there is no parallelism worth a thread hop.
* **dynamic** — pending counts and a ready queue at run time; cheap nodes run inline,
  expensive ones (by cost estimate) go to the inter-op thread pool, async kernels get a
  ``done`` continuation instead of a blocked thread (5.3).

Variable nodes do not run: a consumer that reads a variable gets a read step placed right
before it, so a read after ``control_dependencies([assign])`` sees the assigned value, as with
TF1 reference variables. Ops with a ``Ref`` input (Assign, ...) get the variable's store
bound at plan time instead of a value.
"""

from __future__ import annotations

import heapq
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.kernel_registry import KernelContext, call_kernel_factory

# Step kinds. The first three are inlined in the sequential loop.
K_BINARY, K_UNARY, K_NULLARY, K_GENERIC, K_FREE = 2, 1, 0, 3, 4

# Outputs smaller than this are neither tracked by the allocator nor dropped early: the
# CPU allocator's accounting (a weak reference per array, about 1 us) would cost more than
# computing them. Decided at plan time from static shapes, else per output at run time.
SMALL_BYTES = 64 * 1024

# A node is "expensive" (worth a thread-pool hop) above this estimated flop count: about
# 5 ms of BLAS work. A hop through the pool and back costs tens of microseconds, so smaller
# nodes run faster inline (measured: a 64x128 MLP step was 4.6x slower when its 1-MFLOP
# matmuls went to the pool).
EXPENSIVE_FLOPS = 5e7


def flat_input_is_ref(op) -> list[bool]:
    """For each flat input of ``op``, whether its argument is a Ref (variable) input."""
    out = []
    for arg in op.op_def.inputs:
        if arg.number_attr:
            n = op._attrs[arg.number_attr]
        elif arg.type_list_attr:
            n = len(op._attrs[arg.type_list_attr])
        else:
            n = 1
        out.extend([arg.is_ref] * n)
    return out


class StepContext:
    """Per-run information handed to kernels that ask for it (``takes_context``/async)."""

    __slots__ = ("step_id", "rendezvous", "options", "cancelled", "session")

    def __init__(self, step_id=0, rendezvous=None, options=None, session=None):
        self.step_id = step_id
        self.rendezvous = rendezvous
        self.options = options
        self.cancelled = False
        self.session = session


class _Node:
    __slots__ = ("op", "fn", "kd", "ins", "outs", "kind", "reads", "consumers", "pending",
                 "expensive", "track", "unwrap")


def _static_nbytes(t) -> int | None:
    if not t.shape.is_fully_defined() or t.dtype.is_string:
        return None
    return t.shape.num_elements() * t.dtype.size


def _estimate_flops(op) -> float:
    shapes = [t.shape for t in op.inputs]
    if op.type in ("MatMul", "BatchMatMul", "Conv2D", "MatrixInverse", "MatrixDeterminant"):
        if all(s.is_fully_defined() for s in shapes) and op.outputs and op.outputs[0].shape.is_fully_defined():
            if op.type == "Conv2D":  # each output element: kh * kw * in_channels multiply-adds
                f = shapes[1].as_list()
                k = f[0] * f[1] * f[2]
            else:
                k = shapes[0].as_list()[-1] if shapes[0].ndims else 1
            return 2.0 * op.outputs[0].shape.num_elements() * k
        return float("inf")
    n = 0
    for t in list(op.inputs) + list(op.outputs):
        e = t.shape.num_elements()
        n += e if e is not None else 1e6
    return float(n)


class CompiledPartition:
    """One device's share of an execution plan, compiled for repeated execution."""

    def __init__(self, nodes, feeds, fetches, device, kernels, resources, kernel_cache,
                 session=None, stateful_cache=None):
        self.device = device
        self.allocator = device.allocator
        self._session = session
        slot_of: dict = {}
        template: list = []

        def new_slot(value=None):
            template.append(value)
            return len(template) - 1

        fed = {}
        for t in feeds:
            fed[t] = slot_of[t] = new_slot()
        self.feed_slots = [fed[t] for t in feeds]

        executed: list[_Node] = []
        virtual_ref_ops = set()
        node_of_op = {}
        for op in nodes:
            if op.op_def.outputs_ref:
                virtual_ref_ops.add(op)
                continue
            if op.type == "Const":
                # Constants are immutable: their value sits in the slot template.
                for t in op.outputs:
                    if t not in fed:
                        slot_of[t] = new_slot(op.get_attr("value"))
                continue
            n = _Node()
            n.op = op
            n.outs = []
            for t in op.outputs:
                if t in fed:
                    n.outs.append(new_slot())  # computed but shadowed by the feed
                else:
                    slot_of[t] = new_slot()
                    n.outs.append(slot_of[t])
            node_of_op[op] = n
            executed.append(n)

        # Inputs, variable reads and dependency edges.
        preds: dict[_Node, set] = {n: set() for n in executed}
        for n in executed:
            op = n.op
            n.ins, n.reads = [], []
            is_ref = flat_input_is_ref(op)
            for t, ref in zip(op.inputs, is_ref):
                if ref:
                    continue
                if t in fed:
                    n.ins.append(fed[t])
                elif t.op in virtual_ref_ops:
                    store = resources.state_for_op(t.op)
                    slot = new_slot()
                    n.reads.append((store.read, slot))
                    n.ins.append(slot)
                else:
                    n.ins.append(slot_of[t])
                    if t.op in node_of_op:
                        preds[n].add(node_of_op[t.op])
            for c in op.control_inputs:
                if c in node_of_op:
                    preds[n].add(node_of_op[c])

        # Kernels: looked up and constructed once per plan; stateful kernels once per
        # session, so e.g. a random op's generator state survives plan rebuilds.
        for n in executed:
            op = n.op
            kd = kernels.find(op, device.device_type)
            n.kd = kd
            key = (op.name, id(op), device.name)
            if op.op_def.stateful and key in kernel_cache:
                n.fn = kernel_cache[key]
            else:
                n.fn = call_kernel_factory(kd, KernelContext(op, device, resources, session))
                if op.op_def.stateful:
                    kernel_cache[key] = n.fn
            sizes = [_static_nbytes(t) for t in op.outputs]
            n.track = any(s is None or s >= SMALL_BYTES for s in sizes)
            n.expensive = _estimate_flops(op) > EXPENSIVE_FLOPS
            n_out = len(op.outputs)
            # A list output of length one (Split with num_split=1): the kernel may return a
            # 1-tuple, which must not become the tensor's value.
            n.unwrap = n_out == 1 and op.op_def.outputs[0].is_list
            if kd.is_async or kd.takes_context or n_out != 1 or n.track or n.unwrap or len(n.ins) > 2:
                n.kind = K_GENERIC
            else:
                n.kind = len(n.ins)

        # Schedule: Kahn's algorithm, ready ties broken by creation order.
        succ: dict[_Node, list] = {n: [] for n in executed}
        for n, ps in preds.items():
            for p in ps:
                succ[p].append(n)
        for n in executed:
            n.consumers = sorted(succ[n], key=lambda m: m.op._id)
            n.pending = len(preds[n])
        heap = [(n.op._id, i, n) for i, n in enumerate(executed) if n.pending == 0]
        heapq.heapify(heap)
        remaining = {n: n.pending for n in executed}
        order = []
        while heap:
            _, _, n = heapq.heappop(heap)
            order.append(n)
            for m in n.consumers:
                remaining[m] -= 1
                if remaining[m] == 0:
                    heapq.heappush(heap, (m.op._id, id(m), m))
        if len(order) != len(executed):
            stuck = [n.op.name for n in executed if remaining[n] > 0][:5]
            raise errors.InvalidArgumentError(f"the graph has a cycle; nodes involved include {stuck}")
        self.nodes = order

        # Fetches: fed values, constants, computed slots, or a final read of a variable.
        self.fetch_slots = []
        end_reads = []
        for t in fetches:
            if t in fed:
                self.fetch_slots.append(fed[t])
            elif t.op in virtual_ref_ops:
                slot = new_slot()
                end_reads.append((resources.state_for_op(t.op).read, slot))
                self.fetch_slots.append(slot)
            else:
                self.fetch_slots.append(slot_of[t])

        # Liveness: drop big intermediates after their last use.
        keep = set(self.fetch_slots)
        last_use: dict[int, int] = {}
        for i, n in enumerate(order):
            for s in n.ins:
                last_use[s] = i
        big_slots = {s for n in order if n.track for s in n.outs}
        frees_after: dict[int, list] = {}
        for s in big_slots - keep:
            if s in last_use:
                frees_after.setdefault(last_use[s], []).append(s)

        steps = []
        self._slot_node = {}
        for i, n in enumerate(order):
            for fn, slot in n.reads:
                steps.append((fn, 0, 0, K_NULLARY, slot, None))
                self._slot_node[slot] = n
            a = n.ins[0] if n.ins else 0
            b = n.ins[1] if len(n.ins) > 1 else 0
            out = n.outs[0] if n.outs else -1 - i
            self._slot_node[out] = n
            steps.append((n.fn, a, b, n.kind, out, n if n.kind == K_GENERIC else None))
            if i in frees_after:
                steps.append((None, 0, 0, K_FREE, -1, tuple(frees_after[i])))
        for fn, slot in end_reads:
            steps.append((fn, 0, 0, K_NULLARY, slot, None))
        self.steps = steps
        self.template = template
        self.has_async = any(n.kd.is_async for n in order)
        self.end_reads = end_reads
        self.n_slots = len(template)
        exp = [n for n in order if n.expensive]
        self.parallelizable = len(exp) >= 2 and _has_independent(exp, preds)

    # ------------------------------------------------------------------------------------
    def describe_failure(self, exc: BaseException, out_slot) -> errors.OpError:
        n = self._slot_node.get(out_slot)
        return wrap_kernel_error(exc, n.op if n else None, self.device)

    def run_sequential(self, feed_values, step: StepContext):
        vals = self.template.copy()
        for s, v in zip(self.feed_slots, feed_values):
            vals[s] = v
        out = -1
        try:
            with np.errstate(all="ignore"):
                for fn, a, b, kind, out, x in self.steps:
                    if kind == 2:
                        vals[out] = fn(vals[a], vals[b])
                    elif kind == 1:
                        vals[out] = fn(vals[a])
                    elif kind == 0:
                        vals[out] = fn()
                    elif kind == 4:
                        for s in x:
                            vals[s] = None
                    else:
                        self._run_generic(x, vals, step)
        except Exception as e:  # noqa: BLE001 - every failure becomes a tw error naming the node
            raise self.describe_failure(e, out) from (None if isinstance(e, errors.OpError) else e)
        return [vals[s] for s in self.fetch_slots]

    def _run_generic(self, n: _Node, vals, step):
        args = [vals[i] for i in n.ins]
        kd = n.kd
        if kd.is_async:
            res = _call_async_blocking(n, step, args)
        elif kd.takes_context:
            res = n.fn(step, *args)
        else:
            res = n.fn(*args)
        self._store(n, res, vals)

    def _store(self, n: _Node, res, vals):
        outs = n.outs
        if len(outs) == 1:
            if n.unwrap and isinstance(res, tuple | list):
                res = res[0]
            vals[outs[0]] = res
            if n.track and getattr(res, "nbytes", 0) >= SMALL_BYTES:
                self.allocator.track(res)
        elif outs:
            if res is None or len(res) != len(outs):
                raise errors.InternalError(
                    f"kernel for {n.op.type} returned {0 if res is None else len(res)} outputs, "
                    f"expected {len(outs)}")
            for s, v in zip(outs, res):
                vals[s] = v
                if n.track and getattr(v, "nbytes", 0) >= SMALL_BYTES:
                    self.allocator.track(v)

    # ------------------------------------------------------------------------------------
    def run_traced(self, feed_values, step: StepContext, stats: list):
        """Like run_sequential, recording per-node start/end times and output sizes."""
        vals = self.template.copy()
        for s, v in zip(self.feed_slots, feed_values):
            vals[s] = v
        out = -1
        clock = time.perf_counter
        try:
            with np.errstate(all="ignore"):
                for fn, a, b, kind, out, x in self.steps:
                    if kind == 4:
                        for s in x:
                            vals[s] = None
                        continue
                    t0 = clock()
                    if kind == 2:
                        vals[out] = fn(vals[a], vals[b])
                    elif kind == 1:
                        vals[out] = fn(vals[a])
                    elif kind == 0:
                        vals[out] = fn()
                    else:
                        self._run_generic(x, vals, step)
                    t1 = clock()
                    n = self._slot_node.get(out)
                    if n is not None and (x is not None or kind != 0 or out in n.outs):
                        nbytes = sum(getattr(vals[s], "nbytes", 0) for s in n.outs)
                        stats.append({"node": n.op.name, "op": n.op.type, "device": self.device.name,
                                      "start": t0, "end": t1, "output_bytes": int(nbytes)})
        except Exception as e:  # noqa: BLE001
            raise self.describe_failure(e, out) from (None if isinstance(e, errors.OpError) else e)
        return [vals[s] for s in self.fetch_slots]

    # ------------------------------------------------------------------------------------
    def run_dynamic(self, feed_values, step: StepContext, pool: ThreadPoolExecutor, timeout: float | None):
        """Pending counts and a ready queue at run time; expensive nodes on the pool."""
        vals = self.template.copy()
        for s, v in zip(self.feed_slots, feed_values):
            vals[s] = v
        state = _DynamicState(self, vals, step, pool)
        state.start()
        if not state.done.wait(timeout):
            step.cancelled = True
            raise errors.DeadlineExceededError(
                f"step timed out after {timeout:.3f}s on {self.device.name}; still pending: "
                f"{state.pending_names()}")
        if state.error is not None:
            e, op = state.error
            raise wrap_kernel_error(e, op, self.device) from (None if isinstance(e, errors.OpError) else e)
        for fn, slot in self.end_reads:
            vals[slot] = fn()
        return [vals[s] for s in self.fetch_slots]


class _DynamicState:
    """Run-time state of one dynamic execution: pending counts, outstanding work, errors.

    Every node is finished exactly once. After an error the remaining nodes are still
    finished (skipped, not run), so the outstanding count always reaches zero and a failed
    step can never hang waiting for nodes that will not run.
    """

    def __init__(self, part: CompiledPartition, vals, step, pool):
        self.part = part
        self.vals = vals
        self.step = step
        self.pool = pool
        self.pending = {n: n.pending for n in part.nodes}
        self.lock = threading.Lock()
        self.outstanding = len(part.nodes)
        self.done = threading.Event()
        self.error = None
        if self.outstanding == 0:
            self.done.set()

    def pending_names(self):
        with self.lock:
            return [n.op.name for n, c in self.pending.items() if c >= 0][:5]

    def start(self):
        self._dispatch([n for n in self.part.nodes if n.pending == 0], [])

    def _dispatch(self, ready, queue):
        for n in ready:
            if n.expensive and self.part.parallelizable and self.error is None:
                self.pool.submit(self._run_loop, [n])
            else:
                queue.append(n)
        if queue is not None and queue and not getattr(self._local(), "running", False):
            self._run_loop(queue)

    def _local(self):
        loc = getattr(self, "_tls", None)
        if loc is None:
            loc = self._tls = threading.local()
        return loc

    def _run_loop(self, queue):
        loc = self._local()
        loc.running = True
        try:
            while queue:
                n = queue.pop(0)
                if self.error is not None or self.step.cancelled:
                    self._dispatch(self._finish(n), queue)
                    continue
                try:
                    for fn, slot in n.reads:
                        self.vals[slot] = fn()
                    args = [self.vals[i] for i in n.ins]
                    if n.kd.is_async:
                        n.fn(self.step, self._make_done(n), *args)
                        continue
                    with np.errstate(all="ignore"):
                        res = n.fn(self.step, *args) if n.kd.takes_context else n.fn(*args)
                    self.part._store(n, res, self.vals)
                except Exception as e:  # noqa: BLE001 - reported once the step drains
                    self._fail(e, n)
                self._dispatch(self._finish(n), queue)
        finally:
            loc.running = False

    def _make_done(self, n):
        called = threading.Lock()

        def done(outputs=None, error=None):
            if not called.acquire(blocking=False):
                return  # a second call of the continuation is ignored
            if error is not None:
                self._fail(error, n)
            else:
                try:
                    self.part._store(n, outputs, self.vals)
                except Exception as e:  # noqa: BLE001
                    self._fail(e, n)
            ready = self._finish(n)
            if ready:
                if getattr(self._local(), "running", False):
                    # Called synchronously from inside our own loop: hand work to the pool
                    # rather than recursing.
                    self.pool.submit(self._run_loop, ready)
                else:
                    self._run_loop(ready)
        return done

    def _fail(self, e, n):
        with self.lock:
            if self.error is None:
                self.error = (e, n.op)
        self.step.cancelled = True

    def _finish(self, n):
        ready = []
        with self.lock:
            self.pending[n] = -1
            for m in n.consumers:
                self.pending[m] -= 1
                if self.pending[m] == 0:
                    ready.append(m)
            self.outstanding -= 1
            if self.outstanding == 0:
                self.done.set()
        return ready


def _has_independent(exp_nodes, preds) -> bool:
    """True when two expensive nodes exist neither of which depends on the other."""
    index = {n: i for i, n in enumerate(exp_nodes)}
    anc: dict = {}

    def ancestors(n):
        if n in anc:
            return anc[n]
        anc[n] = 0
        mask = 0
        stack = list(preds[n])
        seen = set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if p in index:
                mask |= 1 << index[p]
            stack.extend(preds[p])
        anc[n] = mask
        return mask

    masks = [ancestors(n) for n in exp_nodes]
    full = (1 << len(exp_nodes)) - 1
    for i, m in enumerate(masks):
        related = m
        for j, mj in enumerate(masks):
            if mj >> i & 1:
                related |= 1 << j
        if (related | 1 << i) != full:
            return True
    return False


def _call_async_blocking(n, step, args):
    """Run an async kernel from the sequential path by waiting for its continuation."""
    ev = threading.Event()
    box = {}

    def done(outputs=None, error=None):
        box["out"], box["err"] = outputs, error
        ev.set()

    n.fn(step, done, *args)
    ev.wait()
    if box["err"] is not None:
        raise box["err"]
    return box["out"]


def wrap_kernel_error(exc: BaseException, op, device) -> errors.OpError:
    """Turn whatever a kernel raised into a tw error that names the node, op and device."""
    where = f"{op.type} node '{op.name}' on {device.name}" if op is not None else f"a node on {device.name}"
    if isinstance(exc, errors.OpError):
        if op is not None and exc.node_def is None:
            exc.node_def = op.name
            exc.op = op
            if f"node '{op.name}'" not in exc.message:
                exc.message = f"{where}: {exc.message}"
                exc.args = (exc.message,)
        return exc
    if isinstance(exc, MemoryError):
        return errors.ResourceExhaustedError(f"{where}: out of memory: {exc}", node_def=getattr(op, "name", None), op=op)
    if isinstance(exc, (ValueError, IndexError, TypeError, np.linalg.LinAlgError, KeyError, ZeroDivisionError)):
        return errors.InvalidArgumentError(f"{where}: {type(exc).__name__}: {exc}", node_def=getattr(op, "name", None), op=op)
    return errors.InternalError(f"{where}: {type(exc).__name__}: {exc}", node_def=getattr(op, "name", None), op=op)
