"""The house rules the import contract cannot state (pyproject.toml [tool.importlinter] states the
rest): no code outside engines/ and strategies.py branches on an engine or strategy name; what an
engine can do is a named capability on it (engines/base.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from prism_strategy.engines import ENGINE_NAMES
from prism_strategy.strategies import STRATEGY_NAMES

SRC = Path(__file__).resolve().parents[2] / "src" / "prism_strategy"
OWNERS = ("engines/", "strategies.py")
# Names that are someone else's vocabulary, not ours: compared as text read from outside.
FOREIGN = {
    ("readers/prism_perf.py", "ds == 'ddp'"): "PRISM's perf.jsonl dist_strategy value",
    ("diagnose/launcher_checks.py", "e.name == 'deepspeed'"): "the `deepspeed` launcher program in a job script",
    ("diagnose/script_checks.py", "'fsdp2' in s.engines()"): "an engine the user's script was seen to call",
}


def _name_tests(tree: ast.AST) -> list[tuple[int, str]]:
    names = set(ENGINE_NAMES) | set(STRATEGY_NAMES)
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(e, ast.Constant) and e.value in names for e in elts):
                hits.append((node.lineno, ast.unparse(node)))
                break
    return hits


def name_tests_outside_owners(root: Path) -> list[str]:
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(OWNERS):
            continue
        for line, text in _name_tests(ast.parse(f.read_text())):
            if (rel, text) not in FOREIGN:
                found.append(f"{rel}:{line}: {text}")
    return found


def test_no_code_outside_engines_and_registry_branches_on_a_name():
    assert name_tests_outside_owners(SRC) == []


def test_the_check_sees_a_name_test(tmp_path):
    (tmp_path / "planner.py").write_text('def f(s):\n    return s.strategy == "zero3" or s.engine in ("ddp",)\n')
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "ddp.py").write_text('x = 1 if "ddp" == "ddp" else 0\n')
    assert sorted(name_tests_outside_owners(tmp_path)) == [
        "planner.py:2: s.engine in ('ddp',)",
        "planner.py:2: s.strategy == 'zero3'",
    ]
