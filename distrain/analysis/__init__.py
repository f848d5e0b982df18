"""The analysis layer: what runs cost and how they compare, read from their records.

The comparison of a pipeline's runs (``compare/``), the experiments and their reports
(``experiments/``), the cost plan of a run (``plan``) and the learning-rate search's rule
and record (``tuning``).
"""
