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


BACKEND_OWNER = "estimate/backends/"
LIVE_BACKEND = {
    ("bench/collectives/commbench_worker.py", "ctx.backend == 'nccl'"): "the live process group's backend (torch)",
    ("bench/collectives/commbench_worker.py", "ctx.backend == 'xccl'"): "the live process group's backend (torch)",
}
"""Comparisons of a running process group's backend (what torch.distributed opened), not a
platform's collective model: the registry prices platforms, it does not open process groups."""


def _backend_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """Every comparison with a `.backend` attribute on one side (`p.backend == "xccl"`, `x.backend in
    (...)`): code choosing a collective model by name."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            isinstance(side, ast.Attribute) and side.attr == "backend" for side in (node.left, *node.comparators)
        ):
            hits.append((node.lineno, ast.unparse(node)))
    return hits


def backend_tests_outside_registry(root: Path) -> list[str]:
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(BACKEND_OWNER):
            continue
        found += [
            f"{rel}:{n}: {t}" for n, t in _backend_tests(ast.parse(f.read_text())) if (rel, t) not in LIVE_BACKEND
        ]
    return found


def test_no_backend_comparison_outside_the_backend_registry():
    assert backend_tests_outside_registry(SRC) == []


def test_the_backend_check_sees_a_comparison(tmp_path):
    (tmp_path / "comm.py").write_text('def f(p):\n    return p.backend == "xccl" or p.backend in ("nccl",)\n')
    (tmp_path / "estimate" / "backends").mkdir(parents=True)
    (tmp_path / "estimate" / "backends" / "nccl.py").write_text('x = p.backend == "nccl"\n')
    assert sorted(backend_tests_outside_registry(tmp_path)) == [
        "comm.py:2: p.backend == 'xccl'",
        "comm.py:2: p.backend in ('nccl',)",
    ]


def test_every_platform_backend_has_a_registered_model():
    from typing import get_args, get_type_hints

    from prism_strategy.estimate.backends import BACKENDS
    from prism_strategy.specs.cluster import PlatformSpec

    names = set(get_args(get_type_hints(PlatformSpec)["backend"]))
    assert names and names <= set(BACKENDS)
