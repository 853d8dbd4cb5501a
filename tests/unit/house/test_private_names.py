"""No private name crosses a module: what another module needs is public (docs/layout.md)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "prism_strategy"


def private_imports(root: Path) -> list[str]:
    """`from prism_strategy.x import _name` anywhere under root (a dunder such as __version__ is public)."""
    found = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prism_strategy"):
                found += [
                    f"{f.relative_to(root).as_posix()}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    return found


def test_no_private_name_is_imported_from_another_module():
    assert private_imports(SRC) == []


def test_the_check_sees_a_private_import(tmp_path):
    (tmp_path / "a.py").write_text("from prism_strategy.planning.planner import _time, plan\nfrom os import _exit\n")
    assert private_imports(tmp_path) == ["a.py:1: prism_strategy.planning.planner._time"]
