"""Runs one pipeline step in this (fresh) process and reports its own compute time.

    python benchmarks/step_runner.py STEP KWARGS_JSON RESULT_JSON

``STEP`` is a function of :mod:`distrain.steps`. The time covers the call only, not the
interpreter's start or the imports, which is what "the step's own compute time" means in
the orchestration-overhead measure. The parent samples this process tree's memory.
"""

import json
import sys
import time

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS first)


def main() -> None:
    step, kwargs, result_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    from distrain import steps

    func = getattr(steps, step)
    if step in ("evaluate", "baseline", "train", "preprocess"):
        import tensorflow  # noqa: F401  (the import is start-up, not the step's work)
    args = kwargs.pop("_args", [])
    start = time.perf_counter()
    result = func(*args, **kwargs)
    seconds = time.perf_counter() - start
    with open(result_path, "w") as f:
        json.dump({"seconds": seconds, "result": result}, f, default=str)


if __name__ == "__main__":
    main()
