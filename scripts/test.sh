#!/usr/bin/env bash
# Set up (with the dev tools), lint, then run every test tier.
# Extra arguments go to pytest (e.g. -m "not slow" for the fast tier only).
# --fast (first argument): the inner loop, under five minutes with .venv set up: no setup,
# lint, then the unit, rules and data-set tests and the integration tier's compile tests,
# none marked slow.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if [ "${1:-}" = "--fast" ]; then
  shift
  if [ ! -x .venv/bin/python ]; then
    echo "test --fast: no .venv here: run ./scripts/test.sh (or scripts/setup.sh --dev) once" >&2
    exit 2
  fi
  .venv/bin/ruff check .
  .venv/bin/ruff format --check .
  .venv/bin/python -m pytest -m "not slow" tests/units tests/rules tests/datasets "$@"
  exec .venv/bin/python -m pytest -m "not slow" -k compile tests/integration "$@"
fi
bash scripts/setup.sh --dev
# The images tier (tests/integration/test_built_images.py) builds with buildah on a Debian base made
# by mmdebstrap: install them where they are missing and this is root on a Debian machine.
if { ! command -v buildah || ! command -v mmdebstrap; } >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test: installing buildah and mmdebstrap for the images tier"
    apt-get update -qq && apt-get install -y -qq buildah mmdebstrap >/dev/null
  else
    echo "test: no buildah/mmdebstrap and no root to install them: the images tier is skipped" >&2
  fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
