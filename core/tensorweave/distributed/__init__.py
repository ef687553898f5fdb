"""Distributed execution (cluster config, master, worker service, transports, wire format).
Not implemented yet: see the distributed-execution issue."""
