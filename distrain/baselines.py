"""Count-based baselines the comparison puts next to the trained models."""

from __future__ import annotations

import math
from collections import Counter


class CharNgramModel:
    """Character n-gram language model with interpolated absolute discounting.

    ``P(c | h) = max(N(h c) - D, 0) / N(h) + D * T(h) / N(h) * P(c | h')`` where ``h'``
    drops the oldest character of the context, ``T(h)`` is the number of distinct
    characters seen after ``h``, and the recursion ends in a uniform distribution over the
    vocabulary. Contexts never seen back off entirely.

    Args:
        order: n (5: four characters of context).
        discount: D, in (0, 1).
        vocab_size: Size of the alphabet the uniform floor spreads over.
    """

    def __init__(self, order: int = 5, discount: float = 0.75, vocab_size: int = 256):
        if order < 1 or not 0 < discount < 1 or vocab_size < 1:
            raise ValueError("order >= 1, 0 < discount < 1 and vocab_size >= 1 are required")
        self.order, self.discount, self.vocab_size = order, discount, vocab_size
        self.counts: list[Counter] = [Counter() for _ in range(order + 1)]
        self.context: list[Counter] = [Counter() for _ in range(order + 1)]
        self.types: list[Counter] = [Counter() for _ in range(order + 1)]

    def fit(self, texts: list[str]) -> CharNgramModel:
        """Counts every n-gram of every text (texts are not joined across boundaries)."""
        for text in texts:
            for k in range(1, self.order + 1):
                grams = Counter(text[i - k + 1 : i + 1] for i in range(k - 1, len(text)))
                self.counts[k].update(grams)
        for k in range(1, self.order + 1):
            for gram, n in self.counts[k].items():
                self.context[k][gram[:-1]] += n
                self.types[k][gram[:-1]] += 1
        return self

    def prob(self, history: str, char: str) -> float:
        """P(char | the last order-1 characters of history)."""
        p = 1.0 / self.vocab_size
        for k in range(1, self.order + 1):
            if k - 1 > len(history):
                break
            h = history[len(history) - (k - 1) :] if k > 1 else ""
            total = self.context[k].get(h, 0)
            if total == 0:
                break  # longer contexts are unseen too
            seen = max(self.counts[k].get(h + char, 0) - self.discount, 0.0)
            p = seen / total + self.discount * self.types[k][h] / total * p
        return p

    def nats_per_char(self, texts: list[str], skip_first: int = 0) -> float:
        """Average negative log-likelihood per character, in nats.

        ``skip_first``: characters at the start of each text that are context only.
        """
        total, n = 0.0, 0
        for text in texts:
            for i, ch in enumerate(text):
                if i < skip_first:
                    continue
                total -= math.log(self.prob(text[max(0, i - self.order + 1) : i], ch))
                n += 1
        if n == 0:
            raise ValueError("no characters to score")
        return total / n


def language_model_scores(nats_per_char: float, accuracy: float | None = None) -> dict:
    """Nats/char, bits/char and perplexity (per character) of a language model."""
    return {
        "nats_per_char": nats_per_char,
        "bits_per_char": nats_per_char / math.log(2),
        "perplexity": math.exp(nats_per_char),
        "accuracy": accuracy,
    }
