"""No function of ``distrain/``, ``components/`` or ``pipelines/`` runs over 80 lines.

A function's length counts from its ``def`` (its decorators left out) to its last line,
docstring, comments and blank lines included, nested functions within their outer one (and
each counted on its own too). A longer function is cut by what it decides, each part named.
The few that stay longer are listed in :data:`EXCEPTIONS`, each with one line saying why;
an exception no longer needed fails the test too, so the list cannot rot.

A function is named ``MODULE.QUALNAME`` (the file's name without ``.py`` and the function's
qualified name), so that the list survives a module's move to another folder.
"""

from __future__ import annotations

import ast

from tests.conftest import ROOT

LIMIT = 80
FOLDERS = ("distrain", "components", "pipelines")

EXCEPTIONS = {
    "rows.csv_records": "datasets/dbpedia/ is the dbpedia branch's now: cut after it lands",
    "beam._run_pipeline": "dbpedia's Beam job, the dbpedia branch's now: cut after it lands",
}


def function_lengths() -> list[tuple[str, int, str]]:
    """Every function's name (``MODULE.QUALNAME``), length and place."""
    lengths = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            tree = ast.parse(path.read_text(), filename=where)
            stack = [(tree, path.stem)]
            while stack:
                node, prefix = stack.pop()
                for child in ast.iter_child_nodes(node):
                    name = prefix
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        name = f"{prefix}.{child.name}"
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        length = child.end_lineno - child.lineno + 1
                        lengths.append((name, length, f"{where}:{child.lineno}"))
                    stack.append((child, name))
    return lengths


def test_no_function_is_over_80_lines():
    too_long = [
        f"{where} {name}: {length} lines"
        for name, length, where in sorted(function_lengths())
        if length > LIMIT and name not in EXCEPTIONS
    ]
    assert not too_long, (
        f"functions over {LIMIT} lines (cut each by what it decides, or list it in "
        "EXCEPTIONS with one line why):\n" + "\n".join(too_long)
    )


def test_every_exception_is_still_needed_and_justified():
    longest = {}
    for name, length, _ in function_lengths():
        longest[name] = max(length, longest.get(name, 0))
    for name, why in EXCEPTIONS.items():
        assert why.strip() and "\n" not in why, f"{name}: say why in one line"
        assert name in longest, f"{name} is listed in EXCEPTIONS but no longer exists"
        assert longest[name] > LIMIT, f"{name} is {longest[name]} lines now: off EXCEPTIONS"


def test_lengths_count_from_def_to_last_line():
    source = "def f():\n" + "    x = 1\n" * 80 + "\n\nclass C:\n    def g(self):\n        pass\n"
    tree = ast.parse(source)
    f, c = tree.body
    assert f.end_lineno - f.lineno + 1 == 81
    assert c.body[0].end_lineno - c.body[0].lineno + 1 == 2
