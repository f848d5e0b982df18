"""Plain TensorFlow peers of distrain's training modes, for the benchmark suite.

Each peer is a small script written the way TensorFlow's own documentation writes the
mode, training the same model (``distrain.learning.models.build_model``) on the same
preprocessed TFRecords (``distrain.learning.inputs.make_dataset``) with the same batch,
learning rate and threads as distrain, so that distrain's modes can be measured against
them:

=============  ==============================  =============================================
kind           module                          what it is
=============  ==============================  =============================================
single         ``benchmarks.peers.single``     one process, a ``tf.function`` step loop
mwms           ``benchmarks.peers.mwms``       ``MultiWorkerMirroredStrategy``, custom loop
async          ``benchmarks.peers.between_graph``  between-graph replication, async PS
syncreplicas   ``benchmarks.peers.between_graph``  the same with ``SyncReplicasOptimizer``
=============  ==============================  =============================================

:func:`run_peer` starts the processes of one run on free localhost ports (``TF_CONFIG``
per process, as on Kubernetes), waits for worker 0's ``RESULT {...}`` line, and kills
every process it started before it returns (parameter servers never end by themselves).

Throughput is distrain's measure: examples per second over the epochs after the first.

    from benchmarks.peers import run_peer
    run_peer("async", "/tmp/peer_data", workers=2, batch=64, model="mlp", epochs=3)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from distrain.train.launch import free_ports

ROOT = Path(__file__).resolve().parents[2]

#: kind -> the module that runs it.
MODULES = {
    "single": "benchmarks.peers.single",
    "mwms": "benchmarks.peers.mwms",
    "async": "benchmarks.peers.between_graph",
    "syncreplicas": "benchmarks.peers.between_graph",
}
KINDS = tuple(MODULES)


RESULT_PREFIX = "RESULT "
# After worker 0 printed its result, how long the other workers get to end by themselves.
_GRACE_SECONDS = 20.0


class PeerError(RuntimeError):
    """A peer run failed, timed out, or printed no result."""


def worker_threads(threads: int, workers: int) -> int:
    """Intra-op threads per worker: ``threads``, or ``cores // workers`` (at least 1)."""
    if threads:
        return threads
    return max(1, (os.cpu_count() or 1) // max(workers, 1))


def parse_result(text: str) -> dict | None:
    """The last ``RESULT {...}`` line of a process's output, or None.

    Anything after the JSON object on its line is ignored (another thread's output).
    """
    result = None
    decoder = json.JSONDecoder()
    for line in text.splitlines():
        if line.startswith(RESULT_PREFIX):
            with contextlib.suppress(ValueError):
                result, _ = decoder.raw_decode(line[len(RESULT_PREFIX) :])
    return result


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-chars:]


def _kill(proc: subprocess.Popen) -> None:
    """Kills the process's whole session (its own process group) and reaps it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        proc.kill()
        proc.wait()
    # Any child it left in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_peer(
    kind: str,
    data_dir: str,
    workers: int,
    batch: int,
    model: str,
    epochs: int,
    threads: int = 0,
    aggregate: int | None = None,
    timeout: float = 600,
    *,
    ps: int = 1,
    seed: int = 0,
    keep_logs: bool = False,
) -> dict:
    """Runs one plain TensorFlow peer on localhost and returns worker 0's result.

    Args:
        kind: ``single``, ``mwms``, ``async`` or ``syncreplicas``.
        data_dir: A preprocessed data directory (``metadata.json`` and TFRecords).
        workers: Worker processes (1 for ``single``).
        batch: Examples per step of one worker.
        model: A model name of ``distrain.learning.models`` for the data set (``mlp``...).
        epochs: Epochs (see the peer modules for what an epoch is in each mode).
        threads: Intra-op threads per worker; 0 gives each ``cores // workers`` (>= 1).
            Inter-op threads are 2 per worker; parameter servers get 1 intra-op and 4
            inter-op threads.
        aggregate: ``syncreplicas``: gradients per update (default: ``workers``).
        timeout: Seconds before the run is given up (every process is killed).
        ps: Parameter servers of ``async`` and ``syncreplicas``.
        seed: Base seed of the model and the shuffles.
        keep_logs: Keep each process's stdout and stderr (``result["logs"]``); by default
            they are deleted after a successful run and kept after a failed one.

    Returns:
        Worker 0's result: ``kind``, ``workers``, ``batch``, ``model``,
        ``examples_per_second``, ``steps``, ``seconds`` and more (``pids``: the processes
        started, all ended; ``worker_exit_codes``, None for a worker still running after a
        grace period, then killed).

    Raises:
        ValueError: Unknown kind or bad sizes.
        PeerError: A process failed, the run timed out, or worker 0 printed no result.
    """
    if kind not in MODULES:
        raise ValueError(f"unknown peer kind {kind!r}; one of {', '.join(KINDS)}")
    if workers < 1 or batch < 1 or epochs < 1:
        raise ValueError("workers, batch and epochs must be positive")
    if kind == "single" and workers != 1:
        raise ValueError("the single peer has one worker")
    ps_count = ps if kind in ("async", "syncreplicas") else 0
    if kind in ("async", "syncreplicas") and ps_count < 1:
        raise ValueError(f"{kind} needs at least one parameter server")
    if kind == "syncreplicas":
        aggregate = aggregate or workers
        if not 1 <= aggregate <= workers:
            raise ValueError(f"aggregate must be in 1..{workers}, got {aggregate}")
    intra = worker_threads(threads, workers)

    ports = free_ports(workers + ps_count)  # the launcher's, as distrain's own runs get them
    cluster = {"worker": [f"localhost:{p}" for p in ports[:workers]]}
    if ps_count:
        cluster["ps"] = [f"localhost:{p}" for p in ports[workers:]]
    common = [
        "--data-dir",
        str(data_dir),
        "--batch",
        str(batch),
        "--model",
        model,
        "--epochs",
        str(epochs),
        "--seed",
        str(seed),
        "--kind",
        kind,
    ]
    if kind == "syncreplicas":
        common += ["--aggregate", str(aggregate)]

    env = dict(os.environ)
    env["TF_USE_LEGACY_KERAS"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"

    tasks = [("ps", i, 1) for i in range(ps_count)] + [("worker", i, intra) for i in range(workers)]
    logdir = Path(tempfile.mkdtemp(prefix=f"peer-{kind}-"))
    procs: dict[tuple[str, int], subprocess.Popen] = {}
    logs: dict[tuple[str, int], Path] = {}
    started = time.monotonic()
    succeeded = False
    try:
        for job, index, n_threads in tasks:
            task_env = dict(env)
            if kind != "single":
                task_env["TF_CONFIG"] = json.dumps(
                    {"cluster": cluster, "task": {"type": job, "index": index}}
                )
            # stdout (the RESULT line) apart from stderr: TensorFlow's threads write to
            # stderr at any moment, also in the middle of a line of stdout.
            log = logdir / f"{job}{index}"
            logs[(job, index)] = log
            with open(f"{log}.out", "wb") as out, open(f"{log}.err", "wb") as err:
                procs[(job, index)] = subprocess.Popen(
                    [sys.executable, "-m", MODULES[kind], *common, "--threads", str(n_threads)],
                    cwd=ROOT,
                    env=task_env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
        chief = procs[("worker", 0)]
        workers_procs = {k: p for k, p in procs.items() if k[0] == "worker"}

        def failure(message: str) -> PeerError:
            details = "\n".join(
                f"--- {job}{index} (exit {procs[(job, index)].poll()}) ---\n"
                f"{_tail(Path(f'{path}.out'), 1000)}{_tail(Path(f'{path}.err'))}"
                for (job, index), path in logs.items()
            )
            return PeerError(f"{kind} peer: {message} (logs in {logdir})\n{details}")

        # Wait for worker 0; a worker failing first would leave the others waiting forever.
        while chief.poll() is None:
            if time.monotonic() - started > timeout:
                raise failure(f"timed out after {timeout:g} s")
            for (job, index), p in procs.items():
                if p.poll() not in (None, 0):
                    raise failure(f"{job}{index} failed with exit code {p.returncode}")
            time.sleep(0.2)
        if chief.returncode != 0:
            raise failure(f"worker 0 failed with exit code {chief.returncode}")
        result = parse_result(_tail(Path(f"{logs[('worker', 0)]}.out"), 10**7))
        if result is None:
            raise failure("worker 0 printed no RESULT line")
        # The other workers end by themselves once the global step reached the end.
        deadline = time.monotonic() + _GRACE_SECONDS
        while any(p.poll() is None for p in workers_procs.values()):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        result["lingering_workers"] = sum(p.poll() is None for p in workers_procs.values())
        # None: still running after the grace period (killed below).
        result["worker_exit_codes"] = [p.poll() for p in workers_procs.values()]
        result["wall_seconds"] = time.monotonic() - started
        result["threads"] = intra
        result["pids"] = [p.pid for p in procs.values()]
        if keep_logs:
            result["logs"] = str(logdir)
        succeeded = True
        return result
    finally:
        for proc in procs.values():
            _kill(proc)
        if succeeded and not keep_logs:
            shutil.rmtree(logdir, ignore_errors=True)


# Shared by the peer scripts.


def peer_args(argv: list[str] | None = None):
    """The command line every peer script takes (``run_peer`` writes it)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--batch", type=int, required=True, help="examples per worker step")
    parser.add_argument("--model", required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", default="")
    parser.add_argument("--aggregate", type=int, default=0, help="syncreplicas: A")
    return parser.parse_args(argv)


def tf_config() -> dict:
    """``TF_CONFIG`` of this process (empty without one)."""
    return json.loads(os.environ.get("TF_CONFIG", "{}"))


def steady_rate(epoch_seconds: list[float], epoch_examples: list[int]) -> tuple[float, int, float]:
    """distrain's measure: (examples/s, examples, seconds) over the epochs after the first."""
    if len(epoch_seconds) > 1:
        epoch_seconds, epoch_examples = epoch_seconds[1:], epoch_examples[1:]
    seconds, examples = sum(epoch_seconds), sum(epoch_examples)
    return (examples / seconds if seconds else 0.0), examples, seconds


def emit_epochs(kind, args, workers, global_batch, steps_per_epoch, seconds, examples, losses, lr):
    """Emits the result of a peer that times its own epochs (single, mwms)."""
    rate, steady_examples, steady_seconds = steady_rate(seconds, examples)
    emit(
        {
            "kind": kind,
            "workers": workers,
            "batch": args.batch,
            "global_batch": global_batch,
            "model": args.model,
            "examples_per_second": rate,
            "steps": steps_per_epoch * args.epochs,
            "steps_per_epoch": steps_per_epoch,
            "seconds": steady_seconds,
            "examples": steady_examples,
            "epoch_seconds": seconds,
            "loss": losses,
            "learning_rate": lr,
        }
    )


def emit(result: dict) -> None:
    """Prints the one ``RESULT {...}`` line that :func:`run_peer` reads (in one write)."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
