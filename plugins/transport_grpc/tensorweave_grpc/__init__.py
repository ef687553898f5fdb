"""tensorweave's gRPC transport plugin (skeleton).

It will register the ``grpc`` transport: the worker service and the tensor channel over
grpcio. For now it only reports its status; see ``tensorweave plugins``.
"""

__version__ = "0.1.0"
