"""tensorweave's UCX transport plugin (skeleton).

It will register the ``ucx`` transport: a tensor channel over UCX through ``ucxx``. For now
it only reports its status; see ``tensorweave plugins``.
"""

__version__ = "0.1.0"
