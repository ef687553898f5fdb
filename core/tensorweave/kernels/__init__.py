"""Kernels that are the same on every device, registered once by the core for every device
type (``"*"``), and the kernels of host-side resources."""
