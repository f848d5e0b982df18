"""The learning layer: what a run reads, the models and their layers, how a model is scored.

Input pipelines (``inputs``), the shared model builders and the lookup of a model by name,
the user's code included (``models``, ``usermodel``, ``choices``), their layers, tasks,
optimizers, tensor splits, staleness rules and precisions, the language models (``lm``,
``ngram``) and the metrics (``metrics``). It asks the data-set registry for a data set's
parser, texts and models, and knows nothing of processes, settings or runs (``train/``).
"""
