"""The core's own plugins, one per subsystem, loaded first by ``tensorweave.plugins`` (its
``CORE_PLUGINS``) through exactly the hooks a third-party plugin uses — like pytest's
default plugins — so the core has no private back door into the registries:

- ``ops``: every op definition and gradient in ``tensorweave.ops``;
- ``kernels``: the kernels that are the same on every device (``tensorweave.kernels``);
- ``passes``: pruning, CSE, constant folding, lossy transfer compression, Recv scheduling;
- ``placer``: the whitepaper's greedy placer, as ``"default"``;
- ``transport``: the in-process transport (tests, no network).
"""
