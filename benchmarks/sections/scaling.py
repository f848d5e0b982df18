"""Section 7 of the suite: the cost model, checked against the measurements, then a plan."""

from __future__ import annotations

from benchmarks.common import SuiteConfig
from distrain.base.costmodel import fit_link, ps_throughput, ring_step


def scaling_plan(cfg: SuiteConfig, training: dict, allreduce: dict) -> dict:
    """Section 7: the cost model, checked at N = 1 and 2, then extrapolated."""
    rows = {(r["run"], r["cores"]): r for r in training["rows"]}
    batch, size = training["batch"], float(training["model_bytes"])
    t_comp = rows[("single:1", "1 core")]["step_seconds"]
    tcp_b = allreduce["link"]["bytes_per_second"]
    tcp_lat = allreduce["link"]["latency_seconds"]
    local_b, local_lat = fit_link(allreduce)
    checks = []
    for run, n, kind in (
        ("single:1", 1, "sync"),
        ("sync:2", 2, "sync"),
        ("async:1", 1, "async"),
        ("async:2", 2, "async"),
    ):
        cores = "1 core" if run == "single:1" else "all cores"
        measured = rows[(run, cores)]["examples_per_second"]

        def predict(bandwidth, latency, kind=kind, n=n):
            if kind == "sync":
                return n * batch / ring_step(t_comp, size, n, bandwidth, latency)
            return ps_throughput(t_comp, size, n, 1, bandwidth, latency, batch)

        predicted = predict(local_b, local_lat)
        checks.append(
            {
                "run": run,
                "workers": n,
                "predicted_tcp": predict(tcp_b, tcp_lat),
                "predicted": predicted,
                "measured": measured,
                "error": predicted / measured - 1.0,
            }
        )
    bandwidth = cfg.link_gbps * 1e9 / 8
    latency = cfg.link_latency_us * 1e-6
    plan = []
    for n in (1, 2, 4, 8, 16, 32, 64):
        sync_step = ring_step(t_comp, size, n, bandwidth, latency)
        p = max(1, n // 4)
        async_tp = ps_throughput(t_comp, size, n, p, bandwidth, latency, batch)
        plan.append(
            {
                "workers": n,
                "sync_step_seconds": sync_step,
                "sync_examples_per_second": n * batch / sync_step,
                "sync_efficiency": t_comp / sync_step,
                "parameter_servers": p,
                "async_examples_per_second": async_tp,
                "async_efficiency": async_tp / (n * batch / t_comp),
            }
        )
    return {
        "t_comp": t_comp,
        "model_bytes": size,
        "batch": batch,
        "tcp_link": {"bytes_per_second": tcp_b, "latency_seconds": tcp_lat},
        "local_link": {"bytes_per_second": local_b, "latency_seconds": local_lat},
        "link": {"gbps": cfg.link_gbps, "latency_us": cfg.link_latency_us},
        "checks": checks,
        "plan": plan,
    }


def render(results: dict) -> list[str]:
    """Section 7's lines of BENCHMARKS.md."""
    lines: list[str] = []
    sp = results["scaling"]
    lines += [
        "",
        "## 7. Scaling plan",
        "",
        "Cost model T_comm = K (T_lat + N T_data) (../shared/papers/000_79ab81518f612185.txt, "
        "eq. 4): sync sends K = 2(N-1) messages of S/N bytes per step around the ring; async "
        "sends K = 2P messages of S/P bytes (gradient push, parameter pull) and the P servers' "
        "links cap the cluster at P B / 2S steps/second. Inputs: the measured one-core step "
        f"time T_comp = {sp['t_comp'] * 1e3:.1f} ms (batch {sp['batch']}), the model size "
        f"S = {sp['model_bytes'] / 1e6:.2f} MB, and a link.",
        "",
        "Check against this machine, with two links: loopback TCP as measured in section 4 "
        f"({sp['tcp_link']['bytes_per_second'] / 1e9:.2f} GB/s, "
        f"{sp['tcp_link']['latency_seconds'] * 1e6:.0f} µs), and the link fitted to "
        "section 4's allreduce times, which is what Horovod gets out of it "
        f"({sp['local_link']['bytes_per_second'] / 1e9:.2f} GB/s, "
        f"{sp['local_link']['latency_seconds'] * 1e6:.0f} µs per message, its negotiation "
        "cycle included):",
        "",
        "| run | workers | predicted, TCP link | predicted, fitted link | measured | "
        "error (fitted) |",
        "|---|---|---|---|---|---|",
    ]
    for c in sp["checks"]:
        lines.append(
            f"| {c['run']} | {c['workers']} | {c['predicted_tcp']:,.0f} | "
            f"{c['predicted']:,.0f} | {c['measured']:,.0f} | {c['error'] * 100:+.0f} % |"
        )
    lines += [
        "",
        "The model leaves out what section 2's ceiling row shows (workers on one machine "
        "slow each other down) and the coordinator's own costs in the parameter-server modes; "
        "the errors above are their size here.",
        "",
        f"Plan for a {sp['link']['gbps']:g} Gbit/s link with {sp['link']['latency_us']:g} µs "
        "latency (`--link-gbps`, `--link-latency-us`), each worker as fast as this machine's "
        "one-core worker:",
        "",
        "| workers | sync step ms | sync examples/s | sync efficiency | PS | async examples/s "
        "| async efficiency |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in sp["plan"]:
        lines.append(
            f"| {p['workers']} | {p['sync_step_seconds'] * 1e3:.1f} | "
            f"{p['sync_examples_per_second']:,.0f} | {p['sync_efficiency']:.2f} | "
            f"{p['parameter_servers']} | {p['async_examples_per_second']:,.0f} | "
            f"{p['async_efficiency']:.2f} |"
        )
    return lines
