"""``tensor``: every dense and recurrent layer split by columns over N Horovod ranks."""

from __future__ import annotations

import resource

from distrain.base.costmodel import tensor_step
from distrain.base.errors import ConfigError
from distrain.learning.models import build_model
from distrain.train.driver import EpochDriver
from distrain.train.horovod import HOROVOD, controller, probe_link, start_horovod
from distrain.train.modes import Mode, register
from distrain.train.modes.single import LocalSteps, share_state
from distrain.train.replica import Group, Replica


def check_columns(cfg, model) -> None:
    """Refuses a model with layers the column split does not cover, naming them.

    Raises:
        ConfigError: One line naming each such layer and why.
    """
    from distrain.learning.split import unsplittable

    refused = unsplittable(model)
    if refused:
        raise ConfigError(
            f"{cfg.run.name}: model {cfg.model!r} has layers the column split "
            f"does not cover ({'; '.join(refused)}); only Dense, LSTM and SimpleRNN "
            "layers are split"
        )


# tf-keras optimizers whose update of each value reads only that value's gradient and
# slots: a rank's share of a split variable is updated as the whole variable would be.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "Nadam", "Adadelta", "Ftrl")


def check_split_optimizer(cfg, optimizer, columns: bool) -> None:
    """Refuses a model file's optimizer whose update needs more than a rank holds.

    A split run's ranks each update their own share of the model: a global norm
    (``global_clipnorm``) would be of the share alone, and with the columns of a variable
    split (``columns``: tensor, hybrid) so would a variable's norm (``clipnorm``) and any
    update that reads across a variable (an optimizer not in :data:`ELEMENTWISE`, e.g.
    Adafactor's factored moments).

    Raises:
        ConfigError: One line naming the mode and the optimizer's setting.
    """
    name, kind = cfg.run.name, type(optimizer).__name__
    held = "its columns of each variable" if columns else "its stage's variables"
    if optimizer.global_clipnorm:
        setting = f"global_clipnorm={optimizer.global_clipnorm:g}"
    elif columns and optimizer.clipnorm:
        setting = f"clipnorm={optimizer.clipnorm:g}"
    elif columns and not (
        kind in ELEMENTWISE and type(optimizer).__module__.startswith("tf_keras.")
    ):
        raise ConfigError(
            f"{name}: the model file's optimizer {kind} is not one whose update is value by "
            f"value ({', '.join(ELEMENTWISE)}); each rank holds {held} only"
        )
    else:
        return
    raise ConfigError(
        f"{name}: the model file's optimizer sets {setting}, a norm over the whole model; "
        f"each rank holds {held} only (use clipvalue, or a data-parallel mode)"
    )


class SplitReplica(Replica):
    """[tensor] A replica whose model is this rank's share of a split model.

    A language model's validation reads the windows (a split layer has no stateful copy);
    the evaluate step scores the saved whole model on the contiguous text.

    Every rank of a model group holds its columns of each dense layer and its units of
    each recurrent one (and the whole of the other layers), reads the same batches as
    the others of its group, and saves its own checkpoints (``checkpoints/part-R-of-M``).
    The saved model is the whole one: the group's shares are gathered, and rank 0 writes
    ``model.keras``.

    Args:
        cfg: The run's configuration.
        group: The data-parallel group (one rank per model group; alone for ``tensor``).
        model_group: The ranks this rank's model is split over.
    """

    scores_text = False  # [tensor]

    #: How the model is split (the comparison's "parallelism" column).
    parallelism = "tensor"

    def __init__(self, cfg, group: Group, model_group):
        self.model_group = model_group
        super().__init__(cfg, group)

    def build_model(self, model):
        from distrain.learning.split import split_model

        check_columns(self.cfg, model)
        return split_model(model, self.model_group)  # [tensor] this rank's share

    @property
    def writes_checkpoints(self) -> bool:
        return self.group.rank == 0  # [tensor] one holder of each part

    def checkpoint_dir(self):
        mg = self.model_group
        return self.out / "checkpoints" / f"part-{mg.rank}-of-{mg.size}"

    def whole_weights(self) -> list:
        """The unsplit model's weights (a collective of the model group)."""
        from distrain.learning.split import whole_weights

        return whole_weights(self.model, self.model_group)

    def save_model(self) -> None:
        weights = self.whole_weights()  # [tensor] every rank of the group takes part
        if self.rank == 0:
            self.refuse_non_finite(f"{self.out / 'model.keras'} after step {self.step}", weights)
            whole = build_model(self.info, self.cfg.model, self.cfg.seed)
            whole.set_weights(weights)
            whole.save(self.out / "model.keras")


class SplitSteps(LocalSteps):
    """[tensor] single's steps on a split model: the group's ranks read the same batches.

    Args:
        replica: This rank's :class:`SplitReplica`.
        reduce: The gradients' mean over the data-parallel group (hybrid), or None.
        link: The run's link probe (:func:`distrain.train.horovod.probe_link`), for the
            history.
    """

    def __init__(self, replica: SplitReplica, reduce=None, link: dict | None = None):
        super().__init__(replica, replica.train_step(reduce))
        self.link = link
        self.gradients_per_update = replica.group.size

    def dataset(self):
        r = self.replica
        return r.train_shard(self.cfg.seed + r.group.rank)  # [tensor] same for the group

    def run(self, epoch: int, position: int, stop: int):
        out = super().run(epoch, position, stop)
        # [hybrid] data group 0's moving statistics are every group's ([tensor]: one group,
        # whose ranks normalise the same activations: theirs are equal already)
        share_state(self.replica)
        return out

    def finish(self) -> None:
        import numpy as np

        from distrain.learning.split import parameters

        # [tensor] every rank's parameters and peak memory, for the comparison (a
        # collective: every rank comes here, at the end of training).
        r = self.replica
        mine = np.array(
            [[parameters(r.model), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]],
            dtype=np.int64,
        )
        every = r.model_group.hvd.allgather(mine, name="split_rank_stats").numpy()
        self.rank_stats = {"parameters": every[:, 0].tolist(), "peak_memory": every[:, 1].tolist()}

    def history(self) -> dict:
        stats = getattr(self, "rank_stats", {})
        hvd = self.replica.model_group.hvd
        return {
            "controller": controller(hvd),
            "parallelism": self.replica.parallelism,
            "model_ranks": self.replica.model_group.size,
            # Per rank of the run, in rank order: trainable parameters held, and the
            # process's peak resident memory in bytes.
            "parameters_per_rank": stats.get("parameters"),
            "peak_memory_per_rank": stats.get("peak_memory"),
            # [tensor] allreduce times of a few sizes on this run's ranks
            "link_probe": self.link,
        }


@register
class Tensor(Mode):
    """Column-split dense and recurrent layers over N ranks, every rank on the same batches."""

    name = "tensor"
    example = "tensor:2"
    engine = HOROVOD  # [tensor] Horovod's ranks: the split's collectives are theirs
    # [tensor] a split recurrent layer has no stateful copy: a stream language model
    # trains on windows from a zero state here (the evaluate step still scores the text).
    carries_state = False

    def gradients_per_update(self) -> int:
        return 1  # [tensor] one batch a step, shared by the group

    def check_model(self, cfg, model) -> None:
        check_columns(cfg, model)

    def check_optimizer(self, cfg, optimizer) -> None:
        check_split_optimizer(cfg, optimizer, columns=True)  # [tensor] a share each

    def predicted_step(self, t1, prof, batch, link):
        if not link:
            return None
        # [tensor] the split layers' share over N, their collectives on every step
        b, lat = link["bytes_per_second"], link["latency_seconds"]
        return tensor_step(t1, prof, batch, self.spec.workers, b, lat)["step"]

    def train(self, cfg) -> dict:
        from distrain.learning.split import ModelGroup

        hvd, _ = start_horovod(cfg.idle_horovod_threads, ranks=cfg.run.processes)
        link = probe_link(hvd)  # [tensor] what a message costs on this run's link
        model_group = ModelGroup(hvd, hvd.rank(), hvd.size())
        # [tensor] no data parallelism: one data group, every rank on the same batches.
        alone = Group(0, 1, None, world_rank=hvd.rank())
        replica = SplitReplica(cfg, alone, model_group)
        history = EpochDriver(cfg, replica, SplitSteps(replica, link=link)).run()
        hvd.join()
        return history

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        return {**cls.engine.columns(run, history), **split_columns(history)}


def split_columns(history: dict) -> dict:
    """[tensor] The comparison's cells of a run whose model is split (tensor, pipeline, hybrid)."""
    parameters = history.get("parameters_per_rank") or []
    memory = history.get("peak_memory_per_rank") or []
    return {
        "parallelism": history.get("parallelism"),
        # The fullest rank: the one whose memory bounds the model that fits.
        "parameters_per_rank": max(parameters) if parameters else None,
        "rank_memory_mb": max(memory) / 2**20 if memory else None,
    }
