"""DBPedia-14's models: bag-of-n-gram classifiers over its token ids."""

from __future__ import annotations

from distrain.learning.models import bag_of_embeddings, keras_module

#: Training rows from which the default model trains as fastText does (fastText's rule).
FASTTEXT_RULE_ROWS = 30_000


def full_size(info) -> bool:
    """Whether the training split is large enough for fastText's own recipe."""
    return info.splits["train"] >= FASTTEXT_RULE_ROWS


def fasttext(info, seed: int, dim: int | None = None):
    """fastText-style classifier: embeddings of unigrams and bigrams, averaged, then softmax.

    Its size is chosen from the training split's (:func:`fasttext_chosen`): fastText's 10
    dimensions from :data:`FASTTEXT_RULE_ROWS` rows on, else 64.
    """
    dim = dim or (10 if full_size(info) else 64)
    return bag_of_embeddings(info, seed, dim, (), "dbpedia_fasttext")


def fasttext_optimizer(info) -> str:
    """The default model's optimizer: fastText's rule (``"sgd"``) on large data, else Adam.

    fastText's rule, plain SGD at a rate per example falling linearly to zero, needs many
    updates an epoch: at the pipeline's batch of 512, the 4,200-row sample gives 7, and
    SGD (fastText's own too, at 5 epochs) is still near chance after them, where lazy
    Adam's normalised steps learn. At 31,435 generated training rows (61 updates an epoch)
    SGD at the pipeline's rate, 0.04 per example, reached fastText's test accuracy (0.9447
    against its 0.9451, 7,000 test rows) by its third epoch.
    """
    return "sgd" if full_size(info) else "adam"


def fasttext_chosen(info) -> str:
    """The run log's line: what the default model chose from the data's size, and why."""
    rows = info.splits["train"]
    if full_size(info):
        return (
            f"{rows:,} training rows (>= {FASTTEXT_RULE_ROWS:,}): fastText's recipe, "
            "10 dimensions and SGD at a rate per example falling linearly to zero"
        )
    return (
        f"{rows:,} training rows (< {FASTTEXT_RULE_ROWS:,}): 64 dimensions and lazy Adam, "
        "which learn in the few updates an epoch of small data gives"
    )


def fasttext10(info, seed: int):
    """The fastText-style classifier at fastText's own size for DBPedia: 10 dimensions.

    The fastText paper's text classifiers have 10 hidden units. On the full 560,000 rows
    it reaches the 64-dimension model's accuracy in one epoch at about a third of the time
    (learning rate 0.01; BENCHMARKS.md section 11); on a small sample it learns more slowly
    than :func:`fasttext`, the pipeline's default.
    """
    return bag_of_embeddings(info, seed, 10, (), "dbpedia_fasttext10")


def logreg(info, seed: int):
    """Logistic regression on the normalised bag of n-grams (one weight per n-gram and class)."""
    keras = keras_module()
    return keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(
                info.metadata["vocab_size"],
                info.num_classes,
                mask_zero=True,
                embeddings_initializer="zeros",
            ),
            # The average of the n-grams' class weights is the linear score of the
            # normalised bag of n-grams.
            keras.layers.GlobalAveragePooling1D(),
        ],
        name="dbpedia_logreg",
    )


def nbow(info, seed: int, dim: int = 64, hidden: int = 128):
    """Neural bag of words (seed 004): averaged embeddings, a ReLU layer, then softmax."""
    return bag_of_embeddings(info, seed, dim, (hidden,), "dbpedia_nbow")
