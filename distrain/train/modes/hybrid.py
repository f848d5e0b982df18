"""``hybrid``: D data-parallel groups of M ranks that split the model by columns."""

from __future__ import annotations

from distrain.base.costmodel import FLOAT, ring_step, tensor_step
from distrain.base.errors import ConfigError
from distrain.train.driver import EpochDriver
from distrain.train.horovod import HOROVOD, probe_link, start_horovod
from distrain.train.modes import Mode, register
from distrain.train.modes.tensor import (
    SplitReplica,
    SplitSteps,
    check_columns,
    check_split_optimizer,
    split_columns,
)
from distrain.train.replica import Group, allreduce_gradients


def layout(rank: int, model_ranks: int) -> tuple[int, int]:
    """``(data group, place in the model group)`` of world rank ``rank``.

    Rank ``d * M + m`` holds columns ``m`` of the model for data group ``d``: the ranks
    of a model group are neighbours (on one host, where the split's traffic is), and the
    ranks holding the same columns in every data group form the gradients' allreduce.
    """
    return rank // model_ranks, rank % model_ranks


@register
class Hybrid(Mode):
    """Data parallelism over model-parallel groups: ``hybrid:D:M`` runs D x M ranks."""

    name = "hybrid"
    example = "hybrid:2:2"
    engine = HOROVOD  # [hybrid] D x M Horovod ranks
    carries_state = False  # [hybrid] as tensor's: a split recurrent layer has no stateful copy
    options = {"model": "ranks per model-parallel group (M, at least 2; hybrid:D:M)"}
    positional = ("model",)

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        if options.get("model") is None:
            raise ConfigError("hybrid: the model-parallel size is required (hybrid:D:M)")
        model = cls.integer(options, "model")
        if model < 2:
            raise ConfigError(f"hybrid: M must be at least 2 ranks per model, got {model}")
        return {**checked, "model": model}

    def processes(self) -> int:
        return self.spec.workers * self.spec.option("model")  # [hybrid] D x M ranks

    def gradients_per_update(self) -> int:
        return self.spec.workers  # [hybrid] one batch per data-parallel group

    def check_model(self, cfg, model) -> None:
        check_columns(cfg, model)  # [hybrid] each group splits the model as tensor does

    def check_optimizer(self, cfg, optimizer) -> None:
        check_split_optimizer(cfg, optimizer, columns=True)  # [hybrid] as tensor

    def short_name(self) -> str:
        return f"{self.spec.mode}:{self.spec.workers}:{self.spec.option('model')}"

    def predicted_step(self, t1, prof, batch, link):
        if not link:
            return None
        # [hybrid] a tensor group's step, then a ring allreduce of each rank's share of
        # the gradients over the D groups
        b, lat = link["bytes_per_second"], link["latency_seconds"]
        m = self.spec.option("model")
        split = tensor_step(t1, prof, batch, m, b, lat)["step"]
        return ring_step(split, prof["parameters"] * FLOAT / m, self.spec.workers, b, lat)

    def train(self, cfg) -> dict:
        import horovod.tensorflow as hvd

        data, model = cfg.run.workers, self.spec.option("model")
        sets = process_sets(hvd, data, model)
        hvd, _ = start_horovod(
            cfg.idle_horovod_threads, process_sets=[*sets[0], *sets[1]], ranks=data * model
        )
        link = probe_link(hvd)  # [hybrid] what a message costs on this run's link
        group, model_group, reduce = groups(hvd, data, model, sets)
        replica = SplitReplica(cfg, group, model_group)
        history = EpochDriver(cfg, replica, SplitSteps(replica, reduce, link)).run()
        hvd.join()
        return history

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        return {**cls.engine.columns(run, history), **split_columns(history)}


def process_sets(hvd, data: int, model: int) -> tuple[list, list]:
    """[hybrid] The process sets to register (none when there is one data group).

    Each data group's model ranks, and each column's holders across the data groups.

    Returns:
        ``(model_sets, data_sets)``, unregistered ``hvd.ProcessSet``s.
    """
    if data == 1:
        return [], []
    model_sets = [hvd.ProcessSet([d * model + m for m in range(model)]) for d in range(data)]
    data_sets = [hvd.ProcessSet([d * model + m for d in range(data)]) for m in range(model)]
    return model_sets, data_sets


def groups(hvd, data: int, model: int, sets: tuple[list, list]):
    """[hybrid] This rank's data group, model group and gradient reduction.

    Args:
        hvd: ``horovod.tensorflow``, initialised with ``sets`` registered.
        data: Data-parallel groups (D).
        model: Ranks per model group (M).
        sets: :func:`process_sets`' result.

    Returns:
        ``(Group, ModelGroup, reduce)``: ``reduce`` averages the gradients over the
        ranks holding the same columns (None with one data group).
    """
    from distrain.learning.split import ModelGroup  # (tf_keras: not in the launcher)

    d, m = layout(hvd.rank(), model)
    if data == 1:
        return Group(0, 1, None, world_rank=hvd.rank()), ModelGroup(hvd, m, model), None
    model_sets, data_sets = sets
    group = Group(d, data, hvd, process_set=data_sets[m], world_rank=hvd.rank())
    # [hybrid] the gradients averaged within the column's set, the split within the group's
    return group, ModelGroup(hvd, m, model, model_sets[d]), allreduce_gradients(hvd, data_sets[m])
