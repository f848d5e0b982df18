"""Exact tests of a model file's own loss, optimizer and class weights.

One step of a mode on one worker against a plain tf-keras ``compile`` and ``fit`` of the
same model, optimizer and loss on the same batch: the weights after it agree to float
tolerance, in single (the eager step every data-parallel mode takes) and on the parameter
servers (the async rule's update, the gradient computed by a worker's step).
"""

from __future__ import annotations

import numpy as np
import pytest

from distrain.learning import choices as choices_module
from distrain.learning.choices import WeightedTask
from distrain.learning.models import model_spec
from distrain.learning.tasks import CLASSIFICATION
from distrain.train.config import TrainConfig
from tests.rules.test_ps_rules import Cluster

BATCH = 16
# A functional MLP on a 2x2 image (the parameter-server test's data) or MNIST's 28x28.
MODEL = """
import tf_keras as keras


def build(info, seed):
    shape = tuple(info.metadata.get("image_shape", [28, 28]))
    image = keras.Input(shape)
    x = keras.layers.Flatten()(image)
    x = keras.layers.Dense(
        8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed),
        kernel_regularizer=keras.regularizers.L2(1e-3),
    )(x)
    logits = keras.layers.Dense(
        info.num_classes, kernel_initializer=keras.initializers.GlorotUniform(seed + 1)
    )(x)
    return keras.Model(image, logits)
"""
ADAMW = """

def optimizer(info):
    schedule = keras.optimizers.schedules.ExponentialDecay(0.01, 1, 0.5)
    return keras.optimizers.AdamW(learning_rate=schedule, weight_decay=0.05)
"""
SMOOTHED = """

def loss(info):
    return keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
"""
SGD = """

def optimizer(info):
    return keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
"""
WEIGHTED = """

def class_weights(info):
    return {0: 0.5, 1: 3.0}
"""


def model_file(tmp_path, *parts: str, name: str = "mine") -> str:
    # (One module per file's path: each variant of the file gets its own name.)
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL + "".join(parts))
    return f"{path}:build"


def keras_fit(model_ref: str, info, initial, x, y, batch: int, class_weight=None):
    """The weights after ``fit`` over ``x`` in batches of ``batch``, with the file's choices."""
    import tensorflow as tf
    import tf_keras as keras

    spec = model_spec(info.dataset, model_ref)
    model = spec.build(info, 0)
    model.set_weights(initial)
    funcs = spec.choices.functions
    loss = funcs["loss"][0](info)
    assert isinstance(loss, keras.losses.CategoricalCrossentropy)  # one-hot labels, as fit's
    model.compile(optimizer=funcs["optimizer"][0](info), loss=loss)
    labels = tf.one_hot(y, info.num_classes)
    model.fit(
        x, labels, batch_size=batch, epochs=1, shuffle=False, verbose=0, class_weight=class_weight
    )
    return model.get_weights()


def test_one_single_step_with_the_users_adamw_is_fits_step(tmp_path, mnist_examples):
    import tf_keras as keras

    from distrain.train.replica import Replica

    ref = model_file(tmp_path, ADAMW, SMOOTHED, WEIGHTED)
    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(tmp_path / "o"),
        run="single:1",
        model=ref,
        batch_size=BATCH,
    )
    replica = Replica(cfg)
    assert isinstance(replica.optimizer.optimizer, keras.optimizers.AdamW)
    initial = replica.model.get_weights()
    x, y = next(iter(replica.train_shard(cfg.seed)))
    step = replica.train_step()
    for _ in range(2):  # two steps: the schedule's second rate, the moments' second update
        step(x, y)
    assert replica.step == 2 and int(replica.optimizer.optimizer.iterations.numpy()) == 2
    weights = replica.model.get_weights()
    classes = replica.info.num_classes
    weight = {c: 1.0 for c in range(classes)} | {0: 0.5, 1: 3.0}
    x2 = np.concatenate([x.numpy(), x.numpy()])
    y2 = np.concatenate([y.numpy(), y.numpy()])
    # fit over the batch twice: two steps of one batch each.
    expected = keras_fit(ref, replica.info, initial, x2, y2, BATCH, weight)
    for mine, theirs in zip(weights, expected, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
    # The step moved the weights (the test could not pass by doing nothing).
    assert max(np.abs(a - b).max() for a, b in zip(weights, initial, strict=True)) > 1e-3
    # The history records what the file chose.
    chosen = replica.user_choices
    assert chosen["optimizer"]["class_name"] == "AdamW"
    assert chosen["optimizer"]["config"]["weight_decay"] == 0.05
    assert chosen["loss"]["config"]["label_smoothing"] == 0.1
    assert chosen["class_weights"][:2] == [0.5, 3.0]


def test_label_smoothing_changes_the_trained_weights(tmp_path, mnist_examples):
    from distrain.train.replica import Replica

    def one_step(ref, out):
        cfg = TrainConfig(
            data_dir=str(mnist_examples),
            output_dir=str(tmp_path / out),
            run="single:1",
            model=ref,
            batch_size=BATCH,
        )
        replica = Replica(cfg)
        x, y = next(iter(replica.train_shard(cfg.seed)))
        replica.train_step()(x, y)
        return replica.model.get_weights()

    # (SGD: Adam's first step is about the gradient's sign, which smoothing rarely flips.)
    plain = one_step(model_file(tmp_path, SGD, name="plain"), "plain")
    smoothed = one_step(model_file(tmp_path, SGD, SMOOTHED, name="smoothed"), "smoothed")
    # Smoothing pulls the targets off 0 and 1: the logits' gradients, hence the step, differ.
    assert max(np.abs(a - b).max() for a, b in zip(plain, smoothed, strict=True)) > 1e-4


def test_one_parameter_server_update_with_the_users_adamw_is_fits_step(tmp_path):
    # [async] a worker's gradient of the user's (smoothed, weighted) loss, applied by the
    # user's AdamW on the parameter servers, gives fit's weights after one step.
    import tensorflow as tf

    from distrain.train.modes.asynchronous import AsyncRule
    from distrain.train.replica import batch_gradients

    ref = model_file(tmp_path, ADAMW, SMOOTHED, WEIGHTED)
    c = Cluster(tmp_path, AsyncRule, model=ref)
    g, sess, grads, read, go_on, done, _ = c.workers[0]
    assert g.optimizer.is_users and g.optimizer.variables[0].device == "/job:ps/task:0"
    rng = np.random.default_rng(3)
    x = rng.random((BATCH, 2, 2)).astype(np.float32)
    y = rng.integers(0, 2, BATCH).astype(np.int32)
    info, initial = g.info, c.initial
    # The worker's gradient, as its step computes it (the model at the servers' values).
    model = model_spec(info.dataset, ref).build(info, 0)
    model.set_weights(initial)
    task = choices_module.training_task(model_spec(info.dataset, ref), info)
    _, _, computed = tf.function(
        lambda: batch_gradients(model, model.trainable_variables, x, y, task)
    )()
    feed = {ph: value.numpy() for ph, value in zip(grads, computed, strict=True)}
    feed[read] = 0
    ok, _ = sess.run([go_on, done], feed)
    assert ok
    expected = keras_fit(ref, info, initial, x, y, BATCH, class_weight={0: 0.5, 1: 3.0})
    for mine, theirs in zip(c.values(), expected, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
    assert max(np.abs(a - b).max() for a, b in zip(c.values(), initial, strict=True)) > 1e-3
    # The user's step counter and slots live on the parameter server, updated there.
    iterations = c.chief.g.optimizer.optimizer.iterations
    assert c.chief.sess.run(iterations) == 1


def test_class_weights_weigh_each_examples_loss_by_its_label(tmp_path):
    import tensorflow as tf
    import tf_keras as keras

    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5], [-1.0, 1.0, 3.0], [0.0, 2.0, 0.0]])
    y = np.array([0, 2, 2, 1], np.int32)
    weights = [0.5, 2.0, 4.0]
    task = WeightedTask(CLASSIFICATION, None, weights)
    # Each example's cross-entropy, log-sum-exp minus its label's logit, times its weight.
    plain = np.log(np.exp(logits).sum(1)) - logits[np.arange(4), y]
    known = plain * np.array(weights)[y]
    got = task.training_losses(tf.constant(y), tf.constant(logits, tf.float32)).numpy()
    np.testing.assert_allclose(got, known, rtol=1e-6)
    # Validation's losses are not weighted (as fit's val_loss); hits are the task's.
    unweighted = task.losses(tf.constant(y), tf.constant(logits, tf.float32)).numpy()
    np.testing.assert_allclose(unweighted, plain, rtol=1e-6)
    total, hits = task.sums(tf.constant(y), tf.constant(logits, tf.float32), training=True)
    assert float(hits) == 3.0
    np.testing.assert_allclose(float(total), known.sum(), rtol=1e-6)
    # The mean is what fit minimises with class_weight: sum(w l) / batch.
    fits = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        y, logits, sample_weight=np.array(weights)[y]
    )
    np.testing.assert_allclose(known.mean(), float(fits), rtol=1e-6)


def test_a_one_hot_loss_gets_one_hot_labels_and_smooths_them():
    import tensorflow as tf
    import tf_keras as keras

    logits = tf.constant([[2.0, 0.0, -1.0], [0.0, 1.0, 3.0]])
    y = tf.constant([0, 2])
    eps = 0.3
    smoothed = choices_module.per_example(
        keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=eps), 3
    )(y, logits).numpy()
    logp = tf.nn.log_softmax(logits).numpy()
    target = np.eye(3)[[0, 2]] * (1 - eps) + eps / 3
    np.testing.assert_allclose(smoothed, -(target * logp).sum(1), rtol=1e-6)
    sparse = choices_module.per_example(
        keras.losses.SparseCategoricalCrossentropy(from_logits=True), 3
    )(y, logits).numpy()
    np.testing.assert_allclose(sparse, -logp[[0, 1], [0, 2]], rtol=1e-6)


@pytest.mark.parametrize(
    "given, says",
    [
        ({0: 1.0, 7: 2.0}, "class 7 is not one of the 3 classes"),
        ({"zebra": 1.0}, "'zebra' is not a class"),
        ([1.0, 2.0], "2 weights, the data set has 3 classes"),
        ([1.0, -1.0, 1.0], "weight -1.0 is not a finite number"),
        ([0, 0, 0], "every class weighs 0"),
        ("heavy", "returned a str"),
    ],
)
def test_bad_class_weights_are_one_line_naming_the_file(given, says):
    from types import SimpleNamespace

    info = SimpleNamespace(num_classes=3, class_names=["a", "b", "c"])
    with pytest.raises(choices_module.ChoiceError) as err:
        choices_module.weights_per_class(given, info, "/me/m.py:9")
    assert str(err.value).startswith("/me/m.py:9: class_weights(info)")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_class_weights_by_name_and_a_partial_dict():
    from types import SimpleNamespace

    info = SimpleNamespace(num_classes=3, class_names=["a", "b", "c"])
    assert choices_module.weights_per_class({"c": 2, 0: 0.5}, info, "") == [0.5, 1.0, 2.0]
