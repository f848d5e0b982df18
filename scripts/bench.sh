#!/usr/bin/env bash
# The benchmark suite: sets up, runs every measure on this machine (about 20 minutes on
# 2 cores), and writes BENCHMARKS.md and benchmarks/results.json. Extra arguments go to
# benchmarks/suite.py (--quick for a smoke run, --link-gbps / --link-latency-us for the
# scaling plan's link). Run it on an otherwise idle machine: its numbers are ratios
# measured in one run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
# fastText, section 11's reference: a benchmark-only dependency, never the project's.
.venv/bin/python -m pip install -q 'fasttext-numpy2==0.10.4'
exec .venv/bin/python -m benchmarks.suite "$@"
