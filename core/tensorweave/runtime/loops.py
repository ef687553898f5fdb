"""Compiled while loops: a loop whose whole frame runs on one partition becomes one node.

``frames.py`` runs control flow as tagged-token dataflow: every activation of every node of
every iteration is routed through frame and iteration bookkeeping under a lock. That is the
general model (parallel iterations, dead tensors, loops across devices and tasks), and it
costs tens of microseconds per iteration of even the smallest loop.

Most loops need none of that generality at run time: the frame's nodes all sit on one
device, the body has no conditional inside it, and nothing in it waits for another device.
For such a frame the plan compiler (``collapse_loops``, called when a partition's control-flow
facts are built) compiles the frame, once, into a flat per-iteration schedule — the loop
predicate's nodes, a predicate test, the body's nodes, the NextIteration hand-over — and puts
one ``_FastLoop`` node in the enclosing frame in its place: its inputs are the loop's Enter
inputs, its outputs the Exit outputs. Running it is a tight loop over ``(kernel, input slots,
output slot)`` tuples, the way flat plans run (executor.py).

Semantics are TF's: nodes that do not depend on the body's Switch run in every iteration,
the last one (predicate false) included; body nodes run only while the predicate holds;
iterations run one after another, which ``parallel_iterations`` allows (it is an upper
bound). Nested loops collapse inside out: an inner loop is one node of the outer loop's
schedule. A loop whose frame has a cond inside it, a Send/Recv, an asynchronous kernel, or a
shape the compiler does not recognise keeps the general path, unchanged. Traced steps record
every node of every iteration, with its frame and iteration, as the general path does.
A dead input (the loop sits in an untaken cond branch) makes the whole loop dead without
running it, as in TF.

A loop on the host whose iteration splits into two stages, the second depending on the
first but nothing of the first on the second (a 2-layer RNN's layers), runs them as a
pipeline: the second stage of iteration t on a stage worker thread while this thread runs
the first stage of iteration t+1 (``_Stages``, planned by ``_plan_stages``). Each stage runs
its nodes in their order and its own loop variables; only the values the second stage reads
are handed over. Values are bit for bit those of one thread; traced steps run one thread.

On the host, a loop variable summed over iterations (a gradient loop's weight gradients)
is added in place from the second iteration (K_ACC), and a product summed so is added into
the sum by the device's own kernel where it has one (K_ACC_MM, ``Device.accumulate_product``).
"""

from __future__ import annotations

import heapq
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.device import Device
from tensorweave.runtime.step import (
    K_BINARY,
    K_GENERIC,
    K_NULLARY,
    K_UNARY,
    PRODUCTS,
    SMALL_BYTES,
    estimate_flops,
    wrap_kernel_error,
)

# Roles as frames.py names them, by op type (only what the compiler tells apart).
_ENTER, _EXIT, _NEXT, _MERGE, _SWITCH, _LOOPCOND = ("Enter", "Exit", "NextIteration", "Merge", "Switch",
                                                      "LoopCond")
_UNSUPPORTED = {"ControlTrigger", "_Send", "_Recv"}
LOOP_OP_TYPE = "_FastLoop"

# Step kinds of a loop's schedule, beyond the executor's K_NULLARY/K_UNARY/K_BINARY/K_GENERIC.
K_PRED, K_NEXT, K_LOOP = 11, 12, 13
# The NextIteration hand-over as plain copies, (source, destination) slot pairs in ``x``.
K_MOVE = 17
# A loop variable's accumulation ``acc = acc + g`` on the host (``_accumulate_in_place``): from
# its second iteration the sum is written into the array the node made the iteration before.
K_ACC = 18
# The same where ``g`` is a MatMul read by nothing else, on a device that adds a product into
# its output (``Device.accumulate_product``): ``acc += a @ b`` in one kernel from the second
# iteration. ``b`` is (slot of a, slot of b, the MatMul's kernel, its node, the device's hook,
# the device).
K_ACC_MM = 19
# Kernels with any number of inputs (their slots in the step's ``a``; ``b`` is 1 when their
# outputs may be big enough for the allocator to track): one output, without and with the
# step's context, or several outputs (the node in ``x``). Called directly, not through
# _run_node.
K_NARY, K_CTX, K_MULTI = 14, 15, 16

# How often (in iterations) a running loop looks at the step's cancellation and deadline.
_CHECK_EVERY = 64


class _LoopOp:
    """Stands in for an Operation: the collapsed loop's name (its frame) and type."""

    __slots__ = ("name", "type", "_id", "inputs", "outputs", "frame")

    def __init__(self, frame, id_):
        self.name, self.type, self._id, self.frame = frame, LOOP_OP_TYPE, id_, frame
        self.inputs, self.outputs = (), ()


class LoopNode:
    """The node a collapsed loop leaves in its enclosing frame (the attributes frames.py and
    the executor read on a node; the control-flow ones are set by FrameInfo)."""

    __slots__ = ("op", "fn", "kd", "ins", "outs", "kind", "pre", "consumers", "pending", "transfer",
                 "expensive", "track", "unwrap", "frees", "role", "f_out", "f_ctrl", "f_nin", "f_merge", "loop")

    def __init__(self, loop, ins, outs, pre, id_):
        self.op = _LoopOp(loop.frame, id_)
        self.loop = loop
        self.ins, self.outs, self.pre = ins, outs, pre
        self.fn = self.kd = None
        self.kind = K_GENERIC
        self.transfer = None
        self.expensive = self.track = self.unwrap = False
        self.frees = ()


class CompiledLoop:
    """One frame's per-iteration schedule. ``execute`` runs the whole loop in the value slots
    of the iteration that runs it (the frame's own slots are its nodes' and no one else's)
    and returns the Exit values, in the order of the LoopNode's outputs."""

    def __init__(self, frame, enter_slots, inits, steps, exit_srcs, slot_node, device, to_host, stages=None):
        self.frame = frame
        self.stages = stages             # a _Stages when the loop runs as a two-stage pipeline
        self.enter_slots = enter_slots   # where each input (an Enter's value) goes
        self.inits = inits               # (kernel, slot): the body's constants, once per loop
        self.steps = steps               # one iteration: (fn, a, b, kind, out, x)
        self.exit_srcs = exit_srcs       # slots holding the loop variables when it ends
        self.slot_node = slot_node       # output slot -> node, to name the node that failed
        self.own_slots = tuple({*enter_slots, *(s for _fn, s in inits), *(s[4] for s in steps if s[4] >= 0),
                                *(d for s in steps if s[3] == K_NEXT for d in s[5][1]),
                                *(d for s in steps if s[3] == K_MOVE for _s, d in s[5]),
                                *(o for s in steps if s[3] in (K_MULTI, K_GENERIC, K_LOOP) for o in s[5].outs)})
        self.device = device
        self.truth = None if to_host is None else (lambda v: bool(np.asarray(to_host(v))))

    def execute(self, state, lv, args):
        for s, v in zip(self.enter_slots, args):
            lv[s] = v
        try:
            for fn, s in self.inits:
                lv[s] = fn()
            if state.stats is not None:
                self._iterate_traced(state, lv)
            elif self.stages is not None:
                self._iterate_in_stages(state, lv)
            else:
                self._iterate(state, lv)
            return tuple(lv[s] for s in self.exit_srcs)
        finally:
            for s in self.own_slots:  # the last iteration's values are not kept for the step
                lv[s] = None

    def _iterate(self, state, lv):
        _run_steps(self.steps, lv, state, self.truth, state.part.allocator.track, self, repeat=True)

    def _iterate_traced(self, state, lv):
        """``_iterate``, one step at a time, recording every node with its frame and iteration."""
        stats, clock = state.stats, time.perf_counter_ns
        tid, dev, alloc = stats.thread(), self.device.name, state.part.allocator
        truth = self.truth
        i = 0
        while True:
            for fn, a, b, kind, out, x in self.steps:
                if kind == K_PRED:
                    if not (lv[a] if truth is None else truth(lv[a])):
                        return
                    continue
                if kind == K_NEXT:
                    srcs, dsts = x
                    new = [lv[s] for s in srcs]
                    for d, v in zip(dsts, new):
                        lv[d] = v
                    continue
                if kind == K_MOVE:
                    for s, d in x:
                        lv[d] = lv[s]
                    continue
                if kind == K_ACC_MM:  # traced: the product and the sum, each recorded
                    self._trace_accumulated_product(stats, dev, tid, alloc, (fn, a, b, kind, out, x), lv, i)
                    continue
                t0 = clock()
                try:
                    if kind in (K_BINARY, K_ACC):  # (an accumulation traced: the kernel)
                        lv[out] = fn(lv[a], lv[b])
                    elif kind == K_UNARY:
                        lv[out] = fn(lv[a])
                    elif kind == K_NULLARY:
                        lv[out] = fn()
                    else:
                        _run_node(state, x, a, kind, lv)
                except (errors.CancelledError, errors.DeadlineExceededError):
                    raise
                except Exception as e:  # noqa: BLE001
                    raise self._error(e, out, x) from (None if isinstance(e, errors.OpError) else e)
                t1 = clock()
                if x is not None and kind != K_LOOP:  # a node's own call, not a copy or a read
                    stats.add(dev, x.op.name, x.op.type, t0, t0, t1, t1, tid, [lv[s] for s in x.outs], alloc,
                              None, self.frame, i)
            i += 1
            if not i % _CHECK_EVERY:
                self._check(state, i)

    def _trace_accumulated_product(self, stats, dev, tid, alloc, st, lv, i):
        """A K_ACC_MM step of a traced run: the MatMul, then the Add, as two kernels."""
        fn, a, b, _kind, out, x = st
        clock = time.perf_counter_ns
        for node, call in ((b[3], lambda: _product(b, lv[b[0]], lv[b[1]])), (x, None)):
            t0 = clock()
            try:
                if call is not None:
                    g = call()
                    outs = [g]
                else:
                    lv[out] = fn(lv[a], g)
                    outs = [lv[out]]
            except Exception as e:  # noqa: BLE001
                raise wrap_kernel_error(e, node.op, self.device) from (None if isinstance(e, errors.OpError) else e)
            t1 = clock()
            stats.add(dev, node.op.name, node.op.type, t0, t0, t1, t1, tid, outs, alloc, None, self.frame, i)

    def _iterate_in_stages(self, state, lv):
        """``_iterate`` as a two-stage pipeline (``_Stages``): this thread runs iteration t+1's
        first stage while a stage worker runs iteration t's second stage in its own copy of
        the slots, from the values this thread hands it."""
        st = self.stages
        side = _SideStage(self, state, list(lv))
        truth, track = self.truth, state.part.allocator.track
        i = 0
        try:
            while _run_steps(st.main_steps, lv, state, truth, track, self):
                side.put(tuple(lv[s] for s in st.handed), state, i)
                new = [lv[s] for s, _d in st.main_moves]  # read all first: variables may swap
                for (_s, d), v in zip(st.main_moves, new):
                    lv[d] = v
                i += 1
                if not i % _CHECK_EVERY:
                    self._check(state, i)
        except BaseException:
            side.stop()
            raise
        lv_side = side.finish()
        for s in st.side_exits:
            lv[s] = lv_side[s]

    def _check(self, state, i):
        if state.step.cancelled or state.error is not None:
            raise errors.CancelledError(f"loop '{self.frame}' stopped at iteration {i}: the step was cancelled")
        if state.deadline is not None and time.monotonic() > state.deadline:
            raise errors.DeadlineExceededError(
                f"step timed out after {state.timeout:.3f}s on {self.device.name} "
                f"(in frame '{self.frame}', iteration {i})")

    def _error(self, e, out, x):
        node = x if x is not None and not isinstance(x, tuple) else self.slot_node.get(out)
        return wrap_kernel_error(e, node.op if node is not None else None, self.device)


def _product(b, p, q):
    """A K_ACC_MM step's product by the MatMul's own kernel (``b``: the step's extra), its
    errors named after the MatMul."""
    try:
        return b[2](p, q)
    except Exception as e:  # noqa: BLE001
        raise wrap_kernel_error(e, b[3].op, b[5]) from (None if isinstance(e, errors.OpError) else e)


def _run_steps(steps, lv, state, truth, track, loop, repeat=False) -> bool:
    """One pass over ``steps`` (a stage of an iteration), or with ``repeat`` passes until the
    predicate is false (the whole loop; the step's cancellation and deadline looked at every
    _CHECK_EVERY iterations). False when the predicate was false. Errors are named after
    the node that raised."""
    step, out, x, i = state.step, -1, None, 0
    try:
        while True:
            # (the kinds tested in the order of how often a small loop's steps are of them)
            for fn, a, b, kind, out, x in steps:
                if kind == K_BINARY:
                    lv[out] = fn(lv[a], lv[b])
                elif kind == K_UNARY:
                    lv[out] = fn(lv[a])
                elif kind == K_PRED:
                    if not (lv[a] if truth is None else truth(lv[a])):
                        return False
                elif kind == K_MOVE:
                    for s, d in x:
                        lv[d] = lv[s]
                elif kind == K_ACC:
                    acc, g = lv[a], lv[b]
                    if lv[out] is acc and type(acc) is np.ndarray and type(g) is np.ndarray \
                            and g.shape == acc.shape and g.dtype == acc.dtype and acc.flags.writeable:
                        np.add(acc, g, out=acc)  # this step's own array of the iteration before
                    else:
                        lv[out] = fn(acc, g)
                elif kind == K_ACC_MM:
                    acc, p, q = lv[a], lv[b[0]], lv[b[1]]
                    if lv[out] is acc and type(acc) is np.ndarray and acc.flags.writeable:
                        if not b[4](acc, p, q):  # the device took none: the product, added in place
                            g = _product(b, p, q)
                            if type(g) is np.ndarray and g.shape == acc.shape and g.dtype == acc.dtype:
                                np.add(acc, g, out=acc)
                            else:
                                lv[out] = fn(acc, g)
                    else:
                        lv[out] = fn(acc, _product(b, p, q))
                elif kind == K_NULLARY:
                    lv[out] = fn()
                elif kind == K_NARY:
                    v = lv[out] = fn(*[lv[i] for i in a])
                    if b and getattr(v, "nbytes", 0) >= SMALL_BYTES:
                        track(v)
                elif kind == K_CTX:
                    v = lv[out] = fn(step, *[lv[i] for i in a])
                    if b and getattr(v, "nbytes", 0) >= SMALL_BYTES:
                        track(v)
                elif kind == K_NEXT:
                    srcs, dsts = x
                    new = [lv[s] for s in srcs]
                    for d, v in zip(dsts, new):
                        lv[d] = v
                elif kind == K_MULTI:
                    res = fn(step, *[lv[i] for i in a]) if x.kd.takes_context else fn(*[lv[i] for i in a])
                    if len(res) != len(x.outs):
                        _wrong_count(x, res)
                    for s, v in zip(x.outs, res):
                        lv[s] = v
                        if b and getattr(v, "nbytes", 0) >= SMALL_BYTES:
                            track(v)
                else:
                    _run_node(state, x, a, kind, lv)
            if not repeat:
                return True
            i += 1
            if not i % _CHECK_EVERY:
                loop._check(state, i)
    except (errors.CancelledError, errors.DeadlineExceededError):
        raise
    except Exception as e:  # noqa: BLE001 - named after the node that raised
        raise loop._error(e, out, x) from (None if isinstance(e, errors.OpError) else e)


# How many iterations the first stage may run ahead of the second: their handed values stay
# referenced until the second stage has run them (bounded memory).
_AHEAD = 2
# Stage workers in all (several loops, steps or sessions may run in stages at once; a loop
# whose worker waits for a free one meanwhile runs ahead by _AHEAD iterations only).
_STAGE_THREADS = 8
_stage_pool_lock = threading.Lock()
_stage_pool: list = []


def _stage_workers() -> ThreadPoolExecutor:
    """The threads second stages run on: their own pool, never the inter-op pool, so a loop
    waiting for its second stage can never wait behind the kernels of its own step."""
    with _stage_pool_lock:
        if not _stage_pool:
            _stage_pool.append(ThreadPoolExecutor(_STAGE_THREADS, thread_name_prefix="tw-loop-stage"))
        return _stage_pool[0]


class _SideStage:
    """A pipelined loop's second stage on a stage worker: iteration after iteration, in order,
    it writes the values the first stage handed over into its own slots, runs its steps and
    moves its own loop variables. The first error stops it; the first stage sees it at its
    next hand-over (or at the end) and raises it."""

    def __init__(self, loop, state, lv):
        self.loop, self.lv = loop, lv
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.room = threading.Semaphore(_AHEAD)
        self.error: BaseException | None = None
        self.future = _stage_workers().submit(self._run, state)

    def put(self, values, state, i):
        """Hand iteration ``i``'s values over; waits while the stage is _AHEAD behind."""
        while not self.room.acquire(timeout=0.05):
            if self.error is None:
                self.loop._check(state, i)
        if self.error is not None:
            self.room.release()
            raise self.error
        self.items.put(values)

    def _run(self, state):
        st, lv, loop, track = self.loop.stages, self.lv, self.loop, state.part.allocator.track
        with np.errstate(all="ignore"):  # per thread: as the executors run kernels
            while True:
                values = self.items.get()
                if values is None:
                    return
                try:
                    if self.error is None:
                        for s, v in zip(st.handed, values):
                            lv[s] = v
                        _run_steps(st.side_steps, lv, state, None, track, loop)
                        new = [lv[s] for s, _d in st.side_moves]
                        for (_s, d), v in zip(st.side_moves, new):
                            lv[d] = v
                except BaseException as e:  # noqa: BLE001 - raised by the first stage
                    self.error = e
                finally:
                    self.room.release()

    def finish(self):
        """Wait for every handed iteration; the stage's slots, or its error raised."""
        self.items.put(None)
        self.future.result()
        if self.error is not None:
            raise self.error
        return self.lv

    def stop(self):
        """The first stage failed: let the worker drain and wait for it (nothing may touch
        the step's values after the loop returns)."""
        self.error = self.error or errors.CancelledError("the loop's first stage stopped")
        self.items.put(None)
        self.future.result()


def _wrong_count(n, res):
    raise errors.InternalError(
        f"kernel for {n.op.type} returned {0 if res is None else len(res)} outputs, expected {len(n.outs)}")


def _run_node(state, n, ins, kind, lv):
    """A node that is not a direct kernel call (a generic kernel, a nested loop), or any node
    of a traced loop."""
    args = [lv[i] for i in ins]
    if kind == K_LOOP:
        res = n.loop.execute(state, lv, args)
    else:
        res = n.fn(state.step, *args) if n.kd.takes_context else n.fn(*args)
        if len(n.outs) == 1:
            if n.unwrap and isinstance(res, tuple | list):
                res = res[0]
            res = (res,)
        elif n.outs and (res is None or len(res) != len(n.outs)):
            raise errors.InternalError(
                f"kernel for {n.op.type} returned {0 if res is None else len(res)} outputs, expected {len(n.outs)}")
        if n.track:
            for v in res or ():
                if getattr(v, "nbytes", 0) >= SMALL_BYTES:
                    state.part.allocator.track(v)
    for s, v in zip(n.outs, res or ()):
        lv[s] = v


# ----------------------------------------------------------------------------------------
# Plan time
# ----------------------------------------------------------------------------------------
def collapse_loops(nodes, edges, recv_frames, keep_general, device, to_host):
    """Replace each loop frame that qualifies (see the module docstring) by a LoopNode.

    ``nodes``: the partition's nodes in a topological order (loop back edges left out);
    ``edges``: (producer, output index or -1, consumer, input position or -1);
    ``recv_frames``: Recv node -> (frame, iterations) for Recvs anchored in a frame;
    ``keep_general``: frames that keep the general path (driven across devices).
    Returns (nodes, edges, {frame: why it was not compiled}).
    """
    frame_of, parent = _frames(nodes, edges, recv_frames)
    if frame_of is None:
        return nodes, edges, {"*": "the partition's frame structure is ambiguous"}
    depth: dict = {"": 0}

    def depth_of(f):
        if f not in depth:
            depth[f] = 1 + depth_of(parent.get(f, ""))
        return depth[f]
    frames = sorted({f for f in frame_of.values() if f}, key=depth_of, reverse=True)
    skipped: dict = {}
    next_id = -(10**9)
    for f in frames:  # innermost first: a compiled inner loop is one node of the outer one
        if f in keep_general:
            skipped[f] = "it spans devices"
            continue
        if any(parent.get(c) == f for c in skipped):
            skipped[f] = "a loop inside it keeps the general path"
            continue
        members = [n for n in nodes if frame_of[n] == f]
        result = _compile_frame(f, members, set(members), edges, device, to_host)
        if isinstance(result, str):
            skipped[f] = result
            continue
        loop, enters, exits, pre = result
        node = LoopNode(loop, [e.ins[0] for e in enters], [x.outs[0] for x in exits], pre, next_id)
        next_id += 1
        in_f = set(members)
        enter_pos = {e: k for k, e in enumerate(enters)}
        exit_pos = {x: k for k, x in enumerate(exits)}
        new_edges = []
        for p, k, c, pos in edges:
            if p in in_f and c in in_f:
                continue  # inside the loop: its schedule now
            if c in in_f:  # into an Enter (_compile_frame checked)
                new_edges.append((p, k, node, enter_pos[c] if k >= 0 else -1))
            elif p in in_f:  # out of an Exit
                new_edges.append((node, exit_pos[p] if k >= 0 else -1, c, pos))
            else:
                new_edges.append((p, k, c, pos))
        edges = new_edges
        frame_of[node] = parent.get(f, "")
        nodes = _toposort([m for m in nodes if m not in in_f] + [node], edges)
    return nodes, edges, skipped


def _toposort(nodes, edges):
    """``nodes`` in a topological order of ``edges`` (loop back edges left out), ties in the
    given order."""
    return _kahn(nodes, [(p, c) for p, _k, c, _pos in edges if not (c.op.type == _MERGE and p.op.type == _NEXT)])


def _kahn(items, pairs) -> list:
    """``items`` in an order where each comes after those ``(before, after)`` pairs put
    before it, ties in the given order."""
    index = {n: i for i, n in enumerate(items)}
    succ: dict = {n: [] for n in items}
    npred = dict.fromkeys(items, 0)
    for p, c in pairs:
        succ[p].append(c)
        npred[c] += 1
    ready = [index[n] for n in items if npred[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = items[heapq.heappop(ready)]
        order.append(n)
        for c in succ[n]:
            npred[c] -= 1
            if npred[c] == 0:
                heapq.heappush(ready, index[c])
    return order


def _frames(nodes, edges, recv_frames):
    """Each node's frame ("" for the root) and each frame's parent, from the Enter/Exit
    structure; (None, None) when it is ambiguous (then nothing is compiled)."""
    ins: dict = {n: [] for n in nodes}
    for p, _k, c, _pos in edges:
        if not (c.op.type == _MERGE and p.op.type == _NEXT):  # the back edge: its producer comes later
            ins[c].append(p)
    frame_of: dict = {}
    parent: dict = {}
    for n in nodes:
        if n in recv_frames:
            frame_of[n] = recv_frames[n][0]
            continue
        srcs = set()
        for p in ins[n]:
            f = frame_of.get(p)
            if f is None:
                return None, None
            srcs.add(parent.get(f, "") if p.op.type == _EXIT else f)
        if len(srcs) > 1:
            return None, None
        here = srcs.pop() if srcs else ""
        if n.op.type == _ENTER:
            f = n.op.get_attr("frame_name")
            if ins[n] and parent.setdefault(f, here) != here:
                return None, None
            frame_of[n] = f
        else:
            frame_of[n] = here
    # A frame none of whose Enters has a producer node (all read feeds, constants or
    # variables) is entered from the root: frames.py starts such Enters in the root iteration.
    return frame_of, parent


def _compile_frame(f, members, in_f, edges, device, to_host):
    """The schedule of frame ``f``; a string saying why not when it does not qualify."""
    by_type: dict = {}
    for n in members:
        t = n.op.type
        if t in _UNSUPPORTED:
            return f"it has a {t} node"
        if t != LOOP_OP_TYPE and n.kd is not None and n.kd.is_async:
            return f"{n.op.name} has an asynchronous kernel"
        by_type.setdefault(t, []).append(n)
    conds = by_type.get(_LOOPCOND, [])
    if len(conds) != 1:
        return "it does not have exactly one LoopCond"
    cond = conds[0]
    data_in: dict = {n: [] for n in members}
    ctrl_in: dict = {n: [] for n in members}
    data_out: dict = {n: [] for n in members}
    for p, k, c, pos in edges:
        if c in in_f:
            (data_in if k >= 0 else ctrl_in)[c].append((p, k, pos))
            if p not in in_f and c.op.type != _ENTER:
                return f"{c.op.name} has an input from outside the loop that is not an Enter"
        if p in in_f:
            if c not in in_f and p.op.type != _EXIT:
                return f"{p.op.name} has a consumer outside the loop"
            if k >= 0:
                data_out[p].append((c, k, pos))
    enters = by_type.get(_ENTER, [])
    if any(len(e.ins) != 1 or len(e.outs) != 1 for e in enters):
        return "an Enter is not a plain one"
    # Loop merges: Merge(Enter, NextIteration); a cond's Merge does not qualify.
    merge_enter, merge_next = {}, {}
    copies = set()  # one-input Merges (the gradient loop's sync points): with no dead values, a copy
    for m in by_type.get(_MERGE, []):
        if len(m.ins) == 1 and len(data_in[m]) <= 1 and not any(k == 1 for _c, k, _p in data_out[m]):
            copies.add(m)
            continue
        srcs = {p.op.type: p for p, _k, _pos in data_in[m]}
        if len(data_in[m]) != 2 or set(srcs) != {_ENTER, _NEXT} or ctrl_in[m]:
            return f"{m.op.name} is the Merge of a conditional inside the loop"
        if srcs[_ENTER].op.get_attr("is_constant"):
            return f"{m.op.name} merges a loop invariant"
        if len(m.outs) > 1 and any(k == 1 for _c, k, _p in data_out[m]):
            return f"{m.op.name}'s value_index is used"
        merge_enter[m], merge_next[m] = srcs[_ENTER], srcs[_NEXT]
    merges = list(merge_enter)
    for e in enters:
        if not e.op.get_attr("is_constant") and (
                [m for m in merges if merge_enter[m] is e] == [] or
                any(c not in merge_enter for c, _k, _p in data_out[e])):
            return f"{e.op.name} (a loop variable) feeds something other than its Merge"
    switches = by_type.get(_SWITCH, [])
    for s in switches:
        if len(s.ins) != 2 or s.ins[1] != cond.outs[0] or not any(
                p in merge_enter and k == 0 and pos == 0 for p, k, pos in data_in[s]):
            return f"{s.op.name} is the Switch of a conditional inside the loop"
        if any(c.op.type != _EXIT for c, k, _p in data_out[s] if k == 0):
            return f"{s.op.name}'s false output goes somewhere other than an Exit"
    for n in by_type.get(_NEXT, []):
        if any(merge_next.get(c) is not n for c, _k, _p in data_out[n]):
            return f"{n.op.name} feeds something other than its Merge"
    exits = by_type.get(_EXIT, [])
    for x in exits:
        if len(data_in[x]) != 1 or data_in[x][0][0] not in switches or data_in[x][0][1] != 0:
            return f"{x.op.name} does not leave the loop from its Switch"
    # The body is what depends on a Switch within the iteration; the rest (the predicate's
    # nodes, loop invariants' uses) runs in every iteration, the last one included, as in TF.
    structural = {_ENTER, _MERGE, _SWITCH, _NEXT, _EXIT, _LOOPCOND}
    body: set = set()
    for n in members:  # in topological order
        if (n.op.type not in structural or n in copies) and any(
                p in body or p.op.type == _SWITCH for p, _k, _pos in data_in[n] + ctrl_in[n]):
            body.add(n)
    # Values that need no step: a Switch's true output, a one-input Merge and an Identity
    # are their input (no dead values here); their readers read the input's slot directly.
    alias: dict = {s.outs[1]: s.ins[0] for s in switches}
    alias.update((m.outs[0], m.ins[0]) for m in copies)
    for n in members:
        if n.op.type == "Identity" and n.kind == K_UNARY and not n.pre:
            alias[n.outs[0]] = n.ins[0]

    def slot(s):
        while s in alias:
            s = alias[s]
        return s
    # Constants inside the body (they wait for the loop's pivot) are computed once per loop.
    inits = [(n.fn, n.outs[0]) for n in members if n.op.type == "Const" and n.kind == K_NULLARY and not n.pre]
    skip = {n for n in members if n.op.type in structural or n.outs and n.outs[0] in alias
            or n.op.type == "Const" and n.kind == K_NULLARY and not n.pre}
    steps: list = []
    slot_node: dict = {}
    for n in members:
        if n not in skip and n not in body:
            _encode(n, steps, slot_node, slot)
    steps.append((None, slot(cond.ins[0]), 0, K_PRED, -1, None))
    for n in members:
        if n not in skip and n in body:
            _encode(n, steps, slot_node, slot)
    steps.append(_next_iteration([slot(merge_next[m].ins[0]) for m in merges], [m.outs[0] for m in merges]))
    # Iteration 0 reads a loop variable's Enter value through its Merge: the value goes
    # straight to the Merge's output slot; an invariant to its Enter's own slot.
    enter_slots = [e.outs[0] if e.op.get_attr("is_constant")
                   else next(m for m in merges if merge_enter[m] is e).outs[0] for e in enters]
    exit_srcs = [slot(data_in[x][0][0].ins[0]) for x in exits]
    pre = [step for e in enters for step in e.pre]
    pairs = [(slot(merge_next[m].ins[0]), m.outs[0]) for m in merges]
    if device.host_tensors:
        steps = _accumulate_in_place(steps, pairs)
        if type(device).accumulate_product is not Device.accumulate_product:
            steps = _accumulate_products(steps, pairs, exit_srcs, device)
    # (host memory only: a device's kernels, e.g. OpenCL's, need not be callable from two threads)
    stages = _plan_stages(members, in_f, skip, body, data_in, ctrl_in, steps, slot_node, pairs, exit_srcs,
                          slot) if device.host_tensors else None
    loop = CompiledLoop(f, enter_slots, inits, steps, exit_srcs, slot_node, device, to_host, stages)
    return loop, enters, exits, pre


def _next_iteration(srcs, dsts):
    """The step that hands each NextIteration value to its Merge's slot for the next
    iteration: one copy after another where no copy reads a slot an earlier one wrote (the
    usual case), else all values read first (a body that swaps loop variables)."""
    pairs, written = [], set()
    for s, d in zip(srcs, dsts):
        if s in written:
            return (None, 0, 0, K_NEXT, -1, (tuple(srcs), tuple(dsts)))
        if s != d:
            pairs.append((s, d))
            written.add(d)
    return (None, 0, 0, K_MOVE, -1, tuple(pairs))


def _accumulate_in_place(steps, pairs) -> list:
    """``steps`` with each accumulation of a loop variable (an Add whose first input is the
    variable and whose output is its next value, neither read by anything else: a gradient
    loop's sums over iterations) as a K_ACC step. Its first iteration adds as the kernel
    does, into a new array (the variable's initial value may be shared); later ones add into
    the array that step made the iteration before, which nothing else holds: an LSTM
    gradient's [400, 800] sum 232 -> 111 us, the same bits."""
    readers = _readers(steps, pairs)
    # (an Exit reads the variable once the loop is over: no later iteration writes into it)
    var_of = {src: dst for src, dst in pairs}
    out = []
    for st in steps:
        ab = _binary_inputs(st)
        if ab is not None:
            (a, b), fn, o, x = ab, st[0], st[4], st[5]
            if x.op.type in ("Add", "AddV2") and var_of.get(o) == a != b and readers.get(a) == 1 \
                    and readers.get(o) == 1 and x.op.outputs[0].dtype.is_floating:
                st = (fn, a, b, K_ACC, o, x)
        out.append(st)
    return out


def _binary_inputs(st):
    """The two input slots of a step calling a node's kernel on two inputs (a K_BINARY step,
    or a K_NARY one: a kernel whose output is big enough to be tracked), else None."""
    kind, x = st[3], st[5]
    if x is None or isinstance(x, tuple):
        return None
    if kind == K_BINARY:
        return st[1], st[2]
    if kind == K_NARY and len(st[1]) == 2:
        return st[1]
    return None


def _readers(steps, pairs, exit_srcs=()) -> dict:
    """slot -> how many reads of it: by steps, NextIteration hand-overs, Exits."""
    readers: dict = {}
    for st in steps:
        for i in _reads(st):
            readers[i] = readers.get(i, 0) + 1
    for i in [src for src, _dst in pairs] + list(exit_srcs):
        readers[i] = readers.get(i, 0) + 1
    return readers


def _accumulate_products(steps, pairs, exit_srcs, device) -> list:
    """``steps`` with each K_ACC step whose addend is a MatMul read by nothing else (no other
    step, hand-over or Exit) as one K_ACC_MM step in the accumulation's place (the product's
    inputs are still there: a slot is written once per iteration), the MatMul's own step gone."""
    readers = _readers(steps, pairs, exit_srcs)
    producer = {st[4]: st for st in steps if _binary_inputs(st) is not None}
    fused, out = set(), []
    for st in steps:
        fn, a, b, kind, o, x = st
        mm = producer.get(b) if kind == K_ACC else None
        if mm is not None and mm[5].op.type == "MatMul" and readers.get(b) == 1:
            node = mm[5]
            p, q = _binary_inputs(mm)
            ta, tb = node.op.get_attr("transpose_a"), node.op.get_attr("transpose_b")

            def into(acc, p, q, ta=ta, tb=tb):
                return device.accumulate_product(acc, p.T if ta else p, q.T if tb else q)
            fused.add(id(mm))
            st = (fn, a, (p, q, mm[0], node, into, device), K_ACC_MM, o, x)
        out.append(st)
    return [st for st in out if id(st) not in fused]


def _encode(n, steps, slot_node, slot):
    """``n``'s steps: the reads before it, then its kernel call, inputs through ``slot``."""
    for fn, src, out in n.pre:
        steps.append((fn, slot(src) if src >= 0 else src, 0, K_NULLARY if src < 0 else K_UNARY, out, None))
        slot_node[out] = n
    if n.op.type == LOOP_OP_TYPE:
        steps.append((None, tuple(slot(i) for i in n.ins), 0, K_LOOP, -1, n))
    elif n.kind in (K_NULLARY, K_UNARY, K_BINARY):
        steps.append((n.fn, slot(n.ins[0]) if n.ins else 0, slot(n.ins[1]) if len(n.ins) > 1 else 0, n.kind,
                      n.outs[0], n))
        slot_node[n.outs[0]] = n
    elif len(n.outs) == 1 and not (n.unwrap or n.kd.is_async):
        steps.append((n.fn, tuple(slot(i) for i in n.ins), int(n.track), K_CTX if n.kd.takes_context else K_NARY,
                      n.outs[0], n))
        slot_node[n.outs[0]] = n
    elif len(n.outs) > 1 and not n.kd.is_async:
        steps.append((n.fn, tuple(slot(i) for i in n.ins), int(n.track), K_MULTI, -1, n))
    else:
        steps.append((n.fn, tuple(slot(i) for i in n.ins), 0, K_GENERIC, -1, n))


# ----------------------------------------------------------------------------------------
# Two-stage loops
# ----------------------------------------------------------------------------------------
# An iteration's nodes split in two stages where nothing of the first depends on the second,
# in this iteration or through a loop variable in the next: a 2-layer LSTM's first layer
# (and the time counter, the input read) and its second layer (and the output write). The
# second stage of iteration t then runs on a stage worker while this thread runs the first
# stage of iteration t+1: TF gets the same overlap from running iterations in parallel. Both
# stages must be worth a hand-over, which costs about 10-20 us: STAGE_MIN_US each, by
# ``_stage_cost``.
STAGE_MIN_US = 50.0
# Stateful nodes the second stage may hold: their resource (a stack, a TensorArray) is one
# no node of the first stage touches, so each is used by one thread, in iteration order.
_STAGE_STATEFUL = {"StackPushV2", "StackPopV2", "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3",
                   "TensorArrayScatterV3", "TensorArrayGradV3"}


class _Stages:
    """A loop's two stages: the first's steps (the predicate's included) and the loop
    variables it moves; the second's steps and variables; the slots the first hands the
    second each iteration; the Exit slots the second holds at the end."""

    __slots__ = ("main_steps", "main_moves", "side_steps", "side_moves", "handed", "side_exits", "side_nodes")

    def __init__(self, main_steps, main_moves, side_steps, side_moves, handed, side_exits, side_nodes):
        self.main_steps, self.main_moves = main_steps, main_moves
        self.side_steps, self.side_moves = side_steps, side_moves
        self.handed, self.side_exits, self.side_nodes = handed, side_exits, side_nodes


def _plan_stages(members, in_f, skip, body, data_in, ctrl_in, steps, slot_node, pairs, exit_srcs, slot):
    """The loop's two stages (``_Stages``), or None where no split is worth it or safe."""
    if any(st[3] in (K_GENERIC, K_LOOP) for st in steps):
        return None
    real = [n for n in members if n not in skip]
    preds = {n: _real_preds(n, in_f, skip, data_in, ctrl_in) for n in real}
    comp = _components(real, preds)
    # A product added into a sum by one step (K_ACC_MM) is computed in the sum's stage: the
    # two nodes are one unit there (the product's only reader is the sum: no cycle forms).
    for st in steps:
        if st[3] == K_ACC_MM:
            mm, add = st[2][3], st[5]
            if mm in comp and add in comp and sum(1 for n in real if comp[n] == comp[mm]) == 1:
                comp[mm] = comp[add]
    cost: dict = {}
    for n in real:
        cost[comp[n]] = cost.get(comp[n], 0.0) + _stage_cost(n.op)
    cpreds: dict = {c: set() for c in cost}
    for n in real:
        cpreds[comp[n]].update(comp[p] for p in preds[n] if comp[p] != comp[n])
    # The first stage holds the predicate's side of the iteration, nodes that read variables
    # or are stateful in other ways, and everything they depend on.
    pinned = {comp[n] for n in real if n not in body or n.pre or (
        n.op.op_def.stateful and n.op.type not in _STAGE_STATEFUL)}
    first = set()
    stack = list(pinned)
    while stack:
        c = stack.pop()
        if c not in first:
            first.add(c)
            stack.extend(cpreds[c])
    # The rest, in a topological order, to the first stage while that brings the two stages'
    # costs closer, unless something it depends on went to the second already.
    total = sum(cost.values())
    head = sum(cost[c] for c in first)
    second: set = set()
    rest = [c for c in _in_order(real, comp) if c not in first]
    for c in _kahn(rest, [(p, r) for r in rest for p in cpreds[r] if p not in first]):
        if not cpreds[c] & second and head + cost[c] / 2 <= total / 2:
            first.add(c)
            head += cost[c]
        else:
            second.add(c)
    side_nodes = {n for n in real if comp[n] in second}
    side_cost = sum(cost[c] for c in second)
    if not side_nodes or side_cost < STAGE_MIN_US or total - side_cost < STAGE_MIN_US:
        return None
    handles = {slot(n.ins[0]) for n in real if n not in side_nodes and n.op.op_def.stateful and n.ins}
    if any(n.op.op_def.stateful and slot(n.ins[0]) in handles for n in side_nodes):
        return None  # a resource both stages would use
    def in_side(st):  # the node a step belongs to (the predicate's: none) is a second-stage one
        return (st[5] if st[3] == K_MULTI else slot_node.get(st[4])) in side_nodes
    main_steps = [st for st in steps if st[3] not in (K_MOVE, K_NEXT) and not in_side(st)]
    side_steps = [st for st in steps if st[3] not in (K_MOVE, K_NEXT) and in_side(st)]
    # A loop variable is the second stage's when its next value is: written by a second-stage
    # node, or another such variable passed on unchanged (``(a, b) -> (b, a + b)``).
    side_written = {o for st in side_steps for o in _writes(st)}
    pairs = [(a, d) for a, d in pairs if a != d]
    grew = True
    while grew:
        grew = False
        for a, d in pairs:
            if a in side_written and d not in side_written:
                side_written.add(d)
                grew = True
    side_moves = tuple((a, d) for a, d in pairs if a in side_written)
    main_moves = tuple((a, d) for a, d in pairs if a not in side_written)
    main_written = {o for st in main_steps for o in _writes(st)} | {d for _a, d in main_moves}
    if any(i in side_written for st in main_steps for i in _reads(st)) or side_written & main_written:
        return None  # the first stage would read the second's values (a safety net: not expected)
    handed = tuple(sorted({i for st in side_steps for i in _reads(st)} & main_written))
    side_exits = tuple(s for s in exit_srcs if s in side_written)
    return _Stages(main_steps, main_moves, side_steps, side_moves, handed, side_exits, side_nodes)


def _stage_cost(op) -> float:
    """A node's time in microseconds for balancing stages, as measured on this project's
    machines (one core): about 3 us of dispatch and Python per kernel, products at about
    90 GFLOP/s, other kernels 0.15 ns per element read or written (an LSTM step's [32, 800]
    gate gradients 10-14 us, a [400, 800] gradient accumulation 146 us)."""
    f = min(estimate_flops(op), 1e12)  # unknown shapes: large, whatever the stage
    return 3.0 + (f / 9e4 if op.type in PRODUCTS else f * 1.5e-4)


def _real_preds(n, in_f, skip, data_in, ctrl_in) -> set:
    """The loop's nodes with steps that ``n`` waits for, in its iteration or, through a loop
    variable, in the one before: its inputs, seen through the nodes without steps (Merge,
    Switch, NextIteration, Identity aliases, Enter, constants)."""
    out, seen = set(), set()
    stack = [p for p, _k, _pos in data_in[n] + ctrl_in[n]]
    while stack:
        p = stack.pop()
        if p in seen or p not in in_f:
            continue
        seen.add(p)
        if p in skip:
            stack.extend(q for q, _k, _pos in data_in[p] + ctrl_in[p])
        else:
            out.add(p)
    return out


def _components(nodes, preds) -> dict:
    """Strongly connected components (loop variables make cycles): node -> component id."""
    index, low, comp, on, stack, counter = {}, {}, {}, set(), [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(preds[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            n, it = work[-1]
            advanced = False
            for p in it:
                if p not in index:
                    index[p] = low[p] = counter[0]
                    counter[0] += 1
                    stack.append(p)
                    on.add(p)
                    work.append((p, iter(preds[p])))
                    advanced = True
                    break
                if p in on:
                    low[n] = min(low[n], index[p])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[n])
            if low[n] == index[n]:
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp[m] = index[n]
                    if m is n:
                        break
    return comp


def _in_order(nodes, comp) -> list:
    """Components in the order of their first node."""
    seen, out = set(), []
    for n in nodes:
        if comp[n] not in seen:
            seen.add(comp[n])
            out.append(comp[n])
    return out


def _reads(st) -> tuple:
    kind = st[3]
    if kind in (K_BINARY, K_ACC):
        return (st[1], st[2])
    if kind == K_ACC_MM:
        return (st[1], st[2][0], st[2][1])
    if kind in (K_UNARY, K_PRED):
        return (st[1],)
    if kind in (K_NARY, K_CTX, K_MULTI):
        return tuple(st[1])
    return ()


def _writes(st) -> tuple:
    if st[3] == K_MULTI:
        return tuple(st[5].outs)
    return (st[4],) if st[4] >= 0 else ()
