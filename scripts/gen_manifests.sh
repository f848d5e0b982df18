#!/usr/bin/env bash
# Regenerate manifests/templates/ from the launcher's own object builder, so the templates
# are exactly what `launcher=kubernetes` creates (tests/integration/test_manifests.py checks
# they match).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="$root/.venv/bin/python"
"$py" -m distrain manifests --run sync:2 --name distrain-sync > manifests/templates/mpijob.yaml
"$py" -m distrain manifests --run async:2:ps=1 --name distrain-async > manifests/templates/ps.yaml
"$py" -m distrain manifests --run sync:2 --name distrain-trainjob --launcher trainjob \
  > manifests/templates/trainjob.yaml
echo "wrote manifests/templates/mpijob.yaml, ps.yaml and trainjob.yaml"
