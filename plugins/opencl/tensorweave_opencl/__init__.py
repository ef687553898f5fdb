"""tensorweave's OpenCL device plugin: OPENCL devices through PyOpenCL on any OpenCL
platform (PoCL included), hand-written OpenCL C kernels for the core ops, and two buffer
allocators (``default`` and ``pool``). See README.md."""

__version__ = "0.1.0"
