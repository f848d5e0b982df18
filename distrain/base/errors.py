"""The exceptions every layer raises: bad settings, and training that could not finish.

The lowest module of the package: it imports nothing of distrain, so any module may
raise these without importing the layer that reads them.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A run spec or a training setting is invalid."""


class TrainingError(RuntimeError):
    """Training could not run or did not finish."""


class StepError(ValueError):
    """A step's inputs are invalid; raised before any work starts."""
