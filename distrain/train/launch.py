"""Starting a training run's processes on this machine, and the commands that do it.

The mode says which processes a run has (:meth:`distrain.train.modes.Mode.local_processes`);
this module starts them, each made to die with the launcher, watches them, and stops
every one when the run's main process ends. The helpers below build the commands the
modes use: ``distrain worker`` and ``distrain server``, and Horovod's ranks under
``mpirun`` (as the MPIJob's launcher runs them on a cluster) or ``horovodrun``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from distrain.progress import Progress
from distrain.train.config import ConfigError, TrainConfig, TrainingError
from distrain.train.worker import ERRORS_DIR

# [sync, MPI] mpirun's options, the same on a cluster (the MPIJob's launcher) and here: no
# binding by mpirun (each rank binds itself, see worker.bind_rank_to_cores), and TCP or
# shared memory rather than InfiniBand's verbs.
MPIRUN_OPTIONS = [
    "-bind-to",
    "none",
    "-map-by",
    "slot",
    "-mca",
    "pml",
    "ob1",
    "-mca",
    "btl",
    "^openib",
]
# [sync, MPI] What ranks on other hosts (over ssh) need of the launcher's environment; local
# ranks are mpirun's children and inherit all of it.
MPIRUN_EXPORTS = ["PATH", "LD_LIBRARY_PATH", "TF_USE_LEGACY_KERAS", "PYTHONUNBUFFERED"]
# [sync, MPI] A local run's ranks talk over loopback only: nothing on another host can
# reach their unauthenticated TCP ports. (TensorFlow's gRPC servers, the parameter-server
# modes', bind every interface whatever the cluster spec says; on a cluster each run's
# NetworkPolicy admits its own pods only, see distrain.k8s.objects.network_policy.)
MPIRUN_LOOPBACK = ["-mca", "btl_tcp_if_include", "lo", "-mca", "oob_tcp_if_include", "lo"]
# [sync, MPI] Open MPI settings of local runs (and of CPU ranks on a cluster, given to the
# MPIJob's mpirun as -mca options). A rank's waits yield its core instead of
# spinning on it: the ranks share their cores with TensorFlow's compute threads, and Open
# MPI's default busy-polling cost sync:2 a third of its throughput on 2 cores.
MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}

# Open MPI refuses to start as root (as in many containers) unless told that it is meant.
MPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mca_options(env: dict[str, str]) -> list[str]:
    """``OMPI_MCA_<name>`` settings as mpirun's ``-mca <name> <value>`` options."""
    prefix = "OMPI_MCA_"
    return [
        arg
        for key, value in env.items()
        if key.startswith(prefix)
        for arg in ("-mca", key.removeprefix(prefix), value)
    ]


def venv_tool(name: str) -> str | None:
    """``name`` next to this Python (a venv's bin/, where setup puts it), else on PATH."""
    local = Path(sys.executable).with_name(name)
    return str(local) if local.exists() else shutil.which(name)


def _horovodrun() -> str:
    found = venv_tool("horovodrun")
    if not found:  # an installation to fix, not a failure to retry
        raise ConfigError(
            "horovodrun not found: sync mode needs Horovod (run scripts/setup.sh, which builds it)"
        )
    return found


@functools.cache
def mpi_controller_available() -> bool:
    """Whether sync runs can use Horovod's MPI controller here.

    True when ``mpirun`` is at hand and Horovod's TensorFlow extension links ``libmpi``.
    The extension's dynamic section is read, not the extension imported: importing it would
    load TensorFlow into the launcher (each rank's ``hvd.init()`` still fails clearly on a
    build without MPI).
    """
    spec = importlib.util.find_spec("horovod")
    if not venv_tool("mpirun") or spec is None or not spec.submodule_search_locations:
        return False
    package = Path(next(iter(spec.submodule_search_locations)))
    return any(
        name.startswith("libmpi.so")
        for so in package.glob("tensorflow/mpi_lib*.so")
        for name in elf_needed(so)
    )


def elf_needed(path: Path) -> list[str]:
    """The libraries a 64-bit little-endian ELF file names as ``DT_NEEDED``.

    Reads the section headers, the dynamic section and its string table: a few KB, not the
    whole file (Horovod's extension is about 50 MB).
    """
    with open(path, "rb") as f:

        def read(offset: int, size: int) -> bytes:
            f.seek(offset)
            return f.read(size)

        header = read(0, 64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return []
        (shoff,) = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
        table = read(shoff, shnum * shentsize)
        sections = [struct.unpack_from("<IIQQQQII", table, i * shentsize) for i in range(shnum)]
        needed = []
        for _, kind, _, _, offset, size, link, _ in sections:
            if kind != 6:  # SHT_DYNAMIC
                continue
            strings_offset = sections[link][4]
            entries = read(offset, size)
            for tag, value in struct.iter_unpack("<qQ", entries):
                if tag == 1:  # DT_NEEDED
                    name = read(strings_offset + value, 256).split(b"\0", 1)[0]
                    needed.append(name.decode())
        return needed


def sync_controller(cfg: TrainConfig) -> str:
    """[sync] ``mpi`` or ``gloo``: the run's :attr:`TrainConfig.controller`, resolved.

    Raises:
        ConfigError: ``mpi`` was asked for and this Horovod or machine lacks it.
    """
    elastic = getattr(cfg.run.impl, "elastic", False)
    if cfg.controller == "gloo" or (cfg.controller == "auto" and elastic):
        return "gloo"
    if mpi_controller_available():
        return "mpi"
    if cfg.controller == "mpi":
        raise ConfigError(
            f"[{cfg.run.name}] controller 'mpi' needs mpirun and a Horovod built with MPI "
            "(scripts/setup.sh installs Open MPI into .venv and builds it); use 'gloo' or 'auto'"
        )
    return "gloo"


def horovod_env(cfg: TrainConfig) -> dict[str, str]:
    """[sync] Environment Horovod's ranks need on top of the run's own (MPI's settings)."""
    if sync_controller(cfg) != "mpi":
        return {}
    env = dict(MPI_ENV, **(MPI_ROOT_ENV if os.geteuid() == 0 else {}))
    env = {key: value for key, value in env.items() if key not in os.environ}  # yours win
    mpirun_dir = Path(venv_tool("mpirun")).parent
    if mpirun_dir == Path(sys.executable).parent:
        # PyPI's Open MPI (setup's, in the venv) looks for its own files under the prefix
        # it was built in, unless told where it was installed.
        env["OPAL_PREFIX"] = str(mpirun_dir.parent)
    return env


def main_process(cfg: TrainConfig, config_path: str | os.PathLike):
    """The run's main process, as the mode starts it locally."""
    processes = cfg.run.impl.local_processes(cfg, Path(config_path), Path(cfg.output_dir) / "logs")
    return next(p for p in processes if p.main)


def launch_env(cfg: TrainConfig) -> dict[str, str]:
    """Environment the run's main process gets on top of the run's own."""
    return dict(main_process(cfg, "-").env)


# How this machine runs the ``distrain`` command; in the images it is the entrypoint
# ``distrain`` itself. Only the prefix differs: the subcommands below are the same.
LOCAL_PREFIX = (sys.executable, "-m", "distrain")


def worker_args(config_path: str | os.PathLike) -> list[str]:
    """The ``distrain`` subcommand of a training process (a rank, or the PS coordinator)."""
    return ["worker", "--config", str(config_path)]


def server_args(threads: int, output_dir: str | os.PathLike = "") -> list[str]:
    """The ``distrain`` subcommand of a parameter-server or worker server (PS modes).

    ``output_dir``: the run's output folder, where a failing server records its error.
    """
    return [
        "server",
        "--threads",
        str(threads),
        *(["--output", str(output_dir)] * bool(output_dir)),
    ]


def worker_command(config_path: str | os.PathLike) -> list[str]:
    """The local command of a training process."""
    return [*LOCAL_PREFIX, *worker_args(config_path)]


def server_command(threads: int, output_dir: str | os.PathLike = "") -> list[str]:
    """The local command of a server process (PS modes)."""
    return [*LOCAL_PREFIX, *server_args(threads, output_dir)]


def local_host_aliases() -> list[str]:
    """Distinct names of this machine: ``localhost``, ``127.0.0.1``, its hostname, its IPs.

    Elastic Horovod counts a failed worker against its host and drops the host; given one
    slot per name, a lost local worker takes only its own slot with it.
    """
    import psutil

    local = {
        a.address
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family == socket.AF_INET
    }
    names = ["localhost", "127.0.0.1", socket.gethostname(), *sorted(local)]
    aliases = []
    for name in names:
        try:
            address = socket.gethostbyname(name)
        except OSError:
            continue
        if address in local and name not in aliases:
            aliases.append(name)
    return aliases


def host_discovery_script(path: Path, slots: int) -> Path:
    """[sync, elastic] The script horovodrun polls for hosts: ``slots`` local slots.

    One slot per local alias while there are aliases, the rest on the last one.
    """
    aliases = local_host_aliases()[:slots] or ["localhost"]
    counts = [1] * len(aliases)
    counts[-1] += slots - len(aliases)
    lines = "".join(f"echo {name}:{count}\n" for name, count in zip(aliases, counts, strict=True))
    path.write_text("#!/bin/sh\n# Written by distrain: this machine's slots.\n" + lines)
    path.chmod(0o755)
    return path


def launch_command(cfg: TrainConfig, config_path: str | os.PathLike) -> list[str]:
    """The command of the run's main process (for parameter-server modes: the chief's)."""
    return main_process(cfg, config_path).command


def sync_command(cfg: TrainConfig, cmd: list[str]) -> list[str]:
    """[sync] ``cmd`` started as ``cfg.run.processes`` ranks on this machine."""
    n = cfg.run.processes
    if sync_controller(cfg) == "mpi":
        # [sync, MPI] mpirun itself, as the MPIJob's launcher runs it (horovodrun --mpi
        # would put a shell between it and this process, which a killed launcher orphans).
        hosts = ["-H", f"localhost:{n}"]
        return [venv_tool("mpirun"), "-np", str(n), *hosts, *MPIRUN_OPTIONS, *MPIRUN_LOOPBACK, *cmd]
    low = cfg.run.option("min")
    if low is not None:  # [sync, elastic] between min and n ranks, hosts found by a script
        script = host_discovery_script(Path(cfg.output_dir) / "discover_hosts.sh", n)
        hosts = ["--min-np", str(low), "--max-np", str(n)]
        hosts += ["--host-discovery-script", str(script)]
    else:
        hosts = ["-H", f"localhost:{n}"]
    return [
        _horovodrun(),
        "-np",
        str(n),
        *hosts,
        "--gloo",
        "--start-timeout",
        str(cfg.start_timeout),
        *cmd,
    ]


def free_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


# A separate tiny process runs die_with_parent before the command, rather than
# ``preexec_fn``, whose fork runs the parent's fork handlers (gRPC's abort in a process that
# has loaded it).
_GUARD = (
    "import os, sys\n"
    "from distrain.train.runtime import die_with_parent\n"
    "die_with_parent(int(sys.argv[1]))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def guarded(cmd: list[str]) -> list[str]:
    """``cmd`` made to die with this process (Linux; elsewhere unchanged).

    A launcher that is itself killed (``kill -9``, a pod evicted, a KFP step cancelled)
    would otherwise leave its workers and parameter servers running.
    """
    if sys.platform != "linux":
        return cmd
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *cmd]


class _Processes:
    """Child processes of one run, each in its own session so its children go with it.

    They are started by the thread that waits for them, and each is killed by the kernel
    if that thread dies (``PR_SET_PDEATHSIG``, see :func:`guarded`): no run leaves orphans.
    """

    def __init__(self):
        self.procs: dict[str, subprocess.Popen] = {}

    def start(
        self, name: str, cmd: list[str], env: dict, log: Path | None = None, pipe: bool = False
    ):
        stdout = open(log, "wb") if log else None  # noqa: SIM115 (closed with the process)
        if pipe:
            stdout = subprocess.PIPE
        stderr = subprocess.STDOUT if log or pipe else None
        self.procs[name] = subprocess.Popen(
            guarded(cmd), env=env, start_new_session=True, stdout=stdout, stderr=stderr
        )
        if stdout and not pipe:
            stdout.close()
        return self.procs[name]

    def stop_all(self, grace: float = 10.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
                _signal_group(proc, signal.SIGCONT)  # a stopped process handles it too
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


# The driver's line at each epoch's end: ``[run] epoch 2/5  loss ...``.
EPOCH_LINE = re.compile(r"\] epoch (\d+)/(\d+)\b")


def _forward(stream, bar: Progress) -> None:
    """Prints the run's output above its progress line; epoch lines move the bar."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        found = EPOCH_LINE.search(line)
        if found:
            bar.update(completed=int(found[1]), total=int(found[2]))
        bar.print(line)
    stream.close()


class WorkerFailed(TrainingError):
    """A training process failed and said why (its record in ``<output>/errors/``).

    Attributes:
        retryable: Whether the process's error was transient (:mod:`distrain.failures`):
            a process that failed on bad data or settings fails every attempt.
    """

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


def process_failure(out: Path, message: str) -> TrainingError:
    """The error of a failed run: ``message``, with the first process's own words if any.

    Each ``distrain worker`` that fails records its error (``worker.record_error``); the
    earliest record is the cause (its peers fail after it, on the lost connection), and
    it says whether the failure is transient. A process killed from outside records
    nothing: that is a lost worker, transient.
    """
    records = []
    for path in sorted((out / ERRORS_DIR).glob("*.json"), key=lambda p: p.stat().st_mtime):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    if not records:
        return TrainingError(message)
    first = records[0]
    return WorkerFailed(
        f"{message}: {first.get('step', 'a process')} failed: {first.get('message', '')}",
        retryable=bool(first.get("retryable", True)),
    )


def run_training(cfg: TrainConfig, timeout: float | None = None) -> dict:
    """Runs a training run to completion with local processes.

    The training output goes to this process's stdout, so progress shows as it happens
    (one line per epoch); PS-mode servers log to ``<output>/logs/``.

    Args:
        cfg: The run's configuration.
        timeout: Seconds before the run is stopped (None: no limit).

    Returns:
        The run's history (``history.json``).

    Raises:
        TrainingError: A process failed or the run timed out; the message says which.
    """
    from distrain.train.inputs import DatasetInfo

    DatasetInfo.load(cfg.data_dir)  # a missing or bad data directory fails before any start
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = cfg.save(out / "train_config.json")
    # DISTRAIN_RUN_DIR marks every process of the run (to find them, e.g. leftovers).
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_USE_LEGACY_KERAS="1", DISTRAIN_RUN_DIR=str(out))
    env.pop("TF_CONFIG", None)
    # The cores the run's processes share on this host (its history records them).
    env["DISTRAIN_HOST_CORES"] = str(len(os.sched_getaffinity(0)))
    # One temporary directory for all the run's processes, removed with the run: what they
    # leave in it (autograph's generated modules, which a process removes only at a normal
    # exit, and parameter-server processes end with os._exit or are stopped) goes too.
    scratch = tempfile.mkdtemp(prefix="distrain-")
    env["TMPDIR"] = scratch
    procs = _Processes()
    deadline = time.monotonic() + timeout if timeout else None
    # In a terminal, one updating line shows the run's epochs and time (distrain.progress).
    bar = Progress(f"train {cfg.run.name}", cfg.epochs, "epochs", stream=sys.stdout)
    bar = bar if bar.live else None
    forward = None
    logs = out / "logs"
    shutil.rmtree(out / ERRORS_DIR, ignore_errors=True)  # an earlier attempt's
    if bar is not None:
        bar.__enter__()
    try:
        processes = cfg.run.impl.local_processes(cfg, config_path, logs)
        if any(p.log for p in processes):
            logs.mkdir(exist_ok=True)
        main_spec = next(p for p in processes if p.main)
        for p in processes:
            if p.main:
                print(f"[{cfg.run.name}] $ {' '.join(p.command)}", flush=True)
            live = p.main and bar is not None and not p.log
            procs.start(p.name, p.command, dict(env, **p.env), p.log, pipe=live)
        main = procs.procs[main_spec.name]
        if main.stdout is not None:  # a terminal: the run's lines above its progress line
            forward = threading.Thread(target=_forward, args=(main.stdout, bar), daemon=True)
            forward.start()
        critical = [p for p in processes if p.critical]

        def check_critical() -> None:
            for p in critical:
                code = procs.procs[p.name].poll()
                if code is not None:
                    raise process_failure(
                        out,
                        f"[{cfg.run.name}] {p.what or p.name} exited with code {code}; see {logs}",
                    )

        while main.poll() is None:
            check_critical()
            if deadline and time.monotonic() > deadline:
                if main_spec.stacks_on_timeout:  # `distrain worker` itself
                    main.send_signal(signal.SIGUSR1)  # its threads' stacks, to stderr
                    time.sleep(2.0)
                raise TrainingError(f"[{cfg.run.name}] timed out after {timeout} s")
            time.sleep(0.2)
        if main.returncode != 0:
            # A critical process (a parameter server) that died is the cause of the main
            # process's failure that followed it, even when both ended between two looks.
            time.sleep(0.2)
            check_critical()
            raise process_failure(
                out,
                f"[{cfg.run.name}] training failed: {main_spec.command[0]} exited with code "
                f"{main.returncode}",
            )
    finally:
        procs.stop_all()
        if forward is not None:
            forward.join(timeout=5)
        if bar is not None:
            bar.__exit__(*sys.exc_info())
        shutil.rmtree(scratch, ignore_errors=True)
    history_path = out / "history.json"
    if not history_path.exists():
        raise TrainingError(f"[{cfg.run.name}] finished but wrote no {history_path}")
    return json.loads(history_path.read_text())
