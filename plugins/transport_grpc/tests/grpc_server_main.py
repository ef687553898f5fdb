"""A worker-service stand-in served over grpc in its own process, for the transport tests.

    python grpc_server_main.py [--token T] [--mib N]

Prints its bound address on the first line of stdout, then serves until stdin closes (so a
test that dies takes it down too). Methods: "GetStatus" echoes the request's header and
tensors back; "RecvTensor" streams an N MiB float32 tensor of arange values.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from tensorweave.distributed import transport, wire


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--token")
    ap.add_argument("--mib", type=int, default=8)
    args = ap.parse_args()
    big = np.arange(args.mib * (1 << 18), dtype=np.float32)

    def echo(payload):
        header, tensors = wire.decode_message(payload)
        return wire.encode_response({"echo": header, "pid_ok": True}, tensors)

    dispatcher = transport.ServiceDispatcher(
        {"GetStatus": echo}, {"RecvTensor": lambda payload: wire.tensor_chunks(big)}, token=args.token)
    server = transport.get_transport("grpc").server("127.0.0.1:0", dispatcher, transport.Security(token=args.token))
    print(server.address, flush=True)
    sys.stdin.read()  # until the parent closes stdin or dies
    server.stop()


if __name__ == "__main__":
    main()
