"""The worker service (whitepaper 3.2.2, Figure 3): runs the partitions a master registers.

A worker owns this process's devices (named ``/job:<job>/replica:0/task:<i>/device:...``)
and their state: its default container lives as long as the process, so variables on a
``ps`` task outlive any one client (whitepaper 4.7). The master registers each plan's
partitions for this task once (``RegisterGraph``) and then asks for one ``RunGraph`` per
step. Values cross devices through the step's ``WorkerRendezvous``: a Send stores its value
here; a Recv whose producer is on this task waits here, and one whose producer is on another
task **pulls** it from that task with ``RecvTensor`` — workers exchange tensors directly,
never through the master.

Everything arriving here crossed a process boundary: graphs are validated against the op
registry (a worker runs only registered ops), messages are decoded by ``wire`` (no pickle)
and each request's header is checked against its method's schema (``wire.REQUEST_FIELDS``:
an unknown or ill-typed field is an error, never a default), and a bad request is answered
with an error while the worker keeps serving. A failed step is aborted here and on every
other worker (the master broadcasts ``AbortStep``), so no step is left waiting for a value
that will not come; a step aborted before its RunGraph arrives runs nothing.

Every table the worker keeps for its clients — steps, steps that ended, registered graphs —
is bounded by ``Limits``: unused entries give way, and when none can, the request is refused
with ``ResourceExhaustedError`` (a crashing or hostile client cannot grow it without bound).

A traced step (``"trace": true`` in its RunGraph) records this task's partitions into a
``StepStatsCollector`` and returns them with the response (``"step_stats"``, on this
process's wall clock) together with when the request was taken up and the reply made
(``"clock"``), from which the master estimates this task's clock offset (as it does from
``Health``, which reports ``"clock_ns"``).
"""

from __future__ import annotations

import collections
import functools
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorweave import plugins
from tensorweave.distributed import wire
from tensorweave.distributed.collective import WorkerCollectives
from tensorweave.distributed.limits import RECV_TIMEOUT, Limits
from tensorweave.distributed.transport import ServiceDispatcher, current_call, guarded
from tensorweave.framework import dtypes, errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.graph import Graph
from tensorweave.framework.importer import import_graph_def
from tensorweave.ops import transfer_ops
from tensorweave.passes.partition import LoopSpec, Transfer
from tensorweave.runtime.config import ConfigProto
from tensorweave.runtime.containers import SessionResources
from tensorweave.runtime.device import Allocator, Device, create_local_devices
from tensorweave.runtime.executor import CompiledPartition
from tensorweave.runtime.file_access import FileAccess
from tensorweave.runtime.rendezvous import LocalRendezvous, aborted
from tensorweave.runtime.step import DEAD, StepContext, StepStatsCollector


def task_prefix(job: str, task: int) -> str:
    return f"/job:{job}/replica:0/task:{task}"


def task_of_device(name: str) -> tuple[str, int]:
    spec = DeviceSpec.from_string(name)
    return spec.job, int(spec.task or 0)


class RemoteDevice(Device):
    """A device of another task, as this process sees it: a name, a type, and host values.

    Values from another process always arrive as host ndarrays, so a local device copies
    them in with ``to_device``; the master also uses these to place nodes.
    """

    host_tensors = True

    def __init__(self, name: str, device_type: str, memory_limit=None, description: str = ""):
        super().__init__(name, Allocator(name, memory_limit), description, memory_limit)
        self.device_type = device_type

    def to_host(self, value):
        return value

    def to_device(self, array):
        return array

    def copy_from(self, value, src):
        return src.to_host(value)


class WorkerRendezvous(LocalRendezvous):
    """One step's rendezvous on one worker: this process's table (Sends, and Recvs whose
    producer is on this task), plus pulls of values produced on other tasks (RecvTensor)."""

    def __init__(self, worker: Worker, step_id: int):
        super().__init__(step_id)
        self.worker = worker
        self.last_used = time.monotonic()
        self.active = 0  # RunGraph and RecvTensor calls of this step in progress here
        self.aborted = False  # aborted before it started here: its RunGraph runs nothing
        # A step ends here by itself (no CleanupStep) once its RunGraph succeeded and the
        # values other tasks pull were pulled (_Registered.remote_sends; None: wait for it).
        self.ran = False
        self.pulls_expected: int | None = None
        self.pulls_served = 0

    @property
    def collective_executor(self):
        """The task's collectives, for the collective kernels of this step."""
        return self.worker.collectives

    def recv_async(self, key: str, callback) -> None:
        src = key.split(";", 1)[0]
        if self.worker.is_local(src):
            super().recv_async(key, callback)
        else:
            self.worker.pull(self, key, src, callback)

    def withdraw(self, key: str, callback) -> None:
        """Take back a receive of ``key`` still waiting (its caller went away or gave up)."""
        with self._lock:
            waiting = self._waiters.get(key)
            if waiting is not None and callback in waiting:
                waiting.remove(callback)
                if not waiting:
                    del self._waiters[key]

    def transport(self, src_device: str, dst_device: str) -> str:
        w = self.worker
        if w.is_local(src_device):
            # A value for another task is pulled by it: its Recv names the transport.
            return "local" if w.is_local(dst_device) else "remote"
        return w.transport_name(*task_of_device(src_device))


class _Once:
    """A callback that runs only the first time it is called (a pull that an abort ended
    may still answer later)."""

    __slots__ = ("_fn", "_lock", "_done")

    def __init__(self, fn):
        self._fn, self._lock, self._done = fn, threading.Lock(), False

    def __call__(self, value, error):
        with self._lock:
            if self._done:
                return
            self._done = True
        self._fn(value, error)


class _Registered:
    """One plan's partitions on this worker."""

    def __init__(self, partitions, feed_names, fetch_names, feed_index, fetch_index, nbytes=0, remote_sends=None):
        self.partitions = partitions      # CompiledPartitions
        self.feed_names = feed_names      # names the master sends values for, in order
        self.fetch_names = fetch_names    # names returned, in order
        self.feed_index = feed_index      # per partition: indices into feed_names
        self.fetch_index = fetch_index    # per fetch: (partition index, index in its results)
        self.nbytes = nbytes              # the size of its RegisterGraph message
        self.last_used = time.monotonic()
        self.running = 0                  # RunGraph calls in progress
        # Values other tasks pull in each step (Sends to their devices), when that number is
        # the same in every step (no Send in a loop): a step of such a graph ends on this
        # task by itself once its RunGraph is done and they were pulled (no CleanupStep needed).
        self.remote_sends = remote_sends


class Worker:
    """The worker service of one task. ``peers``: job -> [address]; ``channel_for(job, task)``
    returns a transport channel to another task (used to pull tensors); ``transport_for(job)``
    names the transport those channels use (traced steps report it)."""

    def __init__(self, job: str, task: int, channel_for=None, config=None, devices=None,
                 max_message_bytes: int | None = None, drop_channel=None, transport_for=None,
                 limits: Limits | None = None, file_access: FileAccess | None = None):

        self.job, self.task = job, int(task)
        self.prefix = task_prefix(job, self.task)
        self.devices = devices or create_local_devices(config or ConfigProto(), name_prefix=self.prefix)
        self._by_name = {d.name: d for d in self.devices}
        self.resources = SessionResources(f"worker {self.prefix}")
        # Clients' ops use files only under the allowed directories (runtime/file_access.py).
        self.resources.file_access = file_access or FileAccess.working_directory()
        self.kernel_cache: dict = {}
        self.channel_for = channel_for
        self.drop_channel = drop_channel  # (job, task, channel): forget a channel that failed
        self.transport_for = transport_for  # job -> the name of the transport pulls from it use
        self.limits = limits or Limits()
        # Registered graphs, least recently used first.
        self._graphs: collections.OrderedDict[str, _Registered] = collections.OrderedDict()
        self._graph_bytes = 0
        self._graph_ids = itertools.count(1)
        self._steps: dict[int, WorkerRendezvous] = {}
        # Steps cleaned up or aborted here, most recent last, with the message a late request
        # of theirs fails with: a RunGraph or RecvTensor that arrives after its step ended
        # (requests of one step may overtake each other) fails at once instead of waiting.
        self._ended: collections.OrderedDict[int, str] = collections.OrderedDict()
        self._next_sweep = time.monotonic() + self.limits.step_idle_seconds
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(64, thread_name_prefix=f"tw-worker-{job}{task}")
        self._pull_pool = ThreadPoolExecutor(64, thread_name_prefix=f"tw-pull-{job}{task}")
        self.started = time.time()
        self.running_steps = 0   # RunGraph calls in progress (Health reports it)
        self.waiting_recvs = 0   # RecvTensor calls waiting for their value (Health reports it)
        # Requests larger than this are refused here too, whatever the transport enforces.
        self.max_message_bytes = max_message_bytes or (1 << 31)
        self.collectives = WorkerCollectives(self)  # collective ops' groups and values (distributed/collective.py)

    # --- helpers ----------------------------------------------------------------------------
    def is_local(self, device_name: str) -> bool:
        return device_name in self._by_name

    def device(self, name: str):
        d = self._by_name.get(name)
        if d is None:
            return RemoteDevice(name, DeviceSpec.from_string(name).device_type or "CPU")
        return d

    def rendezvous(self, step_id: int, use: int = 0) -> WorkerRendezvous:
        """Step ``step_id``'s rendezvous, made on first use; ``use=1`` counts a call that uses
        it until the matching ``release``. A step that already ended or was aborted here gets a
        rendezvous born aborted that is not kept (a late request fails at once and leaves
        nothing behind). Past ``limits.max_steps`` steps, idle ones are forgotten to make room,
        or ``ResourceExhaustedError``."""
        forgotten = []
        try:
            with self._lock:
                rv = self._steps.get(step_id)
                if rv is None:
                    ended = self._ended.get(step_id)
                    if ended is not None:
                        rv = WorkerRendezvous(self, step_id)
                        rv.error = errors.AbortedError(ended or f"step {step_id} already ended on {self.prefix}")
                        rv.aborted = bool(ended)
                        rv.active = use
                        return rv
                    if len(self._steps) >= self.limits.max_steps:
                        forgotten = self._forget_idle_steps(time.monotonic())
                        if len(self._steps) >= self.limits.max_steps:
                            raise errors.ResourceExhaustedError(
                                f"{self.prefix} has {len(self._steps)} steps in progress, the most it keeps "
                                f"(Limits.max_steps); steps unused for {self.limits.step_idle_seconds:g} s give "
                                "way to new ones")
                    rv = self._steps[step_id] = WorkerRendezvous(self, step_id)
                rv.last_used = time.monotonic()
                rv.active += use
                return rv
        finally:
            _abort_all(forgotten)  # outside the lock: an abort runs the step's callbacks

    def release(self, rv: WorkerRendezvous) -> None:
        with self._lock:
            rv.active -= 1
            rv.last_used = time.monotonic()

    def _end_step(self, step_id: int, message: str = "") -> None:
        """Remember ``step_id`` as ended (bounded; the oldest are forgotten), with the message
        of its abort if it was aborted (a CleanupStep after an AbortStep keeps it). Lock held."""
        self._ended[step_id] = message or self._ended.get(step_id, "")
        self._ended.move_to_end(step_id)
        while len(self._ended) > self.limits.max_ended_steps:
            self._ended.popitem(last=False)

    def _forget_idle_steps(self, now: float) -> list:
        """Forget steps nothing has used for ``limits.step_idle_seconds`` (a master that died
        mid-step never sends CleanupStep); returns (rendezvous, error) pairs for the caller to
        abort once it has let go of the lock. Lock held."""
        idle = self.limits.step_idle_seconds
        out = []
        for sid, rv in list(self._steps.items()):
            if rv.active == 0 and now - rv.last_used >= idle:
                message = f"step {sid} was forgotten on {self.prefix} after {idle:g} s unused"
                del self._steps[sid]
                self._end_step(sid, message)
                out.append((rv, errors.AbortedError(message)))
        return out

    def transport_name(self, job: str, task: int) -> str:
        """The name of the transport this task pulls tensors from ``/job:job/task:task`` with
        (traced steps report it), as the server that made this worker configured it."""
        return "unknown" if self.transport_for is None else self.transport_for(job)

    def pull(self, rv: WorkerRendezvous, key: str, src_device: str, callback) -> None:
        """Fetch ``key`` of step ``rv.step_id`` from the task that owns ``src_device``."""
        job, task = task_of_device(src_device)
        callback = _Once(callback)
        if not rv.watch(callback):  # an abort of the step ends this pull's wait too
            callback(None, aborted(rv.error))
            return

        def fetch():
            try:
                if self.channel_for is None:
                    raise errors.UnavailableError(f"worker {self.prefix} has no channel to /job:{job}/task:{task}")
                payload = wire.encode_message({"step_id": rv.step_id, "key": key})
                channel = self.channel_for(job, task)
                try:
                    value = channel.fetch("RecvTensor", payload, RECV_TIMEOUT)
                except errors.UnavailableError:
                    if self.drop_channel is None or rv.error is not None:
                        raise
                    # A channel that once failed to reach a restarting peer may still be in
                    # its transport's reconnect back-off: try once more on a fresh one (a
                    # peer that is really gone refuses that at once too).
                    self.drop_channel(job, task, channel)
                    value = self.channel_for(job, task).fetch("RecvTensor", payload, RECV_TIMEOUT)
            except errors.OpError as e:
                rv.unwatch(callback)
                callback(None, e)
                return
            except Exception as e:  # noqa: BLE001 - a transport's own failure
                rv.unwatch(callback)
                callback(None, errors.UnavailableError(f"RecvTensor {key} from /job:{job}/task:{task}: {e}"))
                return
            rv.unwatch(callback)
            callback(value, None)
        self._pull_pool.submit(fetch)

    # --- the service ------------------------------------------------------------------------
    def dispatcher(self, token=None):
        handlers = {
            "GetStatus": self.get_status, "RegisterGraph": self.register_graph,
            "DeregisterGraph": self.deregister_graph, "RunGraph": self.run_graph,
            "AbortStep": self.abort_step, "CleanupStep": self.cleanup_step,
            "ResetContainers": self.reset_containers, "Health": self.health,
            "CompleteGroup": self.collectives.complete_group, "CollectivePut": self.collectives.collective_put,
        }
        # RecvTensor is deferred: a transport that can (grpc, ucx) answers it when the value
        # is sent here, holding no thread while it waits; the blocking form is for the others.
        return ServiceDispatcher({k: guarded(v) for k, v in handlers.items()},
                                 {"RecvTensor": self.recv_tensor}, token=token,
                                 deferred={"RecvTensor": self.recv_tensor_deferred}, deferred_timeout=RECV_TIMEOUT)

    def _request(self, method: str, payload, copy: bool = False):
        return wire.decode_request(method, payload, self.max_message_bytes, copy=copy)

    def get_status(self, payload: bytes) -> bytes:
        self._request("GetStatus", payload)
        return wire.encode_response({"job": self.job, "task": self.task, "devices": [
            {"name": d.name, "device_type": d.device_type, "memory_limit": d.memory_limit,
             "description": getattr(d, "description", "")} for d in self.devices]})

    def health(self, payload: bytes) -> bytes:
        self._request("Health", payload)
        with self._lock:
            running, steps, graphs = self.running_steps, len(self._steps), len(self._graphs)
            waiting = self.waiting_recvs
        # clock_ns: this process's wall clock, for the master's clock-offset estimate.
        return wire.encode_response({"job": self.job, "task": self.task, "started": self.started,
                                     "running_steps": running, "steps": steps, "graphs": graphs,
                                     "waiting_recvs": waiting,
                                     "clock_ns": time.time_ns()})

    def reset_containers(self, payload: bytes) -> bytes:
        header, _ = self._request("ResetContainers", payload)
        if ("containers" in header) == ("all" in header):
            raise errors.InvalidArgumentError(
                "ResetContainers: give exactly one of 'containers' (a list of container names) or "
                f"'all': true; got {sorted(header) or 'neither'}")
        self.resources.reset(None if "all" in header else header["containers"])
        self.kernel_cache.clear()
        return wire.encode_response({})

    def register_graph(self, payload: bytes) -> bytes:
        # The tensors are the graphs' constants (wire.encode_graph_def): owned copies, as
        # the graphs outlive this message.
        header, constants = self._request("RegisterGraph", payload, copy=True)
        nbytes = memoryview(payload).nbytes
        with self._lock:  # a full table refuses before any work is done
            self._make_room_for_graph(nbytes, time.monotonic(), reserve=False)
        parts = header["partitions"]
        feed_names = header.get("feeds", [])
        fetch_names = header.get("fetches", [])
        feed_types = header.get("feed_types", {})
        reg = plugins.registry()
        compiled, feed_index, produced, remote_sends = [], [], {}, 0
        for i, p in enumerate(parts):
            device = self._by_name.get(p["device"])
            if device is None:
                raise errors.InvalidArgumentError(
                    f"RegisterGraph: device {p['device'][:200]!r} is not on this task ({self.prefix}); "
                    f"it has {sorted(self._by_name)}")
            loops = _loops(p.get("loops", {}))
            cp, feeds, fetches, sends = self._compile(device, p["graph_def"], constants, feed_names, feed_types,
                                                      fetch_names, loops, reg)
            remote_sends = None if loops or remote_sends is None else \
                remote_sends + sum(1 for tr in sends if not self.is_local(tr.dst.name))
            compiled.append(cp)
            feed_index.append([feed_names.index(f) for f in feeds])
            for j, f in enumerate(fetches):
                produced[f] = (i, j)
        missing = [f for f in fetch_names if f not in produced]
        if missing:
            raise errors.InvalidArgumentError(f"RegisterGraph: no partition produces fetches {missing}")
        handle = f"{self.prefix}/graph-{next(self._graph_ids)}"
        entry = _Registered(compiled, feed_names, fetch_names, feed_index, [produced[f] for f in fetch_names], nbytes,
                            remote_sends)
        with self._lock:
            self._make_room_for_graph(nbytes, time.monotonic())
            self._graphs[handle] = entry
            self._graph_bytes += nbytes
        return wire.encode_response({"handle": handle, "started": self.started})

    def _make_room_for_graph(self, nbytes: int, now: float, reserve: bool = True) -> None:
        """Make room for one more registered graph of ``nbytes``: graphs not run for
        ``limits.graph_idle_seconds`` (least recently used first) give way; when that is not
        enough, ``ResourceExhaustedError``. ``reserve=False`` only checks. Lock held."""
        lim = self.limits
        idle = lim.graph_idle_seconds

        def full():
            return len(self._graphs) + 1 > lim.max_graphs or self._graph_bytes + nbytes > lim.max_graph_bytes
        if nbytes > lim.max_graph_bytes:
            raise errors.ResourceExhaustedError(
                f"RegisterGraph: a graph of {nbytes} bytes is more than {self.prefix} keeps for all graphs "
                f"together ({lim.max_graph_bytes} bytes, Limits.max_graph_bytes)")
        for handle, g in list(self._graphs.items()):  # least recently used first
            if not full():
                break
            if g.running == 0 and now - g.last_used >= idle:
                if reserve:
                    del self._graphs[handle]
                    self._graph_bytes -= g.nbytes
                else:
                    return  # a graph can give way: the real insert will evict it
        if full():
            raise errors.ResourceExhaustedError(
                f"RegisterGraph: {self.prefix} holds {len(self._graphs)} registered graphs "
                f"({self._graph_bytes} bytes), the most it keeps (Limits.max_graphs={lim.max_graphs}, "
                f"max_graph_bytes={lim.max_graph_bytes}); DeregisterGraph graphs no longer used "
                f"(a session does when it closes); graphs not run for {idle:g} s give way to new ones")

    def _compile(self, device, gd, constants, feed_names, feed_types, fetch_names, loops, reg):
        """Rebuild one partition from its GraphDef: its ``_Recv`` nodes become placeholders
        the executor fills from the rendezvous, its ``_Send`` nodes Transfers."""
        # Validated against the op registry (plus the runtime's _Send/_Recv) before anything
        # else reads it: a worker runs only registered ops.
        try:
            checked = wire.decode_graph_def(gd, reg.ops, feeds=feed_names, tensors=constants)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"RegisterGraph: the graph_def for {device.name}: {e.message}") from None
        nodes, recvs, sends = [], [], []
        for n in checked["node"]:
            if n["op"] == transfer_ops.RECV:
                a = transfer_ops.decode_attrs(n["attr"], n["name"])  # wire checked them
                recvs.append((n["name"], a))
                if a.control:
                    nodes.append({"name": n["name"], "op": "NoOp", "input": [], "attr": {}})
                else:
                    nodes.append({"name": n["name"], "op": "Placeholder", "input": [],
                                  "attr": {"dtype": {"type": a.tensor_type.name}, "shape": {"shape": None}}})
            elif n["op"] == transfer_ops.SEND:
                sends.append(n)
            else:
                nodes.append(n)
        present = {n["name"] for n in nodes}
        for f in feed_names:
            src = f.rsplit(":", 1)[0]
            if src not in present and any(src == i.lstrip("^").rsplit(":", 1)[0]
                                          for n in nodes for i in n.get("input", [])):
                dt = feed_types.get(f)
                if not isinstance(dt, str):
                    raise errors.InvalidArgumentError(f"RegisterGraph: no dtype for fed tensor {f!r}")
                nodes.append({"name": src, "op": "Placeholder", "input": [],
                              "attr": {"dtype": {"type": dtypes.as_dtype(dt).name}, "shape": {"shape": None}}})
                present.add(src)
        g = Graph()
        with g.as_default():
            import_graph_def({"node": nodes}, name="")
        by = g.get_operation_by_name
        transfer_nodes = set()
        recv_transfers = []
        for name, a in recvs:
            op = by(name)
            transfer_nodes.add(op)
            recv_transfers.append(Transfer.from_attrs(a, None if a.control else op.outputs[0],
                                                      self.device(a.send_device), device,
                                                      control_op=op if a.control else None))
        send_transfers = []
        for n in sends:
            a = transfer_ops.decode_attrs(n["attr"], n["name"])
            if len(n["input"]) != 1:
                raise errors.InvalidArgumentError(f"RegisterGraph: _Send node {n['name']!r} needs exactly one input")
            inp = n["input"][0]  # wire checked it names a node of this graph
            dst = self.device(a.recv_device)
            if inp.startswith("^"):
                tr = Transfer.from_attrs(a, None, device, dst, control_op=by(inp[1:]))
            else:
                tr = Transfer.from_attrs(a, g.as_graph_element(inp), device, dst)
            send_transfers.append(tr)
        feeds = [f for f in feed_names if f.rsplit(":", 1)[0] in present]
        feed_tensors = [g.as_graph_element(f) for f in feeds]
        feed_ops = {t.op for t in feed_tensors}
        exec_nodes = [op for op in g.get_operations() if op not in transfer_nodes and op not in feed_ops]
        fetches = [f for f in fetch_names if f.rsplit(":", 1)[0] in present]
        cp = CompiledPartition(exec_nodes, feed_tensors, [g.as_graph_element(f) for f in fetches], device,
                               reg.kernels, self.resources, self.kernel_cache, None,
                               recvs=recv_transfers, sends=send_transfers, loops=loops)
        return cp, feeds, fetches, send_transfers

    def deregister_graph(self, payload: bytes) -> bytes:
        header, _ = self._request("DeregisterGraph", payload)
        with self._lock:
            g = self._graphs.pop(header["handle"], None)
            if g is not None:
                self._graph_bytes -= g.nbytes
        return wire.encode_response({})

    def run_graph(self, payload: bytes) -> bytes:
        header, tensors = self._request("RunGraph", payload, copy=True)  # kernels may keep or update them
        handle, step_id = header["handle"], header["step_id"]
        with self._lock:
            g = self._graphs.get(handle)
            if g is not None:
                self._graphs.move_to_end(handle)
                g.running += 1
                g.last_used = time.monotonic()
        if g is None:
            raise errors.NotFoundError(f"RunGraph: no graph {handle[:200]!r} is registered on {self.prefix}")
        try:
            if len(tensors) != len(g.feed_names):
                raise errors.InvalidArgumentError(
                    f"RunGraph: {len(tensors)} feed values for {len(g.feed_names)} feeds {g.feed_names}")
            timeout = header.get("timeout")
            timeout = float(timeout) if timeout else None
            received = time.time_ns() if header.get("trace") is True else None
            with self._lock:
                self.running_steps += 1
            try:
                return self._run_graph(g, step_id, tensors, timeout, received)
            finally:
                with self._lock:
                    self.running_steps -= 1
        finally:
            with self._lock:
                g.running -= 1
                g.last_used = time.monotonic()

    def _run_graph(self, g, step_id, tensors, timeout, received=None) -> bytes:
        """One step of ``g``; ``received`` (when the request was taken up, on the wall clock)
        is given for a traced step, whose stats go back with the fetches."""
        rv = self.rendezvous(step_id, use=1)
        rv.pulls_expected = g.remote_sends
        # A master that dies mid-step sends no AbortStep: when this RunGraph's caller goes away
        # (the transport reports its connection lost), the step is aborted and forgotten here,
        # so nothing of it waits on (a dequeue, a Recv) until Limits.step_idle_seconds.
        call = current_call()
        gone = functools.partial(self._caller_gone, rv)
        if call is not None and not call.on_gone(gone):
            gone()
        ok = False
        try:
            out = self._run_partitions(g, rv, tensors, timeout, received)
            ok = True
            return out
        finally:
            if call is not None:
                call.forget(gone)
            self.release(rv)
            if ok:
                self._progress(rv, ran=True)

    def _progress(self, rv: WorkerRendezvous, ran: bool = False, pulled: int = 0) -> None:
        """Step ``rv`` ran here or had a value pulled: once both are complete (and it did not
        fail), the step ends here as a CleanupStep would end it. The master skips the
        CleanupStep of such steps (the RunGraph answer says ``"ends_here"``): one request per
        task and step fewer on the path every distributed step pays."""
        with self._lock:
            rv.ran = rv.ran or ran
            rv.pulls_served += pulled
            if (rv.ran and rv.pulls_expected is not None and rv.pulls_served >= rv.pulls_expected
                    and rv.error is None and self._steps.get(rv.step_id) is rv):
                del self._steps[rv.step_id]
                self._end_step(rv.step_id)

    def _caller_gone(self, rv: WorkerRendezvous) -> None:
        """The master of step ``rv`` went away mid-step: abort it and forget it, as its
        AbortStep and CleanupStep would have."""
        message = (f"step {rv.step_id} was aborted on {self.prefix}: its master went away "
                   "(the connection of its RunGraph was lost)")
        with self._lock:
            if self._steps.get(rv.step_id) is rv:
                del self._steps[rv.step_id]
            self._end_step(rv.step_id, message)
        rv.abort(errors.AbortedError(message))

    def _run_partitions(self, g, rv, tensors, timeout, received):
        step_id = rv.step_id
        if rv.aborted:
            # Aborted before its RunGraph came here: the master gave up on the step, so none of
            # it runs (no variable update of an abandoned step).
            raise rv.error
        stats = StepStatsCollector() if received is not None else None
        step = StepContext(step_id, rv, None, None, stats)
        states, results, err = [], [None] * len(g.partitions), None
        deadline = None if timeout is None else time.monotonic() + timeout
        ended = threading.Event()  # the step was aborted (here, or by the master)

        def on_abort(_value, _error):
            ended.set()
            # Kernels parked outside the executor (a dequeue from an empty queue) give their
            # wait back, as in a local step that failed: nothing of an aborted step stays
            # parked, to take an element a later step was meant to get.
            step.cancel()
        if not rv.watch(on_abort):
            ended.set()
        try:
            for i, cp in enumerate(g.partitions):
                try:
                    states.append((i, cp, cp.start([tensors[k] for k in g.feed_index[i]], step, self._pool,
                                                   timeout)))
                except Exception as e:  # noqa: BLE001
                    rv.abort(e)
                    err = err or e
            for i, cp, st in states:
                try:
                    if _wait_partition(st, ended, deadline):
                        results[i] = cp.finish(st, None)
                    elif ended.is_set():
                        # Failed elsewhere, and this partition did not wind down within the grace
                        # period (a loop waiting for values that will not come): answer now.
                        err = err or rv.error
                    else:
                        e = errors.DeadlineExceededError(
                            f"step timed out after {timeout:.3f}s on {cp.device.name}; still pending: "
                            f"{st.pending_names()}")
                        step.cancel()
                        rv.abort(e)
                        err = err or e
                except Exception as e:  # noqa: BLE001
                    rv.abort(e)
                    err = err or e
        finally:
            rv.unwatch(on_abort)
        if err is not None:
            root = rv.error if rv.error is not None else err
            raise root if isinstance(root, errors.OpError) else errors.InternalError(str(root))
        out = [np.asarray(results[i][j]) for i, j in g.fetch_index]
        answer = {"fetches": g.fetch_names}
        if g.remote_sends is not None:
            answer["ends_here"] = True  # see _progress
        if stats is None:
            return wire.encode_response(answer, out)
        answer["step_stats"] = wire.encode_step_stats(stats.step_stats())
        # Stamped last: the master's estimate subtracts everything between the two stamps.
        answer["clock"] = {"received_ns": received, "replied_ns": time.time_ns()}
        return wire.encode_response(answer, out)

    def abort_step(self, payload: bytes) -> bytes:
        header, _ = self._request("AbortStep", payload)
        step_id = header["step_id"]
        message = header.get("message") or "aborted by the master"
        with self._lock:
            rv = self._steps.get(step_id)
            if rv is None:
                # An abort may overtake the step's own RunGraph: remembered (bounded), so the
                # step is born aborted if it comes; an abort of a step that never comes costs
                # one entry of that bounded table, nothing more.
                self._end_step(step_id, message)
        if rv is not None:
            rv.abort(errors.AbortedError(message))
        return wire.encode_response({})

    def cleanup_step(self, payload: bytes) -> bytes:
        step_id = self._request("CleanupStep", payload)[0]["step_id"]
        forgotten = []
        with self._lock:
            self._steps.pop(step_id, None)
            self._end_step(step_id)
            now = time.monotonic()
            if now >= self._next_sweep:  # now and then, not on every call: O(steps)
                self._next_sweep = now + min(60.0, self.limits.step_idle_seconds)
                forgotten = self._forget_idle_steps(now)
        _abort_all(forgotten)
        return wire.encode_response({})

    def recv_tensor(self, payload: bytes):
        """Stream method: the value of ``key`` in step ``step_id``, once it is sent here (the
        blocking form of ``recv_tensor_deferred``: this thread waits, ``RECV_TIMEOUT`` at most)."""
        box, ready = [], threading.Event()

        def done(make_chunks):
            box.append(make_chunks)
            ready.set()
        try:
            cancel = self.recv_tensor_deferred(payload, done)
        except errors.OpError as e:
            return iter([wire.encode_error(e)])
        if not ready.wait(RECV_TIMEOUT) and cancel():
            key = wire.decode_request("RecvTensor", payload, self.max_message_bytes)[0]["key"]
            return iter([wire.encode_error(errors.DeadlineExceededError(
                f"rendezvous: {key} was not produced within {RECV_TIMEOUT:.0f}s on {self.prefix}"))])
        ready.wait()  # the value came just as the wait ran out: it stands
        try:
            return box[0]()
        except errors.OpError as e:
            return iter([wire.encode_error(e)])

    def recv_tensor_deferred(self, payload: bytes, done):
        """RecvTensor without a thread waiting: ``done(make_chunks)`` is called once ``key`` of
        step ``step_id`` is sent here (or the step aborts: its error is the only chunk), in the
        sender's thread; ``make_chunks()`` gives the stream (copying a device value to the
        host). Returns ``cancel()``, which withdraws the wait when the caller went away or gave
        up (True), unless the value came first (False). A malformed request raises."""
        header, _ = self._request("RecvTensor", payload)
        step_id, key = header["step_id"], header["key"]
        if key.count(";") != 3:
            raise errors.InvalidArgumentError(
                f"RecvTensor: 'key' must be a rendezvous key 'src;incarnation;dst;name', got {key[:200]!r}")
        src = key.split(";", 1)[0]
        device = self._by_name.get(src)
        if device is None:
            raise errors.InvalidArgumentError(f"RecvTensor: {src!r} is not a device of {self.prefix}")
        rv = self.rendezvous(step_id, use=1)
        claimed = threading.Lock()  # whichever of the value and cancel() takes it first wins

        def chunks(value):
            if value is not DEAD and value is not None and not device.host_tensors:
                value = device.to_host(value)
            if value is None:  # a control edge's token
                value = np.zeros((0,), np.float32)
            return wire.tensor_chunks(value)

        def got(value, error):
            if not claimed.acquire(blocking=False):
                return
            self._recv_done(rv)
            if error is not None:
                failure = error if isinstance(error, errors.OpError) else errors.InternalError(str(error))
                done(lambda: iter([wire.encode_error(failure)]))
            else:
                done(lambda: chunks(value))
                self._progress(rv, pulled=1)

        def cancel() -> bool:
            if not claimed.acquire(blocking=False):
                return False
            rv.withdraw(key, got)
            self._recv_done(rv)
            return True
        with self._lock:
            self.waiting_recvs += 1
        LocalRendezvous.recv_async(rv, key, got)  # this process's table: a value sent here
        return cancel

    def _recv_done(self, rv: WorkerRendezvous) -> None:
        with self._lock:
            self.waiting_recvs -= 1
        self.release(rv)

    def close(self) -> None:
        with self._lock:
            steps = list(self._steps.values())
            self._steps.clear()
        for rv in steps:
            rv.abort(errors.CancelledError(f"worker {self.prefix} is shutting down"))
        self.collectives.close()
        self._pool.shutdown(wait=False)
        self._pull_pool.shutdown(wait=False)


# How long a partition may still take to wind down once its step was aborted (its running
# kernels finish; nothing new starts) before the RunGraph answers with the step's error.
ABORT_GRACE = 1.0


def _wait_partition(state, ended: threading.Event, deadline) -> bool:
    """Wait until a started partition ``state`` is done (True), the step's ``deadline`` has
    passed (False), or the step was aborted (``ended``) and the partition has not finished
    within ``ABORT_GRACE`` more seconds (False). A failed step ends at once on every task:
    its RunGraph does not wait for the deadline when some part of the step cannot wind down
    (e.g. an iteration of a loop that spans tasks waiting for a value that will never come)."""
    grace_end = None
    while True:
        now = time.monotonic()
        if ended.is_set() and grace_end is None:
            grace_end = now + ABORT_GRACE
        limit = min(x for x in (deadline, grace_end, now + 0.05) if x is not None)
        if state.done.wait(max(0.0, limit - now)):
            return True
        now = time.monotonic()
        if (deadline is not None and now >= deadline) or (grace_end is not None and now >= grace_end):
            return state.done.is_set()


def _abort_all(pairs) -> None:
    for rv, error in pairs:
        rv.abort(error)


def _loops(d):
    if not isinstance(d, dict):
        raise errors.InvalidArgumentError("RegisterGraph: 'loops' must be a dict")
    out = {}
    for name, spec in d.items():
        if not (isinstance(spec, list) and len(spec) == 2 and isinstance(spec[0], str) and type(spec[1]) is int
                and spec[1] > 0):
            raise errors.InvalidArgumentError(f"RegisterGraph: loop {name!r} must be [parent frame, parallel_iterations]")
        out[name] = LoopSpec(spec[0], spec[1])
    return out
