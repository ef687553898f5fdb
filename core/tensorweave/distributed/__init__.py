"""Distributed execution (whitepaper 3.2.2): cluster configuration, the master, the worker
service, transports and the wire format. Importing the package registers the sessions for
cluster targets (``tw.Session("grpc://host:port")``) with ``client/session.py``."""

from tensorweave.distributed import master, master_service  # noqa: F401 - register their session factories
