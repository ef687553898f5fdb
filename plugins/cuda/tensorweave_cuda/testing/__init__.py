"""Test support for the CUDA plugin: a CPU emulation of its driver layer (``emulator``), so the
plugin's own kernels, launch planning, allocators and device run where no GPU exists."""
