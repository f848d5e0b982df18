"""Between-graph replication peer: classic TF1 parameter-server training, async or sync.

Written as TensorFlow 1's "Distributed TensorFlow" guide writes it: a
``tf.compat.v1.train.Server`` per process from ``TF_CONFIG``; parameter servers only
``join()``; each worker builds its own graph (``tf.Graph().as_default()``) with the
variables placed by ``replica_device_setter``, a ``tf.compat.v1.train.AdamOptimizer``
with a global step, and runs ``session.run(train_op)`` once per step in a
``MonitoredTrainingSession`` (worker 0 is chief) until ``StopAtStepHook`` stops it.

``--kind async``: every worker applies its own gradients (Downpour-style async SGD); an
epoch is ``train_examples // batch`` global steps, learning rate 1e-3.

``--kind syncreplicas --aggregate A``: the optimizer is wrapped in
``SyncReplicasOptimizer(replicas_to_aggregate=A, total_num_replicas=N)``, each global
step averages A gradients (later ones of the same step are dropped); an epoch is
``train_examples // (batch * A)`` global steps, learning rate 1e-3 * A.

Every worker reads the whole train split in its own shuffled order (seed + worker index).
Worker 0 measures distrain's way: global steps * batch (* A) per second from the moment
the global step passed the end of epoch 1 to the end.

TF 2.21 notes: ``tf.device(replica_device_setter(...))`` raises (TF2's ``tf.device``
takes no function); ``tf.compat.v1.device`` does. A non-chief ``MonitoredTrainingSession``
waits 30 s between readiness checks, so workers first poll
``report_uninitialized_variables`` on a plain session until the chief initialised them.
"""

from __future__ import annotations

import time

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from benchmarks.peers import emit, peer_args, tf_config

LEARNING_RATE = 1e-3
# Seconds MonitoredTrainingSession waits for its threads (SyncReplicas' chief queue
# runner stays blocked for gradients that never come) before it closes: default 120.
STOP_GRACE_SECONDS = 2


def _server(tf, cluster, job: str, index: int, threads: int):
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads,
        # Workers: 2 as distrain. Servers: on few cores fewer than 4 can deadlock.
        inter_op_parallelism_threads=2 if job == "worker" else max(4, threads),
    )
    return tf.compat.v1.train.Server(
        cluster, job_name=job, task_index=index, config=config, start=True
    ), config


def _wait_for_chief(tf, server, config, timeout: float = 600.0) -> None:
    """Polls until the chief initialised the global variables (non-chief workers)."""
    pending = tf.compat.v1.report_uninitialized_variables(tf.compat.v1.global_variables())
    deadline = time.monotonic() + timeout
    with tf.compat.v1.Session(server.target, config=config) as session:
        while True:
            try:
                if len(session.run(pending)) == 0:
                    return
            except tf.errors.UnavailableError:  # the parameter servers are not up yet
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the chief did not initialise the variables")
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    began = time.perf_counter()
    args = peer_args(argv)
    import tensorflow as tf

    config = tf_config()
    job, index = config["task"]["type"], int(config["task"]["index"])
    cluster = tf.train.ClusterSpec(config["cluster"])
    server, server_config = _server(tf, cluster, job, index, args.threads)
    if job == "ps":
        server.join()  # forever: run_peer kills it
        return 0

    from distrain.datasets.info import DatasetInfo
    from distrain.learning.inputs import make_dataset
    from distrain.learning.models import build_model

    sync = args.kind == "syncreplicas"
    num_workers = cluster.num_tasks("worker")
    aggregate = (args.aggregate or num_workers) if sync else 1
    is_chief = index == 0
    info = DatasetInfo.load(args.data_dir)
    steps_per_epoch = info.splits["train"] // (args.batch * aggregate)
    last_step = args.epochs * steps_per_epoch
    worker_device = f"/job:worker/task:{index}"

    with tf.Graph().as_default():
        with tf.compat.v1.device(worker_device + "/cpu:0"):
            dataset = make_dataset(
                info,
                "train",
                args.batch,
                shuffle=True,
                seed=args.seed + index,
                repeat=True,
                drop_remainder=True,
            )
            images, labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        with tf.compat.v1.device(
            tf.compat.v1.train.replica_device_setter(worker_device=worker_device, cluster=cluster)
        ):
            model = build_model(info, args.model, args.seed)
            logits = model(images, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            )
            global_step = tf.compat.v1.train.get_or_create_global_step()
            optimizer = tf.compat.v1.train.AdamOptimizer(LEARNING_RATE * aggregate)
            if sync:
                optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
                    optimizer, replicas_to_aggregate=aggregate, total_num_replicas=num_workers
                )
            train_op = optimizer.minimize(
                loss, global_step=global_step, var_list=model.trainable_variables
            )

        hooks = [tf.compat.v1.train.StopAtStepHook(last_step=last_step)]
        if sync:
            hooks.append(optimizer.make_session_run_hook(is_chief))
        timer = _Timer(tf, global_step, loss, steps_per_epoch)
        if is_chief:
            hooks.append(timer)
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=args.threads,
            inter_op_parallelism_threads=2,
            # Talk to the parameter servers and this worker only, never wait for the others.
            device_filters=["/job:ps", worker_device],
        )
        built = time.perf_counter()
        if not is_chief:
            _wait_for_chief(tf, server, session_config)
        steps = 0
        with tf.compat.v1.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=is_chief,
            hooks=hooks,
            config=session_config,
            checkpoint_dir=None,
            save_checkpoint_secs=None,
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=None,
            stop_grace_period_secs=STOP_GRACE_SECONDS,
        ) as session:
            while not session.should_stop():
                session.run(train_op)
                steps += 1
    closed = time.perf_counter()

    if is_chief:
        examples = (timer.end_step - timer.start_step) * args.batch * aggregate
        seconds = timer.end_time - timer.start_time
        emit(
            {
                "kind": args.kind,
                "workers": num_workers,
                "aggregate": aggregate,
                "batch": args.batch,
                "global_batch": args.batch * aggregate,
                "model": args.model,
                "examples_per_second": examples / seconds if seconds > 0 else 0.0,
                "steps": timer.end_step,
                "steps_per_epoch": steps_per_epoch,
                "chief_steps": steps,
                "seconds": seconds,
                "examples": examples,
                "start_step": timer.start_step,
                "loss": timer.losses,
                "learning_rate": LEARNING_RATE * aggregate,
                # Where worker 0's time went: import and graph, session creation, the
                # steps, closing the session (SyncReplicas: the grace for its queue runner).
                "phase_seconds": {
                    "build": built - began,
                    "session": timer.first_time - built,
                    "train": timer.end_time - timer.first_time,
                    "close": closed - timer.end_time,
                },
            }
        )
    return 0


class _Timer:
    """Chief's hook: when the global step passed epoch 1, and where it is at the end.

    Duck-typed ``SessionRunHook`` (``MonitoredSession`` calls these methods only).
    """

    def __init__(self, tf, global_step, loss, steps_per_epoch: int):
        self.tf = tf
        self.global_step, self.loss = global_step, loss
        self.steps_per_epoch = steps_per_epoch
        self.start_step = self.end_step = 0
        self.start_time = self.end_time = 0.0
        self.first_time = 0.0
        self.losses: list[float] = []
        self._runs = 0

    def begin(self):
        pass

    def after_create_session(self, session, coord):
        self.first_time = time.perf_counter()

    def before_run(self, run_context):
        fetches = {"step": self.global_step}
        if self._runs % 50 == 0:
            fetches["loss"] = self.loss
        self._runs += 1
        return self.tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        now = time.perf_counter()
        results = run_values.results
        if "loss" in results:
            self.losses.append(float(results["loss"]))
        # The step read before this run's update: the update of this run is on top.
        step = int(results["step"]) + 1
        if not self.start_time and step >= self.steps_per_epoch:
            self.start_time, self.start_step = now, step
        self.end_time, self.end_step = now, step

    def end(self, session):
        self.end_step = int(session.run(self.global_step))
        self.end_time = time.perf_counter()
        if not self.start_time:  # a single epoch: measure all of it
            self.start_time, self.start_step = self.first_time, 0


if __name__ == "__main__":
    raise SystemExit(main())
