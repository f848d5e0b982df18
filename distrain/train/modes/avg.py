"""``avg``: periodic model averaging (local SGD): N replicas averaged every K steps."""

from __future__ import annotations

import dataclasses
import time

from distrain.base.costmodel import FLOAT, ring_step
from distrain.base.errors import ConfigError
from distrain.learning.inputs import make_dataset
from distrain.train.driver import EpochDriver
from distrain.train.horovod import HOROVOD, controller, start_horovod
from distrain.train.modes import Mode, register
from distrain.train.modes.single import LocalSteps
from distrain.train.replica import VAL_BATCH, Group, Replica

# With weights=accuracy, every this-many-th record of a rank's shard is held back from its
# training and scores the rank's replica before each exchange (5 %).
HELD_OUT_EVERY = 20


class AverageSteps(LocalSteps):
    """[avg] Each rank trains its own replica; every ``period`` steps they are averaged.

    As PyTorch's ``PeriodicModelAverager``: the steps in between are local (no
    collective at all), and an exchange replaces every rank's weights (the model's
    variables; each rank keeps its own optimizer state) by their mean over the ranks,
    or a mean weighted by each replica's accuracy on a slice of its shard held back
    from training (``weights=accuracy``). The replicas are also averaged at each
    checkpoint and epoch end (the end of every segment the driver asks for), so the model
    evaluated, checkpointed and saved is always their average.

    Args:
        replica: This rank's replica (its group holds Horovod).
        period: Steps between exchanges.
        shared_init: Start every rank from rank 0's weights (else each from its own seed).
        weighted: Weight each replica by its held-out accuracy.
        common_every: Every rank also trains on each ``common_every``-th record of the
            split (0: none).
    """

    def __init__(self, replica, period, shared_init=True, weighted=False, common_every=0):
        super().__init__(replica, replica.train_step())  # [avg] local steps, no allreduce
        self.hvd = replica.group.hvd
        self.period, self.shared_init = period, shared_init
        self.weighted, self.common_every = weighted, common_every
        # Every rank's batch goes into the count of examples.
        self.gradients_per_update = replica.group.size
        self.rounds = 0
        self.divergence: list[list[float]] = []  # [seconds, mean distance to the average]
        self.started = time.perf_counter()
        self.averaged_at: int | None = None
        self._average = None

    def start(self) -> None:
        r = self.replica
        if self.shared_init and not r.step:
            # [avg] one initialisation for every replica (a resumed run's come from one file)
            self.hvd.broadcast_variables(r.model.variables, root_rank=0)
        if self.weighted:
            self.held_out = self._held_out_dataset()
        super().start()

    def dataset(self):
        r = self.replica
        selection = {"common_every": self.common_every}
        if self.weighted:
            selection["held_out"] = (HELD_OUT_EVERY, False)  # [avg] the slice that weighs it
        return r.train_shard(self.cfg.seed + r.rank, **selection)

    def _held_out_dataset(self):
        r = self.replica
        g = r.group
        return make_dataset(
            r.info,
            "train",
            VAL_BATCH,
            shard=(g.size, g.rank),
            held_out=(HELD_OUT_EVERY, True),
            common_every=self.common_every,
        )

    def due(self, step: int) -> bool:
        """Whether the replicas are averaged after update ``step`` (every ``period``)."""
        return step > 0 and step % self.period == 0

    def run(self, epoch: int, position: int, stop: int):
        loss_sum = correct = 0.0
        durations: list[float] = []
        while position < stop:
            step = self.replica.step
            # Segments end at the next exchange.
            upto = min(stop, position + self.period - step % self.period)
            batch_loss, batch_correct, timed = super().run(epoch, position, upto)
            loss_sum, correct = loss_sum + batch_loss, correct + batch_correct
            durations.extend(timed)
            position = upto
            if self.due(self.replica.step):
                self.exchange()
        if self.averaged_at != self.replica.step:
            self.exchange()  # [avg] a checkpoint's or an epoch's end: the average is the model
        return loss_sum, correct, durations

    def exchanges(self) -> int:
        """[avg] Averagings so far (the scored model moves only at one); this process's count."""
        return self.rounds

    def weight(self) -> float:
        """This replica's weight in the average: 1, or its accuracy on its held-out slice."""
        if not self.weighted:
            return 1.0
        eval_step = self.replica.eval_function()
        hits = count = 0.0
        for x, y in self.held_out:
            _, batch_correct = eval_step(x, y)
            hits += float(batch_correct)
            count += float(y.shape.num_elements())
        # A replica right on nothing still counts a little: no weight of zero overall.
        return max(hits / max(count, 1.0), 1e-3)

    def exchange(self) -> float:
        """Averages the replicas now; returns their mean distance to the average before."""
        distance = float(self.average(self.weight()))
        self.rounds += 1
        self.averaged_at = self.replica.step
        self.divergence.append([round(time.perf_counter() - self.started, 4), distance])
        return distance

    def average(self, weight: float):
        """[avg] Every rank's variables become the ``weight``-weighted mean over the ranks.

        Returns:
            The ranks' mean Euclidean distance to that mean, before the exchange.
        """
        if self._average is None:
            tf, hvd = self.replica.tf, self.hvd
            variables = self.replica.model.variables

            @tf.function
            def average(weight):
                share = weight / hvd.allreduce(weight, op=hvd.Sum)
                means = [hvd.allreduce(v * share, op=hvd.Sum) for v in variables]
                pairs = zip(variables, means, strict=True)
                distance = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(v - m)) for v, m in pairs]))
                with tf.control_dependencies([distance]):
                    for v, m in zip(variables, means, strict=True):
                        v.assign(m)
                return hvd.allreduce(distance, op=hvd.Average)

            self._average = average
        return self._average(self.replica.tf.constant(weight, self.replica.tf.float32))

    def bytes_per_worker(self) -> int:
        """Bytes each rank sent in the exchanges (ring allreduce: 2 (N-1)/N of the model)."""
        n = self.replica.group.size
        size = sum(v.shape.num_elements() * v.dtype.size for v in self.replica.model.variables)
        return int(self.rounds * 2 * (n - 1) / n * size)

    def history(self) -> dict:
        return {
            "controller": controller(self.hvd),
            "communication_rounds": self.rounds,
            "bytes_per_worker": self.bytes_per_worker(),
            "divergence": self.divergence,
        }


@register
class Average(Mode):
    """Periodic model averaging over Horovod: local steps, an allreduce of weights every K."""

    name = "avg"
    example = "avg:2:period=8"
    engine = HOROVOD  # [avg] Horovod's ranks; their allreduce averages the weights
    carries_state = False  # [avg] its held-out slices are records, not streams
    options = {
        "period": "steps between exchanges (required)",
        "init": "shared (default) or independent: one initialisation for all, or one each",
        "weights": "uniform (default) or accuracy: each replica's held-out accuracy",
        "common": "fraction of the examples every worker reads besides its shard (0-1)",
    }

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        period = cls.integer(options, "period")
        if period is None or period < 1:
            raise ConfigError(
                f"avg: period must be at least 1 step (e.g. avg:2:period=8), got {period}"
            )
        init = str(options.get("init", "shared"))
        if init not in ("shared", "independent"):
            raise ConfigError(f"avg: init must be shared or independent, got {init!r}")
        weights = str(options.get("weights", "uniform"))
        if weights not in ("uniform", "accuracy"):
            raise ConfigError(f"avg: weights must be uniform or accuracy, got {weights!r}")
        try:
            common = float(options.get("common", 0))
        except ValueError:
            given = options["common"]
            raise ConfigError(f"avg: common must be a fraction, got {given!r}") from None
        if not 0 <= common < 1:
            raise ConfigError(f"avg: common must be at least 0 and below 1, got {common}")
        return {**checked, "period": period, "init": init, "weights": weights, "common": common}

    def gradients_per_update(self) -> int:
        return 1  # [avg] each replica steps on its own batch: the learning rate is not scaled

    def min_exchanges(self, updates_per_epoch: int) -> int:
        """[avg] One epoch's worth of averagings: at the period, and at the epoch's end."""
        return -(-updates_per_epoch // int(self.spec.option("period")))  # (ceiling)

    def short_name(self) -> str:
        spec = self.spec
        parts = [f"{spec.mode}:{spec.workers}:period={spec.option('period')}"]
        if spec.option("init") != "shared":
            parts.append(f"init={spec.option('init')}")
        if spec.option("weights") != "uniform":
            parts.append(f"weights={spec.option('weights')}")
        if spec.option("common"):
            parts.append(f"common={spec.option('common'):g}")
        return ":".join(parts)

    def train(self, cfg) -> dict:
        hvd, _ = start_horovod(cfg.idle_horovod_threads, ranks=cfg.run.processes)
        spec = cfg.run
        shared = spec.option("init") == "shared"
        # [avg] independent replicas: each rank's model from its own seed
        seeded = cfg if shared else dataclasses.replace(cfg, seed=cfg.seed + 7919 * hvd.rank())
        replica = Replica(seeded, Group(hvd.rank(), hvd.size(), hvd), run_cfg=cfg)
        common = float(spec.option("common"))
        steps = AverageSteps(
            replica,
            int(spec.option("period")),
            shared_init=shared,
            weighted=spec.option("weights") == "accuracy",
            common_every=round(1 / common) if common > 0 else 0,
        )
        history = EpochDriver(cfg, replica, steps).run()
        hvd.join()
        return history

    def predicted_step(self, t1, prof, batch, link):
        if not link:
            return None
        # [avg] one ring allreduce of the weights every `period` steps
        b, lat = link["bytes_per_second"], link["latency_seconds"]
        exchange = ring_step(0.0, prof["parameters"] * FLOAT, self.spec.workers, b, lat)
        return t1 + exchange / int(self.spec.option("period"))

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        divergence = history.get("divergence") or []
        return {
            **cls.engine.columns(run, history),
            "communication_rounds": history.get("communication_rounds"),
            "megabytes_per_worker": (history.get("bytes_per_worker") or 0) / 1e6 or None,
            "divergence": divergence[-1][1] if divergence else None,
        }
