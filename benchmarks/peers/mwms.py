"""MultiWorkerMirroredStrategy peer: a custom training loop over N local processes.

Written as TensorFlow's "custom training loop with MultiWorkerMirroredStrategy" tutorial
writes it: the strategy from ``TF_CONFIG``, model and optimizer made in its scope, the
dataset from ``distribute_datasets_from_function`` (each worker reads a 1/N shard, batch
``batch`` per worker, so the global batch is ``batch * N``), ``strategy.run`` of a step
inside a ``tf.function``, and the loss averaged over the global batch. The learning rate
is 1e-3 * N, as distrain scales it. An epoch is ``train_examples // N // batch`` steps.
"""

from __future__ import annotations

import time

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from benchmarks.peers import emit_epochs, peer_args, tf_config

LEARNING_RATE = 1e-3


def main(argv: list[str] | None = None) -> int:
    args = peer_args(argv)
    import tensorflow as tf

    # Threads before the strategy: creating it starts TensorFlow's runtime.
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import tf_keras

    from distrain.datasets.info import DatasetInfo
    from distrain.learning.inputs import make_dataset
    from distrain.learning.models import build_model

    config = tf_config()
    num_workers = len(config["cluster"]["worker"])
    task_index = int(config["task"]["index"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    info = DatasetInfo.load(args.data_dir)
    global_batch = args.batch * num_workers
    steps_per_epoch = info.splits["train"] // num_workers // args.batch

    def dataset_fn(context: tf.distribute.InputContext):
        # One input pipeline per worker, sharded by hand: each reads a disjoint 1/N.
        return make_dataset(
            info,
            "train",
            context.get_per_replica_batch_size(global_batch),
            shard=(context.num_input_pipelines, context.input_pipeline_id),
            shuffle=True,
            seed=args.seed + context.input_pipeline_id,
            repeat=True,
            drop_remainder=True,
        )

    dataset = strategy.distribute_datasets_from_function(dataset_fn)

    with strategy.scope():
        model = build_model(info, args.model, args.seed)
        optimizer = tf_keras.optimizers.Adam(LEARNING_RATE * num_workers)
    loss_object = tf_keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf_keras.losses.Reduction.NONE
    )

    def compute_loss(labels, logits):
        per_example = loss_object(labels, logits)
        if per_example.shape.rank > 1:  # a label per position: average them per example
            per_example = tf.reduce_mean(per_example, axis=list(range(1, per_example.shape.rank)))
        return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)

    @tf.function
    def train_step(iterator):
        def step_fn(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = compute_loss(y, logits)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dataset)
    seconds, examples, losses = [], [], []
    for _ in range(args.epochs):
        start = time.perf_counter()
        total = tf.constant(0.0)
        for _ in range(steps_per_epoch):
            total += train_step(iterator)
        losses.append(float(total) / steps_per_epoch)  # waits for the epoch's last step
        seconds.append(time.perf_counter() - start)
        examples.append(steps_per_epoch * global_batch)
    if task_index == 0:
        lr = LEARNING_RATE * num_workers
        emit_epochs(
            "mwms", args, num_workers, global_batch, steps_per_epoch, seconds, examples, losses, lr
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
