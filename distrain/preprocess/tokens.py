"""How a ``bytes`` feature's values become the tokens of its vocabulary.

Without Beam or TensorFlow: ``features.json``'s check names the tokenizers, and the Beam
job's analyzers (:mod:`distrain.preprocess.analyzers`) split the values.
"""

from __future__ import annotations

import re

# TextVectorization's default standardisation strips these ASCII characters
# (tf_keras' ``DEFAULT_STRIP_REGEX``), after ``tf.strings.lower`` (ASCII only).
_PUNCTUATION = re.compile(rb"[!\"#$%&()\*\+,\-\./:;<=>?@\[\\\]^_`{|}~']")

# How a bytes feature's values become tokens (features.json's ``tokenizer``).
TOKENIZERS = {
    "value": "each value whole, as it is (a categorical feature: StringLookup)",
    "words": "ASCII-lowercased, punctuation stripped, split at whitespace, as "
    "TextVectorization's defaults do (a text feature: TextVectorization)",
}
DEFAULT_TOKENIZER = "value"


def tokens(value: bytes, tokenizer: str) -> list[bytes]:
    """The tokens of one ``bytes`` value.

    Args:
        value: The value, as the record holds it.
        tokenizer: ``value`` (the value itself) or ``words`` (TextVectorization's
            default standardisation and split: ``bytes.lower`` and ``bytes.split`` are
            ASCII-only, as ``tf.strings.lower`` and ``tf.strings.split`` are).

    Raises:
        ValueError: An unknown tokenizer.
    """
    if tokenizer == "value":
        return [value]
    if tokenizer == "words":
        return _PUNCTUATION.sub(b"", value.lower()).split()
    raise ValueError(f"unknown tokenizer {tokenizer!r} (one of {', '.join(TOKENIZERS)})")
