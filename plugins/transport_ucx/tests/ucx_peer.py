"""A worker-service stand-in served over ucx in its own process, for the transport tests.

    python ucx_peer.py [--token T] [--mib N]

Prints its bound address on the first line of stdout, then serves until stdin closes (so a
test that dies takes it down too). Methods: "Echo" returns the request's header and tensors;
"Hang" never answers (for peer-death tests); stream "Tensor" sends an N MiB float32 arange.
"""

from __future__ import annotations

import argparse
import sys
import threading

import numpy as np

from tensorweave.distributed import transport, wire


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--token")
    ap.add_argument("--mib", type=int, default=1)
    args = ap.parse_args()
    big = np.arange(args.mib * (1 << 18), dtype=np.float32)
    never = threading.Event()

    def echo(payload):
        header, tensors = wire.decode_message(payload)
        return wire.encode_response({"echo": header}, tensors)

    def hang(payload):
        never.wait()
        return wire.encode_response({})

    dispatcher = transport.ServiceDispatcher(
        {"Echo": echo, "Hang": hang}, {"Tensor": lambda payload: wire.tensor_chunks(big)}, token=args.token)
    server = transport.get_transport("ucx").server("127.0.0.1:0", dispatcher, transport.Security(token=args.token))
    print(server.address, flush=True)
    sys.stdin.read()  # until the parent closes stdin or dies
    never.set()
    server.stop()


if __name__ == "__main__":
    main()
