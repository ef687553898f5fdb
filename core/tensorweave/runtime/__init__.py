"""Running graphs: Device/Allocator interfaces, the kernel registry, containers, the
executor and the Session."""
