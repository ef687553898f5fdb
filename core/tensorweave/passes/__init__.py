"""Plan-time graph passes: pruning to the fetches, placement, and (later) CSE, partitioning
and Recv scheduling. Each is registered through the plugin hooks by the built-in plugin."""
