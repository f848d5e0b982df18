"""A training mode: one process that takes ``steps`` training steps per traced call.

The entry point ``example-single`` names :class:`ExampleSingle`. A mode names its engine
(here one process) and trains in the processes the engine starts; distrain's epoch
driver, checkpoints and history come with it.
"""

from __future__ import annotations

from distrain.base.errors import ConfigError
from distrain.train.driver import EpochDriver
from distrain.train.engine import ONE_PROCESS
from distrain.train.modes import Mode
from distrain.train.modes.single import LocalSteps
from distrain.train.replica import Replica


class ExampleSingle(Mode):
    """One process, ``steps`` training steps per traced call (an example plugin's mode)."""

    name = "example-single"
    engine = ONE_PROCESS
    fixed_workers = 1
    options = {"steps": "training steps per traced call (default 1)"}

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        steps = cls.integer(options, "steps", 1)
        if steps < 1:
            raise ConfigError(f"example-single: steps must be at least 1, got {steps}")
        return {**checked, "steps": steps}

    def needs_cluster(self) -> bool:
        return False

    def train(self, cfg) -> dict:
        replica = Replica(cfg)
        steps = LocalSteps(replica, replica.train_step(), int(cfg.run.option("steps")))
        return EpochDriver(cfg, replica, steps).run()
