"""Running a script on Horovod ranks, as the exact tests of the distributed rules do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from distrain.train.config import TrainConfig
from distrain.train.launch import launch_env, sync_command


def run_on_ranks(tmp_path, script: str, *args: str, ranks: int = 2, **cfg_kw) -> list[dict]:
    """Runs ``script`` on ``ranks`` Horovod ranks; returns each rank's result, in rank order."""
    cfg = TrainConfig(data_dir="d", output_dir=str(tmp_path), run=f"sync:{ranks}", **cfg_kw)
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {**os.environ, **launch_env(cfg), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        sync_command(cfg, [sys.executable, str(path), str(tmp_path), *args]),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    # Each rank writes its own file: the ranks share one stdout, their lines interleave.
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("result-*.json"))]
    results.sort(key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == list(range(ranks))
    return results
