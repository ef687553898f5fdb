"""Tensor transfer between two processes on loopback: each transport against a raw TCP socket.

For every transport named (default: ``grpc``), a server process streams one tensor of
``--mib`` MiB (float32) from a ``RecvTensor`` stream method and this process fetches it with
``channel.fetch`` into a fresh buffer, ``--rounds`` times over one reused channel. In the same
run a raw TCP socket moves the same bytes between two processes the cheapest way Python can
(``sendall`` of the array's memory; ``recv_into`` a preallocated buffer, one connection for
all rounds), as the ceiling. Prints GB/s (10^9 bytes per second; best and median round) and
each transport's ratio to raw TCP (best against best, median against median).

    python benchmarks/transfer.py                       # grpc, 64 MiB, 10 rounds
    python benchmarks/transfer.py --transports grpc,ucx --mib 256 --rounds 5

``--null-step`` measures instead the latency of a minimal distributed step — one scalar
variable update on a ps task from 2 workers, 2 client threads at once — median and p99
over ``--steps`` steps per client, for ``local`` (one process), ``inproc``, each
transport named and, when it is installed, TensorFlow (``tf.compat.v1`` sessions on three
``tf.distribute.Server`` processes of the same shape); with grpc, also the floor of any
Python gRPC implementation (``grpcio-sync``, ``grpcio-aio``: the same three calls per step
between bare grpcio servers whose handlers do nothing)::

    python benchmarks/transfer.py --null-step --transports grpc,ucx --steps 500

``--unary`` measures the latency of one small unary call (``--bytes`` each way, default 100;
an ``Echo`` of the request) between two processes, median and p99 over ``--calls`` calls::

    python benchmarks/transfer.py --unary --transports grpc,ucx --calls 3000

Any transport registered with ``tensorweave_register_transports`` works here except ``inproc``
(it cannot cross processes). The server processes are children of this one and always reaped.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.abspath(__file__)


def _payload(mib: int) -> np.ndarray:
    return np.arange(mib * (1 << 18), dtype=np.float32)


# ----------------------------------------------------------------------------------------
# Server side (``--serve NAME``): prints its address, serves until stdin closes.


def _serve_transport(name: str, mib: int) -> None:
    from tensorweave.distributed import transport, wire

    arr = _payload(mib)
    dispatcher = transport.ServiceDispatcher({"Echo": bytes}, {"RecvTensor": lambda payload: wire.tensor_chunks(arr)})
    server = transport.get_transport(name).server("127.0.0.1:0", dispatcher, transport.Security())
    print(server.address, flush=True)
    sys.stdin.read()
    server.stop()


def _serve_tcp(mib: int) -> None:
    data = memoryview(_payload(mib)).cast("B")
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        print(f"127.0.0.1:{lsock.getsockname()[1]}", flush=True)
        conn, _ = lsock.accept()
        with conn:
            while conn.recv(1):  # one request byte per round; b"" when the client closes
                conn.sendall(data)


# ----------------------------------------------------------------------------------------
# Client side


class _ServerProcess:
    def __init__(self, what: str, mib: int):
        self.proc = subprocess.Popen([sys.executable, HERE, "--serve", what, "--mib", str(mib)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(60)
        sel.close()
        self.address = self.proc.stdout.readline().strip() if ready else ""
        if not self.address:
            self.close()
            raise RuntimeError(f"the {what} server process did not start (exit code {self.proc.returncode})")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # asks it to stop
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()


def _time_rounds(fn, rounds: int) -> list[float]:
    fn()  # warm-up: connection, first allocation
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def bench_tcp(mib: int, rounds: int) -> list[float]:
    nbytes = mib << 20
    server = _ServerProcess("tcp", mib)
    try:
        host, port = server.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            def fetch():
                buf = np.empty(nbytes, np.uint8)  # a fresh buffer each round, like a fetch
                view = memoryview(buf)
                sock.sendall(b"x")
                got = 0
                while got < nbytes:
                    n = sock.recv_into(view[got:])
                    if n == 0:
                        raise ConnectionError("tcp server closed the connection mid-transfer")
                    got += n
                return buf

            assert np.array_equal(fetch().view(np.float32), _payload(mib))
            return _time_rounds(fetch, rounds)
    finally:
        server.close()


def bench_transport(name: str, mib: int, rounds: int) -> list[float]:
    from tensorweave.distributed import transport, wire

    server = _ServerProcess(name, mib)
    try:
        ch = transport.get_transport(name).channel(server.address, transport.Security())
        try:
            request = wire.encode_message({"key": "bench"})

            def fetch():
                return ch.fetch("RecvTensor", request, timeout=120)

            assert np.array_equal(fetch(), _payload(mib)), f"{name}: the fetched tensor differs"
            return _time_rounds(fetch, rounds)
        finally:
            ch.close()
    finally:
        server.close()


# ----------------------------------------------------------------------------------------
# Null-step latency (``--null-step``): the fixed cost of one distributed step. A cluster of 1
# ps and 2 worker tasks (separate processes started by the ``tensorweave cluster up``
# launcher; ``inproc``: servers in this process); one scalar variable on the ps; each of 2
# client threads, with its own Session, runs ``assign_add(v, delta)`` where ``delta`` comes
# from its worker task: a RunGraph on the worker and on the ps and one tensor pulled from
# the worker by the ps, per step.


def _null_step_cluster(name: str):
    import contextlib

    from tensorweave.distributed import cluster as cl

    @contextlib.contextmanager
    def cluster():
        if name == "inproc":
            from tensorweave.distributed.server import Server

            spec = {"ps": ["inproc-bench:1"], "worker": ["inproc-bench:2", "inproc-bench:3"]}
            config = cl.config_from_dict({"cluster": spec, "transport": "inproc"})
            servers = [Server(config, "ps", 0), Server(config, "worker", 0), Server(config, "worker", 1)]
            try:
                yield config
            finally:
                for srv in servers:
                    srv.stop()
            return
        from tensorweave.distributed import launcher

        with launcher.temporary(workers=2, ps=1, transport=name, prefix="tw-null-step-") as config:
            yield config
    return cluster()


def bench_null_step(name: str, steps: int, warmup: int = 20) -> list[float]:
    """Seconds per step of each of 2 client threads updating one scalar on the ps at once
    (``name`` "local": the same graph in one process, on one device)."""
    import contextlib

    import tensorweave as tw

    g = tw.Graph()
    local = name == "local"
    with g.as_default():
        with tw.device(None if local else "/job:ps/task:0"):
            v = tw.Variable(0.0, name="counter")
        updates = []
        for i in range(2):
            with tw.device(None if local else f"/job:worker/task:{i}"):
                delta = tw.ones([], name=f"delta_{i}")
            updates.append(tw.assign_add(v, delta, use_locking=True).op)
    with contextlib.ExitStack() as stack:
        target = "" if local else stack.enter_context(_null_step_cluster(name))
        sessions = [stack.enter_context(tw.Session(target, graph=g)) for _ in range(2)]
        if local:
            sessions = sessions[:1] * 2  # a local session's variables are its own
        sessions[0].run(v.initializer)
        times = _time_clients([s.make_callable(u) for s, u in zip(sessions, updates)], steps, warmup)
        total = sessions[0].run(v)
    assert total == 2 * (steps + warmup), f"{name}: {total} updates counted, expected {2 * (steps + warmup)}"
    return times


def _time_clients(runs, steps: int, warmup: int) -> list[float]:
    """Seconds per call of each ``runs[i]()``, all called at once from a thread each
    (``warmup`` calls first, then ``steps`` timed ones after a common start); a client's error
    is raised here."""
    import threading

    times: list[list[float]] = [[] for _ in runs]
    errors: list[BaseException] = []
    start = threading.Barrier(len(runs), timeout=120)

    def client(i):
        try:
            run = runs[i]
            for _ in range(warmup):
                run()
            start.wait()
            for _ in range(steps):
                t0 = time.perf_counter()
                run()
                times[i].append(time.perf_counter() - t0)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            start.abort()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]
    return [t for per_client in times for t in per_client]


# TensorFlow's figure for the same step, when it is installed in the benchmark environment:
# three ``tf.distribute.Server`` processes (1 ps, 2 workers) on loopback, the same graph through
# ``tf.compat.v1`` sessions, 2 client threads.
_TF_TASK = """
import sys, json
import tensorflow as tf
cluster = json.loads(sys.argv[1])
server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=sys.argv[2], task_index=int(sys.argv[3]),
                              start=True)
print("ready", flush=True)
sys.stdin.read()
"""


def _have_tensorflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


def bench_null_step_tf(steps: int, warmup: int = 20) -> list[float]:
    """TensorFlow's null step on a cluster of the same shape (seconds per step, both clients)."""
    import json

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    from tensorweave.distributed import launcher

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    ports = launcher.pick_ports(3)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    procs = [subprocess.Popen([sys.executable, "-c", _TF_TASK, json.dumps(cluster), job, str(i)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                              text=True)
             for job, i in (("ps", 0), ("worker", 0), ("worker", 1))]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a TensorFlow task did not start")
        g = tf1.Graph()
        with g.as_default():
            with tf1.device("/job:ps/task:0"):
                v = tf1.Variable(0.0, name="counter")
            updates = []
            for i in range(2):
                with tf1.device(f"/job:worker/task:{i}"):
                    delta = tf1.ones([], name=f"delta_{i}")
                updates.append(tf1.assign_add(v, delta, use_locking=True).op)
        sessions = [tf1.Session(f"grpc://{cluster['worker'][i]}", graph=g) for i in range(2)]
        try:
            sessions[0].run(v.initializer)
            times = _time_clients([s.make_callable(u) for s, u in zip(sessions, updates)], steps, warmup)
            total = sessions[0].run(v)
        finally:
            for sess in sessions:
                sess.close()
        assert total == 2 * (steps + warmup), f"tensorflow: {total} updates counted"
        return times
    finally:
        for p in procs:
            p.stdin.close()
            p.kill()
            p.wait(30)


# The floor under any gRPC null step written in Python: the same three calls per step (the
# client's RunGraph to its worker and to the ps at once; the ps's handler pulls one small value
# from the worker) between three processes whose handlers do nothing else, over bare grpcio.
# "grpcio-sync": grpcio's thread-pool server, unary calls only; "grpcio-aio": its asyncio server
# with the RunGraph handler on a pool thread and the pull a 2-message stream, as ours are.
_FLOOR_TASK = """
import asyncio, sys
from concurrent import futures
import grpc
role, port, kind = sys.argv[1], sys.argv[2], sys.argv[3]
peers = sys.argv[4].split(",") if len(sys.argv) > 4 else []
same = lambda b: b
pulls = {}
def pull(i):
    if i not in pulls:
        ch = grpc.insecure_channel("127.0.0.1:" + peers[i], options=[("SingleThreadedUnaryStream", 1)])
        if kind == "sync":
            pulls[i] = ch.unary_unary("/f/Recv", request_serializer=same, response_deserializer=same)
        else:
            stream = ch.unary_stream("/f/Recv", request_serializer=same, response_deserializer=same)
            pulls[i] = lambda req, _ch=ch: b"".join(stream(req))
    return pulls[i](b"key")
def run_graph(req, ctx=None):
    if role == "ps":
        pull(req[0])
    return b"done"
if kind == "sync":
    handlers = {"RunGraph": grpc.unary_unary_rpc_method_handler(run_graph, same, same),
                "Recv": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"v" * 64, same, same)}
    server = grpc.server(futures.ThreadPoolExecutor(16), handlers=[grpc.method_handlers_generic_handler("f", handlers)])
    server.add_insecure_port("127.0.0.1:" + port)
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
else:
    async def main():
        pool = futures.ThreadPoolExecutor(16)
        async def run_graph_aio(req, ctx):
            return await asyncio.get_running_loop().run_in_executor(pool, run_graph, req)
        async def recv(req, ctx):
            yield b"h" * 32
            yield b"v" * 64
        handlers = {"RunGraph": grpc.unary_unary_rpc_method_handler(run_graph_aio, same, same),
                    "Recv": grpc.unary_stream_rpc_method_handler(recv, same, same)}
        server = grpc.aio.server(handlers=[grpc.method_handlers_generic_handler("f", handlers)])
        server.add_insecure_port("127.0.0.1:" + port)
        await server.start()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    asyncio.run(main())
"""


def bench_null_step_floor(kind: str, steps: int, warmup: int = 20) -> list[float]:
    """Seconds per step of the bare-grpcio floor (``kind`` "sync" or "aio"), both clients."""
    import grpc

    from tensorweave.distributed import launcher

    ports = [str(p) for p in launcher.pick_ports(3)]
    tasks = [("worker", ports[0]), ("worker", ports[1]), ("ps", ports[2], ",".join(ports[:2]))]
    procs = [subprocess.Popen([sys.executable, "-c", _FLOOR_TASK, t[0], t[1], kind, *t[2:]],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for t in tasks]
    channels = []
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a grpcio floor task did not start")

        def stub(port):
            channels.append(grpc.insecure_channel(f"127.0.0.1:{port}"))
            return channels[-1].unary_unary("/f/RunGraph")

        ps = stub(ports[2])

        def client(i):
            worker = stub(ports[i])

            def step():
                answer = worker.future(b"step")
                ps(bytes([i]) + b"step")
                answer.result()
            return step
        return _time_clients([client(0), client(1)], steps, warmup)
    finally:
        for ch in channels:
            ch.close()
        for p in procs:
            p.stdin.close()
            p.wait(30)


def bench_unary(name: str, calls: int, nbytes: int) -> list[float]:
    from tensorweave.distributed import transport

    server = _ServerProcess(name, 0)
    try:
        ch = transport.get_transport(name).channel(server.address, transport.Security())
        try:
            request = bytes(range(256)) * (nbytes // 256) + bytes(nbytes % 256)
            assert ch.call("Echo", request, timeout=60) == request, f"{name}: the echo differs"
            return _time_rounds(lambda: ch.call("Echo", request, timeout=60), calls)
        finally:
            ch.close()
    finally:
        server.close()


def unary_main(transports: list[str], calls: int, nbytes: int) -> None:
    print(f"unary call of {nbytes} bytes each way between two processes on 127.0.0.1, {calls} calls "
          f"({os.cpu_count()} CPUs)")
    print(f"{'':10s} {'median us':>10s} {'p99 us':>8s}", flush=True)
    for name in transports:
        times = sorted(bench_unary(name, calls, nbytes))
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        print(f"{name:10s} {statistics.median(times) * 1e6:10.0f} {p99 * 1e6:8.0f}", flush=True)


def null_step_main(transports: list[str], steps: int) -> None:
    print(f"null step: assign_add of a scalar on /job:ps/task:0 from 2 workers, 2 client threads at once, "
          f"{steps} steps each ({os.cpu_count()} CPUs)")
    print(f"{'':10s} {'median ms':>10s} {'p99 ms':>8s} {'steps/s (both clients)':>24s}", flush=True)
    rows = ["local", *transports] + (["tensorflow"] if _have_tensorflow() else [])
    if "grpc" in transports:
        rows += ["grpcio-sync", "grpcio-aio"]
    for name in rows:
        if name == "tensorflow":
            times = bench_null_step_tf(steps)
        elif name.startswith("grpcio-"):
            times = bench_null_step_floor(name.partition("-")[2], steps)
        else:
            times = bench_null_step(name, steps)
        times = sorted(times)
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        print(f"{name:10s} {statistics.median(times) * 1e3:10.3f} {p99 * 1e3:8.3f} "
              f"{2 / statistics.mean(times):24.0f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transports", default="grpc", help="comma-separated transport names (default: grpc)")
    ap.add_argument("--mib", type=int, default=64, help="tensor size in MiB (default 64)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--null-step", action="store_true",
                    help="measure null-step latency instead (1 ps + 2 workers; also inproc and local)")
    ap.add_argument("--steps", type=int, default=500, help="null-step steps per client (default 500)")
    ap.add_argument("--unary", action="store_true", help="measure small unary call latency instead")
    ap.add_argument("--calls", type=int, default=3000, help="unary calls (default 3000)")
    ap.add_argument("--bytes", type=int, default=100, help="unary request and answer size (default 100)")
    args = ap.parse_args()
    if args.unary:
        return unary_main(list(filter(None, (t.strip() for t in args.transports.split(",")))), args.calls,
                          args.bytes)
    if args.null_step:
        return null_step_main(["inproc", *filter(None, (t.strip() for t in args.transports.split(",")))],
                              args.steps)
    if args.serve == "tcp":
        return _serve_tcp(args.mib)
    if args.serve:
        return _serve_transport(args.serve, args.mib)

    nbytes = args.mib << 20
    print(f"{args.mib} MiB float32 tensor, two processes on 127.0.0.1, {args.rounds} rounds "
          f"({os.cpu_count()} CPUs)")
    results = {"raw tcp": bench_tcp(args.mib, args.rounds)}
    for name in filter(None, (t.strip() for t in args.transports.split(","))):
        results[name] = bench_transport(name, args.mib, args.rounds)
    tcp = results["raw tcp"]
    print(f"{'':10s} {'best GB/s':>10s} {'median GB/s':>12s} {'ratio to raw tcp (best, median)':>32s}")
    for name, times in results.items():
        best = nbytes / min(times) / 1e9
        median = nbytes / statistics.median(times) / 1e9
        print(f"{name:10s} {best:10.2f} {median:12.2f} {min(tcp) / min(times):20.2f}x "
              f"{statistics.median(tcp) / statistics.median(times):9.2f}x")


if __name__ == "__main__":
    main()
