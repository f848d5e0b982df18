"""Section 4 of the suite: Horovod allreduce against the ring bound on a measured link."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from benchmarks.common import (
    PY,
    ROOT,
    SuiteConfig,
    horovod_controller,
    run_ranks,
)


def loopback_bandwidth(total: int = 512 * 2**20, chunk: int = 4 * 2**20) -> dict:
    """Bytes/second and round-trip latency of TCP on 127.0.0.1 between two processes."""
    code = (
        "import socket,sys\n"
        "s=socket.create_connection(('127.0.0.1',int(sys.argv[1])))\n"
        "s.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
        "for _ in range(200):\n"
        "    s.sendall(s.recv(1))\n"
        f"buf=b'x'*{chunk}\n"
        f"for _ in range({total // chunk}):\n"
        "    s.sendall(buf)\n"
        "s.close()\n"
    )
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    child = subprocess.Popen([PY, "-c", code, str(server.getsockname()[1])])
    conn, _ = server.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = time.perf_counter()
    for _ in range(200):
        conn.sendall(b"p")
        conn.recv(1)
    rtt = (time.perf_counter() - start) / 200
    received = 0
    start = time.perf_counter()
    while received < total:
        data = conn.recv(4 * 2**20)
        if not data:
            break
        received += len(data)
    seconds = time.perf_counter() - start
    conn.close()
    server.close()
    child.wait()
    return {"bytes_per_second": received / seconds, "latency_seconds": rtt / 2}


def bench_allreduce(cfg: SuiteConfig, tmp: Path) -> dict:
    """Section 4: Horovod allreduce on 2 local ranks against the ring bound.

    Under sync's controller (``rows``, what the scaling plan fits its link to) and, when
    that is MPI, under gloo too (``gloo_rows``).
    """
    link = loopback_bandwidth(64 * 2**20 if cfg.quick else 512 * 2**20)
    worker = ROOT / "benchmarks" / "allreduce_worker.py"
    controller = horovod_controller()
    measured = {}
    for name in dict.fromkeys([controller, "gloo"]):
        out = tmp / f"allreduce-{name}.json"
        env = dict(os.environ, DISTRAIN_BIND_CORES="0")
        run_ranks([PY, str(worker), str(out)], controller=name, env=env)
        measured[name] = json.loads(out.read_text())
    n = measured[controller]["ranks"]

    def rows(results: list[dict]) -> list[dict]:
        found = []
        for r in results:
            bound_seconds = 2 * (n - 1) / n * r["bytes"] / link["bytes_per_second"]
            found.append(
                {
                    "bytes": r["bytes"],
                    "seconds": r["seconds"],
                    "algbw_bytes_per_second": r["bytes"] / r["seconds"],
                    "bound_seconds": bound_seconds,
                    "fraction_of_bound": bound_seconds / r["seconds"],
                }
            )
        return found

    return {
        "ranks": n,
        "link": link,
        "controller": controller,
        "rows": rows(measured[controller]["results"]),
        "gloo_rows": rows(measured["gloo"]["results"]) if controller != "gloo" else None,
    }


def render(results: dict) -> list[str]:
    """Section 4's lines of BENCHMARKS.md."""
    lines: list[str] = []
    ar = results["allreduce"]
    link = ar["link"]
    gloo = ar.get("gloo_rows")
    lines += [
        "",
        "## 4. Allreduce",
        "",
        f"Horovod allreduce ({ar['controller']}, as sync runs here) of float32 tensors, "
        f"{ar['ranks']} ranks on loopback. The "
        f"ring bound is 2(N-1)/N x S / B with B = {link['bytes_per_second'] / 1e9:.2f} GB/s, "
        f"measured with TCP between two processes on the same loopback (one-way latency "
        f"{link['latency_seconds'] * 1e6:.0f} µs)."
        + (" The last column is the same allreduce over gloo." if gloo else ""),
        "",
        "| bytes | seconds | algorithm bandwidth GB/s | ring bound seconds | fraction of bound |"
        + (" seconds over gloo |" if gloo else ""),
        "|---|---|---|---|---|" + ("---|" if gloo else ""),
    ]
    for i, r in enumerate(ar["rows"]):
        lines.append(
            f"| {r['bytes']:,} | {r['seconds']:.6f} | {r['algbw_bytes_per_second'] / 1e9:.3f} | "
            f"{r['bound_seconds']:.6f} | {r['fraction_of_bound']:.2f} |"
            + (f" {gloo[i]['seconds']:.6f} |" if gloo else "")
        )
    return lines
