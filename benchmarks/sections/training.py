"""Section 2 of the suite: training throughput per mode, and where sync's efficiency goes."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import threading
from pathlib import Path

from benchmarks.common import (
    PY,
    ROOT,
    SuiteConfig,
    fmt,
    horovod_controller,
    log,
    mnist_data,
    run_ranks,
    speed,
    spread,
    train_config,
    train_run,
)


def _independent_pair(
    data: Path, out: Path, cfg: SuiteConfig, cores: list[int]
) -> tuple[float, float | None]:
    """:func:`speed` of two independent ``single:1`` runs at once, one core each (summed)."""
    results: list[tuple[float, float | None]] = []

    def one(core: int) -> None:
        history = train_run(data, out / f"core-{core}", "single:1", cfg, {core}, 1)
        results.append(speed(history))

    threads = [threading.Thread(target=one, args=(c,)) for c in cores[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(results) != len(threads):
        raise RuntimeError(f"an independent one-core run failed (see the log above); {out}")
    typical = [t for _, t in results]
    return sum(e for e, _ in results), None if None in typical else sum(typical)


def paired_phases(
    data: Path, out: Path, cfg: SuiteConfig, controller: str = "auto", idle: bool = False
) -> dict:
    """Sync efficiency from alternating phases of one sync:2 run (:func:`paired_efficiency`).

    ``controller`` and ``idle`` as :class:`TrainConfig`'s ``controller`` and
    ``idle_horovod_threads``.
    """
    import dataclasses

    out.mkdir(parents=True)
    config = out / "train_config.json"
    settings = train_config(data, out, "sync:2", cfg, controller=controller)
    config.write_text(dataclasses.replace(settings, idle_horovod_threads=idle).to_json())
    worker = str(ROOT / "benchmarks" / "paired_worker.py")
    groups, steps = str(cfg.paired_groups), str(cfg.paired_steps)
    run_ranks([PY, worker, str(config), str(out / "phases"), groups, steps], controller)
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("phases-rank*.json"))]
    return paired_efficiency(ranks)


def paired_efficiency(ranks: list[dict]) -> dict:
    """Sync efficiency per group of phases, from every rank's record of them.

    In each group (see :mod:`benchmarks.paired_worker`), sync's examples/second (every
    rank's batch per step, over the slowest rank's phase time) is set against:

    - the ``solo`` phases: the sum of each rank's examples/second alone on the machine, as
      one worker on 1/N of the cores; sync / that is the sync scaling efficiency;
    - the ``alone`` phase: the same sum with every rank training at once; alone / solo is
      what the machine costs two workers, sync / alone what sync itself costs.

    Each rank, bound to its own core, lost to its Horovod threads the CPU time they used
    in its phases without the allreduce; a worker alone would not have lost it, so those
    phases take it off (each rank's share per kind over all groups, as the clock of one
    phase is coarse). The uncorrected efficiency is kept beside it.

    Args:
        ranks: The JSON of each rank written by :mod:`benchmarks.paired_worker`.

    Returns:
        Medians over groups of the efficiency (the target's measure, with its range and
        every group's value), of alone / solo and sync / alone, the uncorrected
        efficiency, and the Horovod threads' share of a core per kind.
    """

    batch, n = ranks[0]["batch"], len(ranks)
    phase = {(r["rank"], p["group"], p["kind"]): p for r in ranks for p in r["phases"]}
    share: dict[tuple[int, str], float] = {}
    for r in ranks:
        for kind in ("alone", "solo"):
            mine = [p for p in r["phases"] if p["kind"] == kind]
            cpu = sum(p["horovod_cpu_seconds"] for p in mine)
            share[r["rank"], kind] = cpu / sum(p["seconds"] for p in mine)

    def phase_speed(group: int, kind: str, corrected: bool = True) -> float:
        """Examples/second of a phase without the allreduce: the sum of the ranks'."""
        total = 0.0
        for r in ranks:
            p = phase[r["rank"], group, kind]
            kept = 1 - share[r["rank"], kind] if corrected else 1.0
            total += p["steps"] * batch / (p["seconds"] * kept)
        return total

    groups = sorted({p["group"] for r in ranks for p in r["phases"]})
    efficiency, uncorrected, machine, own = [], [], [], []
    for g in groups:
        sync = [phase[r["rank"], g, "sync"] for r in ranks]
        sync_speed = n * sync[0]["steps"] * batch / max(p["seconds"] for p in sync)
        solo, alone = phase_speed(g, "solo"), phase_speed(g, "alone")
        efficiency.append(sync_speed / solo)
        uncorrected.append(sync_speed / phase_speed(g, "solo", corrected=False))
        machine.append(alone / solo)
        own.append(sync_speed / alone)
    median = statistics.median
    return {
        "efficiency": median(efficiency),
        "range": [min(efficiency), max(efficiency)],
        "groups_efficiency": efficiency,
        "uncorrected": median(uncorrected),
        "machine": median(machine),
        "sync_own": median(own),
        "horovod_cpu_share": {
            kind: statistics.mean(v for (_, k), v in share.items() if k == kind)
            for kind in ("alone", "solo")
        },
        "groups": len(groups),
        "controller": ranks[0].get("controller"),
        "idle_horovod_threads": any(r.get("idle_horovod_threads") for r in ranks),
        "steps_per_phase": ranks[0]["phases"][0]["steps"],
        "batch": batch,
    }


def bracketed(reference, items: list[tuple[str, object]]) -> tuple[list[dict], list[float]]:
    """Runs ``reference``, then each item followed by ``reference`` again.

    Each item's throughput is set against the mean of the reference runs just before and
    after it: a host whose speed drifts over minutes (a shared machine) cancels out to
    first order, where a reference run made once, or only before, does not (on this
    project's 2-core hosts a run made later in a repeat came out about 0.1 more
    efficient than one made earlier against the same reference).

    Args:
        reference: Callable returning the :func:`speed` of the reference set-up (one
            worker on one core).
        items: ``(name, callable)`` of the two-worker set-ups, in the order to run them;
            each callable returns its set-up's :func:`speed`.

    Returns:
        ``(measured, references)``: per item its name, examples/second, the mean
        reference and its efficiency (throughput / (2 x reference)), and the same from
        the median steps (``typical_efficiency``, None unless every run recorded them);
        and every reference examples/second in run order.
    """
    refs = [reference()]
    measured = []
    for name, measure in items:
        value, typical = measure()
        refs.append(reference())
        ref = (refs[-2][0] + refs[-1][0]) / 2
        typical_refs = [refs[-2][1], refs[-1][1]]
        typical_eff = None
        if typical is not None and None not in typical_refs:
            typical_eff = typical / sum(typical_refs)  # typical / (2 x their mean)
        measured.append(
            {
                "name": name,
                "examples_per_second": value,
                "reference": ref,
                "efficiency": value / (2 * ref),
                "typical_efficiency": typical_eff,
            }
        )
        log(
            f"{name}: efficiency {value / (2 * ref):.2f} (reference {ref:,.0f}/s), "
            f"on median steps {fmt(typical_eff)}"
        )
    return measured, [r[0] for r in refs]


def interleave(repeated: str, repeats: int, others: list[str]) -> list[str]:
    """``repeated`` ``repeats`` times with each of ``others`` placed between them, so
    that no set-up always runs at the same point of the sequence."""
    order = []
    for i in range(max(repeats, len(others))):
        order += [repeated] if i < repeats else []
        order += [others[i]] if i < len(others) else []
    return order


def bench_training(cfg: SuiteConfig, tmp: Path) -> dict:
    """Section 2: examples/second per mode and worker count, on the same cores."""

    data = mnist_data(tmp, cfg.train_size)
    cores = sorted(os.sched_getaffinity(0))
    n_cores = len(cores)
    first: dict[str, dict] = {}  # the first history of each run at the default batch
    counter = itertools.count()
    reference_runs = itertools.count()

    def one_core(batch: int = 0) -> tuple[float, float | None]:
        # The cores take turns: each two-worker set-up, between two of these runs, is set
        # against both of the cores it uses (here one core can be slower than the other
        # for minutes, so a reference always on the first core flattered or wronged it).
        core = cores[next(reference_runs) % n_cores]
        history = train_run(data, tmp / f"r-{next(counter)}", "single:1", cfg, {core}, 1, batch)
        if not batch:
            first.setdefault("single:1", history)
        return speed(history)

    def sync(batch: int = 0) -> tuple[float, float | None]:
        history = train_run(data, tmp / f"s-{next(counter)}", "sync:2", cfg, None, 0, batch)
        if not batch:
            first.setdefault("sync:2", history)
        return speed(history, history["run"]["workers"])

    controller = horovod_controller()
    # Sync's efficiency, and the machine's own ceiling beside it (two independent one-core
    # processes at once); each between two one-core runs.
    setups = {
        "sync": sync,
        "independent": lambda: _independent_pair(data, tmp / f"i-{next(counter)}", cfg, cores),
    }
    order = interleave("sync", cfg.efficiency_repeats, ["independent"])
    measured, refs = bracketed(one_core, [(name, setups[name]) for name in order])
    # The target's measure: sync and the same ranks alone, in alternating phases of one run.
    paired = paired_phases(data, tmp / "paired", cfg)
    log(
        f"sync efficiency, phase-paired: {paired['efficiency']:.2f} "
        f"({paired['range'][0]:.2f}-{paired['range'][1]:.2f} over {paired['groups']} groups)"
    )
    parts: dict[str, list[float]] = {}  # efficiencies per set-up
    typical: dict[str, list[float]] = {}  # the same from median steps
    speeds: dict[str, list[float]] = {}  # examples/second per set-up
    for m in measured:
        parts.setdefault(m["name"], []).append(m["efficiency"])
        speeds.setdefault(m["name"], []).append(m["examples_per_second"])
        if m["typical_efficiency"] is not None:
            typical.setdefault(m["name"], []).append(m["typical_efficiency"])

    def row(run: str, where: str, history: dict, eps: float | None = None, runs: int = 1):
        eps = history["examples_per_second"] if eps is None else eps
        return {
            "run": run,
            "cores": where,
            "workers": history["run"]["workers"],
            "examples_per_second": eps,
            "runs": runs,
            "step_seconds": cfg.train_batch / max(eps, 1e-9),
            "val_accuracy": history["epochs"][-1]["val_accuracy"],
            "train_seconds": history["train_seconds"],
            "controller": history.get("controller"),
        }

    # The table: one-core and sync rows are the medians of the runs above.
    one = statistics.median(refs)
    rows = [
        row("single:1", "1 core", first["single:1"], one, len(refs)),
        row(
            "sync:2",
            "all cores",
            first["sync:2"],
            statistics.median(speeds["sync"]),
            len(speeds["sync"]),
        ),
    ]
    for run, threads in [
        ("single:1", n_cores),
        ("async:1", 0),
        ("async:2", 0),
        ("syncreplicas:2", 0),
        ("syncreplicas:3:aggregate=2", 0),
        ("ssp:2:staleness=2", 0),
        ("easgd:2:tau=4", 0),
        ("avg:2:period=8", 0),
    ]:
        history = train_run(data, tmp / f"t-{len(rows)}", run, cfg, None, threads)
        rows.append(row(run, "all cores", history))
        log(f"training {run} on all cores: {history['examples_per_second']:,.0f} examples/s")
    independent = speeds["independent"]
    rows.append(
        {
            "run": "2 x single:1, independent",
            "cores": "1 core each",
            "workers": 2,
            "examples_per_second": statistics.median(independent),
            "runs": len(independent),
            "step_seconds": None,
            "val_accuracy": None,
            "train_seconds": None,
        }
    )
    all_cores = next(r for r in rows if r["cores"] == "all cores" and r["run"] == "single:1")
    for r in rows:
        r["vs_single_all_cores"] = r["examples_per_second"] / all_cores["examples_per_second"]
        r["efficiency"] = r["examples_per_second"] / (r["workers"] * one)
    # Sync efficiency against the per-worker batch (the compute per allreduce): a sync run
    # between two one-core runs at a larger batch.
    sweep = []
    for batch in (4096,) if not cfg.quick else (128,):
        (pair,), _ = bracketed(lambda b=batch: one_core(b), [("sync", lambda b=batch: sync(b))])
        single, both = pair["reference"], pair["examples_per_second"]
        sweep.append(
            {
                "batch": batch,
                "single_one_core": single,
                "sync2": both,
                "efficiency": both / (2 * single),
            }
        )
        log(f"sync efficiency at batch {batch}/worker: {sweep[-1]['efficiency']:.2f}")
    whole_runs = statistics.median(parts["sync"])
    sweep.append(
        {
            "batch": cfg.train_batch,
            "single_one_core": one,
            "sync2": rows[1]["examples_per_second"],
            "efficiency": whole_runs,
        }
    )
    sweep.sort(key=lambda b: b["batch"])
    sync_idle = first["sync:2"].get("idle_horovod_threads")
    return {
        "batch_sweep": sweep,
        "rows": rows,
        # The target's measure; whole runs between one-core runs beside it.
        "sync_efficiency": paired["efficiency"],
        "sync_efficiency_runs": whole_runs,
        "sync_vs_all_cores": rows[1]["examples_per_second"] / all_cores["examples_per_second"],
        "machine_ceiling": statistics.median(parts["independent"]),
        "sync_losses": parts,
        "typical_efficiency": typical,
        "paired": paired,
        "references": refs,
        "order": order,
        "controller": controller,
        "idle_horovod_threads": bool(sync_idle),
        "model_bytes": _model_bytes(data),
        "batch": cfg.train_batch,
        "cores": n_cores,
    }


def _model_bytes(data: Path) -> int:
    from distrain.datasets.info import DatasetInfo
    from distrain.learning.models import build_model

    model = build_model(DatasetInfo.load(data), "cnn")
    return int(sum(int(v.shape.num_elements()) for v in model.trainable_variables) * 4)


def targets(results: dict) -> list[dict]:
    """Section 2's target: sync scaling efficiency at N = 2, phase-paired."""
    out = []
    eff = results["training"]["sync_efficiency"]
    out.append(
        {
            "target": "sync scaling efficiency at N = 2 >= 0.90",
            "measured": f"{eff:.2f} (phase-paired)",
            "met": eff >= 0.90,
            "miss": f"{0.90 - eff:.2f} short",
        }
    )
    return out


def _pairs(training: dict) -> str:
    """', the median of k runs (range a-b)' for a sync efficiency measured more than once."""
    effs = training["sync_losses"]["sync"]
    if len(effs) < 2:
        return ""
    return (
        f", the median of {len(effs)} sync:2 runs, each set against the one-core runs just "
        f"before and after it (range {min(effs):.2f}-{max(effs):.2f})"
    )


def _paired_text(paired: dict) -> list[str]:
    """The paragraph and table of the phase-paired measure of sync efficiency."""
    lo, hi = paired["range"]
    share = paired["horovod_cpu_share"]
    return [
        "Phase-paired measure (the target's). One sync:2 run whose ranks, built as a sync "
        "run builds them (`benchmarks/paired_worker.py`), take turns between phases of "
        f"{paired['steps_per_phase']} steps of batch {paired['batch']}, each started at a "
        "barrier: *sync*, both ranks running the sync step; *alone*, both running the same "
        "step without the allreduce at the same time; and *solo*, one rank running it while "
        "the other sleeps, once per rank: one worker on 1/N of the cores with the rest of "
        f"the machine idle. {paired['groups']} groups of these four phases, the order "
        "rotating from group to group; each group sets sync's examples/second against the "
        "sum of the two solo phases' (the efficiency) and the alone phase's. The phases of a "
        "group lie a few seconds apart, so the host's drift, which moves whole runs minutes "
        "apart (below), hits them alike. Horovod's threads run in "
        f"every phase; they took {share['solo'] * 100:.1f} % of a rank's core in the solo "
        f"phases and {share['alone'] * 100:.1f} % in the alone ones, which those phases get "
        "back, as a worker without Horovod would not have lost it (without that the "
        f"efficiency is {paired['uncorrected']:.2f}).",
        "",
        "| phases set against each other | median over groups |",
        "|---|---|",
        f"| sync / solo: sync scaling efficiency | **{paired['efficiency']:.2f}** "
        f"({lo:.2f}-{hi:.2f}) |",
        f"| alone / solo: what the machine costs two workers | {paired['machine']:.2f} |",
        f"| sync / alone: what sync itself costs | {paired['sync_own']:.2f} |",
        "",
    ]


def _sync_losses(training: dict) -> list[str]:
    """The table splitting sync's loss of efficiency at N = 2."""

    losses, controller = training["sync_losses"], training["controller"]
    typical = training.get("typical_efficiency", {})
    med = {k: statistics.median(v) for k, v in losses.items()}
    rows = [
        (
            "two independent processes",
            "independent",
            "the machine (shared caches, memory bandwidth, the host)",
            1.0,
        ),
        (
            f"sync:2 over {controller}",
            "sync",
            "Horovod's background thread, the allreduce rounds of each step and the waits "
            "for the slower rank",
            med["independent"],
        ),
    ]
    order = ", ".join(training["order"])
    refs = training["references"]
    lines = [
        "Where sync's efficiency goes. The set-ups below ran in turn with a one-worker, "
        f"one-core run before and after each (order: {order}); the one-core runs take the "
        "cores in turn, so each set-up is set against the mean of one run on each of its "
        "two cores, and the host's drift over minutes cancels (the one-core runs ranged "
        f"{min(refs):,.0f}-{max(refs):,.0f} examples/s). Medians where a set-up ran more "
        "than once, the range in brackets. The column *on median steps* is the same "
        "ratio from each run's median step time instead of its examples/second.",
        "",
        "| two workers, one core each | efficiency | on median steps | lost to | lost |",
        "|---|---|---|---|---|",
        *[
            f"| {label} | {spread(losses[key])} | "
            f"{spread(typical[key]) if typical.get(key) else '—'} | {cause} | "
            f"{before - med[key]:.2f} |"
            for label, key, cause, before in rows
        ],
        "",
    ]
    if typical.get("sync"):
        gap = round(statistics.median(typical["sync"]) - med["sync"], 2) + 0.0  # no -0.00
        lines += [
            "A sync step ends when the slower rank's does. On this shared host one core at a "
            "time can run slower for a few seconds up to minutes (another load on the host): "
            "a burst on either core slows every sync step while it lasts, but a one-core run "
            "only during a burst on its own core. The median step leaves out bursts shorter "
            "than half a run; the gap between the two columns for sync:2, "
            f"{gap:+.2f}, is what those cost it. Slow periods as long as a run move both "
            "columns alike: the spread between repeats shows them.",
            "",
        ]
    return lines


def render(results: dict) -> list[str]:
    """Section 2's lines of BENCHMARKS.md."""
    lines: list[str] = []
    tr = results["training"]
    idle = " and its threads at idle priority" if tr.get("idle_horovod_threads") else ""
    lines += [
        "",
        "## 2. Training throughput",
        "",
        f"MNIST sample, CNN, batch {tr['batch']} per worker, {tr['cores']} cores for every "
        "configuration (threads per worker = cores / workers; sync ranks bound to their "
        "cores, started as `distrain train` starts them, with Horovod's "
        f"{tr['controller']} controller{idle}); examples/second after the first epoch. "
        "Efficiency = throughput / (workers x one worker on one core). Rows run more than "
        "once show the median examples/s (runs in brackets); their efficiency divides by "
        "the median one-core run.",
        "",
        "| run | cores | workers | examples/s | vs single on all cores | efficiency | "
        "val accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in tr["rows"]:
        run = f"{r['run']} over {r['controller']}" if r.get("controller") else r["run"]
        run += f" ({r['runs']} runs)" if r.get("runs", 1) > 1 else ""
        lines.append(
            f"| {run} | {r['cores']} | {r['workers']} | {r['examples_per_second']:,.0f} | "
            f"{r['vs_single_all_cores']:.2f} | {r['efficiency']:.2f} | "
            f"{fmt(r['val_accuracy'], '.4f')} |"
        )
    lines += [
        "",
        f"Sync efficiency at N = 2: **{tr['sync_efficiency']:.2f}**, phase-paired (the "
        f"target's measure, below). Whole runs: {tr['sync_efficiency_runs']:.2f}{_pairs(tr)} "
        f"({tr['sync_vs_all_cores']:.2f} of one process on all cores). Two independent "
        f"one-core processes reach {tr['machine_ceiling']:.2f} of twice one alone (measured "
        "as below): that is "
        "this machine's ceiling for any two-worker run (shared caches and memory bandwidth), "
        "before any communication.",
        "",
        *_paired_text(tr["paired"]),
        *_sync_losses(tr),
        "Sync efficiency at N = 2 against the per-worker batch (more compute per allreduce); "
        f"batch {tr['batch']} is the measure above, the others one sync:2 run each between "
        "two one-core runs at the same batch:",
        "",
        "| batch per worker | one worker, one core, examples/s | sync:2 examples/s | efficiency |",
        "|---|---|---|---|",
        *[
            f"| {b['batch']} | {b['single_one_core']:,.0f} | {b['sync2']:,.0f} | "
            f"{b['efficiency']:.2f} |"
            for b in tr["batch_sweep"]
        ],
    ]
    return lines
