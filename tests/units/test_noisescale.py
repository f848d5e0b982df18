"""The noise-scale estimator on gradients whose noise scale is known."""

import numpy as np
import pytest

from distrain.base.noisescale import simple_noise_scale, steps_at


def test_expected_norms_give_back_the_gradient_the_trace_and_their_ratio():
    # E |G_B|^2 = |G|^2 + tr(Sigma) / B: with |G|^2 = 2 and tr(Sigma) = 500, B_noise = 250.
    small, big = 2 + 500 / 64, 2 + 500 / 1024
    got = simple_noise_scale([small], [big], 64, 1024)
    assert got["gradient_sq"] == pytest.approx(2.0)
    assert got["trace"] == pytest.approx(500.0)
    assert got["b_noise"] == pytest.approx(250.0)


def test_sampled_batches_of_known_per_example_gradients():
    # Per-example gradients G + noise of known covariance; batches drawn with replacement.
    rng = np.random.default_rng(0)
    mean = np.array([1.0, -2.0, 0.5])  # |G|^2 = 5.25
    scales = np.array([3.0, 4.0, 12.0])  # tr(Sigma) = 9 + 16 + 144 = 169
    examples = mean + rng.standard_normal((200_000, 3)) * scales
    population_trace = examples.var(axis=0).sum()
    population_sq = float(np.sum(examples.mean(axis=0) ** 2))

    def norms(batch, count):
        picks = rng.integers(0, len(examples), size=(count, batch))
        return np.sum(examples[picks].mean(axis=1) ** 2, axis=1)

    got = simple_noise_scale(norms(8, 40_000), norms(256, 4_000), 8, 256)
    assert got["trace"] == pytest.approx(population_trace, rel=0.03)
    assert got["gradient_sq"] == pytest.approx(population_sq, rel=0.05)
    assert got["b_noise"] == pytest.approx(population_trace / population_sq, rel=0.06)


def test_a_gradient_swamped_by_noise_has_no_noise_scale_and_bad_batches_are_refused():
    assert simple_noise_scale([1.0], [0.1], 8, 64)["b_noise"] is None  # |G|^2 < 0
    with pytest.raises(ValueError, match="must be larger"):
        simple_noise_scale([1.0], [1.0], 64, 64)
    with pytest.raises(ValueError, match="both batch sizes"):
        simple_noise_scale([], [1.0], 8, 64)


def test_steps_follow_the_empirical_model():
    # S_min = 300 / (1 + 250/50) = 50; at B = 1000: 50 (1 + 0.25) = 62.5.
    assert steps_at(300, 50, 250, 1000) == pytest.approx(62.5)
    assert steps_at(300, 50, 250, 50) == pytest.approx(300)
    assert steps_at(300, 50, 0.0, 1000) == pytest.approx(300)  # no noise: no gain from batch


def test_the_sync_prediction_spans_the_seeds_and_the_noise_scales_interval():
    from distrain.analysis.planstats import predict_sync

    bases = [{"steps": s, "every": 5} for s in (95, 100, 110)]
    noise = {"b_noise": 192.0, "range": [128.0, 256.0]}
    got = predict_sync(bases, noise, 64, 1024)
    assert got["predicted"] == pytest.approx(steps_at(100, 64, 192, 1024))
    ends = [steps_at(s, 64, b, 1024) for s in (90, 110) for b in (128, 256)]
    assert got["predicted_range"] == pytest.approx([min(ends), max(ends)])
    # A base run that missed the target: no prediction.
    assert predict_sync([*bases, {"steps": None, "every": 5}], noise, 64, 1024)["predicted"] is None


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_plans_learner_trains_with_the_runs_optimizer(mnist_examples, monkeypatch, optimizer):
    # The plan's statistics must be of the optimizer the runs train with: a spec that
    # chooses SGD (DBPedia's fastText recipe at full size) gets SGD, not Adam, and a
    # noise scale in the plain metric (SGD keeps no second moment).
    import numpy as np

    from distrain.analysis import planstats
    from distrain.datasets import ModelSpec
    from distrain.learning.models import load_info
    from distrain.learning.optim import SGD, Adam

    monkeypatch.setattr(ModelSpec, "optimizer_for", lambda self, info: optimizer)
    info = load_info(str(mnist_examples))
    learner = planstats._Learner(info, "mlp", seed=0, rate=0.01, batch=32, updates=10)
    assert isinstance(learner.optimizer, SGD if optimizer == "sgd" else Adam)
    x, y = planstats.load_arrays(info, "train")
    batch = (planstats._take(x, np.arange(32)), y[:32])
    before = learner.weights()
    plain, metric = learner.sq_norms(*batch)
    if optimizer == "sgd":
        assert metric == plain > 0
    else:
        # Adam's v is zero before the first update: each coordinate over epsilon.
        assert metric == pytest.approx(plain / learner.optimizer.epsilon, rel=1e-3)
    learner.apply(learner.gradient(*batch))
    assert any(not np.array_equal(a, b) for a, b in zip(before, learner.weights(), strict=True))
