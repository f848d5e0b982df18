"""Character n-gram language models with interpolated Kneser-Ney smoothing, orders fitted at once.

One pass over the training text counts every order up to the highest; one pass over the
scored text gives every order's log-likelihood, since an order-n model's lower levels are
the same continuation distributions for every n (Chen & Goodman, "An empirical study of
smoothing techniques for language modeling", 1998, section 2.7). Pure Python with
dictionaries: about 1 MB of training text and 100 kB of scored text take seconds.
"""

from __future__ import annotations

import math
from collections import Counter


def _discount(counts) -> float:
    """Ney's estimate ``n1 / (n1 + 2 n2)`` from how many n-grams occur once and twice."""
    histogram = Counter(counts)
    n1, n2 = histogram.get(1, 0), histogram.get(2, 0)
    if n1 == 0:
        return 0.5
    return min(max(n1 / (n1 + 2 * n2), 0.05), 0.95)


class _Level:
    """The counts of one n-gram length: per gram, and per context their sum and types."""

    def __init__(self, grams: dict[str, int]):
        self.grams = grams
        self.total: dict[str, int] = Counter()
        self.types: dict[str, int] = Counter()
        for gram, n in grams.items():
            self.total[gram[:-1]] += n
            self.types[gram[:-1]] += 1
        self.discount = _discount(grams.values())

    def prob(self, history: str, char: str, lower: float) -> float:
        """``max(c(hc) - D, 0) / c(h.) + D T(h) / c(h.) * lower`` (``lower`` if h is unseen)."""
        total = self.total.get(history)
        if not total:
            return lower
        d = self.discount
        seen = self.grams.get(history + char, 0) - d
        return (seen if seen > 0 else 0.0) / total + d * self.types[history] / total * lower


class KneserNeyModels:
    """Interpolated Kneser-Ney character models of every order from 1 to ``max_order``.

    The order-n model's top level uses raw counts of n-grams; its lower levels use
    continuation counts (how many distinct characters precede a shorter gram), each level
    with its own discount, and the recursion ends in a uniform distribution over the
    vocabulary. Texts are counted apart (no gram spans two texts).

    Args:
        max_order: The highest order fitted (7: six characters of context).
        vocab_size: The alphabet the uniform floor spreads over (the unknown symbol included).
    """

    def __init__(self, max_order: int = 7, vocab_size: int = 256):
        if max_order < 1 or vocab_size < 1:
            raise ValueError("max_order >= 1 and vocab_size >= 1 are required")
        self.max_order, self.vocab_size = max_order, vocab_size
        self.raw: list[_Level | None] = [None] * (max_order + 1)
        self.continuation: list[_Level | None] = [None] * (max_order + 1)

    def fit(self, texts: list[str]) -> KneserNeyModels:
        """Counts the training texts (only these: the scored text is never counted)."""
        raw: list[Counter] = [Counter() for _ in range(self.max_order + 1)]
        for text in texts:
            for k in range(1, self.max_order + 1):
                raw[k].update(text[i : i + k] for i in range(len(text) - k + 1))
        for k in range(1, self.max_order + 1):
            self.raw[k] = _Level(raw[k])
        for k in range(1, self.max_order):
            # N1+(. g): distinct characters seen before g, from the (k+1)-grams.
            self.continuation[k] = _Level(Counter(gram[1:] for gram in raw[k + 1]))
        return self

    def log_probs(self, text: str, orders) -> dict[int, list[float]]:
        """Natural-log probability of each character of ``text`` after the first, per order.

        Each character is predicted from the characters before it in ``text`` (at most
        ``order - 1`` of them).
        """
        orders = sorted(set(orders))
        if not orders or orders[0] < 1 or orders[-1] > self.max_order:
            raise ValueError(f"orders must be within 1..{self.max_order}, got {orders}")
        top = orders[-1]
        floor = 1.0 / self.vocab_size
        out: dict[int, list[float]] = {n: [] for n in orders}
        log = math.log
        for i in range(1, len(text)):
            char = text[i]
            context = text[max(0, i - top + 1) : i]
            # lower[k]: the continuation distribution of length k (k - 1 characters of context).
            lower = [floor]
            for k in range(1, top):
                h = context[len(context) - (k - 1) :] if k > 1 else ""
                if len(h) < k - 1:
                    lower.append(lower[-1])
                    continue
                lower.append(self.continuation[k].prob(h, char, lower[-1]))
            for n in orders:
                h = context[len(context) - (n - 1) :] if n > 1 else ""
                if len(h) < n - 1:  # the text's first characters: as much context as there is
                    p = self.raw[len(h) + 1].prob(h, char, lower[len(h)])
                else:
                    p = self.raw[n].prob(h, char, lower[n - 1])
                out[n].append(log(p))
        return out

    def nats(self, texts: list[str], orders) -> dict[int, tuple[float, int]]:
        """Per order: summed negative log-likelihood (nats) and characters scored."""
        totals = {n: [0.0, 0] for n in orders}
        for text in texts:
            for n, logs in self.log_probs(text, orders).items():
                totals[n][0] -= math.fsum(logs)
                totals[n][1] += len(logs)
        return {n: (nats, count) for n, (nats, count) in totals.items()}


def best_ngram(
    train: list[str], valid: list[str], vocab_size: int, orders=range(3, 8)
) -> tuple[int, dict[int, float]]:
    """The order (of ``orders``) whose Kneser-Ney model has the fewest nats/char on ``valid``.

    Returns:
        ``(best order, {order: nats per character})``.

    Raises:
        ValueError: ``valid`` has no character to score.
    """
    orders = list(orders)
    model = KneserNeyModels(max(orders), vocab_size).fit(train)
    per_order = {}
    for n, (nats, count) in model.nats(valid, orders).items():
        if count == 0:
            raise ValueError("no characters to score")
        per_order[n] = nats / count
    return min(per_order, key=per_order.get), per_order
