"""tensorweave's UCX transport plugin: the worker service and tensor streams over UCX
endpoints through ``ucxx``. Registers transport ``ucx`` (``plugin.py``). The package, one
concern per module:

* ``env.py`` — the UCX environment variables set before ucxx is first imported;
* ``engine.py`` — the process's ucxx context and the asyncio loop thread driving it, connecting;
* ``framing.py`` — slot frames, tags and the tensor chunk table (``TWU2``);
* ``connection.py`` — ``Conn``: one endpoint, its calls in flight failing together; message I/O;
* ``server.py`` — ``UcxServer``: the listener, hello/auth, requests to the ``ServiceDispatcher``;
* ``channel.py`` — ``UcxChannel``: unary calls and tensors received straight into their array;
* ``transport.py`` — ``UcxTransport``, the registered class (address and TLS checks).
"""

__version__ = "0.1.0"
