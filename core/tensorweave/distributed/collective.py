"""Collectives across tasks: a worker's share of ``runtime/collectives.py``.

``WorkerCollectives`` is the ``CollectiveExecutor`` of one task (``Worker.collectives``; a
step's ``WorkerRendezvous`` hands it to the collective kernels). What it adds to the
in-process one:

* **The group leader is a task**: ``/job:chief/task:0`` when the cluster has a ``chief`` job,
  else ``/job:worker/task:0``, else task 0 of the first job by name — the same rule in every
  task, so every member asks the same one (TensorFlow's ``collective_group_leader``). A
  member on another task joins with ``CompleteGroup`` (``group_key``, ``group_size``, its
  device); the leader answers with the ordered member list once all have joined. The answer
  waits at most ``LONG_POLL`` seconds at the leader (then ``{"pending": true, "arrived":
  [...]}``, and the member asks again while an execution still waits), so a member that
  gave up holds no thread of the leader for long. Each member asks once per group and
  remembers the answer.
* **Values travel over the cluster's transport**: ``CollectivePut`` carries one value (a
  chunk of the ring, a block of a gather, a broadcast) from member to member, on the
  channel the pair of jobs uses for tensors (``Worker.channel_for``: grpc, ucx, or the
  in-process transport), with a header naming (group_key, instance_key, execution, round,
  source, destination) and the sender's signature; or a member's failure (``"error"``) for
  every other member. Requests are checked (``wire.REQUEST_FIELDS``, then here: full device
  names, the destination a device of this task, the value's dtype) before anything is kept,
  and what is kept for executions that have not started is bounded (``CollectiveLimits``).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorweave.distributed import wire
from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.runtime import collectives
from tensorweave.runtime.collectives import CollectiveExecutor, CollectiveLimits, check_member
from tensorweave.runtime.step import DEAD

# The longest a CompleteGroup waits at the leader before answering "pending".
LONG_POLL = 5.0
# What a request to another task may take beyond the wait it asks for.
RPC_SLACK = 10.0
_I64 = (-(1 << 63), 1 << 63)


def leader_of(cluster: dict | None) -> tuple[str, int] | None:
    """(job, task) of the group leader of ``cluster`` (job -> {task: address}); None without
    a cluster (every member is then in this process)."""
    if not cluster:
        return None
    jobs = [j for j in ("chief", "worker") if cluster.get(j)] or sorted(j for j in cluster if cluster[j])
    if not jobs:
        return None
    return jobs[0], min(int(t) for t in cluster[jobs[0]])


def _task_of(device: str) -> tuple[str, int]:
    s = DeviceSpec.from_string(device)
    return s.job, int(s.task or 0)


def _int_field(header: dict, name: str, method: str, lo: int = _I64[0], hi: int = _I64[1]) -> int:
    v = header[name]
    if not lo <= v < hi:
        raise errors.InvalidArgumentError(f"{method}: field {name!r} must be in [{lo}, {hi}), got {v}")
    return v


class WorkerCollectives(CollectiveExecutor):
    """The collectives of one task (see the module docstring)."""

    def __init__(self, worker, limits: CollectiveLimits | None = None):
        super().__init__(f"worker {worker.prefix}", limits)
        self.worker = worker
        self._rpc = ThreadPoolExecutor(64, thread_name_prefix=f"tw-collective-rpc-{worker.job}{worker.task}")
        self._arrived: dict = {}  # (group_key, device) -> members the leader last said had joined

    # --- where members and the leader are ---------------------------------------------------
    def is_local(self, device: str) -> bool:
        return self.worker.is_local(device)

    def leader(self) -> tuple[str, int] | None:
        return leader_of(getattr(self.worker, "cluster", None))

    def _is_leader(self) -> bool:
        leader = self.leader()
        return leader is None or leader == (self.worker.job, self.worker.task)

    def _call(self, job: str, task: int, method: str, payload: bytes, timeout: float) -> dict:
        if self.worker.channel_for is None:
            raise errors.UnavailableError(f"{self.worker.prefix} has no channel to /job:{job}/task:{task}")
        channel = self.worker.channel_for(job, task)
        try:
            header, _ = wire.decode_response(channel.call(method, payload, timeout))
        except errors.UnavailableError:
            if self.worker.drop_channel is not None:  # the next request gets a fresh channel
                self.worker.drop_channel(job, task, channel)
            raise
        return header

    # --- the group ----------------------------------------------------------------------------
    def resolve_group(self, group_key: int, group_size: int, device: str, deadline: float) -> None:
        if self._is_leader():
            super().resolve_group(group_key, group_size, device, deadline)
        else:
            self._rpc.submit(self._ask_leader, group_key, group_size, device)

    def arrived(self, group_key: int, device: str) -> list:
        if self._is_leader():
            return super().arrived(group_key, device)
        return list(self._arrived.get((group_key, device), []))

    def _ask_leader(self, group_key: int, group_size: int, device: str) -> None:
        job, task = self.leader()
        try:
            while (deadline := self.still_resolving(group_key, device)) is not None:
                # Answered a little before the earliest deadline, so that a timeout can say
                # which members had joined.
                wait = min(LONG_POLL, max(0.05, deadline - time.monotonic() - 0.25))
                payload = wire.encode_message({"group_key": group_key, "group_size": group_size, "device": device,
                                               "timeout": wait})
                header = self._call(job, task, "CompleteGroup", payload, wait + RPC_SLACK)
                devices = header.get("devices")
                if devices is not None:
                    if not isinstance(devices, list):
                        raise errors.InvalidArgumentError(f"the leader answered 'devices': {devices!r:.200}")
                    self.group_resolved(group_key, device, devices, None)
                    return
                arrived = header.get("arrived")
                if isinstance(arrived, list) and all(isinstance(d, str) for d in arrived):
                    self._arrived[(group_key, device)] = arrived[:collectives.MAX_GROUP_SIZE]
        except Exception as e:  # noqa: BLE001 - every failure ends the executions waiting
            message = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
            cls = type(e) if isinstance(e, errors.OpError) else errors.UnavailableError
            self.group_resolved(group_key, device, None,
                                cls(f"asking the collective group leader /job:{job}/task:{task} for the members "
                                    f"of group_key={group_key}: {message}"))
        finally:
            if self.still_resolving(group_key, device) is None:
                self._arrived.pop((group_key, device), None)

    # --- values -------------------------------------------------------------------------------
    def send(self, ex, dst: str, header: dict, value):
        if self.is_local(dst):
            return super().send(ex, dst, header, value)
        job, task = _task_of(dst)
        if value is not None and not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)  # (never for a 0-d value, which it would make 1-d)
        payload = wire.encode_message(header, [] if value is None else [value])
        timeout = max(1.0, ex.deadline - time.monotonic()) + RPC_SLACK
        return self._rpc.submit(self._call, job, task, "CollectivePut", payload, timeout)

    # --- the service (Worker.dispatcher routes these methods here) --------------------------
    def complete_group(self, payload: bytes) -> bytes:
        """``CompleteGroup``: a member joins its group here, the leader; the ordered members
        once all have joined, or ``{"pending": true, "arrived": [...]}`` after at most
        ``LONG_POLL`` seconds (the member asks again)."""
        header, _ = wire.decode_request("CompleteGroup", payload, self.worker.max_message_bytes)
        group_key = _int_field(header, "group_key", "CompleteGroup")
        size = _int_field(header, "group_size", "CompleteGroup", 1, collectives.MAX_GROUP_SIZE + 1)
        device = check_member(header["device"])
        cluster = getattr(self.worker, "cluster", None)
        job, task = _task_of(device)
        if cluster and str(task) not in cluster.get(job, {}):
            raise errors.InvalidArgumentError(f"CompleteGroup: {device} is not a device of a task of this cluster")
        if not self._is_leader():
            raise errors.FailedPreconditionError(
                f"CompleteGroup: {self.worker.prefix} is not the collective group leader; "
                f"/job:{self.leader()[0]}/task:{self.leader()[1]} is")
        timeout = header.get("timeout")
        wait = LONG_POLL if timeout is None else min(LONG_POLL, float(timeout))
        answered, box = threading.Event(), {}

        def on_done(devices, error):
            box["devices"], box["error"] = devices, error
            answered.set()
        self.leader_table.join(group_key, size, device, on_done)
        if not answered.wait(wait):
            self.leader_table.withdraw(group_key, on_done)
        if not answered.is_set():
            return wire.encode_response({"pending": True, "arrived": self.leader_table.arrived(group_key)})
        if box["error"] is not None:
            raise box["error"]
        return wire.encode_response({"devices": box["devices"]})

    def collective_put(self, payload: bytes) -> bytes:
        """``CollectivePut``: a value (or a failure) from another member for a member here."""
        header, tensors = wire.decode_request("CollectivePut", payload, self.worker.max_message_bytes)
        m = "CollectivePut"
        _int_field(header, "group_key", m)
        _int_field(header, "instance_key", m)
        _int_field(header, "exec", m, 0)
        check_member(header["src"], "src")
        dst = check_member(header["dst"], "dst")
        if not self.is_local(dst):
            raise errors.InvalidArgumentError(f"{m}: {dst!r} is not a device of {self.worker.prefix}")
        error = header.get("error")
        if error is not None:
            if tensors or not (isinstance(error.get("code"), int) and isinstance(error.get("message"), str)):
                raise errors.InvalidArgumentError(
                    f"{m}: 'error' must be {{\"code\": int, \"message\": str}} with no tensor")
            self.put(header, None)
            return wire.encode_response({})
        _int_field(header, "round", m, 0, 2 * collectives.MAX_GROUP_SIZE)
        if len(tensors) != 1 or tensors[0] is DEAD or tensors[0].dtype not in collectives.DTYPES:
            raise errors.InvalidArgumentError(
                f"{m}: expected one tensor of {sorted(str(d) for d in collectives.DTYPES)}")
        if not isinstance(header.get("signature"), dict):
            raise errors.InvalidArgumentError(f"{m}: a value needs its sender's 'signature'")
        self.put(header, tensors[0])
        return wire.encode_response({})

    def close(self) -> None:
        super().close()
        self._rpc.shutdown(wait=False)
