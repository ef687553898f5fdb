"""tensorweave's CPU device plugin: NumPy kernels and CPU allocators."""

__version__ = "0.1.0"
