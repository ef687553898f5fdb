"""Plan-time graph passes: pruning to the fetches, placement, and (later) CSE, partitioning
and Recv scheduling. Each is registered through the plugin hooks by the built-in plugin."""

import os


def graph_option(config, name: str, env: str) -> bool:
    """Whether the switch ``GraphOptions.<name>`` (default on) is on for a session with
    ``config``; the environment variable ``env`` (0/1, off/on, ...) wins over the config."""
    value = os.environ.get(env, "").strip().lower()
    if value in ("0", "false", "off", "no"):
        return False
    if value in ("1", "true", "on", "yes"):
        return True
    opts = getattr(config, "graph_options", None)
    return bool(getattr(opts, name, True)) if opts is not None else True
