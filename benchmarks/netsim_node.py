"""One process of the simulated-network benchmark (:mod:`benchmarks.netsim`), in its namespace.

Roles, over plain TCP so that the rate-limited link, not a framework, sets the time:

* ``ring RANK N``: a rank of a ring allreduce of ``--bytes`` (reduce-scatter, then
  all-gather: 2(N-1) rounds of bytes/N sent to the next rank while the previous one's
  arrive), ``--steps`` times; prints its mean step seconds (a stall counts).
* ``server``: a parameter server holding its shard; for every worker's push of the shard's
  gradient it adds it and sends the shard back (the pull), until the workers hang up.
* ``worker``: a parameter-server worker: each step pushes its gradient's shard to every
  server and pulls the shard back, the servers at once (as TensorFlow's workers do);
  prints its mean step seconds (a stall counts).

* ``echo`` / ``rtt``: a small message's round trip (the link's latency; no ``ping`` needed).

No compute: the steps are communication alone, which is what the benchmark checks.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time

import numpy as np

PORT = 7300


def _recv_exact(sock: socket.socket, size: int) -> bytearray:
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if not n:
            raise ConnectionError("peer closed")
        got += n
    return buf


def _connect(host: str, port: int, deadline: float = 30.0) -> socket.socket:
    end = time.monotonic() + deadline
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=60)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def _listen(host: str, port: int) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(64)
    return server


def ring(args) -> None:
    """A ring allreduce rank: its mean step seconds (a stall counts) on stdout."""
    n, rank = args.n, args.rank
    server = _listen(args.hosts[rank], PORT)
    nxt = _connect(args.hosts[(rank + 1) % n], PORT)
    prev, _ = server.accept()
    prev.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk = args.bytes // n // 4
    data = np.ones((n, chunk), np.float32)
    times = []
    for _ in range(args.steps + args.warmup):
        start = time.perf_counter()
        for rnd in range(2 * (n - 1)):
            out = data[(rank - rnd) % n].tobytes()
            sender = threading.Thread(target=nxt.sendall, args=(out,))
            sender.start()
            got = np.frombuffer(_recv_exact(prev, chunk * 4), np.float32)
            sender.join()
            slot = (rank - rnd - 1) % n
            data[slot] = data[slot] + got if rnd < n - 1 else got
        times.append(time.perf_counter() - start)
    print(json.dumps({"step_seconds": statistics.fmean(times[args.warmup :])}), flush=True)


def server(args) -> None:
    """A parameter server: adds each push to its shard and sends the shard back."""
    listener = _listen(args.hosts[0], PORT)
    size = args.bytes // args.servers // 4 * 4
    shard = np.zeros(size // 4, np.float32)
    lock = threading.Lock()

    def serve(conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                grad = np.frombuffer(_recv_exact(conn, size), np.float32)
                with lock:
                    shard[:] += grad
                    reply = shard.tobytes()
                conn.sendall(reply)
        except ConnectionError:
            conn.close()

    threads = []
    for _ in range(args.n):
        conn, _ = listener.accept()
        threads.append(threading.Thread(target=serve, args=(conn,)))
        threads[-1].start()
    for t in threads:
        t.join()


def worker(args) -> None:
    """A parameter-server worker: pushes and pulls every shard at once; mean step out."""
    size = args.bytes // args.servers // 4 * 4
    conns = [_connect(h, PORT) for h in args.hosts]
    grad = np.ones(size // 4, np.float32).tobytes()
    times = []

    def exchange(conn):
        conn.sendall(grad)
        _recv_exact(conn, size)

    for _ in range(args.steps + args.warmup):
        start = time.perf_counter()
        threads = [threading.Thread(target=exchange, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        times.append(time.perf_counter() - start)
    for conn in conns:
        conn.close()
    print(json.dumps({"step_seconds": statistics.fmean(times[args.warmup :])}), flush=True)


def echo(args) -> None:
    """Sends back each 64-byte message until the peer hangs up."""
    conn, _ = _listen(args.hosts[0], PORT).accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            conn.sendall(_recv_exact(conn, 64))
    except ConnectionError:
        conn.close()


def rtt(args) -> None:
    """The median round trip of a 64-byte message to an ``echo``, on stdout."""
    conn = _connect(args.hosts[0], PORT)
    times = []
    for _ in range(args.steps + args.warmup):
        start = time.perf_counter()
        conn.sendall(b"x" * 64)
        _recv_exact(conn, 64)
        times.append(time.perf_counter() - start)
    conn.close()
    print(json.dumps({"step_seconds": statistics.median(times[args.warmup :])}), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["ring", "server", "worker", "echo", "rtt"])
    parser.add_argument("--hosts", nargs="+", required=True, help="ring: every rank; else peers")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--n", type=int, required=True, help="ranks, or workers of a server")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    roles = {"ring": ring, "server": server, "worker": worker, "echo": echo, "rtt": rtt}
    roles[args.role](args)


if __name__ == "__main__":
    main()
