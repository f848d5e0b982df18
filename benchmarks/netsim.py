"""The plan's link model checked on a simulated network (``--only plan``; issue 52, point 2).

Each rank, worker and parameter server runs in a network namespace of its own, joined to a
switch namespace (a Linux bridge) by a veth pair whose two ends are rate-limited with
``tc ... tbf`` (100 Mb/s and 1 Gb/s): every host has one full-duplex link of that rate, as
the cost model assumes. The processes (:mod:`benchmarks.netsim_node`) exchange the MNIST
MLP's gradients over TCP and do no compute, so a step is its communication alone:

* **sync**: a ring allreduce among 2 and 4 ranks, against
  :func:`distrain.base.costmodel.ring_step` (2(N-1) messages of S/N bytes);
* **async**: 2 and 4 workers pushing their gradient to 1 and 2 parameter servers and
  pulling the parameters back, against :func:`distrain.base.costmodel.ps_throughput` (2P
  messages of S/P bytes a step; the servers' links carry S each way per worker step).

The model's latency is the link's own, half a 64-byte message's round trip between two
namespaces (this kernel has no ``netem`` to add delay): at these rates a message's time
is its bytes. The error is the model's predicted step over the measured one, minus one.
It needs root and ``ip netns``; without them the section says why and measures nothing.
Namespaces, links and processes are removed whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from distrain.base.costmodel import ps_throughput, ring_step

ROOT = Path(__file__).resolve().parent.parent
LINKS_MBIT = (100, 1000)
SYNC_RANKS = (2, 4)
ASYNC_SETUPS = ((2, 1), (4, 1), (4, 2))  # (workers, servers)
# The MNIST MLP's gradients: 235,146 float32 parameters (its profile's count).
MNIST_MLP_BYTES = 235_146 * 4
# How long a packet may wait in a host link's queue: a second's worth of bytes, so that
# four workers' gradients arriving at once queue rather than drop (with 200 ms, drops and
# TCP's retransmission timeouts made async:4:ps=1 28 % slower than the link allows).
QUEUE = "1s"
BOUND = 0.25  # the communication terms' error the issue asks for, where they dominate


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def why_not() -> str | None:
    """Why namespaces cannot be used here (None: they can)."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"dtprobe{os.getpid()}"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode:
            return f"ip netns add failed: {made.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _burst(mbit: int) -> str:
    # About 1.3 ms of the rate, and never below two full frames (tbf drops what exceeds it).
    return f"{max(mbit * 1_000_000 // 8 // 800, 16_384)}"


@contextmanager
def network(hosts: int, mbit: int):
    """``hosts`` namespaces on a bridge, each host link rate-limited to ``mbit`` both ways.

    Yields:
        ``(names, addresses)`` of the hosts' namespaces.
    """
    tag = f"dt{os.getpid() % 10_000}"
    switch = f"{tag}sw"
    names = [f"{tag}h{i}" for i in range(hosts)]
    made = []
    try:
        _ip("netns", "add", switch)
        made.append(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, ns in enumerate(names):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("link", "add", f"{tag}a{i}", "netns", ns, "type", "veth", "peer", "name",
                f"{tag}b{i}", "netns", switch)  # fmt: skip
            _ip("-n", ns, "link", "set", f"{tag}a{i}", "name", "eth0")
            _ip("-n", ns, "addr", "add", f"10.231.0.{i + 1}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", switch, "link", "set", f"{tag}b{i}", "master", "br0")
            _ip("-n", switch, "link", "set", f"{tag}b{i}", "up")
            for where, dev in ((ns, "eth0"), (switch, f"{tag}b{i}")):
                subprocess.run(
                    ["ip", "netns", "exec", where, "tc", "qdisc", "add", "dev", dev, "root",
                     "tbf", "rate", f"{mbit}mbit", "burst", _burst(mbit), "latency", QUEUE],
                    check=True, capture_output=True,
                )  # fmt: skip
            subprocess.run(
                ["ip", "netns", "exec", ns, "sysctl", "-qw",
                 "net.ipv4.tcp_slow_start_after_idle=0"],
                check=False, capture_output=True,
            )  # fmt: skip
        yield names, [f"10.231.0.{i + 1}" for i in range(hosts)]
    finally:
        for ns in reversed(made):
            _ip("netns", "del", ns, check=False)


def _latency(names: list[str], addresses: list[str]) -> float:
    """One-way seconds of a small message between two hosts: half the median round trip."""
    server = _start(names[1], "echo", "--n", "1", "--bytes", "64", "--hosts", addresses[1])
    client = _start(names[0], "rtt", "--n", "1", "--bytes", "64", "--steps", "200",
                    "--hosts", addresses[1])  # fmt: skip
    rtt = _finish([client])
    _finish([server])
    return rtt[0] / 2


def _start(ns: str, *args: str) -> subprocess.Popen:
    command = ["ip", "netns", "exec", ns, sys.executable, "-m", "benchmarks.netsim_node", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _finish(procs: list[subprocess.Popen], timeout: float = 300) -> list[float]:
    """The step seconds each process printed (all are ended, by their own ids, on failure)."""
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [json.loads(o)["step_seconds"] for o in outs if o and o.strip()]


def measure_sync(ranks: int, mbit: int, size: int, steps: int) -> dict:
    with network(ranks, mbit) as (names, hosts):
        latency = _latency(names, hosts)
        procs = [
            _start(
                ns,
                "ring",
                "--rank",
                str(r),
                "--n",
                str(ranks),
                "--bytes",
                str(size),
                "--steps",
                str(steps),
                "--hosts",
                *hosts,
            )  # fmt: skip
            for r, ns in enumerate(names)
        ]
        measured = max(_finish(procs))  # the ring steps at its slowest rank's pace
    predicted = ring_step(0.0, size, ranks, mbit * 1e6 / 8, latency)
    return _row("sync", f"sync:{ranks}", mbit, latency, measured, predicted)


def measure_async(workers: int, servers: int, mbit: int, size: int, steps: int) -> dict:
    with network(workers + servers, mbit) as (names, hosts):
        latency = _latency(names, hosts)
        common = ["--n", str(workers), "--servers", str(servers), "--bytes", str(size)]
        procs = [_start(ns, "server", "--hosts", h, *common) for ns, h in
                 zip(names[:servers], hosts[:servers], strict=True)]  # fmt: skip
        work = [
            _start(ns, "worker", "--steps", str(steps), "--hosts", *hosts[:servers], *common)
            for ns in names[servers:]
        ]
        steps_each = _finish(work)
        _finish(procs)
    measured = workers / sum(1 / s for s in steps_each)  # a worker's step at the cluster's rate
    # The model's cluster rate (examples/s of batch 1 is steps/s), per worker.
    rate = ps_throughput(0.0, size, workers, servers, mbit * 1e6 / 8, latency, 1)
    predicted = workers / rate
    return _row("async", f"async:{workers}:ps={servers}", mbit, latency, measured, predicted)


def _row(mode, spec, mbit, latency, measured, predicted) -> dict:
    return {
        "mode": mode,
        "spec": spec,
        "link_mbit": mbit,
        "latency_seconds": latency,
        "measured_step_seconds": measured,
        "predicted_step_seconds": predicted,
        "error": predicted / measured - 1.0,
    }


def bench_plan(steps: int = 16) -> dict:
    """The cost model's communication error per mode and link (``skipped`` saying why)."""
    reason = why_not()
    if reason:
        return {"skipped": reason}
    rows = []
    for mbit in LINKS_MBIT:
        for ranks in SYNC_RANKS:
            rows.append(measure_sync(ranks, mbit, MNIST_MLP_BYTES, steps))
        for workers, servers in ASYNC_SETUPS:
            rows.append(measure_async(workers, servers, mbit, MNIST_MLP_BYTES, steps))
    return {"bytes": MNIST_MLP_BYTES, "bound": BOUND, "rows": rows}


def render(section: dict) -> list[str]:
    """BENCHMARKS.md's lines of the section."""
    lines = ["", "## The plan's link model on a simulated network", ""]
    if section.get("skipped"):
        return lines + [f"Not measured here: {section['skipped']}."]
    lines += [
        f"Ranks, workers and parameter servers each in a network namespace, on a bridge, each "
        f"host's veth rate-limited both ways with `tc tbf`; {section['bytes']:,} bytes of "
        "gradients (the MNIST MLP's) over TCP, no compute, so a step is communication "
        "alone (`python -m benchmarks.suite --only plan`; `benchmarks/netsim.py`). "
        "Predicted: `costmodel.ring_step` (sync) and `costmodel.ps_throughput` (async, a "
        "worker's step at the cluster's rate), with the link's rate and the latency of a "
        f"64-byte round trip between namespaces. Bound: within {section['bound']:.0%}.",
        "",
        "| mode | run | link | latency | measured step | predicted | error | within |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in section["rows"]:
        ok = "yes" if abs(r["error"]) <= section["bound"] else "no"
        lines.append(
            f"| {r['mode']} | {r['spec']} | {r['link_mbit']} Mb/s | "
            f"{r['latency_seconds'] * 1e6:.0f} µs | {r['measured_step_seconds'] * 1e3:.1f} ms | "
            f"{r['predicted_step_seconds'] * 1e3:.1f} ms | {r['error']:+.0%} | {ok} |"
        )
    return lines


if __name__ == "__main__":
    print(json.dumps(bench_plan(), indent=2))
