#!/usr/bin/env bash
# Set up (with the dev tools), lint, then run every test tier.
# Extra arguments go to pytest (e.g. -m "not slow" for the fast tier only).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh --dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
