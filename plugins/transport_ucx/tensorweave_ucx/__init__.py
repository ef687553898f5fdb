"""tensorweave's UCX transport plugin: registers transport ``ucx`` (``transport.py``), the
worker service and tensor streams over UCX endpoints through ``ucxx``."""

__version__ = "0.1.0"
