"""tensorweave's CUDA device plugin: GPU devices through PyCUDA, CUDA C kernels
(``kernels/*.cu``) compiled with ``SourceModule``, cuBLAS matrix products, and a pooling
allocator. Without a usable GPU it registers nothing and says why (``tensorweave plugins``).
Importing the package imports no driver.
"""

__version__ = "0.1.0"
