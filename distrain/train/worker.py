"""Entry point of one training process: ``distrain worker --config FILE``.

``horovodrun`` starts one of these per rank (sync); ``single`` starts one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from distrain.train.config import TrainConfig


def main(argv: list[str] | None = None) -> int:
    """Runs one training process from a config file written by the launcher."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="train_config.json")
    args = parser.parse_args(argv)
    cfg = TrainConfig.from_json(Path(args.config).read_text())
    from distrain.train.loop import train

    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
