"""One rank of the phase-paired sync measure: ``python paired_worker.py CONFIG OUT GROUPS STEPS``.

The suite starts the ranks as sync runs start theirs (``mpirun -np N`` or ``horovodrun
--gloo -np N``), and each binds itself to its own cores as a sync rank does. The rank is
built as a sync run builds it (:class:`distrain.train.replica.Replica` in a Horovod
:class:`~distrain.train.replica.Group`: the same model, optimizer, data shard, threads and
Horovod start) and traces two steps over the same
variables: a sync run's training step (gradients averaged by Horovod's allreduce) and the
same step without the allreduce. Then come ``GROUPS`` groups of phases of ``STEPS`` steps,
one phase of each kind per group:

- ``sync``: every rank runs the sync step;
- ``alone``: every rank runs the step without the allreduce, at the same time: N workers
  each alone on its own cores, sharing the machine;
- ``solo<r>``: rank r alone runs the step without the allreduce while the others sleep:
  one worker on 1/N of the cores, the rest of the machine idle.

Every phase starts at a barrier, and the order of the kinds rotates from group to group.
A host whose speed drifts over seconds or minutes slows the phases of one group alike, as
they take turns every second or so. Horovod's own threads (the background thread's
coordination rounds, Open MPI's progress threads) run in every phase; their CPU time in
each is recorded, so that the suite can take it off the phases without the allreduce: a
worker alone would not have them. The sleeping ranks of a solo phase wait for a flag file,
so all ranks must share a file system (one machine).

Each rank writes ``OUT-rank<r>.json``: its batch and, per phase it ran, the group, the kind
(``solo`` for its own solo phase), the steps, the seconds and the Horovod threads' CPU
seconds.
"""

import json
import os
import sys
import time
from pathlib import Path

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)


def thread_cpu_seconds(tids: list[str]) -> float:
    """User + system CPU seconds of some of this process's threads (Linux ``/proc``)."""
    total = 0
    for tid in tids:
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # a thread that has ended
            continue
        fields = stat.rsplit(")", 1)[1].split()  # fields 3 onwards of proc(5)'s stat
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


def main() -> None:
    config_path, out, groups, steps = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5])
    from distrain.train.horovod import bind_rank_to_cores, start_horovod
    from distrain.train.runtime import configure_tensorflow

    bind_rank_to_cores()  # [sync] before TensorFlow creates its thread pools, as a rank does
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from distrain.train.config import TrainConfig
    from distrain.train.replica import Group, Replica, allreduce_gradients

    cfg = TrainConfig.from_json(Path(config_path).read_text())
    configure_tensorflow(cfg)  # as a training process does
    # Horovod started here first, as the trainer starts it (its threads at idle priority
    # if the config asks), to tell its threads from TensorFlow's; the trainer's own
    # hvd.init() then finds it started.
    tasks = Path("/proc/self/task")
    before = set(os.listdir(tasks))
    _, lowered = start_horovod(cfg.idle_horovod_threads)
    new = sorted(set(os.listdir(tasks)) - before, key=int)
    horovod_threads = [str(t) for t in lowered] or new
    trainer = Replica(cfg, Group(hvd.rank(), hvd.size(), hvd))
    batches = iter(trainer.train_shard(cfg.seed + trainer.rank))
    alone = trainer.train_step()
    alone(*next(batches))
    sync = trainer.train_step(allreduce_gradients(hvd))  # as a sync rank's step
    sync(*next(batches))
    steps_of = {"alone": alone, "sync": sync}

    def barrier() -> None:
        hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name="phase_barrier").numpy()

    def run_phase(kind: str) -> tuple[float, float]:
        """``steps`` steps of one kind: (seconds, Horovod threads' CPU seconds)."""
        step = steps_of[kind]
        cpu = thread_cpu_seconds(horovod_threads)
        start = time.perf_counter()
        for _ in range(steps):
            loss, _ = step(*next(batches))
            float(loss)  # waits for the step, as the training loop does
        return time.perf_counter() - start, thread_cpu_seconds(horovod_threads) - cpu

    kinds = ["sync", "alone", *(f"solo{r}" for r in range(trainer.group.size))]
    records = []
    for group in range(-1, groups):  # group -1 warms the steps up and is not kept
        order = kinds[group % len(kinds) :] + kinds[: group % len(kinds)]
        for kind in order:
            barrier()
            if kind.startswith("solo"):
                # One rank trains, alone on the machine; the others wait without taking a
                # core: they sleep until its flag file appears (ranks on one machine).
                flag = Path(f"{out}-group{group}-{kind}.done")
                if int(kind[4:]) == trainer.rank:
                    seconds, cpu = run_phase("alone")
                    flag.touch()
                else:
                    while not flag.exists():
                        time.sleep(0.002)
                    continue
            else:
                seconds, cpu = run_phase(kind)
            if group >= 0:
                records.append(
                    {
                        "group": group,
                        "kind": "solo" if kind.startswith("solo") else kind,
                        "steps": steps,
                        "seconds": seconds,
                        "horovod_cpu_seconds": cpu,
                    }
                )
    barrier()
    result = {"rank": trainer.rank, "batch": cfg.batch_size, "phases": records}
    result["horovod_threads"] = len(horovod_threads)
    result["idle_horovod_threads"] = len(lowered)
    result["controller"] = "mpi" if hvd.mpi_enabled() else "gloo"
    Path(f"{out}-rank{trainer.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
