"""Control flow in the executor: frames, iterations and dead tensors (whitepaper 4.4).

A partition that contains control-flow primitives (Switch, Merge, Enter, Exit,
NextIteration, LoopCond) runs here instead of in the flat schedules of executor.py. The
model is TensorFlow's tagged-token dataflow:

* Every value lives in an **iteration** of a **frame instance**. The root frame has one
  iteration. ``Enter`` moves a value into a child frame instance (one per parent iteration,
  so nested loops work); with ``is_constant`` the value is a loop invariant seen by every
  iteration. ``NextIteration`` moves a value to iteration i+1, ``Exit`` back to the parent.
  Each iteration has its own value slots and pending counts, so iterations can run
  concurrently, up to the loop's ``parallel_iterations``.
* A value may be **dead**. Switch forwards its input to one output; the other is dead. A node
  with a dead input (data or control) does not run; its outputs are dead. Merge forwards the
  first live input and is dead only when all inputs are. A dead NextIteration does not start
  an iteration; a dead Exit is dropped, unless the whole loop is dead (its LoopCond was dead:
  the loop sat in an untaken branch), so the parent sees the deadness.
* An iteration is done when nothing in it is running or ready, no inner loop it started is
  still going, and the previous iteration is done (iteration 0: every Enter has arrived). A
  frame is done when its last iteration is; the step is done when the root iteration is.

Loops across devices: when a frame has nodes on several devices, the partitioner sends the
loop predicate to every partition that has nodes of the frame (``Partition.loops``). Each
such partition then drives the frame itself: a frame instance is created as soon as its
parent iteration exists, every iteration starts by activating the frame's Recv nodes (they
have no local inputs), and a true predicate for iteration i starts iteration i+1 — so each
partition knows when an iteration and the loop end without any extra graph nodes.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.loops import LOOP_OP_TYPE, collapse_loops
from tensorweave.runtime.rendezvous import make_key
from tensorweave.runtime.step import (
    DEAD,
    StepState,
    assign_frees,
    enter_loop,
    in_loop,
    leave_loop,
    quiet_floats,
    restore_floats,
    transfer_record,
)

ROOT = ""  # the root frame's name; its instance key is 0 so root transfers match executor.py's keys

# Node roles, decided at plan time.
R_OP, R_SWITCH, R_MERGE, R_ENTER, R_EXIT, R_NEXT, R_LOOPCOND, R_TRIGGER, R_SEND, R_RECV, R_LOOP = range(11)
_ROLES = {"Switch": R_SWITCH, "Merge": R_MERGE, "Enter": R_ENTER, "Exit": R_EXIT, "NextIteration": R_NEXT,
          "LoopCond": R_LOOPCOND, "ControlTrigger": R_TRIGGER, "_Send": R_SEND, "_Recv": R_RECV,
          LOOP_OP_TYPE: R_LOOP}


class FrameInfo:
    """Plan-time control-flow facts of one compiled partition."""

    def __init__(self, part, edges, loops, recv_frames, cond_recvs, compile_loops=True, freeable=frozenset()):
        """``edges``: (producer node, output index or -1 for control, consumer node, input
        position or -1). ``loops``: frame name -> LoopSpec for frames this partition drives.
        ``recv_frames``: recv node -> (frame name, "all" | "first" | "later" iterations). ``cond_recvs``: recv node -> frame name of the
        loop predicate it carries. ``freeable``: slots worth dropping once their last consumer
        is done (executor.py, plan_liveness)."""
        nodes = part.nodes
        # Loops that run whole on this partition become one node each (runtime/loops.py).
        self.general_loops = {}  # frame -> why it keeps the general path
        if compile_loops:
            nodes, edges, self.general_loops = collapse_loops(
                nodes, edges, recv_frames, set(loops), part.device, part._to_host)
        self.nodes = nodes
        # Only the root iteration drops values (a loop's own slots are cleared when it ends, an
        # iteration's with it): its nodes run once a step, so a slot is dead once every node
        # freeing it has finished, run or dead. (A child frame's slots are counted too but
        # never reach zero: only the root's finishes count.)
        self.root_uses = assign_frees(nodes, freeable)
        # Per-node facts live on the nodes (one attribute read per activation at run time):
        # role, f_out ((output index, ((consumer, input position), ...)), ...), f_ctrl (control
        # consumers), f_nin (edges a non-Merge waits for), f_merge ((data inputs expected, control
        # inputs)) for a Merge — a loop Merge expects one data input per iteration.
        out_edges = {n: {} for n in nodes}
        ctrl_out = {n: [] for n in nodes}
        merge_data, merge_ctrl, loop_merge = dict.fromkeys(nodes, 0), dict.fromkeys(nodes, 0), set()
        for n in nodes:
            n.role = _ROLES.get(n.op.type, R_OP)
            n.f_nin = 0
        for prod, k, cons, pos in edges:
            if k < 0:
                ctrl_out[prod].append(cons)
            else:
                out_edges[prod].setdefault(k, []).append((cons, pos))
            if cons.role == R_MERGE:
                if k < 0:
                    merge_ctrl[cons] += 1
                else:
                    merge_data[cons] += 1
                    if prod.role == R_NEXT:
                        loop_merge.add(cons)
            else:
                cons.f_nin += 1
        self.enter_count: dict = {}
        self.enter_attrs = {}
        for n in nodes:
            n.f_out = tuple(sorted(out_edges[n].items()))
            n.f_ctrl = tuple(ctrl_out[n])
            n.f_merge = ((1 if n in loop_merge else merge_data[n]), merge_ctrl[n]) if n.role == R_MERGE else None
            if n.role == R_ENTER:
                name = n.op.get_attr("frame_name")
                self.enter_count[name] = self.enter_count.get(name, 0) + 1
                self.enter_attrs[n] = (name, bool(n.op.get_attr("is_constant")),
                                       max(1, int(n.op.get_attr("parallel_iterations"))))
        # Loops this partition drives itself (the frame spans devices).
        self.loops = dict(loops)
        self.children = {}                       # frame name -> driven child frames
        for name, spec in self.loops.items():
            self.children.setdefault(spec.parent, []).append(name)
        # frame name -> [(recv node, which iterations)]: started when an iteration starts.
        self.anchored = {}
        for n, (f, which) in recv_frames.items():
            if f != ROOT:
                self.anchored.setdefault(f, []).append((n, which))
                n.f_nin += 1
        self.cond_of = dict(cond_recvs)          # node -> frame whose predicate it yields
        for n in nodes:
            if n.role == R_LOOPCOND:
                self.cond_of[n] = None           # the frame of whatever iteration runs it
        self.sources = [n for n in nodes if n.f_nin == 0 and n.role != R_MERGE]


class _Frame:
    __slots__ = ("name", "key", "parent", "iters", "pending_enters", "invariants", "deferred", "dead",
                 "par", "active", "driven")

    def __init__(self, name, key, parent, pending_enters, par, driven):
        self.name, self.key, self.parent = name, key, parent
        self.iters: dict = {}
        self.pending_enters = pending_enters
        self.invariants: list = []   # (enter node, value) delivered to every iteration
        self.deferred: dict = {}     # iteration -> [(node, outputs)] waiting for the parallel window
        self.dead = False
        self.par = par
        self.active = 0
        self.driven = driven


class _Iter:
    __slots__ = ("frame", "i", "vals", "pending", "dead", "merges", "ops", "frames", "children", "tag")

    def __init__(self, frame, i, vals):
        self.frame, self.i, self.vals = frame, i, vals
        self.pending: dict = {}
        self.dead: set = set()
        self.merges: dict = {}   # merge node -> [fired, dead data inputs, control inputs seen, live input]
        self.ops = 0             # activations ready or running in this iteration
        self.frames = 0          # child frame instances started here and not yet done
        self.children: dict = {}
        self.tag = (frame.key, i)


class FrameState(StepState):
    """Run-time state of one step of a partition with control flow (the flat plans' is
    executor._DynamicState; both are started with ``start`` and awaited through ``done``)."""

    def __init__(self, part, vals, step, pool, timeout=None):
        super().__init__(part, vals, step, pool, threading.RLock())
        # Loops run inline for as long as they iterate, so the step's deadline is checked
        # here too, not only by the thread that waits in finish().
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout
        self._ticks = 0
        self.info: FrameInfo = part.frame_info
        self.root_frame = _Frame(ROOT, 0, None, 0, 1, False)
        self.root = _Iter(self.root_frame, 0, vals)
        self.uses = dict(self.info.root_uses)  # nodes left to finish per freeable root slot
        self.root_frame.iters[0] = self.root
        self.root_frame.active = 1
        # After a failure the step ends as soon as nothing runs any more: executor loops
        # running and asynchronous nodes (Recvs, async kernels) still waiting. Activations
        # that never come (an iteration of a loop spanning tasks whose values were lost with
        # the failure) are not waited for.
        self._loops = 0
        self._waiting = 0

    # --- bookkeeping (called with self.lock held) -------------------------------------------
    def _ready(self, n, it, dead, out):
        it.ops += 1
        out.append((n, it, dead))

    def _activate(self, c, it, dead, pos, out):
        merge = c.f_merge
        if merge is not None:
            st = it.merges.get(c)
            if st is None:
                st = it.merges[c] = [False, 0, 0, None]
            if st[0]:
                return
            if pos < 0:
                st[2] += 1
            elif dead:
                st[1] += 1
            elif st[3] is None:
                st[3] = pos
            expected, n_ctrl = merge
            if st[2] < n_ctrl:
                return
            if st[3] is not None:
                st[0] = True
                it.ops += 1
                out.append((c, it, False))
            elif st[1] >= expected:
                st[0] = True
                it.ops += 1
                out.append((c, it, True))
            return
        if dead:
            it.dead.add(c)
        pending = it.pending
        p = pending.get(c)
        if p is None:
            if c.f_nin == 1:  # the common case: its only input just arrived
                it.ops += 1
                out.append((c, it, dead))
                return
            pending[c] = c.f_nin - 1
            return
        if p == 1:
            del pending[c]
            it.ops += 1
            out.append((c, it, c in it.dead))
        else:
            pending[c] = p - 1

    def _deliver(self, n, it, outputs, node_dead, out):
        """Store ``n``'s outputs in iteration ``it`` and activate their consumers there."""
        vals = it.vals
        activate = self._activate
        if node_dead:
            for s in n.outs:
                vals[s] = DEAD
            for _, cons in n.f_out:
                for c, pos in cons:
                    activate(c, it, True, pos, out)
        else:
            for k, s in enumerate(n.outs):
                vals[s] = outputs[k]
            for k, cons in n.f_out:
                d = outputs[k] is DEAD
                for c, pos in cons:
                    activate(c, it, d, pos, out)
        for c in n.f_ctrl:
            activate(c, it, node_dead, -1, out)

    def _new_frame(self, parent_it, name, par, out):
        info = self.info
        spec = info.loops.get(name)
        if spec is not None:
            par = spec.parallel_iterations
        f = _Frame(name, f"{parent_it.frame.key}/{parent_it.i}/{name}", parent_it,
                   info.enter_count.get(name, 0), par, spec is not None)
        parent_it.children[name] = f
        parent_it.frames += 1
        self._new_iter(f, 0, out)
        return f

    def _child(self, parent_it, name, par, out):
        f = parent_it.children.get(name)
        return f if f is not None else self._new_frame(parent_it, name, par, out)

    def _new_iter(self, f, i, out):
        it = _Iter(f, i, self.part.template.copy())
        f.iters[i] = it
        f.active += 1
        for enter, value in f.invariants:
            self._deliver(enter, it, value, value is None, out)
        for r, which in self.info.anchored.get(f.name, ()):
            if which == "all" or (which == "first") == (i == 0):
                self._activate(r, it, False, -1, out)
        for child in self.info.children.get(f.name, ()):
            self._child(it, child, 1, out)
        return it

    def _to_iteration(self, f, i, n, outputs, out):
        """Deliver a NextIteration (``n``, outputs) — or just a start (n None) — to iteration i."""
        it = f.iters.get(i)
        if it is None:
            if i in f.deferred or f.active >= f.par:
                lst = f.deferred.setdefault(i, [])
                if n is not None:
                    lst.append((n, outputs))
                return
            it = self._new_iter(f, i, out)
        if n is not None:
            self._deliver(n, it, outputs, False, out)

    def _route(self, n, it, outputs, node_dead, out):
        """Where ``n``'s outputs go: its own iteration, a child frame, the parent, or i+1."""
        role = n.role
        if role == R_OP:  # most nodes: their own iteration
            self._deliver(n, it, outputs, node_dead, out)
            return
        if role == R_ENTER:
            name, const, par = self.info.enter_attrs[n]
            f = self._child(it, name, par, out)
            if const:
                value = None if node_dead else outputs
                f.invariants.append((n, value))
                for child_it in list(f.iters.values()):
                    self._deliver(n, child_it, value, node_dead, out)
            else:
                self._deliver(n, f.iters[0] if 0 in f.iters else self._first_iter(f, out), outputs, node_dead, out)
            f.pending_enters -= 1
            if 0 in f.iters:
                self._check(f.iters[0], out)
            return
        if role == R_EXIT:
            if node_dead and not it.frame.dead:
                return  # the loop went on; only the last iteration's Exit is live
            self._deliver(n, it.frame.parent, outputs, node_dead, out)
            return
        if role == R_NEXT:
            if not node_dead:
                self._to_iteration(it.frame, it.i + 1, n, outputs, out)
            return
        self._deliver(n, it, outputs, node_dead, out)
        if n in self.info.cond_of:
            f = it.frame
            if node_dead:
                f.dead = True
            elif f.driven and self._truth(outputs[0]):
                self._to_iteration(f, it.i + 1, None, None, out)

    def _truth(self, v) -> bool:
        """A loop predicate's value, which may be a device tensor."""
        to_host = self.part._to_host
        return bool(np.asarray(v if to_host is None else to_host(v)))

    def _first_iter(self, f, out):
        # Iteration 0 was already done and dropped: only possible for a malformed loop.
        raise errors.InternalError(f"frame '{f.name}' received an Enter value after its first iteration ended")

    def _check(self, it, out):
        """Retire ``it`` (and what that unblocks) if it is done."""
        while it is not None:
            f = it.frame
            if it.ops or it.frames:
                return
            if it.i == 0:
                if f.pending_enters > 0:
                    return
            elif it.i - 1 in f.iters:
                return
            if f.parent is None:
                # The step is over. The root frame and its iteration refer to each other: left
                # so, that cycle kept every value of the step (200 MB in the LSTM benchmark)
                # alive until the garbage collector next ran, well into the next step.
                f.iters.clear()
                self.done.set()
                return
            del f.iters[it.i]
            f.active -= 1
            if f.deferred:
                j = min(f.deferred)
                if f.active < f.par:
                    pending = f.deferred.pop(j)
                    nxt = self._new_iter(f, j, out)
                    for node, outputs in pending:
                        self._deliver(node, nxt, outputs, False, out)
            nxt = f.iters.get(it.i + 1)
            if nxt is not None:
                it = nxt
                continue
            if f.iters or f.deferred:
                return
            parent = f.parent
            del parent.children[f.name]
            parent.frames -= 1
            it = parent

    # --- running ------------------------------------------------------------------------------
    def pending_names(self):
        with self.lock:
            names = []
            self._collect(self.root, names)
            return names[:5]

    def _collect(self, it, names):
        names.extend(n.op.name for n in it.pending)
        for f in it.children.values():
            for child in f.iters.values():
                self._collect(child, names)

    def start(self):
        out = []
        with self.lock:
            for n in self.info.sources:
                self._ready(n, self.root, False, out)
            for child in self.info.children.get(ROOT, ()):
                self._child(self.root, child, 1, out)
            if not out:
                self._check(self.root, out)
        self._dispatch(out, [])

    def _dispatch(self, ready, queue):
        part = self.part
        for item in ready:
            if item[0].expensive and part.parallelizable and self.error is None and not item[2]:
                self.pool.submit(self._run_loop, [item])
            else:
                queue.append(item)
        if queue and not getattr(in_loop, "active", False):
            self._run_loop(queue)

    def _queue_ready(self, ready, queue):
        """Ready activations go to ``queue`` (run by the caller's loop), expensive ones to the pool."""
        if not self.part.parallelizable:
            queue.extend(ready)
            return
        for item in ready:
            if item[0].expensive and self.error is None and not item[2]:
                self.pool.submit(self._run_loop, deque([item]))
            else:
                queue.append(item)

    def _run_loop(self, queue):
        with self.lock:
            self._loops += 1
        try:
            self._run_queue(queue)
        finally:
            with self.lock:
                self._loops -= 1
                self._end_if_failed()

    def _end_if_failed(self):
        """(lock held) A failed step is over once no loop runs and no async node waits."""
        if self.error is not None and not self._loops and not self._waiting:
            self.done.set()

    def _run_queue(self, queue):
        outer = enter_loop(self, queue)
        quiet = quiet_floats()  # once per loop, not per kernel
        try:
            if not isinstance(queue, deque):
                queue = deque(queue)
                in_loop.queue = queue
            pop = queue.popleft
            run = self._run if self.stats is None else self._run_traced  # chosen once per loop
            while queue:
                n, it, dead = pop()
                if self.deadline is not None:
                    self._ticks += 1
                    if self._ticks & 255 == 0 and time.monotonic() > self.deadline and self.error is None:
                        self._fail(errors.DeadlineExceededError(
                            f"step timed out after {self.timeout:.3f}s on {self.part.device.name} "
                            f"(in frame '{it.frame.name}', iteration {it.i})"), n)
                if self.error is not None or self.step.cancelled:
                    dead = True  # drain: nothing more runs, every activation still finishes
                elif dead and n.role == R_TRIGGER:
                    dead = False  # a ControlTrigger runs even where its inputs are dead
                if dead:
                    if n.role == R_SEND and self.error is None:
                        try:
                            self._send(n, it, DEAD)
                        except Exception as e:  # noqa: BLE001
                            self._fail(e, n)
                    self._finish(n, it, None, True, queue)
                    continue
                try:
                    outputs = run(n, it)
                except Exception as e:  # noqa: BLE001 - reported once the step drains
                    self._fail(e, n)
                    self._finish(n, it, None, True, queue)
                    continue
                if outputs is _ASYNC:
                    continue  # counted in self._waiting until its continuation runs
                self._finish(n, it, outputs, False, queue)
        finally:
            restore_floats(quiet)
            leave_loop(outer)

    def _run(self, n, it):
        vals = it.vals
        for fn, src, slot in n.pre:
            vals[slot] = fn() if src < 0 else fn(vals[src])
        role = n.role
        if role == R_OP:
            args = [vals[i] for i in n.ins]
            if n.kd.is_async:
                n.fn(self.step, self._make_done(n, it), *args)
                return _ASYNC
            res = n.fn(self.step, *args) if n.kd.takes_context else n.fn(*args)
            outs = n.outs
            if len(outs) == 1:
                if n.unwrap and isinstance(res, tuple | list):
                    res = res[0]
                res = (res,)
            elif outs and (res is None or len(res) != len(outs)):
                raise errors.InternalError(
                    f"kernel for {n.op.type} returned {0 if res is None else len(res)} outputs, expected {len(outs)}")
            if n.track:
                for v in res or ():
                    if getattr(v, "nbytes", 0) >= 65536:
                        self.part.allocator.track(v)
            return res or ()
        if role == R_SWITCH:
            v = vals[n.ins[0]]
            return (DEAD, v) if bool(np.asarray(vals[n.ins[1]])) else (v, DEAD)
        if role == R_MERGE:
            k = it.merges[n][3]
            return vals[n.ins[k]], np.int32(k)
        if role in (R_ENTER, R_EXIT, R_NEXT, R_LOOPCOND):
            return (vals[n.ins[0]],)
        if role == R_LOOP:
            return n.loop.execute(self, vals, [vals[i] for i in n.ins])
        if role == R_TRIGGER:
            return ()
        if role == R_SEND:
            self._send(n, it, vals[n.ins[0]] if n.ins else None)
            return ()
        if role == R_RECV:
            self._recv(n, it)
            return _ASYNC
        raise errors.InternalError(f"unknown node role for {n.op.name}")

    def _run_traced(self, n, it):
        """``_run``, recording ``n`` into the step's stats with its frame and iteration (an
        async node, a Recv included, is recorded by its continuation: ``_make_done``)."""
        clock = time.perf_counter_ns
        t0 = clock()
        res = self._run(n, it)
        if res is _ASYNC:
            return res
        t1 = clock()
        stats, op, part = self.stats, n.op, self.part
        transfer = None
        if n.role == R_SEND:
            transfer = transfer_record(n.transfer, self.step, it.vals[n.ins[0]] if n.ins else None, it.tag)
        stats.add(part.device.name, op.name, op.type, t0, t0, t1, clock(), stats.thread(), res, part.allocator,
                  transfer, it.frame.name, it.i)
        return res

    def _send(self, n, it, value):
        src, dst, what = n.transfer
        self.step.rendezvous.send(make_key(src.name, dst.name, what, it.tag), value)

    def _recv(self, n, it):
        src, dst, what = n.transfer
        same_memory = src.host_tensors and dst.host_tensors
        done = self._make_done(n, it)

        def arrived(value, error):
            if error is not None:
                done(None, error)
                return
            try:
                v = value if same_memory or value is None or value is DEAD else dst.copy_from(value, src)
            except Exception as e:  # noqa: BLE001
                done(None, e)
                return
            done((v,))
        self.step.rendezvous.recv_async(make_key(src.name, dst.name, what, it.tag), arrived)

    def _make_done(self, n, it):
        called = threading.Lock()
        with self.lock:
            self._waiting += 1
        is_recv = n.role == R_RECV
        stats = self.stats
        if stats is not None:  # traced: when and by which thread the node was started
            tid = stats.thread()
            t0 = time.perf_counter_ns()

        def done(outputs=None, error=None):
            if not called.acquire(blocking=False):
                return  # a second call of the continuation is ignored
            with self.lock:
                self._waiting -= 1
            dead = False
            if error is not None:
                self._fail(error, n)
                outputs, dead = None, True
            elif is_recv:
                dead = outputs[0] is DEAD
            elif len(n.outs) == 1:
                outputs = (outputs[0] if n.unwrap and isinstance(outputs, tuple | list) else outputs,)
            if stats is not None and error is None:
                t1 = time.perf_counter_ns()
                transfer = transfer_record(n.transfer, self.step, outputs[0], it.tag) if is_recv else None
                stats.add(self.part.device.name, n.op.name, n.op.type, t0, t0, t1, t1, tid, outputs or (),
                          self.part.allocator, transfer, it.frame.name, it.i)
            if getattr(in_loop, "state", None) is self:
                # Completed during the kernel call, in our own loop: go on in this thread.
                self._finish(n, it, outputs, dead, in_loop.queue)
                return
            queue = deque()
            self._finish(n, it, outputs, dead, queue)
            if queue:
                if getattr(in_loop, "active", False):
                    self.pool.submit(self._run_loop, queue)
                else:
                    self._run_loop(queue)
            else:
                with self.lock:
                    self._end_if_failed()
        return done

    def _finish(self, n, it, outputs, dead, queue):
        ready = []
        with self.lock:
            self._route(n, it, outputs, dead, ready)
            if it is self.root and n.frees:
                # Big values and variable reads go as soon as nothing in the step needs them
                # (memory; an update later in the step then writes in place: kernels/state.py).
                uses = self.uses
                for s in n.frees:
                    left = uses[s] - 1
                    uses[s] = left
                    if not left:
                        it.vals[s] = None
            it.ops -= 1
            self._check(it, ready)
        if ready:
            self._queue_ready(ready, queue)


_ASYNC = object()
