"""UCX's environment: the variables the transport sets, unless already set, before ucxx is
first imported (UCX reads its environment once, when its context is created), so that no
GPU, CUDA driver or user shell setting is needed."""

from __future__ import annotations

import os

UCX_ENV_DEFAULTS = {
    # ucxx asks rendezvous fragments to be staged in CUDA memory unless told otherwise;
    # tensors here are host memory and the machine may have no GPU at all.
    "UCX_RNDV_FRAG_MEM_TYPE": "host",
    # ucxx sets UCX_MEMTYPE_CACHE, which UCX >= 1.19 no longer knows: a warning per process.
    "UCX_WARN_UNUSED_ENV_VARS": "n",
    # UCX's TCP transport moves data in segments of 8 KiB (send) / 64 KiB (receive) by
    # default; 1 MiB ones make a 64 MiB fetch ~2.5x faster on loopback (1.3 -> 3+ GB/s),
    # for 8 MiB of buffers per direction and process (allocated 8 at a time).
    "UCX_TCP_TX_SEG_SIZE": "1m",
    "UCX_TCP_RX_SEG_SIZE": "1m",
    # A task restarted at its port after a crash must be able to listen again while the old
    # connections linger in TIME_WAIT (SO_REUSEADDR; a live listener still holds the port).
    "UCX_TCP_CM_REUSEADDR": "y",
    # ucxx logs every endpoint error at ERROR level; a peer going away is reported to the
    # caller as UnavailableError instead.
    "UCXX_LOG_LEVEL": "FATAL",
}


def apply(environ=os.environ) -> None:
    """Set every default the user has not set (a variable set by the user wins)."""
    for k, v in UCX_ENV_DEFAULTS.items():
        environ.setdefault(k, v)
