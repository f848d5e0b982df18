"""What a mode's processes are: the engine a mode chooses, and the commands it starts.

:class:`Engine` says which processes a run has and how they start (a single process here;
its Horovod and parameter-server kinds in :mod:`distrain.train.horovod` and
:mod:`distrain.train.ps.mode`), each a :class:`Process`; the ``distrain worker`` and
``distrain server`` commands are the ones every engine starts. The modes' registry names
an engine per mode (:attr:`distrain.train.modes.Mode.engine`); the launcher
(:mod:`distrain.train.launch`) starts the processes, watches them and stops them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from distrain.base.errors import ConfigError


@dataclass(frozen=True)
class Process:
    """One local process of a run, as the launcher starts it.

    Attributes:
        name: ``role:index`` (``chief``, ``ps:0``, ``worker:1``).
        command: The command line.
        env: Variables added to the run's environment.
        log: Its output goes to this file (None: the launcher's own output).
        main: The run ends when this process does (exactly one per run).
        critical: The run fails at once if this process ends first (a parameter server).
        what: How a failure names it (``parameter server ps:0``).
        stacks_on_timeout: It is a ``distrain`` process: SIGUSR1 prints its threads' stacks.
    """

    name: str
    command: list[str]
    env: dict = field(default_factory=dict)
    log: Path | None = None
    main: bool = False
    critical: bool = False
    what: str = ""
    stacks_on_timeout: bool = False


class Engine:
    """How a mode's processes start and exchange: the engine a mode chooses.

    This one is a single process (``single``): no ranks, no servers, no cluster job. The
    two transports are its kinds: :class:`distrain.train.horovod.Horovod` (ranks under
    ``mpirun`` or ``horovodrun``, an MPIJob on Kubernetes) and
    :class:`distrain.train.ps.mode.ParameterServers` (a chief, workers and parameter
    servers, Jobs on Kubernetes). A mode names its engine
    (:attr:`distrain.train.modes.Mode.engine`) and asks it; only the lines where the
    mode departs from its engine are its own.
    """

    #: What the local launcher does with a process that stopped running (its heartbeat
    #: stopped, :mod:`distrain.train.heartbeat`) for ``operation_timeout`` seconds:
    #: ``"fail"`` the run naming it, ``"drop"`` it (SIGKILL: the others go on without it),
    #: or None (the engine's own timeouts hold).
    when_stalled: str | None = "fail"

    def local_processes(self, mode, cfg, config_path: Path, logs: Path) -> list[Process]:
        """The processes of ``mode``'s run on this machine (one of them ``main``)."""
        return [Process("chief", worker_command(config_path), main=True, stacks_on_timeout=True)]

    def check_kubernetes(self, mode, cfg) -> None:
        """Refuses, before any work, settings the engine cannot honour on Kubernetes."""

    def kubernetes_objects(self, mode, cfg, k, name: str, config_path: str) -> list[dict]:
        """The Kubernetes objects the run becomes.

        Raises:
            ConfigError: The run cannot be a cluster job, or not with these settings.
        """
        raise ConfigError(f"{mode.spec.name} runs in the step's own pod, not as a cluster job")

    def trainjob_objects(self, mode, cfg, k, name: str, config_path: str) -> list[dict]:
        """The objects the run becomes with ``launcher=trainjob`` (Kubeflow Trainer v2).

        By default the same as :meth:`kubernetes_objects`.
        """
        return self.kubernetes_objects(mode, cfg, k, name, config_path)

    def columns(self, run: dict, history: dict) -> dict:
        """The engine's cells of the comparison table: servers, aggregation, transport."""
        return {"parameter_servers": 0, "aggregation": None, "transport": None}


#: The engine of a one-process mode (single).
ONE_PROCESS = Engine()


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
