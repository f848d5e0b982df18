"""``sync``: Horovod ring-allreduce over N ranks, every rank running the same steps (SPMD)."""

from __future__ import annotations

from distrain.base.costmodel import FLOAT, ring_step
from distrain.train.driver import EpochDriver
from distrain.train.horovod import HOROVOD, controller, probe_link, start_horovod
from distrain.train.modes import Mode, register
from distrain.train.modes.elastic import ElasticSync
from distrain.train.modes.single import LocalSteps, share_state
from distrain.train.replica import Group, Replica, allreduce_gradients


class SyncSteps(LocalSteps):
    """[sync] Steps whose gradients are allreduce-averaged; rank 0's state to all first.

    Several steps per traced call, as single's: a step waits for its allreduce inside the
    call, not for Python between steps.

    Args:
        replica: This rank's replica (its group holds Horovod).
        lowered: Horovod's threads lowered to idle priority (for the history).
        link: The run's link probe (:func:`distrain.train.horovod.probe_link`), for the
            history.
    """

    def __init__(self, replica, lowered: list[int] = (), link: dict | None = None):
        hvd = replica.group.hvd
        # [sync] the gradients averaged over the ranks.
        super().__init__(replica, replica.train_step(allreduce_gradients(hvd)))
        self.hvd, self.lowered, self.link = hvd, list(lowered), link
        self.gradients_per_update = replica.group.size

    def start(self) -> None:
        r = self.replica
        # [sync] every rank starts from rank 0's weights, optimizer state and step.
        self.hvd.broadcast_variables(
            [*r.model.variables, *r.optimizer.variables, r.version, r.epoch_var], root_rank=0
        )
        super().start()

    def run(self, epoch: int, position: int, stop: int):
        out = super().run(epoch, position, stop)
        share_state(self.replica)  # [sync] rank 0's moving statistics are every rank's
        return out

    def history(self) -> dict:
        return {
            # [sync] the transport the ranks actually used
            "controller": controller(self.hvd),
            # [sync] Horovod's threads that rank 0 runs at idle priority (0: none)
            "idle_horovod_threads": len(self.lowered),
            # [sync] allreduce times of a few sizes on this run's ranks
            "link_probe": self.link,
        }


@register
class Sync(Mode):
    """Horovod allreduce: N ranks, one update per step from the mean of N gradients."""

    name = "sync"
    example = "sync:2"
    engine = HOROVOD  # [sync] ranks under mpirun (horovodrun with gloo), an MPIJob on Kubernetes
    options = {"min": "elastic Horovod: training goes on while at least this many workers live"}
    carries_state = True

    @property
    def elastic(self) -> bool:
        """Whether the world may shrink during the run (the elastic variant)."""
        return self.engine.elastic

    @classmethod
    def variant(cls, options: dict) -> type[Mode]:
        if "min" in options:
            return ElasticSync  # [sync] elastic Horovod
        return cls

    def gradients_per_update(self) -> int:
        return self.spec.workers  # [sync] the mean of every rank's gradient

    def train(self, cfg) -> dict:
        # [sync] hvd.init(); Horovod's own threads at idle priority if the config asks.
        hvd, lowered = start_horovod(cfg.idle_horovod_threads, ranks=cfg.run.processes)
        link = probe_link(hvd)  # [sync] what a message costs on this run's link
        replica = Replica(cfg, Group(hvd.rank(), hvd.size(), hvd))
        history = EpochDriver(cfg, replica, SyncSteps(replica, lowered, link)).run()
        hvd.join()  # [sync] no rank leaves before the others are done
        return history

    def predicted_step(self, t1, prof, batch, link):
        if not link:
            return None
        # [sync] the compute, then a ring allreduce of every gradient
        size = prof["parameters"] * FLOAT
        n = self.spec.workers
        return ring_step(t1, size, n, link["bytes_per_second"], link["latency_seconds"])
