"""tensorweave's CUDA device plugin (skeleton).

It will provide GPU devices through PyCUDA, CUDA C kernels (``kernels/*.cu``) loaded with
``SourceModule``, cuBLAS matrix products and a pooling allocator. For now it only reports
what it found on this machine; see ``tensorweave plugins``.
"""

__version__ = "0.1.0"
