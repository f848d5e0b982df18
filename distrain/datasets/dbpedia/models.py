"""DBPedia-14's models: bag-of-n-gram classifiers over its token ids."""

from __future__ import annotations

from distrain.learning.models import bag_of_embeddings, keras_module


def fasttext(info, seed: int, dim: int = 64):
    """fastText-style classifier: embeddings of unigrams and bigrams, averaged, then softmax."""
    return bag_of_embeddings(info, seed, dim, (), "dbpedia_fasttext")


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
