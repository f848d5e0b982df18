"""The plan's statistics, measured here: steps to target at the planned batch and staleness.

Statistical efficiency does not depend on speed: the steps a mode needs at an effective batch
of 1,024, or with 16 asynchronous workers' staleness, can be measured on one process of a
small machine. :func:`measure` runs, on the comparison's preprocessed data and model, in one
process and evaluating the validation split every few steps:

* **base**: one worker's batch at the best of a few multiples of the base learning rate
  (:func:`best_rate`: the empirical model's steps are each batch's at its best rate), with
  the gradient noise scale (:mod:`distrain.base.noisescale`) measured at every evaluation from
  mini-batch gradients at two batch sizes, in Adam's metric (each coordinate over
  ``√v + ε``: Adam preconditions its steps, and a preconditioned optimizer's critical
  batch is larger than plain SGD's, Zhang et al. 2019; plainly where the runs' optimizer
  keeps no second moment) and plainly, beside it;
* **check**: the planned effective batch of ``sync:N`` (N batches) at the rate sync's rule
  gives it (``scale_learning_rate``: N times the base, warmed up over ``warmup_epochs`` as
  the run was), the run that checks the noise scale's prediction;
* **stale**: ``async:N``'s statistics: one worker's batch whose gradient is computed on the
  weights of ``N - 1`` updates before (N workers of equal speed take turns at the servers,
  so each gradient finds ``N - 1`` others applied since it read the weights), at the base
  rate (or divided by 1 + staleness, ``lr=staleness``).

Each returns the steps to the target (the first evaluation at or above it) or None.
"""

from __future__ import annotations

import collections
import functools
import statistics

import numpy as np

from distrain.base.noisescale import simple_noise_scale, steps_at
from distrain.learning.choices import make_optimizer
from distrain.learning.inputs import make_dataset
from distrain.learning.models import build_model, load_info, model_spec, task_of

# Gradients per evaluation for the noise scale: small batches and big ones (the big ones
# BIG_FACTOR times the small).
SMALL_GRADIENTS, BIG_GRADIENTS, BIG_FACTOR = 16, 4, 16
# Evaluations per pass over the training split (the steps' resolution).
EVALUATIONS_PER_EPOCH = 20
# Seeds of the base run: the steps to a target vary from seed to seed, and the prediction's
# range says by how much.
BASE_SEEDS = 3
# The base rate's multiples tried at one worker's batch (two seeds each): the empirical
# model's steps are at each batch's best rate, and the runs' own rate need not be it.
RATE_FACTORS = (1, 2, 4, 8)


def load_arrays(info, split: str) -> tuple:
    """A split's features and labels as NumPy arrays (a structure of them for dict features)."""
    import tensorflow as tf

    parts = list(make_dataset(info, split, 4096).as_numpy_iterator())
    features = tf.nest.map_structure(lambda *a: np.concatenate(a), *[p[0] for p in parts])
    return features, np.concatenate([p[1] for p in parts])


def _take(features, index):
    import tensorflow as tf

    return tf.nest.map_structure(lambda a: a[index], features)


class _Learner:
    """A model, its task and the optimizer its runs train with, stepped one batch at a time.

    The optimizer is the runs' own (:func:`distrain.learning.choices.make_optimizer`):
    distrain's Adam or SGD as the model's spec and the data's size choose, or the model
    file's; SGD's rate falls to zero over ``updates``.
    """

    def __init__(
        self,
        info,
        model_name: str,
        seed: int,
        rate: float,
        warmup: tuple = (0, None),
        batch: int = 1,
        updates: int = 0,
    ):
        import tensorflow as tf

        self.model = build_model(info, model_name, seed)
        self.task = task_of(info, model_name)
        self.variables = self.model.trainable_variables
        schedule = {"warmup_updates": warmup[0], "warmup_from": warmup[1]} if warmup[0] else {}
        spec = model_spec(info.dataset, model_name)
        self.optimizer = make_optimizer(
            spec, info, rate, examples=batch, run_updates=updates, **schedule
        )
        self.optimizer.build(self.variables)
        # Adam's second moments, where the optimizer keeps them: the noise scale's metric.
        self.second_moments = getattr(self.optimizer, "v", None) or None

        @tf.function(reduce_retracing=True)
        def gradient(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(self.task.losses(y, self.model(x, training=True)))
            return tape.gradient(loss, self.variables)

        @tf.function(reduce_retracing=True)
        def hits(x, y):
            return tf.reduce_sum(
                tf.cast(self.task.hits(y, self.model(x, training=False)), "float32")
            )

        self.gradient, self._hits = gradient, hits

    def apply(self, grads, scale=None) -> None:
        import tensorflow as tf

        pairs = zip(grads, self.variables, strict=True)
        if scale is None:
            self.optimizer.apply_gradients(pairs)
        else:
            self.optimizer.apply_gradients(pairs, scale=tf.constant(scale, tf.float32))

    def accuracy(self, x, y) -> float:
        return float(self._hits(x, y)) / len(y)

    def weights(self) -> list:
        return [v.numpy() for v in self.variables]

    def assign(self, weights) -> None:
        for v, w in zip(self.variables, weights, strict=True):
            v.assign(w)

    def sq_norms(self, x, y) -> tuple[float, float]:
        """``|g|²`` of the batch's gradient, plain and in Adam's metric (``Σ g² / (√v + ε)``).

        An optimizer without second moments (SGD, a model file's) preconditions nothing:
        its metric is the plain one.
        """
        grads = [tf_dense(g) for g in self.gradient(x, y)]
        plain = sum(float(np.sum(np.square(g))) for g in grads)
        if self.second_moments is None:
            return plain, plain
        scales = [np.sqrt(v.numpy()) + self.optimizer.epsilon for v in self.second_moments]
        adam = sum(float(np.sum(np.square(g) / d)) for g, d in zip(grads, scales, strict=True))
        return plain, adam


def tf_dense(grad):
    """A gradient as a dense array (an embedding's arrives as rows: IndexedSlices)."""
    import tensorflow as tf

    return tf.convert_to_tensor(grad).numpy()


def _noise(learner: _Learner, train, batch: int, rng) -> dict:
    """The noise scale at the learner's weights: small and big batches' gradient norms."""
    x, y = train
    big = min(batch * BIG_FACTOR, len(y) // 2)
    small = [
        learner.sq_norms(*_pair(x, y, rng.choice(len(y), batch, replace=False)))
        for _ in range(SMALL_GRADIENTS)
    ]
    large = [
        learner.sq_norms(*_pair(x, y, rng.choice(len(y), big, replace=False)))
        for _ in range(BIG_GRADIENTS)
    ]
    plain = simple_noise_scale([s[0] for s in small], [b[0] for b in large], batch, big)
    adam = simple_noise_scale([s[1] for s in small], [b[1] for b in large], batch, big)
    return {**adam, "plain": plain, "b_small": batch, "b_big": big}


def _pair(x, y, index):
    return _take(x, index), y[index]


def run_to_target(
    info,
    model_name: str,
    data: tuple,
    *,
    batch: int,
    rate: float,
    target: float,
    max_steps: int,
    seed: int = 0,
    delay: int = 0,
    staleness_rate: bool = False,
    warmup: tuple = (0, None),
    noise: bool = False,
) -> dict:
    """Trains one process until the validation accuracy reaches ``target`` (or ``max_steps``).

    Args:
        info: The data set's info (:func:`distrain.learning.models.load_info`).
        model_name: The model.
        data: ``(train, validation)``, each ``(features, labels)`` arrays.
        batch: Examples per update.
        rate: The optimizer's learning rate (Adam's, or SGD's per example).
        target: The validation accuracy to reach.
        max_steps: Updates at the most.
        seed: Initial weights and the data order.
        delay: Each gradient is computed on the weights of this many updates before.
        staleness_rate: Divide each update's rate by 1 + its delay (async's ``lr=staleness``).
        warmup: ``(updates, from_rate)`` of a gradual warm-up (none: ``(0, None)``).
        noise: Measure the gradient noise scale at each evaluation.

    Returns:
        ``{"steps", "batch", "rate", "delay", "every", "evaluations", "noise"}``: ``steps``
        to the target (None: not reached in ``max_steps``), ``every`` the updates between
        evaluations (the steps' resolution), ``evaluations`` ``[step, accuracy]`` pairs and
        ``noise`` the noise scale measured at each (with ``noise``).
    """
    train, (xv, yv) = data
    x, y = train
    rng = np.random.default_rng(seed)
    learner = _Learner(info, model_name, seed, rate, warmup, batch=batch, updates=max_steps)
    every = max(1, round(len(y) / batch / EVALUATIONS_PER_EPOCH))
    history = collections.deque(maxlen=delay + 1)
    out = {"batch": batch, "rate": rate, "delay": delay, "every": every, "steps": None}
    out["evaluations"], out["noise"] = [], []
    order, position = rng.permutation(len(y)), 0
    for step in range(1, max_steps + 1):
        if position + batch > len(y):
            order, position = rng.permutation(len(y)), 0
        index = order[position : position + batch]
        position += batch
        if delay:
            history.append(learner.weights())
            current = history[-1]
            learner.assign(history[0])  # the oldest kept: up to ``delay`` updates before
            grads = learner.gradient(*_pair(x, y, index))
            learner.assign(current)
            lag = len(history) - 1
            learner.apply(grads, 1.0 / (1 + lag) if staleness_rate else None)
        else:
            learner.apply(learner.gradient(*_pair(x, y, index)))
        if step % every and step != max_steps:
            continue
        if noise:
            out["noise"].append({"step": step, **_noise(learner, train, batch, rng)})
        accuracy = learner.accuracy(xv, yv)
        out["evaluations"].append([step, accuracy])
        if accuracy >= target:
            out["steps"] = step
            break
    return out


def noise_summary(late: list[dict], seed: int = 0, draws: int = 2000) -> dict | None:
    """The noise scale over evaluations, with a 95 % bootstrap interval.

    ``late``: the evaluations in the second half of each base run to the target (the noise
    scale grows as the loss falls; the steps to a target are set near it). The value is the
    ratio of their mean ``tr(Σ)`` to their mean ``|G|²`` (one evaluation's own ratio is far
    noisier: its ``|G|²`` can come out near zero); the interval is the 2.5th and 97.5th
    percentiles of that ratio over the evaluations resampled with replacement. None without
    a positive estimate.
    """
    trace = np.array([p["trace"] for p in late], float)
    grad = np.array([p["gradient_sq"] for p in late], float)
    if not len(late) or grad.mean() <= 0:
        return None
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(late), size=(draws, len(late)))
    means = grad[picks].mean(axis=1)
    ratios = trace[picks].mean(axis=1)[means > 0] / means[means > 0]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return {
        "b_noise": float(trace.mean() / grad.mean()),
        "range": [float(max(low, 0.0)), float(high)],
        "evaluations": len(late),
    }


def best_rate(info, model_name: str, data, *, batch, rate, target, seed, seeds=2) -> dict:
    """The multiple of ``rate`` (:data:`RATE_FACTORS`) that reaches ``target`` in fewest steps.

    Returns:
        ``{"best", "steps"}``: the rate, and each rate's steps over ``seeds`` seeds (None:
        missed); ties go to the lower rate.
    """
    limit = max(10, int(30 * len(data[0][1]) / batch))
    steps = {}
    for factor in RATE_FACTORS:
        runs = [
            run_to_target(
                info,
                model_name,
                data,
                batch=batch,
                rate=rate * factor,
                target=target,
                max_steps=limit,
                seed=seed + k,
            )["steps"]  # fmt: skip
            for k in range(seeds)
        ]
        steps[rate * factor] = runs
    reached = {r: statistics.median(v) for r, v in steps.items() if all(v)}
    best = min(reached, key=lambda r: (reached[r], r)) if reached else rate
    return {"best": best, "steps": {f"{r:g}": v for r, v in steps.items()}}


def predict_sync(bases: list[dict], noise: dict | None, batch: int, big: int) -> dict:
    """The noise scale's steps at batch ``big`` from the base runs' at ``batch``, with a range.

    The range spans the seeds' steps (the lowest less the base's resolution: an evaluation
    every few steps) and the noise scale's interval. None where a base run missed the
    target or the noise scale has no estimate.
    """
    reached = [b["steps"] for b in bases if b["steps"]]
    if not noise or len(reached) < len(bases):
        return {"predicted": None, "predicted_range": None}
    ends = [
        steps_at(s, batch, b, big)
        for s in (min(reached) - bases[0]["every"], max(reached))
        for b in noise["range"]
    ]
    middle = statistics.median(reached)
    return {
        "predicted": steps_at(middle, batch, noise["b_noise"], big),
        "predicted_range": [min(ends), max(ends)],
    }


def measure(
    data_dir: str,
    model_name: str,
    *,
    batch: int,
    rate: float,
    target: float,
    workers: int,
    seed: int = 0,
    warmup_epochs: float = 0.0,
    staleness_rate: bool = False,
    max_epochs: float = 30.0,
) -> dict:
    """The plan's statistics for ``workers``: base run, noise scale, batch check, stale run.

    Args:
        data_dir: The comparison's preprocessed data.
        model_name: Its model.
        batch: One worker's batch.
        rate: The base learning rate (one worker's).
        target: The validation accuracy to reach.
        workers: The plan's workers (N).
        seed: Initial weights and the data order.
        warmup_epochs: Sync's warm-up of its scaled rate, as the runs had it.
        staleness_rate: Async's ``lr=staleness`` rule.
        max_epochs: Passes over the training split each run may take at the most.

    Returns:
        ``{"workers", "base", "noise_scale", "sync", "async"}``: the three runs and, under
        ``sync``, the noise scale's prediction of the steps at the planned batch with its
        range, beside the check run's measured steps.
    """
    info = load_info(data_dir, model_name)
    data = (load_arrays(info, "train"), load_arrays(info, "validation"))
    examples = len(data[0][1])
    run = functools.partial(run_to_target, info, model_name, data, target=target)

    def limit(b: int) -> int:
        return max(10, int(max_epochs * examples / b))

    grid = best_rate(info, model_name, data, batch=batch, rate=rate, target=target, seed=seed)
    bases = [
        run(batch=batch, rate=grid["best"], max_steps=limit(batch), noise=True, seed=seed + k)
        for k in range(BASE_SEEDS)
    ]
    base = bases[0]
    late = [p for b in bases for p in b["noise"][len(b["noise"]) // 2 :]]
    noise = noise_summary(late)  # in Adam's metric, the optimizer's; the plain one beside it
    big = batch * workers
    per_epoch = max(1, examples // big)
    warmup = (max(1, round(warmup_epochs * per_epoch)), rate) if warmup_epochs else (0, None)
    check = run(batch=big, rate=rate * workers, max_steps=limit(big), warmup=warmup, seed=seed)
    stale = run(
        batch=batch, rate=rate, max_steps=limit(batch), delay=workers - 1,
        staleness_rate=staleness_rate, seed=seed,
    )  # fmt: skip
    sync = {"batch": big, "check": check, **predict_sync(bases, noise, batch, big)}
    base = {**base, "seed_steps": [b["steps"] for b in bases]}
    return {
        "workers": workers,
        "target": target,
        "base": base,
        "rates": grid,
        "noise_scale": noise,
        "noise_scale_plain": noise_summary([p["plain"] for p in late]),
        "sync": sync,
        "async": stale,
    }
