"""A task's server: the worker service of one task of a cluster, over the configured transport.

``Server(cluster, job_name, task_index)`` (also ``tw.train.Server``) creates this task's
devices and worker (``distributed/worker.py``) and serves it at the task's address from the
cluster. Clients connect with ``tw.Session("grpc://host:port")``: the master runs in the
client and learns the cluster from any task (``GetStatus``). Tensors between tasks travel
over the transport the config names for that pair of jobs (``{control = "grpc", tensors =
"ucx"}`` is allowed); a transport named but not installed is an error here, at start-up.
"""

from __future__ import annotations

import threading

from tensorweave.distributed import wire
from tensorweave.distributed.cluster import check_transports, health_check_announcement
from tensorweave.distributed.master import _cluster_dict, _control_transport, _normalise_cluster
from tensorweave.distributed.master_service import MasterService
from tensorweave.distributed.transport import Security, get_transport
from tensorweave.distributed.worker import Limits, Worker
from tensorweave.framework import errors
from tensorweave.runtime.file_access import FileAccess


def _file_access(config) -> FileAccess:
    """The config's ``[files] allow`` directories, else this process's working directory."""
    allow = getattr(config, "files_allow", None)
    return FileAccess.working_directory() if allow is None else FileAccess(allow)


class Server:
    """One task of a cluster. ``cluster``: a ClusterConfig, ClusterSpec or {job: [addresses]}.
    ``limits``: what the task keeps for its clients at most (``limits.Limits``: steps, graphs,
    master-service sessions and how long unused ones live; default: the config's ``[limits]``).
    Clients' ops use files only under the config's ``[files] allow`` directories (default: the
    directory this process was started in; runtime/file_access.py)."""

    def __init__(self, cluster, job_name: str, task_index: int = 0, transport: str | None = None,
                 config=None, start: bool = True, security: Security | None = None,
                 limits: Limits | None = None):

        self._config = cluster if hasattr(cluster, "transport_for") else None
        self._cluster = _normalise_cluster(_cluster_dict(cluster))
        self.job_name, self.task_index = str(job_name), int(task_index)
        key = (self.job_name, self.task_index)
        if key not in self._cluster:
            known = sorted(f"/job:{j}/task:{t}" for j, t in self._cluster)
            raise errors.InvalidArgumentError(
                f"task /job:{job_name}/task:{task_index} is not in the cluster (it has {known})")
        self._transport_override = transport
        self._security = security or self._security_for(self.job_name, self.job_name)
        # Every transport the config names for a pair with this job must exist now: an error
        # naming it and where it is used, never a silent fallback.
        if self._config is not None and transport is None:
            check_transports(self._config, self.job_name)
        else:
            for j in {j for j, _ in self._cluster}:
                for name in self._transports_for(self.job_name, j):
                    get_transport(name)
        # Every task serves its address over the cluster's control transport, whatever the
        # [transport_pairs] of its job say: clients and masters reach any task with it.
        self._control = get_transport(self._transport_override or _control_transport(self._config))
        self._channels: dict = {}
        self._channels_lock = threading.Lock()
        self.worker = Worker(self.job_name, self.task_index, channel_for=self._channel_for, config=config,
                             max_message_bytes=self._security.max_message_bytes,
                             drop_channel=self._drop_channel,
                             transport_for=lambda job: self._transports_for(self.job_name, job)[1],
                             limits=limits or getattr(self._config, "limits", None),
                             file_access=_file_access(self._config))
        self.worker.cluster = {j: {str(t): a for (jj, t), a in self._cluster.items() if jj == j}
                               for j in {j for j, _ in self._cluster}}
        self._server = None
        self._tensor_servers: dict = {}
        self._master = MasterService(self, self.worker.limits)
        self._stopped = threading.Event()
        if start:
            self.start()

    def _transports_for(self, a: str, b: str) -> tuple[str, str]:
        if self._transport_override:
            return self._transport_override, self._transport_override
        if self._config is not None:
            t = self._config.transport_for(a, b)
            return (t, t) if isinstance(t, str) else tuple(t)
        return "grpc", "grpc"

    def _security_for(self, a, b):
        if self._config is not None and hasattr(self._config, "security_for"):
            try:
                return self._config.security_for(a, b)
            except TypeError:
                return self._config.security_for()
        return Security()

    def _channel_for(self, job: str, task: int):
        """A channel to another task for tensors (Recv pulls from the producing task).

        When the pair's tensor transport differs from the task's control transport
        (``{control = "grpc", tensors = "ucx"}``), the task serves tensors on a second server
        whose address it announces in ``GetStatus``; we ask for it once."""
        with self._channels_lock:
            ch = self._channels.get((job, task))
            if ch is None:
                address = self._cluster.get((job, int(task)))
                if address is None:
                    raise errors.InvalidArgumentError(f"no task /job:{job}/task:{task} in the cluster")
                _, tensors = self._transports_for(self.job_name, job)
                peer_control = self._control.name
                security = self._security_for(self.job_name, job)
                if tensors != peer_control:
                    address = self._tensor_address(job, task, address, peer_control, tensors, security)
                ch = self._channels[(job, task)] = get_transport(tensors).channel(address, security)
            return ch

    def _tensor_address(self, job, task, address, control, tensors, security) -> str:
        ch = get_transport(control).channel(address, security)
        try:
            header, _ = wire.decode_response(ch.call("GetStatus", wire.encode_message({}), 30.0))
        finally:
            ch.close()
        found = (header.get("tensor_addresses") or {}).get(tensors)
        if not isinstance(found, str):
            raise errors.UnavailableError(
                f"/job:{job}/task:{task} ({address}) serves no {tensors!r} tensor channel")
        return found

    def _drop_channel(self, job: str, task: int, channel) -> None:
        """Forget a channel whose peer was unreachable; pulls still using it finish on it
        (it is closed when the last of them lets go of it)."""
        with self._channels_lock:
            if self._channels.get((job, task)) is channel:
                del self._channels[(job, task)]

    @property
    def target(self) -> str:
        return f"{self._control.name}://{self.address}"

    @property
    def address(self) -> str:
        return self._server.address if self._server is not None else self._cluster[(self.job_name, self.task_index)]

    def start(self) -> None:
        if self._server is not None:
            return
        address = self._cluster[(self.job_name, self.task_index)]
        dispatcher = self.worker.dispatcher(token=self._security.token)
        status = dispatcher.handlers["GetStatus"]

        def get_status(payload):  # the cluster too, so a client needs only one address
            try:
                header, tensors = wire.decode_response(status(payload))
            except errors.OpError as e:  # a bad request: answered, never raised into the transport
                return wire.encode_error(e)
            header["cluster"] = self.worker.cluster
            if (hc := health_check_announcement(self._config)) is not None:  # for grpc:// clients
                header["health_check"] = hc
            header["tensor_addresses"] = {n: srv.address for n, srv in self._tensor_servers.items()}
            return wire.encode_response(header, tensors)
        dispatcher.handlers["GetStatus"] = get_status
        dispatcher.handlers.update(self._master.handlers())  # every server also runs the master service
        self._server = self._control.server(address, dispatcher, self._security)
        # A second server for each other transport that carries tensors to or from this task.
        host = self._server.address.rpartition(":")[0]
        for j in {j for j, _ in self._cluster}:
            for name in {self._transports_for(self.job_name, j)[1], self._transports_for(j, self.job_name)[1]}:
                if name != self._control.name and name not in self._tensor_servers:
                    self._tensor_servers[name] = get_transport(name).server(f"{host}:0", dispatcher, self._security)

    def join(self) -> None:
        """Block until ``stop()`` (``tensorweave worker`` uses this)."""
        self._stopped.wait()

    def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            self._server.stop(grace)
            self._server = None
        for srv in self._tensor_servers.values():
            srv.stop(grace)
        self._tensor_servers.clear()
        self._master.close()
        self.worker.close()
        with self._channels_lock:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()
        self._stopped.set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
