"""[ps] A process's role in a parameter-server cluster, the cluster's addresses, its server.

Every process of the run (chief, workers, parameter servers) learns its role from
``TF_CONFIG`` and runs a ``tf.compat.v1.train.Server`` of the cluster.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from distrain.base.errors import TrainingError
from distrain.train.launch import free_ports


@dataclass(frozen=True)
class Role:
    """This process's place in the cluster, from ``TF_CONFIG``."""

    cluster: dict
    job: str
    index: int

    @classmethod
    def from_environment(cls) -> Role:
        """Reads ``TF_CONFIG``.

        Raises:
            TrainingError: It is missing or names no task.
        """
        text = os.environ.get("TF_CONFIG")
        if not text:
            raise TrainingError("a parameter-server process needs TF_CONFIG (cluster and task)")
        data = json.loads(text)
        task = data.get("task") or {}
        return cls(data["cluster"], str(task.get("type")), int(task.get("index", 0)))

    @property
    def workers(self) -> int:
        return len(self.cluster.get("worker", []))

    @property
    def parameter_servers(self) -> int:
        return len(self.cluster.get("ps", []))


def start_server(role: Role, threads: int):
    """This process's TensorFlow server (gRPC), started."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        # On few cores a server with fewer inter-op threads can deadlock.
        inter_op_parallelism_threads=max(4, threads) if role.job == "ps" else 2,
        intra_op_parallelism_threads=threads,
    )
    return tf.compat.v1.train.Server(
        tf.train.ClusterSpec(role.cluster),
        job_name=role.job,
        task_index=role.index,
        protocol="grpc",
        config=config,
        start=True,
    )


def cluster_spec(workers: int, parameter_servers: int) -> dict[str, list[str]]:
    """A localhost cluster: one chief (the coordinator), the workers and the PS."""
    ports = free_ports(1 + workers + parameter_servers)
    addresses = [f"localhost:{p}" for p in ports]
    return {
        "chief": addresses[:1],
        "worker": addresses[1 : 1 + workers],
        "ps": addresses[1 + workers :],
    }


def tf_config(cluster: dict, task_type: str, index: int) -> str:
    """The TF_CONFIG of one process of the cluster."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
