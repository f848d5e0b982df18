"""Packaging: which packages the wheel holds, found rather than listed.

pyproject.toml holds everything else. ``components/`` and ``pipelines/`` sit at the
repository root (the layout KFP users expect) but import as ``distrain.components`` and
``distrain.pipelines``; every package below them is found and mapped the same way, so a new
subpackage can never be left out of the wheel (tests/integration/test_wheel.py installs the
built wheel alone and imports, compiles and trains from it).
"""

from setuptools import find_packages, setup

# Top-level source folder -> the import name it ships as.
MAPPED = {"components": "distrain.components", "pipelines": "distrain.pipelines"}


def _packages() -> list[str]:
    found = find_packages(include=["distrain", "distrain.*"])
    for folder, name in MAPPED.items():
        found += [
            name + sub[len(folder) :] for sub in find_packages(include=[folder, f"{folder}.*"])
        ]
    return found


setup(
    packages=_packages(),
    package_dir={name: folder for folder, name in MAPPED.items()},
    # Read at run time with importlib.resources (distrain/k8s/validate.py).
    package_data={"distrain.k8s": ["schemas/*.json"]},
)
