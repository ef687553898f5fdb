"""tensorweave's OpenCL device plugin (skeleton).

It will provide OPENCL devices through PyOpenCL, OpenCL C kernels for the core ops and a
pooling allocator. For now it only reports its status; see ``tensorweave plugins``.
"""

__version__ = "0.1.0"
