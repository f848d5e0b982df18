"""``sync:N:min=M``: elastic Horovod; training goes on after losing workers, down to M."""

from __future__ import annotations

import time

from distrain.base.costmodel import FLOAT, ring_step
from distrain.base.errors import ConfigError
from distrain.train import nonfinite
from distrain.train.driver import EpochDriver
from distrain.train.horovod import ELASTIC_HOROVOD, controller, start_horovod
from distrain.train.modes import Mode
from distrain.train.replica import Group, Replica, allreduce_gradients


class ElasticSteps:
    """What the epoch driver asks of an elastic run (its loop is :meth:`ElasticSync.train`'s)."""

    def __init__(self, hvd):
        self.hvd = hvd
        self.gradients_per_update = 1  # examples are counted by the loop (the world varies)
        self.resets = 0

    def refresh(self) -> None:
        pass

    def epoch_note(self) -> str:
        return ""

    def history(self) -> dict:
        return {
            "controller": controller(self.hvd),
            "idle_horovod_threads": 0,
            "elastic_resets": self.resets,
        }

    def finish(self) -> None:
        pass


class ElasticSync(Mode):
    """Elastic Horovod (``horovodrun --min-np M --max-np N``), local processes only.

    The state (variables, step, epoch, the epoch's progress and partial sums) is committed
    in memory every ``elastic_commit_steps`` steps. When a worker is lost, the others go
    back to the last commit, Horovod rebuilds the ring without it, rank 0 broadcasts the
    state, and every rank reads its share of the data for the new world size. An epoch
    is a pass's worth of examples whatever the size; checkpoints record the examples done
    in the epoch, so a killed run resumes mid-epoch and ends at the same step count.
    """

    name = "sync"  # a variant of sync's (sync:N:min=M), not a mode of its own
    engine = ELASTIC_HOROVOD  # [sync] horovodrun --min-np with host discovery, local only
    options = {"min": "elastic Horovod: training goes on while at least this many workers live"}
    carries_state = False  # [sync] elastic: a world that changes re-deals the data

    @property
    def elastic(self) -> bool:
        """Whether the world may shrink during the run (yes: the elastic variant)."""
        return self.engine.elastic

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        options = super().check(workers, options)
        low = cls.integer(options, "min")
        if not 1 <= low <= workers:
            raise ConfigError(
                f"sync: min workers must be between 1 and workers ({workers}), got {low}"
            )
        return {"min": low}

    def short_name(self) -> str:
        return f"{self.spec.mode}:{self.spec.workers}:min={self.spec.option('min')}"

    def check_config(self, cfg) -> None:
        if cfg.controller == "mpi":
            raise ConfigError(f"{self.short_name()}: elastic Horovod runs need the gloo controller")

    def gradients_per_update(self) -> int:
        return self.spec.workers  # [sync] the mean of every rank's gradient

    def predicted_step(self, t1, prof, batch, link):
        if not link:
            return None
        # [sync] as sync's: the compute, then a ring allreduce of every gradient
        size = prof["parameters"] * FLOAT
        n = self.spec.workers
        return ring_step(t1, size, n, link["bytes_per_second"], link["latency_seconds"])

    def train(self, cfg) -> dict:
        import horovod.tensorflow.elastic  # noqa: F401  [sync] hvd.elastic

        hvd, _ = start_horovod(False)
        replica = Replica(cfg, Group(hvd.rank(), hvd.size(), hvd))
        engine = ElasticSteps(hvd)
        driver = EpochDriver(cfg, replica, engine)
        driver.restore()
        n_train = replica.info.splits["train"]
        total = int(replica.examples.numpy())
        if replica.step and not total:  # a checkpoint from before examples were recorded
            total = replica.step * cfg.batch_size * cfg.run.workers
        state = _elastic_state(hvd, replica, total)

        def on_reset():
            # Not in the state: a sync restores the state to its last commit.
            engine.resets += 1

        state.register_reset_callbacks([on_reset])
        start = time.perf_counter()
        driver.log_start()

        @hvd.elastic.run  # [sync] retried from the last commit after a lost worker
        def train_elastic(state):
            step_fn, global_batch, iterator = _join_world(hvd, cfg, replica, engine)
            step = replica.step
            # Until plateau: the validation loss is every rank's (allreduced), so is the stop.
            while replica.epoch < cfg.epochs and not driver.plateau.stop:
                epoch = replica.epoch
                step, local, t0 = _epoch_steps(
                    cfg, replica, state, (step_fn, iterator, global_batch), n_train, epoch, step
                )
                _fold(replica, state, local)
                state.epoch_seconds += time.perf_counter() - t0
                driver.examples_so_far = state.total_examples
                state.epoch_examples = 0
                replica.examples.assign(state.total_examples)
                replica.epoch_examples.assign(0)
                driver.end_epoch(
                    epoch, state.loss_sum, state.correct, state.seen, state.epoch_seconds, start
                )
                state.seen = 0
                state.loss_sum = state.correct = state.epoch_seconds = 0.0
                state.commit()

        train_elastic(state)
        driver.restore_best()
        replica.save_model()
        history = driver.history()
        hvd.join()
        return history


def _elastic_state(hvd, replica: Replica, total: int):
    """What a reset goes back to: the variables, and the epoch's progress and partial sums.

    Committed in memory every ``elastic_commit_steps`` steps; after a lost worker, rank 0
    broadcasts it to the others.
    """

    class State(hvd.elastic.TensorFlowState):
        def sync(self):
            hvd.broadcast_variables(self.variables, root_rank=0)  # [sync] from rank 0
            super().sync()

    return State(
        variables=[
            *replica.model.variables,
            *replica.optimizer.variables,
            replica.version,
            replica.epoch_var,
        ],
        # Resumed mid-epoch: the examples the checkpoint's epoch had done.
        epoch_examples=int(replica.epoch_examples.numpy()),
        loss_sum=0.0,
        correct=0.0,
        seen=0,
        epoch_seconds=0.0,
        total_examples=total,
    )


def _join_world(hvd, cfg, replica: Replica, engine: ElasticSteps):
    """Sets the replica up for this world (after the start or a reset).

    Returns:
        The training step (traced for this world's learning rate), the global batch, and
        an iterator over this rank's share of the data, in a new order after every reset.
    """
    size = hvd.size()
    replica.set_group(Group(hvd.rank(), size, hvd))
    replica.losses.who = f"rank {replica.rank}"  # (a reset may renumber the ranks)
    users = replica.optimizer.is_users
    if cfg.scale_learning_rate and not users:
        # [sync] the learning rate follows the gradients averaged per step (a
        # model file's own optimizer keeps its rate: the user's choice wins).
        replica.optimizer.learning_rate = cfg.learning_rate * size
    # Traced for this world's learning rate.
    step_fn = replica.train_step(allreduce_gradients(hvd))
    if engine.resets:
        replica.log(
            f"continuing with {size} workers from step {replica.step}, "
            + (
                "the model file's optimizer"
                if users
                else f"learning rate {replica.optimizer.learning_rate:g}"
            )
        )
    # [sync] this world's share, in a new order after every reset.
    seed = cfg.seed + replica.rank + 7919 * engine.resets + 104729 * replica.step
    return step_fn, size * cfg.batch_size, iter(replica.train_shard(seed))


def _epoch_steps(cfg, replica: Replica, state, world, n_train: int, epoch: int, step: int):
    """Trains the rest of the epoch in this world, committing every ``elastic_commit_steps``.

    An epoch is a pass's worth of examples whatever the world's size.

    Returns:
        The step reached, the loss and correct sums not yet folded into the state, and
        when the epoch's last stretch of time began.
    """
    step_fn, iterator, global_batch = world
    t0 = time.perf_counter()
    local = [0.0, 0.0]
    while state.epoch_examples + global_batch <= n_train:
        batch_loss, batch_correct = step_fn(*next(iterator))
        batch_loss = float(batch_loss)
        step += 1
        if not nonfinite.is_finite(batch_loss):
            replica.losses.bad(epoch + 1, step, batch_loss)
        local[0] += batch_loss
        local[1] += float(batch_correct)
        state.epoch_examples += global_batch
        state.seen += global_batch
        state.total_examples += global_batch
        last = state.epoch_examples + global_batch > n_train
        if step % cfg.elastic_commit_steps == 0 and not last:
            _fold(replica, state, local)
            state.epoch_seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            state.commit()  # [sync] also where a changed world is noticed
        every = cfg.checkpoint_every_steps
        if every and step % every == 0 and not last:
            replica.examples.assign(state.total_examples)
            replica.epoch_examples.assign(state.epoch_examples)
            replica.checkpoint(step)
    return step, local, t0


def _fold(replica: Replica, state, local: list[float]) -> None:
    """Adds the ranks' local loss and correct sums into the state, and zeroes them."""
    loss_sum, correct = replica.group.sums(*local)  # [sync] over the live ranks
    state.loss_sum += loss_sum
    state.correct += correct
    local[:] = [0.0, 0.0]
