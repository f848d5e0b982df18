"""The gradient noise scale and the steps it predicts at another batch (McCandlish et al. 2018).

"An Empirical Model of Large-Batch Training" (McCandlish, Kaplan, Amodei et al., 2018):
the *simple* noise scale ``B_noise = tr(Σ) / |G|²`` (Σ the per-example gradients'
covariance, G the true gradient) sets how the steps to a target fall with the batch,

    S(B) = S_min (1 + B_noise / B),

so from the steps ``S`` one run needed at its batch ``B`` the steps at any other batch follow
(:func:`steps_at`). Both quantities are estimated without per-example gradients, from the
squared norms of mini-batch gradients at two batch sizes (the paper's appendix A.1): since
``E |G_B|² = |G|² + tr(Σ) / B``,

    |G|²   = (B_big |G_big|² - B_small |G_small|²) / (B_big - B_small)
    tr(Σ)  = (|G_small|² - |G_big|²) / (1 / B_small - 1 / B_big)

are unbiased; the ratio of their means over many pairs is the noise scale
(:func:`simple_noise_scale`). This module owns the arithmetic; the measurement on a model
is :mod:`distrain.analysis.planstats`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def simple_noise_scale(
    small_sq: Sequence[float], big_sq: Sequence[float], b_small: int, b_big: int
) -> dict:
    """``B_noise`` from squared gradient norms measured at two batch sizes.

    Args:
        small_sq: ``|G_small|²`` of gradients over ``b_small`` examples each (one or more).
        big_sq: ``|G_big|²`` of gradients over ``b_big`` examples each (one or more).
        b_small: The small batch.
        b_big: The big batch (larger than ``b_small``).

    Returns:
        ``{"gradient_sq", "trace", "b_noise"}``: the unbiased estimates of ``|G|²`` and
        ``tr(Σ)`` from the mean squared norms, and their ratio (None where ``|G|²`` is
        estimated at zero or below: the noise swamps the gradient).

    Raises:
        ValueError: No norms, or ``b_big`` not above ``b_small``.
    """
    if not len(small_sq) or not len(big_sq):
        raise ValueError("the noise scale needs squared gradient norms at both batch sizes")
    if not 0 < b_small < b_big:
        raise ValueError(f"the big batch ({b_big}) must be larger than the small ({b_small})")
    small, big = float(np.mean(small_sq)), float(np.mean(big_sq))
    gradient_sq = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1.0 / b_small - 1.0 / b_big)
    b_noise = trace / gradient_sq if gradient_sq > 0 else None
    return {"gradient_sq": gradient_sq, "trace": trace, "b_noise": b_noise}


def steps_at(steps: float, batch: float, b_noise: float, target_batch: float) -> float:
    """The steps to the same target at ``target_batch``, from ``steps`` measured at ``batch``.

    ``S_min = S / (1 + B_noise / B)``, then ``S(B') = S_min (1 + B_noise / B')``.
    """
    s_min = steps / (1.0 + b_noise / batch)
    return s_min * (1.0 + b_noise / target_batch)
