"""The Horovod engine: how its ranks start (here and on a cluster), set up, and exchange.

Every mode whose processes are Horovod ranks (sync, elastic sync, avg, tensor, pipeline,
hybrid) names :data:`HOROVOD` (or :data:`ELASTIC_HOROVOD`) as its engine instead of
inheriting this code. It owns:

* launch: ``mpirun`` (as the MPIJob's launcher runs it) or ``horovodrun`` (gloo, and
  elastic runs with host discovery) on this machine, whether this Horovod has MPI (read
  from its extension's ELF header), and the MPIJob or TrainJob on Kubernetes;
* ranks: each rank's set-up before TensorFlow starts (cores, dying with the launcher),
  ``hvd.init()`` with Horovod's own threads at idle priority, and the controller used;
* collectives: the link probe a report fits the cost model to.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import socket
import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from distrain.base.errors import ConfigError, TrainingError
from distrain.k8s.objects import mpijob, trainjob
from distrain.train.engine import Engine, Process, worker_args, worker_command
from distrain.train.runtime import die_with_parent

if TYPE_CHECKING:
    from distrain.train.config import TrainConfig

# [sync, MPI] mpirun's options, the same on a cluster (the MPIJob's launcher) and here: no
# binding by mpirun (each rank binds itself, see bind_rank_to_cores), and TCP or
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
    elastic = getattr(cfg.run.impl.engine, "elastic", False)
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
        # Fewer ranks than the minimum left: Horovod waits this long for hosts (600 s by
        # default), then fails the run; the start timeout bounds it instead.
        hosts += ["--elastic-timeout", str(cfg.start_timeout)]
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


def cluster_mpirun_args(k, ranks: int, config_path: str) -> list[str]:
    """[sync, MPI] mpirun's arguments in a cluster job's launcher (MPIJob, TrainJob).

    Args:
        k: The run's :class:`distrain.k8s.config.KubernetesConfig`.
        ranks: The ranks mpirun starts.
        config_path: The run's config file, as the pods see it.
    """
    # [sync, MPI] CPU ranks share their cores with TensorFlow's compute threads: their MPI
    # waits yield the core, as local runs' do (MPI_ENV). As options of mpirun, which hands
    # them to the ranks it starts over ssh in the worker pods. GPU ranks keep busy-polling.
    yield_idle = [] if k.worker_gpus() else mca_options(MPI_ENV)
    return [
        "-np",
        str(ranks),
        *MPIRUN_OPTIONS,
        *yield_idle,
        *[arg for name in MPIRUN_EXPORTS for arg in ("-x", name)],
        "distrain",
        *worker_args(config_path),
    ]


# ---- a rank's set-up and collectives --------------------------------------------------------


def keep_collectives_in_order() -> None:
    """Keeps the control edges that order a process's Horovod collectives.

    Grappler's dependency optimizer drops control edges between ops it takes to be free
    of side effects, and Horovod's ops are not marked stateful: with it on, a pipeline
    stage started a backward receive before its forward sends, and both stages waited for
    ever. Off for the whole process, before any function is traced.
    """
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"dependency_optimization": False})


def bind_rank_to_cores() -> set[int] | None:
    """[sync] Binds this rank to its own slice of the cores it may use.

    As ``mpirun --bind-to core`` does: with ``HOROVOD_LOCAL_RANK`` / ``HOROVOD_LOCAL_SIZE``
    (horovodrun) or Open MPI's local rank and size in the environment, local rank r of s
    gets the r-th of s equal slices. Called before TensorFlow starts its threads, so they
    all inherit it; it keeps ranks from competing for the same core. Off with
    ``DISTRAIN_BIND_CORES=0`` or when there are fewer cores than ranks.

    Returns:
        The cores bound to, or None when nothing was changed.
    """
    env = os.environ
    if env.get("DISTRAIN_BIND_CORES", "1") == "0":
        return None
    rank = env.get("HOROVOD_LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK"))
    size = env.get("HOROVOD_LOCAL_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE"))
    if rank is None or size is None or int(size) < 2:
        return None
    cores = sorted(os.sched_getaffinity(0))
    per_rank = len(cores) // int(size)
    if per_rank < 1:
        return None
    mine = set(cores[int(rank) * per_rank : (int(rank) + 1) * per_rank])
    os.sched_setaffinity(0, mine)
    return mine


def start_horovod(idle_threads: bool = False, process_sets=(), ranks: int | None = None):
    """[sync] ``hvd.init()``, with Horovod's own threads at idle priority if asked.

    ``hvd.init()`` starts Horovod's background thread (and, under MPI, Open MPI's progress
    threads). The background thread wakes every cycle (1 ms) for a coordination round
    with the other ranks, busy or not, and on a CPU rank it shares the rank's cores with
    TensorFlow's compute threads: each wake-up preempts them. At ``SCHED_IDLE`` (Linux)
    these threads take a core only when TensorFlow leaves it, as it does while a step
    waits for its allreduce, so the rounds that matter still run at once. This is a
    per-thread setting of the kernel's scheduler: Horovod itself is unchanged. A rank that
    sees a GPU keeps the default priority: its cores are mostly free, and its background
    thread feeds NCCL.

    Args:
        idle_threads: Lower the new threads to ``SCHED_IDLE`` on a rank without a GPU
            (:attr:`TrainConfig.idle_horovod_threads`).
        process_sets: ``hvd.ProcessSet``s to register at the start (model-parallel
            groups); each is ready for collectives once this returns.
        ranks: The ranks the run asks for (None: any number).

    Returns:
        The ``horovod.tensorflow`` module, initialised, and the ids of the threads lowered
        (empty when nothing was changed).

    Raises:
        TrainingError: Horovod started with another number of ranks than ``ranks``.
    """
    import horovod.tensorflow as hvd
    import tensorflow as tf

    tasks = Path("/proc/self/task")
    lower = idle_threads and hasattr(os, "SCHED_IDLE") and tasks.is_dir()
    lower = lower and not tf.config.list_physical_devices("GPU")
    before = set(os.listdir(tasks)) if lower else set()
    hvd.init(process_sets=list(process_sets) or None)
    if ranks is not None and hvd.size() != ranks:
        raise TrainingError(f"started with {hvd.size()} ranks, the run asks {ranks}")
    lowered = []
    if lower:
        for tid in sorted(set(os.listdir(tasks)) - before, key=int):
            try:
                os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
            except (ProcessLookupError, PermissionError):
                continue  # a thread that has ended already, or a kernel that refuses
            lowered.append(int(tid))
    return hvd, lowered


# Sizes of the link probe's allreduces, in bytes (float32), and repeats of each.
PROBE_SIZES = (4, 64 * 2**10, 2**20, 4 * 2**20)
PROBE_REPEATS = 5


def probe_link(hvd) -> dict | None:
    """[sync] Times allreduces of a few sizes over all ranks: the link this run trains on.

    A few tens of milliseconds at the start; a report fits a latency and a bandwidth to
    them (:func:`distrain.base.costmodel.fit_link`) to predict what the run's messages cost.
    A collective: every rank calls it, in the same order.

    Returns:
        ``{"ranks", "rows": [{"bytes", "seconds"}]}``, or None with one rank.
    """
    import tensorflow as tf

    if hvd.size() < 2:
        return None
    rows = []
    for size in PROBE_SIZES:
        x = tf.ones([size // 4], tf.float32)
        name = f"link_probe_{size}"
        hvd.allreduce(x, op=hvd.Sum, name=name).numpy()  # warm-up: the name's negotiation
        start = time.perf_counter()
        for _ in range(PROBE_REPEATS):
            hvd.allreduce(x, op=hvd.Sum, name=name).numpy()
        rows.append({"bytes": size, "seconds": (time.perf_counter() - start) / PROBE_REPEATS})
    return {"ranks": hvd.size(), "rows": rows}


def die_with_launcher() -> None:
    """[sync] Makes this rank end when the process that started it does (Linux).

    Under ``mpirun`` the ranks are mpirun's children. A launcher killed outright takes
    mpirun with it (``SIGKILL``, see :func:`distrain.train.launch.guarded`), and its ranks
    would go on training alone; with this the kernel kills them too. Not a rank: nothing.
    """
    env = os.environ
    if sys.platform == "linux" and ("HOROVOD_RANK" in env or "OMPI_COMM_WORLD_RANK" in env):
        die_with_parent(os.getppid())


def controller(hvd) -> str:
    """[sync] The controller the ranks actually use: ``mpi`` or ``gloo`` (for the history)."""
    return "mpi" if hvd.mpi_enabled() else "gloo"


class Horovod(Engine):
    """[sync] The Horovod engine: N ranks of ``distrain worker``, one world, collectives.

    Args:
        elastic: Ranks may be lost and the run go on (``horovodrun --min-np``, gloo);
            local processes only.
    """

    def __init__(self, elastic: bool = False):
        self.elastic = elastic
        # [sync] every rank waits on a stopped one: fail; [elastic] drop it, the rest go on.
        self.when_stalled = "drop" if elastic else "fail"

    def local_processes(self, mode, cfg, config_path, logs) -> list[Process]:
        command = sync_command(cfg, worker_command(config_path))
        return [Process("chief", command, env=horovod_env(cfg), main=True)]

    def check_kubernetes(self, mode, cfg) -> None:
        if self.elastic:
            raise ConfigError(
                f"{cfg.run.name}: elastic sync runs with local processes only; on Kubernetes "
                "use sync:N"
            )
        if cfg.controller == "gloo":
            raise ConfigError(
                f"{cfg.run.name}: controller 'gloo' is for local runs; on Kubernetes sync runs "
                "are an MPIJob or TrainJob whose ranks mpirun starts (use 'auto' or 'mpi')"
            )

    def kubernetes_objects(self, mode, cfg, k, name, config_path) -> list[dict]:
        self.check_kubernetes(mode, cfg)
        args = cluster_mpirun_args(k, cfg.run.processes, config_path)
        return [mpijob(cfg, k, name, args)]

    def trainjob_objects(self, mode, cfg, k, name, config_path) -> list[dict]:
        # [sync] the same mpirun over Horovod ranks, on Trainer v2's MPI runtime.
        self.check_kubernetes(mode, cfg)
        args = cluster_mpirun_args(k, cfg.run.processes, config_path)
        return [trainjob(cfg, k, name, args)]

    def columns(self, run: dict, history: dict) -> dict:
        # How the ranks exchanged: Horovod's controller, as the run recorded it.
        return {"parameter_servers": 0, "aggregation": None, "transport": history.get("controller")}


#: The engine of the Horovod modes.
HOROVOD = Horovod()
#: The engine of ``sync:N:min=M``: ranks may be lost.
ELASTIC_HOROVOD = Horovod(elastic=True)
