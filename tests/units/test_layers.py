"""The package's imports go one way, down these layers (lowest first):

Each layer is a folder of ``distrain/`` (:data:`LAYERS` names them by glob), but where a
folder holds two layers or the root holds a layer's modules:

0. **base** (``base/``; and ``distrain/__init__.py``): helpers that import no other layer
   (``plugins`` loads other packages' entry points for the registries).
1. **files** (``preprocess/``): downloads, records, the shared Beam transforms and runners,
   the one-line failure reports.
2. **registry** (``datasets/__init__.py``, ``datasets/info.py``): the data-set registry and
   what a preprocessed directory holds. It imports its plugins by name on the first lookup,
   so every layer above may ask it and none of its plugins is below it. It tells a model in
   the user's code (``FILE.py:FUNCTION``) from a registered one and no more: the learning
   layer resolves it (``learning.models``).
3. **learning** (``learning/``): what a run reads, the models' builders (the user's too,
   with its loss and optimizer) and their layers, how a model is scored; they ask the
   registry for a data set's parser, texts and models.
4. **data sets** (``datasets/NAME/``: each data set's package, plugin, Beam job, models;
   ``datasets/testing.py``, the contract test base): built on the learning layer, found
   through the registry.
5. **settings** (``train/``: ``engine``, ``launch``, ``heartbeat``, ``modes/__init__.py``,
   ``config``): a mode's processes and their commands, the process launch and its
   heartbeats, the modes' registry and the typed training config.
6. **runs** (the rest of ``train/``: modes, driver, replica, engines, processes; ``k8s/``).
7. **analysis** (``analysis/``: ``compare``, ``experiments``, ``plan``, ``tuning``): the
   comparison, the experiments and their reports, the cost plan, the learning-rate search.
8. **steps** (``steps``, ``trainstep``, ``search``, ``submit``, ``faults``, ``listing``): what the
   pipelines' components and the CLI's commands call.
9. **front** (``cli``, ``commands/``, ``cliflags``, ``console``, ``__main__``).

Every import counts (:func:`module_imports`): inside functions too, those under
``if TYPE_CHECKING:`` (they tie the modules for whoever reads or checks them), and calls
that import a literal name (``importlib.import_module("distrain.learning.usermodel")``). An
import may go to its own layer or below, never up, and the whole graph has no cycle (a
failure lists every circle with its lines). A module that
no layer names fails the test (add it to :data:`LAYERS`). A package's ``__init__`` is not
counted as imported by its submodules (Python runs it first; it may import them).

Function-level imports stay only where they keep a heavy library (:data:`LAZY`: TensorFlow,
tf_keras, Beam, Horovod, KFP, ...) out of a process that does not need it: of such a library
itself, or of a module of the package that loads one when imported. The others are counted
(:data:`OTHER_LOCAL_IMPORTS` is the most allowed), so the count cannot grow unseen.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from functools import cache

from tests.conftest import ROOT

# Each layer is a folder of the package (a glob of its modules), but for the two that share
# one: ``datasets/`` holds the registry (its ``__init__`` and ``info``) below the learning
# layer and the data sets' packages above it; ``train/`` holds the settings (named) below
# the runs (the rest of it). The root holds ``distrain/__init__.py`` (base), the steps and
# the front.
LAYERS = [
    ("base", ["distrain", "distrain.base", "distrain.base.*"]),
    ("files", ["distrain.preprocess", "distrain.preprocess.*"]),
    ("registry", ["distrain.datasets", "distrain.datasets.info"]),
    ("learning", ["distrain.learning", "distrain.learning.*"]),
    ("data sets", ["distrain.datasets.*"]),
    (
        "settings",
        [
            "distrain.train",
            "distrain.train.engine",
            "distrain.train.heartbeat",
            "distrain.train.launch",
            "distrain.train.modes",
            "distrain.train.config",
        ],
    ),
    ("runs", ["distrain.train.*", "distrain.k8s", "distrain.k8s.*"]),
    ("analysis", ["distrain.analysis", "distrain.analysis.*"]),
    (
        "steps",
        [
            "distrain.steps",
            "distrain.trainstep",
            "distrain.search",
            "distrain.submit",
            "distrain.faults",
            "distrain.listing",
        ],
    ),
    (
        "front",
        [
            "distrain.cli",
            "distrain.cliflags",
            "distrain.commands*",
            "distrain.console",
            "distrain.__main__",
        ],
    ),
]

# Libraries slow or heavy to import: a function may import them (or a module of the package
# that imports them when loaded) so that a process that does not need them never loads them.
LAZY = {
    "apache_beam",
    "dask",
    "distributed",
    "google",
    "horovod",
    "jsonschema",
    "kfp",
    "kubernetes",
    "kubernetes_validate",
    "matplotlib",
    "tensorflow",
    "tf_keras",
}
# Modules the installed package maps from ``pipelines/`` and ``components/``: they load KFP.
BUILT_FROM_KFP = ("distrain.pipelines", "distrain.components")
# Function-level imports of anything else (the standard library, a light module of the
# package, a light library): the most there may be. Lower it when you move one to the top.
OTHER_LOCAL_IMPORTS = 52


def _modules() -> dict[str, object]:
    paths = sorted((ROOT / "distrain").rglob("*.py"))
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in paths
    }


def _dynamic_name(node: ast.AST) -> str | None:
    """The module a call imports by a literal name, as ``importlib.import_module("distrain.x")``.

    ``import_module`` called as an attribute or a bare name, or ``__import__``; a name that
    is not a string literal (``f"{__name__}.{package}"``: a registry importing its plugins
    by name) is not counted.
    """
    if not (isinstance(node, ast.Call) and node.args):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if name in ("import_module", "__import__") and isinstance(first, ast.Constant):
        return first.value if isinstance(first.value, str) else None
    return None


def module_imports(tree: ast.Module) -> list[tuple[int, list[str], bool, bool]]:
    """A module's imports of every kind: ``(line, names it may bind, in a function, typing)``.

    ``import`` and ``from ... import`` statements, those under ``if TYPE_CHECKING:`` too
    (``typing``: they run only for a type checker, yet tie the modules as much), and calls
    that import a literal name (:func:`_dynamic_name`).
    """
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    top_level = {
        id(inner)
        for statement in tree.body
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for inner in ast.walk(statement)
    }
    # Class bodies run at import too: their imports (not their methods') are top-level.
    for cls in (s for s in tree.body if isinstance(s, ast.ClassDef)):
        for statement in cls.body:
            if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                top_level.update(id(inner) for inner in ast.walk(statement))
    rows = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif (dynamic := _dynamic_name(node)) is not None:
            names = [dynamic]
        else:
            continue
        rows.append((node.lineno, names, id(node) not in top_level, id(node) in typing_only))
    return rows


@cache
def _imports() -> dict[str, list[tuple[int, list[str], bool, bool]]]:
    """Each module's imports (:func:`module_imports`)."""
    return {m: module_imports(ast.parse(p.read_text())) for m, p in _modules().items()}


def _graph(local: bool = True, typing: bool = True) -> dict[str, dict[str, int]]:
    """Module -> the package's modules it imports (-> a line that does).

    Every kind of import by default; ``local=False``: not those inside functions;
    ``typing=False``: not those for type checking only.
    """
    modules = _modules()
    graph = {}
    for module, rows in _imports().items():
        deps = {}
        for line, names, in_function, typing_only in rows:
            if (in_function and not local) or (typing_only and not typing):
                continue
            for name in names:
                if name in modules and name != module:
                    deps.setdefault(name, line)
        graph[module] = deps
    return graph


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module``'s layer: its most specific pattern's."""
    best = None
    for index, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if fnmatch.fnmatchcase(module, pattern):
                weight = len(pattern.rstrip("*")) + (pattern == module)
                if best is None or weight > best[0]:
                    best = (weight, index)
    return None if best is None else best[1]


def test_every_module_has_a_layer():
    missing = [m for m in _modules() if layer_of(m) is None]
    assert not missing, f"modules in no layer of LAYERS: {missing}"


def test_imports_go_down_the_layers():
    """A module imports its own layer or lower ones, never a higher one."""
    path_of = _modules()
    upward = []
    for module, deps in _graph().items():
        for dep, line in sorted(deps.items()):
            if layer_of(dep) > layer_of(module):
                upward.append(
                    f"{path_of[module].relative_to(ROOT)}:{line}: {module} "
                    f"({LAYERS[layer_of(module)][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})"
                )
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Each circle of ``graph``: a set of modules that all reach each other, sorted.

    Its strongly connected components of more than one module (Tarjan's algorithm).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        for dep in sorted(graph.get(module, ())):
            if dep not in index:
                visit(dep)
                low[module] = min(low[module], low[dep])
            elif dep in stack:
                low[module] = min(low[module], index[dep])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_import_cycle_in_the_package():
    """Every import counts: inside functions, for type checking, by a literal name."""
    graph = _graph()
    path_of = _modules()
    report = []
    for circle in circles(graph):
        report.append(f"a circle of {len(circle)} modules:")
        report += [
            f"  {path_of[m].relative_to(ROOT)}:{line}: {m} imports {dep}"
            for m in circle
            for dep, line in sorted(graph[m].items())
            if dep in circle
        ]
    assert not report, "\n".join(report)


@cache
def _import_time_loads(module: str) -> bool:
    """Whether ``module``'s own code loads a :data:`LAZY` library when the module is imported.

    By a top-level import, or by calling at import time (a statement, a class's bases,
    decorators or body) one of its functions that imports one (``class L(_keras().Layer)``).
    """
    tree = ast.parse(_modules()[module].read_text())
    lazy_functions = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(
            isinstance(n, ast.Import | ast.ImportFrom) and _lazy_names(n) for n in ast.walk(node)
        )
    }
    runs_now = []
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            runs_now += statement.decorator_list
        elif isinstance(statement, ast.ClassDef):
            runs_now += [*statement.bases, *statement.keywords, *statement.decorator_list]
            runs_now += [s for s in statement.body if not isinstance(s, ast.FunctionDef)]
        else:
            runs_now.append(statement)
    for node in (n for part in runs_now for n in ast.walk(part)):
        if isinstance(node, ast.Import | ast.ImportFrom) and _lazy_names(node):
            return True
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in lazy_functions:
            return True
    return False


def _lazy_names(node: ast.Import | ast.ImportFrom) -> bool:
    names = (
        [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    )
    return any(n.split(".")[0] in LAZY for n in names)


def _loads_lazy(module: str) -> bool:
    """Whether importing ``module`` of the package loads a :data:`LAZY` library."""
    top = _graph(local=False, typing=False)
    seen, todo = set(), [module]  # a walk, not a recursion: it ends on a cycle too
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if _import_time_loads(name):
            return True
        seen.add(name)
        todo += top[name]
    return False


def other_local_imports() -> list[str]:
    """The function-level imports that keep no heavy library out of a process."""
    modules = _modules()
    found = []
    for module, rows in _imports().items():
        for line, names, in_function, _ in rows:
            if not in_function:
                continue
            ours = [n for n in names if n in modules]
            if ours and any(_loads_lazy(n) for n in ours):
                continue
            if not ours and names[0].split(".")[0] in LAZY:
                continue
            if names[0].startswith(BUILT_FROM_KFP):
                continue
            found.append(f"{modules[module].relative_to(ROOT)}:{line}: {names[0]}")
    return found


def test_function_level_imports_keep_heavy_libraries_out_and_cannot_grow_unseen():
    lazy = sum(inside for rows in _imports().values() for _, _, inside, _ in rows)
    other = other_local_imports()
    print(f"function-level imports: {lazy}, of which {len(other)} load no heavy library")
    assert len(other) <= OTHER_LOCAL_IMPORTS, (
        f"{len(other)} function-level imports load no heavy library (at most "
        f"{OTHER_LOCAL_IMPORTS}); move them to the module's top:\n" + "\n".join(other)
    )


def test_the_checks_catch_an_upward_import_and_a_cycle(monkeypatch):
    """The layer check sees a low module importing a high one; the cycle check a loop."""
    graph = {m: dict(d) for m, d in _graph().items()}
    graph["distrain.base.errors"]["distrain.cli"] = 1
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda local=True, typing=True: graph)
    try:
        test_imports_go_down_the_layers()
    except AssertionError as err:
        assert "distrain.base.errors (base) imports distrain.cli (front)" in str(err)
    else:
        raise AssertionError("the upward import went unseen")
    try:
        test_no_import_cycle_in_the_package()
    except AssertionError as err:
        assert "distrain.base.errors" in str(err)
    else:
        raise AssertionError("the cycle went unseen")


def test_every_kind_of_import_is_counted():
    """Imports for type checking and by a literal name tie modules as much as the others."""
    source = (
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from distrain.learning.tasks import Task\n"
        "def spec(name):\n"
        "    return importlib.import_module('distrain.learning.usermodel').spec(name)\n"
        "def plugin(package):\n"
        "    return importlib.import_module(f'distrain.datasets.{package}')\n"
    )
    rows = {
        names[0]: (inside, typing) for _, names, inside, typing in module_imports(ast.parse(source))
    }
    assert rows == {
        "importlib": (False, False),
        "typing": (False, False),
        "distrain.learning.tasks": (False, True),
        "distrain.learning.usermodel": (True, False),
    }


MAX_LINES = 700


def test_no_python_file_is_over_700_lines():
    """A module one can read whole: split a longer one by concern (as ``analysis/compare/``)."""
    folders = ["distrain", "components", "pipelines", "benchmarks", "tests", "scripts"]
    paths = [p for folder in folders for p in (ROOT / folder).rglob("*.py")]
    assert len(paths) > 100  # the folders are there
    long = {
        str(p.relative_to(ROOT)): n
        for p in paths
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_the_cli_and_the_registries_load_no_heavy_library():
    """``distrain --help``, the modes and the data sets: no TensorFlow, tf_keras nor Beam."""
    code = (
        "import sys\n"
        "import distrain.cli, distrain.steps, distrain.analysis.compare\n"
        "import distrain.analysis.experiments.report\n"
        "from distrain import datasets\n"
        "from distrain.train import modes\n"
        "from distrain.train.config import TrainConfig\n"
        "for name in modes.mode_names():\n"
        "    modes.mode_class(name)\n"
        "TrainConfig(data_dir='d', output_dir='o', run='pipeline:2', model='mlp')\n"
        "[datasets.get(name).models for name in datasets.names()]\n"
        "print(sorted(m for m in ('tensorflow', 'tf_keras', 'apache_beam', 'horovod')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def _drawn_layers(page: str) -> dict[str, set[str]]:
    """Folder -> the layers ``docs/layers.md``'s picture of ``distrain/`` gives it."""
    block = page.split("```\ndistrain/\n", 1)[1].split("```", 1)[0]
    drawn: dict[str, set[str]] = {}
    folder = None
    for line in block.splitlines():
        if match := re.match(r"  (\w+)/\s+(\S+(?: \S+)?)\s{2,}", line):
            folder = match.group(1)
        elif not (match := re.match(r"\s{4,}(\S+(?: \S+)?)\s{2,}", line)):
            continue
        drawn.setdefault(folder, set()).add(match.group(match.lastindex))
    return drawn


def _folders() -> dict[str, set[str]]:
    """Each package folder of ``distrain/`` -> the layers of its modules."""
    names = [name for name, _ in LAYERS]
    folders = {p.name for p in (ROOT / "distrain").iterdir() if (p / "__init__.py").exists()}
    found: dict[str, set[str]] = {}
    for module in _modules():
        parts = module.split(".")
        if len(parts) > 1 and parts[1] in folders:
            found.setdefault(parts[1], set()).add(names[layer_of(module)])
    return found


def test_the_layers_page_draws_each_folder_in_its_layers():
    """``docs/layers.md`` draws every folder of ``distrain/`` with the layers of its modules."""
    drawn = _drawn_layers((ROOT / "docs" / "layers.md").read_text())
    assert drawn == _folders()


def test_the_readme_maps_each_folder_to_its_layers():
    """The README's map of the code: a line per folder of ``distrain/``, naming its layers."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Map of the code\n", 1)[1].split("\n## ", 1)[0]
    for folder, layers in _folders().items():
        lines = [line for line in section.splitlines() if f"`{folder}/`" in line]
        assert len(lines) == 1, f"README's map names distrain/{folder}/ on {len(lines)} lines"
        for layer in layers:
            assert f"**{layer}**" in lines[0], f"README's map: {folder}/ is not said {layer}"
