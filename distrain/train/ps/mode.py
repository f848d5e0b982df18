"""[ps] The parameter-server engine's processes, and what every parameter-server mode shares.

:class:`ParameterServers` starts the run's processes here and on Kubernetes; a mode
(async, syncreplicas, ssp, easgd) is a :class:`ParameterServerMode` that gives its name,
options and :class:`~distrain.train.ps.rules.PushRule`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from distrain.base.errors import ConfigError
from distrain.k8s.objects import ps_objects
from distrain.learning.models import load_info
from distrain.preprocess.failures import Failure
from distrain.train.driver import EpochDriver
from distrain.train.engine import Engine, Process, server_command, worker_command
from distrain.train.modes import Mode
from distrain.train.ps.chief import CHIEF_NICENESS, Chief, ChiefSteps
from distrain.train.ps.roles import Role, cluster_spec, tf_config
from distrain.train.ps.rules import PushRule
from distrain.train.ps.worker_loop import Worker
from distrain.train.replica import Replica
from distrain.train.worker import record_error


class ParameterServers(Engine):
    """[ps] The parameter-server engine: a chief, N workers and P servers, each its own process.

    Locally each is a process of this machine with its role in ``TF_CONFIG``; on
    Kubernetes each is a Job with a Service (:func:`distrain.k8s.objects.ps_objects`).
    """

    # [ps] a stopped worker is left behind by design (Downpour); the session operation
    # timeout and the chief's stall limit bound a stopped server or every worker stopped.
    when_stalled = None

    def local_processes(self, mode, cfg, config_path, logs) -> list[Process]:
        cluster = cluster_spec(cfg.run.workers, mode.parameter_servers)
        print(f"[{cfg.run.name}] cluster: {json.dumps(cluster)}", flush=True)
        processes = [
            Process(
                f"ps:{i}",
                server_command(1, cfg.output_dir),
                env={"TF_CONFIG": tf_config(cluster, "ps", i)},
                log=logs / f"ps-{i}.log",
                critical=True,
                what=f"parameter server ps:{i}",
            )
            for i in range(len(cluster["ps"]))
        ]
        # Each worker trains against the parameter servers: its own steps, the same
        # command as the chief, its role from TF_CONFIG. A worker that ends or dies does
        # not end the run: the others make its updates.
        processes += [
            Process(
                f"worker:{i}",
                worker_command(config_path),
                env={"TF_CONFIG": tf_config(cluster, "worker", i)},
                log=logs / f"worker-{i}.log",
            )
            for i in range(len(cluster["worker"]))
        ]
        chief_env = {"TF_CONFIG": tf_config(cluster, "chief", 0)}
        command = worker_command(config_path)
        processes.append(Process("chief", command, chief_env, main=True, stacks_on_timeout=True))
        return processes

    def kubernetes_objects(self, mode, cfg, k, name, config_path) -> list[dict]:
        return ps_objects(cfg, k, name, config_path)

    def columns(self, run: dict, history: dict) -> dict:
        return {
            "parameter_servers": int(run.get("parameter_servers") or 0),
            "aggregation": None,
            "transport": "grpc",  # TensorFlow's gRPC runtime
        }


#: The engine of the parameter-server modes.
PARAMETER_SERVERS = ParameterServers()


class ParameterServerMode(Mode):
    """What the parameter-server modes share: their engine, the ``ps`` option, the roles.

    A subclass gives its name, its options and its :meth:`rule`.
    """

    engine = PARAMETER_SERVERS  # [ps] a chief, workers and parameter servers
    options = {"ps": "parameter servers (default 1)"}

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        ps = cls.integer(options, "ps", 1)
        if ps < 1:
            raise ConfigError(f"{cls.name}: ps must be at least 1, got {ps}")
        return {**checked, "ps": ps}

    @property
    def parameter_servers(self) -> int:
        return int(self.spec.option("ps"))

    def rule(self) -> PushRule:
        """The mode's rule for a gradient's push."""
        raise NotImplementedError

    def train(self, cfg) -> dict:
        """Runs this process's role of the cluster (chief, or worker), from ``TF_CONFIG``.

        Does not return: the process ends once its part is done, without waiting for the
        TensorFlow server's teardown, which can wait for peers that are gone or stopped.
        After an error its traceback is printed and the error recorded for the launcher
        (``<output>/errors/``, as every training process records its own), and the exit
        code is 2 for bad input or settings, 1 otherwise.
        """
        code = 0
        try:
            self._train_role(cfg, Role.from_environment())
        except BaseException as exc:  # noqa: BLE001 (reported, then the process ends at once)
            traceback.print_exc()
            record_error(cfg.output_dir, exc)
            code = Failure.of(cfg.run.name, exc).exit_code
            # Held until the exit: freeing the exception's frames would close their
            # sessions, and closing one to a stopped server waits forever.
            self.failed = exc
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _train_role(self, cfg, role: Role) -> None:
        info = load_info(cfg.data_dir, cfg.model)
        if role.job == "worker":
            Worker(cfg, info, role, self.rule()).run()
            return
        # The chief's evaluation and bookkeeping yield the cores to the workers and the
        # parameter servers when they share a machine (locally; a pod has its own).
        os.nice(CHIEF_NICENESS)
        # The chief's graph first: tf-keras refuses models made before one in a tf.Graph.
        chief = Chief(cfg, info, role, self.rule())
        replica = Replica(cfg)
        chief.attach(replica)
        EpochDriver(cfg, replica, ChiefSteps(chief, replica)).run()
