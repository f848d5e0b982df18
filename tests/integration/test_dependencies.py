"""Every package the code imports is declared: pyproject.toml and requirements/ name it."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.conftest import ROOT

# Built from source by scripts/setup.sh (requirements/horovod.env), not a dependency pip
# resolves; benchmarks/bench_dbpedia.py's fastText is installed by hand (docs/benchmarks.md).
BUILT = {"horovod"}
BY_HAND = {"fasttext"}


def _imports(*folders: str) -> dict[str, set[str]]:
    """Top-level third-party modules imported under ``folders`` -> the files importing them."""
    local = {"distrain", "components", "pipelines", "tests", "benchmarks", "__future__"}
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local:
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    return {_normal(re.split(r"[\s;<>=!~\[]", r.strip(), maxsplit=1)[0]) for r in requirements}


def _requirement_file(name: str) -> list[str]:
    lines = (ROOT / "requirements" / name).read_text().splitlines()
    return [ln for ln in lines if ln.strip() and not ln.startswith("#")]


def _distributions(module: str) -> set[str]:
    return {_normal(d) for d in packages_distributions().get(module, [])}


def test_every_import_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _names(project["dependencies"])
    dev = _names(project["optional-dependencies"]["dev"])
    pins, dev_pins = _names(_requirement_file("pins.txt")), _names(_requirement_file("dev.txt"))
    # tf-keras is installed without its dependencies, at horovod.env's TF_KERAS_VERSION.
    env = (ROOT / "requirements" / "horovod.env").read_text()
    pins |= {"tf-keras"} if "TF_KERAS_VERSION=" in env else set()
    problems = []
    for module, files in sorted(_imports("distrain", "components", "pipelines").items()):
        if module in BUILT:
            if f"{module.upper()}_VERSION=" not in env:
                problems.append(f"{module}: no version in requirements/horovod.env")
            continue
        dists = _distributions(module)
        if not dists & runtime:
            problems.append(f"{module} ({sorted(files)[0]}...): not in pyproject's dependencies")
        if not dists & pins:
            problems.append(f"{module} ({sorted(files)[0]}...): not in requirements/pins.txt")
    for module, files in sorted(_imports("tests", "benchmarks").items()):
        if module in BUILT | BY_HAND:
            continue
        dists = _distributions(module)
        if not dists & (runtime | dev) or not dists & (pins | dev_pins):
            problems.append(f"{module} ({sorted(files)[0]}...): not declared for the tests")
    assert not problems, "\n".join(problems)
