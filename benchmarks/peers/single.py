"""Single-process peer: a ``tf.function`` training step in a Python loop (eager TF2).

Written as TensorFlow's "training loop from scratch" guide writes it: a tf-keras model,
a tf-keras Adam, ``GradientTape`` inside a ``tf.function`` step. An epoch is
``train_examples // batch`` steps.
"""

from __future__ import annotations

import time

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from benchmarks.peers import emit_epochs, peer_args

LEARNING_RATE = 1e-3


def main(argv: list[str] | None = None) -> int:
    args = peer_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import tf_keras

    from distrain.datasets.info import DatasetInfo
    from distrain.learning.inputs import make_dataset
    from distrain.learning.models import build_model

    info = DatasetInfo.load(args.data_dir)
    steps_per_epoch = info.splits["train"] // args.batch
    dataset = make_dataset(
        info,
        "train",
        args.batch,
        shuffle=True,
        seed=args.seed,
        repeat=True,
        drop_remainder=True,
    )
    model = build_model(info, args.model, args.seed)
    optimizer = tf_keras.optimizers.Adam(LEARNING_RATE)
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    iterator = iter(dataset)
    seconds, examples, losses = [], [], []
    for _ in range(args.epochs):
        start = time.perf_counter()
        total = tf.constant(0.0)
        for _ in range(steps_per_epoch):
            x, y = next(iterator)
            total += train_step(x, y)
        losses.append(float(total) / steps_per_epoch)  # waits for the epoch's last step
        seconds.append(time.perf_counter() - start)
        examples.append(steps_per_epoch * args.batch)
    emit_epochs(
        "single", args, 1, args.batch, steps_per_epoch, seconds, examples, losses, LEARNING_RATE
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
